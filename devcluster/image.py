"""Tessera's image built from the repository's Dockerfile with podman, from Debian's packages.

No image registry is reachable from the project's machines, so ``python:3.11-slim`` cannot be
pulled. The Dockerfile takes its base as the build argument ``PYTHON_IMAGE``; here the base is
a stand-in made by ``mmdebstrap`` from the host's own apt sources (its Debian release,
``python3`` with ``venv``, ``python`` on PATH, CA certificates: what the Dockerfile's steps use
of the official image), imported into podman's store and cached under the user cache. Every
other step is the one users run.

pip inside the build gets its settings from this machine's pip configuration (files and
``PIP_*`` variables, as ``pip config list`` reports them), written to a pip.conf that is
mounted for the build's RUN steps only, with the files it names (a CA bundle, a find-links
directory) mounted at the same paths; nothing of it lands in a layer, and no index is named
here.

podman runs with runc and ``--cgroup-manager=cgroupfs`` (crun refuses these machines' hybrid
cgroup layout) and explicit ulimits within podman's own (root here lacks CAP_SYS_RESOURCE, so
the runtime may not raise a limit).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import re
import resource
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from devcluster import DevClusterError
from devcluster.binaries import cache_root, repo_root

#: Packages of the stand-in base: the interpreter with ``venv`` (the build stage's
#: ``python -m venv``), ``python`` on PATH, the CA bundle and netbase (as the official slim image
#: has), and passwd (the runtime stage's groupadd/useradd).
BASE_PACKAGES = ("python3", "python3-venv", "python-is-python3", "ca-certificates", "netbase",
                 "tzdata", "passwd")
#: Left out of the stand-in, as the official slim image leaves them out.
BASE_EXCLUDES = ("/usr/share/doc/*", "/usr/share/man/*", "/usr/share/info/*",
                 "/usr/share/locale/*")
#: Processes per uid inside a container: podman runs the runtime with a hard limit of its own
#: (32768 on these machines), and the runtime may only lower limits, never raise them.
MAX_NPROC = 4096
BUILD_TIMEOUT_S = 1800.0
APT_SOURCES = (Path("/etc/apt/sources.list"), Path("/etc/apt/sources.list.d"))


class ImageError(DevClusterError):
    """The image or its base could not be built; the message says why."""


def _run(argv: list[str], what: str, timeout: float = BUILD_TIMEOUT_S,
         log: Path | None = None) -> str:
    try:
        if log is not None:
            log.parent.mkdir(parents=True, exist_ok=True)
            with log.open("w") as out:
                result = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, text=True,
                                        check=False, timeout=timeout)
            if result.returncode != 0:
                tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
                raise ImageError(f"{what} failed ({result.returncode}); {log}:\n{tail}")
            return ""
        result = subprocess.run(argv, capture_output=True, text=True, check=False,
                                timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ImageError(f"{what}: {exc}") from exc
    if result.returncode != 0:
        raise ImageError(f"{what} failed ({result.returncode}): {result.stderr.strip()}")
    return result.stdout


def ulimits() -> tuple[str, ...]:
    """``--ulimit`` flags within this process's hard limits (the runtime may not raise any)."""
    _, nofile = resource.getrlimit(resource.RLIMIT_NOFILE)
    _, nproc = resource.getrlimit(resource.RLIMIT_NPROC)
    nofile = 1 << 20 if nofile == resource.RLIM_INFINITY else min(nofile, 1 << 20)
    nproc = MAX_NPROC if nproc == resource.RLIM_INFINITY else min(nproc, MAX_NPROC)
    return (f"--ulimit=nofile={nofile}:{nofile}", f"--ulimit=nproc={nproc}:{nproc}")


@dataclass(frozen=True)
class Podman:
    """The podman command with the flags these machines need."""

    executable: str

    @classmethod
    def find(cls) -> Podman:
        found = shutil.which("podman")
        if found is None or shutil.which("runc") is None:
            raise ImageError("podman and runc are missing: hack/test-image.sh installs them "
                             "(apt-get install podman runc mmdebstrap)")
        return cls(found)

    def command(self, *args: str) -> list[str]:
        return [self.executable, "--cgroup-manager=cgroupfs", "--runtime=runc", *args]

    def run(self, *args: str, what: str = "podman", timeout: float = 120.0) -> str:
        return _run(self.command(*args), what, timeout)

    def image_exists(self, ref: str) -> bool:
        result = subprocess.run(self.command("image", "exists", ref), capture_output=True,
                                check=False, timeout=60)
        return result.returncode == 0

    def image_size(self, ref: str) -> int:
        """The image's size in bytes (its layers, uncompressed)."""
        return int(json.loads(self.run("image", "inspect", ref))[0]["Size"])


