"""The krew manifest: krew's required fields, and the sha256 of the archive it names."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

from devcluster.binaries import repo_root

ROOT = repo_root()


def manifest() -> dict[str, object]:
    doc = yaml.safe_load((ROOT / "plugins" / "tessera.yaml").read_text())
    assert isinstance(doc, dict)
    return doc


def test_the_manifest_has_the_fields_krew_requires() -> None:
    doc = manifest()
    assert doc["apiVersion"] == "krew.googlecontainertools.github.com/v1alpha2"
    assert doc["kind"] == "Plugin"
    # krew: the manifest's name is its file name and the command (`kubectl tessera`).
    assert doc["metadata"] == {"name": "tessera"}
    spec = doc["spec"]
    assert isinstance(spec, dict)
    assert re.fullmatch(r"v\d+\.\d+\.\d+", spec["version"])
    assert spec["shortDescription"] and spec["description"]
    for platform in spec["platforms"]:
        assert platform["selector"]["matchExpressions"]
        assert platform["uri"].endswith(".tar.gz")
        assert re.fullmatch(r"[0-9a-f]{64}", platform["sha256"])
        assert platform["bin"] == "kubectl-tessera"


def test_the_manifests_sha256_is_the_reproducible_archive_of_the_launcher(
        tmp_path: Path) -> None:
    done = subprocess.run(["bash", str(ROOT / "hack" / "krew-archive.sh"), str(tmp_path)],
                          capture_output=True, text=True, check=True, timeout=60)
    _path, digest = done.stdout.split()
    spec = manifest()["spec"]
    assert isinstance(spec, dict)
    assert {p["sha256"] for p in spec["platforms"]} == {digest}


def test_the_launcher_runs_the_plugin_module() -> None:
    done = subprocess.run([str(ROOT / "plugins" / "kubectl-tessera"), "--version"],
                          env={"TESSERA_PYTHON": sys.executable, "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("kubectl tessera ")
