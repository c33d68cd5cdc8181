"""The benchmarks' wait for the allocator's picture to hold the pods bound so far
(bench/speed/cluster.py ``wait_allocator_records``), over a stand-in for its /status."""

from __future__ import annotations

import json
import ssl
from types import SimpleNamespace
from typing import Any

import pytest

import bench.speed.cluster as cluster


class StatusCounts:
    """Answers /status with the next record count each time it is read; time moves only
    when the wait sleeps."""

    def __init__(self, counts: list[int]) -> None:
        self.counts = counts
        self.paths: list[str] = []
        self.now = 0.0

    def text(self, server: str, context: ssl.SSLContext, path: str) -> str:
        self.paths.append(path)
        count = self.counts.pop(0) if len(self.counts) > 1 else self.counts[0]
        return json.dumps({"pods": count, "nodes": []})

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def _dev() -> Any:
    return SimpleNamespace(services=SimpleNamespace(allocator_port=1))


@pytest.fixture()
def status(monkeypatch: pytest.MonkeyPatch) -> StatusCounts:
    fake = StatusCounts([0])
    monkeypatch.setattr(cluster, "https_text", fake.text)
    monkeypatch.setattr(cluster, "admin_context", lambda dev: None)
    monkeypatch.setattr(cluster.time, "sleep", fake.sleep)
    monkeypatch.setattr(cluster.time, "perf_counter", lambda: fake.now)
    return fake


def test_the_wait_returns_once_the_picture_holds_the_count(status: StatusCounts) -> None:
    status.counts[:] = [3, 7, 10]
    cluster.wait_allocator_records(_dev(), 10, timeout=5)
    assert status.paths == ["/status"] * 3


def test_the_wait_fails_naming_the_count_seen_when_it_never_gets_there(
        status: StatusCounts) -> None:
    status.counts[:] = [4]
    with pytest.raises(TimeoutError, match="holds 4 pod records, not 10"):
        cluster.wait_allocator_records(_dev(), 10, timeout=1)
