"""What the kubelet does with a pod's containers on this machine (I/O): a container run with
podman, attached, its output in a log file; and a Secret volume written as the kubelet's
AtomicWriter writes it. The flags of the run are :mod:`devcluster.kubelet`'s (pure)."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

from devcluster import DevClusterError
from devcluster.image import Podman, ulimits
from devcluster.kubelet import ContainerRun
from devcluster.process import ManagedProcess, no_proxy_env


class SecretVolume:
    """A directory updated the way the kubelet's AtomicWriter updates a Secret volume
    (kubernetes pkg/volume/util/atomic_writer.go): each version in a new timestamped
    directory, ``..data`` swapped to it by one rename, the files symlinks through it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.generation = 0

    def publish(self, files: Mapping[str, bytes]) -> None:
        self.generation += 1
        payload = self.path / f"..2026_01_01_00_00_00.{self.generation:06d}"
        payload.mkdir(parents=True)
        for name, data in files.items():
            (payload / name).write_bytes(data)
            (payload / name).chmod(0o644)  # the Secret volume's defaultMode
        tmp_link = self.path / "..data_tmp"
        tmp_link.symlink_to(payload.name)
        os.replace(tmp_link, self.path / "..data")  # the one atomic step
        for name in files:
            link = self.path / name
            if not link.is_symlink():
                link.symlink_to(f"..data/{name}")


class Container:
    """One running container: ``podman run`` attached, its output in a log file."""

    def __init__(self, podman: Podman, run: ContainerRun, log: Path) -> None:
        self.podman = podman
        self.run = run
        self.process = ManagedProcess(run.name, podman.command("run", *run.podman_args(
            ulimits())), log, env=no_proxy_env())
        self.started_at = 0.0

    @property
    def name(self) -> str:
        return self.run.name

    def start(self) -> None:
        self.remove()
        self.started_at = time.monotonic()
        self.process.start()

    def exec(self, argv: list[str], timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.podman.command("exec", self.name, *argv), capture_output=True,
                              text=True, check=False, timeout=timeout)

    def terminate(self, grace_seconds: float) -> int:
        """SIGTERM to the container's main process, as the kubelet stops a pod; its exit code
        once it has exited (SIGKILL after ``grace_seconds``, as the kubelet's grace period)."""
        self.podman.run("kill", "--signal=TERM", self.name, what="podman kill")
        result = subprocess.run(self.podman.command("wait", self.name), capture_output=True,
                                text=True, check=False, timeout=grace_seconds + 10)
        self.process.stop()
        if result.returncode != 0:
            raise DevClusterError(f"podman wait {self.name}: {result.stderr.strip()}")
        return int(result.stdout.strip())

    def remove(self) -> None:
        subprocess.run(self.podman.command("rm", "--force", "--time=0", self.name),
                       capture_output=True, check=False, timeout=60)

    def stop(self) -> None:
        self.process.stop(timeout=35.0)
        self.remove()