# ---------------------------------------------------------------------- the stand-in base
def apt_sources() -> list[Path]:
    """The host's apt source files: where the stand-in's packages come from."""
    files: list[Path] = []
    for place in APT_SOURCES:
        if place.is_file() and place.stat().st_size:
            files.append(place)
        elif place.is_dir():
            files += sorted(p for p in place.iterdir() if p.suffix in (".list", ".sources"))
    if not files:
        raise ImageError("no apt sources on this machine to build the stand-in base from")
    return files


def host_codename() -> str:
    fields = dict(line.partition("=")[::2] for line in
                  Path("/etc/os-release").read_text().splitlines() if "=" in line)
    codename = fields.get("VERSION_CODENAME", "").strip('"')
    if fields.get("ID") != "debian" or not codename:
        raise ImageError("the stand-in base is built from Debian's packages: this is not Debian")
    return codename


def base_image_ref(codename: str) -> str:
    """Named after what it is made of, so a changed package list makes a new one."""
    digest = hashlib.sha256(repr((codename, BASE_PACKAGES, BASE_EXCLUDES)).encode())
    return f"localhost/tessera-python-base:{codename}-{digest.hexdigest()[:12]}"


def ensure_base(podman: Podman, log_dir: Path) -> str:
    """The stand-in base in podman's store: imported from the cached root filesystem, which is
    made by mmdebstrap when missing. Returns its reference."""
    codename = host_codename()
    ref = base_image_ref(codename)
    if podman.image_exists(ref):
        return ref
    tarball = cache_root() / "image" / f"{ref.rpartition(':')[2]}.tar"
    if not tarball.is_file():
        mmdebstrap = shutil.which("mmdebstrap")
        if mmdebstrap is None:
            raise ImageError("mmdebstrap is missing: hack/test-image.sh installs it")
        tarball.parent.mkdir(parents=True, exist_ok=True)
        partial = tarball.with_suffix(".partial.tar")
        _run([mmdebstrap, "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}",
              *(f"--dpkgopt=path-exclude={p}" for p in BASE_EXCLUDES),
              codename, str(partial), *(str(p) for p in apt_sources())],
             "mmdebstrap (the stand-in base)", log=log_dir / "mmdebstrap.log")
        partial.replace(tarball)
    podman.run("import", "--change=ENV LANG=C.UTF-8", '--change=CMD ["python3"]',
               str(tarball), ref, what="podman import (the stand-in base)", timeout=600)
    return ref


# ---------------------------------------------------------------------- pip's settings
_CONFIG_LINE = re.compile(r"^(?P<section>[^.]*)\.(?P<key>[^=]+)=(?P<value>.*)$")


def pip_settings(listing: str) -> dict[str, dict[str, str]]:
    """``pip config list`` output as pip.conf sections (pure); the environment's (``:env:``)
    settings go to ``global``, where pip's own files would put them."""
    sections: dict[str, dict[str, str]] = {}
    for line in listing.splitlines():
        match = _CONFIG_LINE.match(line.strip())
        if match is None:
            continue
        section = "global" if match["section"] == ":env:" else match["section"]
        value = match["value"]
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        sections.setdefault(section, {})[match["key"]] = value
    return sections


def pip_conf(sections: dict[str, dict[str, str]]) -> str:
    return "".join(f"[{name}]\n" + "".join(f"{k} = {v}\n" for k, v in values.items())
                   for name, values in sections.items())


def named_paths(sections: dict[str, dict[str, str]]) -> list[Path]:
    """The existing files and directories the settings name (a CA bundle, find-links)."""
    paths = []
    for values in sections.values():
        for value in values.values():
            for word in value.split():
                if word.startswith("/") and Path(word).exists():
                    paths.append(Path(word))
    return sorted(set(paths))


def _host_pip_listing() -> str:
    return _run([sys.executable, "-m", "pip", "config", "list"], "pip config list", 60)


# ---------------------------------------------------------------------- the image
def build_image(podman: Podman, tag: str, log_dir: Path) -> str:
    """``podman build`` of the repository's Dockerfile on the stand-in base, tagged ``tag``.

    One build at a time on a machine: two test runs share the cached base and the tag."""
    lock_path = cache_root() / "image.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        base = ensure_base(podman, log_dir)
        _build(podman, base, tag, log_dir)
    return tag


def _build(podman: Podman, base: str, tag: str, log_dir: Path) -> None:
    sections = pip_settings(_host_pip_listing())
    with tempfile.TemporaryDirectory(prefix="tessera-pip-") as tmp:
        conf = Path(tmp) / "pip.conf"
        conf.write_text(pip_conf(sections))
        mounts = [f"--volume={conf}:/etc/pip.conf:ro",
                  *(f"--volume={p}:{p}:ro" for p in named_paths(sections))]
        _run(podman.command("build", "--network=host", *ulimits(), *mounts,
                            f"--build-arg=PYTHON_IMAGE={base}", f"--tag={tag}",
                            f"--file={repo_root() / 'Dockerfile'}", str(repo_root())),
             "podman build", log=log_dir / "podman-build.log")

