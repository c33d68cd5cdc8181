"""A real Prometheus server on loopback, scraping the dev cluster's stand-in dcgm-exporter.

Built once by hack/build-prometheus.sh (the script pins the version and prints the binary's
directory; ``TESSERA_PROMETHEUS_BIN`` names a directory with a prebuilt ``prometheus``
instead). The allocator reads it exactly as it reads a cluster's Prometheus: the HTTP query
API (docs/metrics.md).
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path
from typing import IO, Any

from devcluster import DevClusterError
from devcluster.binaries import cache_root, repo_root
from devcluster.process import ManagedProcess, free_port, http_ok, wait_until

BIN_ENV = "TESSERA_PROMETHEUS_BIN"


def ensure_prometheus(progress: IO[str] | None = None) -> Path:
    """The ``prometheus`` binary, built on first use (minutes on 2 cores; Go on PATH)."""
    override = os.environ.get(BIN_ENV)
    if override:
        binary = Path(override) / "prometheus"
        if not os.access(binary, os.X_OK):
            raise DevClusterError(f"{binary} is not an executable (unset {BIN_ENV})")
        return binary
    script = repo_root() / "hack" / "build-prometheus.sh"
    lock_path = cache_root() / "prometheus.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with lock_path.open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            result = subprocess.run(["bash", str(script)], stdout=subprocess.PIPE,
                                    stderr=progress, text=True, check=False)
    except OSError as exc:
        raise DevClusterError(f"cannot run {script}: {exc}") from exc
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        raise DevClusterError(f"{script} failed with exit code {result.returncode}; its "
                              f"messages above say what is missing (Go, module proxy)")
    return Path(lines[-1]) / "prometheus"


def scrape_config(targets: list[str], interval_seconds: int) -> str:
    """prometheus.yml: one job, ``dcgm-exporter``, over static loopback targets (JSON is
    YAML)."""
    return json.dumps({
        "global": {"scrape_interval": f"{interval_seconds}s",
                   "evaluation_interval": f"{interval_seconds}s"},
        "scrape_configs": [{"job_name": "dcgm-exporter",
                            "static_configs": [{"targets": targets}]}],
    }, indent=2)


class PrometheusServer:
    """One Prometheus: :meth:`start`, :meth:`query`, :meth:`stop` (restartable)."""

    def __init__(self, binary: Path, workdir: Path, targets: list[str],
                 scrape_seconds: int = 1) -> None:
        self.binary = binary
        self.workdir = workdir
        self.port = free_port()
        self.config_file = workdir / "prometheus.yml"
        workdir.mkdir(parents=True, exist_ok=True)
        self.config_file.write_text(scrape_config(targets, scrape_seconds))
        self.process = ManagedProcess("prometheus", [
            str(binary), f"--config.file={self.config_file}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            f"--storage.tsdb.path={workdir / 'data'}",
            "--storage.tsdb.retention.time=1h", "--log.level=warn",
        ], workdir / "prometheus.log")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60) -> PrometheusServer:
        self.process.start()
        wait_until("prometheus /-/ready", lambda: http_ok(f"{self.url}/-/ready"), timeout,
                   watch=[self.process])
        return self

    def stop(self) -> None:
        self.process.stop()

    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query's result vector."""
        url = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
        with urllib.request.urlopen(url, timeout=5) as reply:
            doc = json.load(reply)
        result: list[dict[str, Any]] = doc["data"]["result"]
        return result

    def wait_for_series(self, promql: str, count: int, timeout: float = 60) -> None:
        """Until the query returns at least ``count`` series (scraped at least once)."""
        wait_until(f"{count} series of {promql}", lambda: len(self.query(promql)) >= count,
                   timeout, interval=0.5, watch=[self.process])
