"""Find the control-plane binaries, building them with hack/build-controlplane.sh if needed.

The script is the single source of the version pin and the cache layout: it prints the binary
directory on its last stdout line and returns at once when the binaries are cached, so we
always ask it instead of guessing paths. ``TESSERA_CONTROLPLANE_BIN`` points at a directory of
prebuilt binaries instead (nothing is built then).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from devcluster import DevClusterError

NAMES = ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kubectl", "kwok",
         "helm")
BIN_ENV = "TESSERA_CONTROLPLANE_BIN"


@dataclass(frozen=True)
class Binaries:
    directory: Path
    etcd: Path
    kube_apiserver: Path
    kube_scheduler: Path
    kube_controller_manager: Path
    kubectl: Path
    #: sigs.k8s.io/kwok: node Leases, node status and pod phases in place of kubelets.
    kwok: Path
    #: helm.sh/helm/v3: renders charts/tessera for the chart tests.
    helm: Path
    #: e.g. "v1.34.4 etcd=v3.6.4 go=go1.26.8" (the script's VERSIONS file), "" when unknown.
    versions: str = ""

    @classmethod
    def in_directory(cls, directory: Path) -> Binaries:
        missing = [n for n in NAMES if not os.access(directory / n, os.X_OK)]
        if missing:
            raise DevClusterError(
                f"{directory} lacks executable {', '.join(missing)}; run "
                f"hack/build-controlplane.sh (or unset {BIN_ENV})"
            )
        versions_file = directory.parent / "VERSIONS"
        versions = versions_file.read_text().strip() if versions_file.is_file() else ""
        return cls(
            directory=directory,
            etcd=directory / "etcd",
            kube_apiserver=directory / "kube-apiserver",
            kube_scheduler=directory / "kube-scheduler",
            kube_controller_manager=directory / "kube-controller-manager",
            kubectl=directory / "kubectl",
            kwok=directory / "kwok",
            helm=directory / "helm",
            versions=versions,
        )


def repo_root() -> Path:
    """The source checkout this package runs from (an editable install, as hack/ scripts use)."""
    return Path(__file__).resolve().parents[1]


def cache_root() -> Path:
    """The script's cache root (same rule as hack/build-controlplane.sh)."""
    explicit = os.environ.get("TESSERA_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "tessera"


def build_script() -> Path:
    script = repo_root() / "hack" / "build-controlplane.sh"
    if not script.is_file():
        raise DevClusterError(
            f"{script} not found: the dev cluster needs a source checkout of Tessera "
            f"(pip install -e .), or set {BIN_ENV} to a directory with {', '.join(NAMES)}"
        )
    return script


def ensure_binaries(progress: IO[str] | None = None) -> Binaries:
    """The binaries, built on first use (many minutes on 2 cores; Go must be on PATH).

    Build output goes to ``progress`` (default: inherit file descriptor 2) so a long first
    build is visibly alive.
    """
    override = os.environ.get(BIN_ENV)
    if override:
        return Binaries.in_directory(Path(override))
    script = build_script()
    if shutil.which("bash") is None:
        raise DevClusterError("bash is needed to run hack/build-controlplane.sh")
    # The script starts a build by wiping its source directory: two concurrent callers (the
    # demo and a test run) must not interleave, so the second waits for the first here.
    lock_path = cache_root() / "controlplane.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with lock_path.open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            result = subprocess.run(
                ["bash", str(script)],
                stdout=subprocess.PIPE,
                stderr=progress,
                text=True,
                check=False,
            )
    except OSError as exc:
        raise DevClusterError(f"cannot run {script}: {exc}") from exc
    if result.returncode != 0:
        raise DevClusterError(
            f"{script} failed with exit code {result.returncode}; its messages above say what "
            f"is missing (Go toolchain, module proxy, disk space)"
        )
    lines = result.stdout.strip().splitlines()
    if not lines:
        raise DevClusterError(f"{script} printed no binary directory")
    return Binaries.in_directory(Path(lines[-1]))
