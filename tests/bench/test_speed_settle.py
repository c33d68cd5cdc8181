"""The speed benchmarks' wait for a grown cluster's node writes to stop
(bench/speed/common.py ``settle``), over a stand-in for the API server's request counts."""

from __future__ import annotations

import ssl
from collections.abc import Iterator

import pytest

import bench.speed.common as common


def _counts(sequence: list[dict[str, float]]) -> Iterator[dict[str, float]]:
    yield from sequence
    while True:
        yield sequence[-1]


def test_settle_reads_an_api_server_that_has_served_no_node_writes_of_a_kind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A fresh cluster has PATCHed nodes but never PUT one: the count is absent, not 0.
    reads = _counts([{"PATCH nodes": 3.0, "GET pods": 9.0}])
    monkeypatch.setattr(common, "api_requests", lambda _server, _context: next(reads))
    assert common.settle("127.0.0.1:1", ssl.create_default_context(), quiet_s=0.0) < 1.0


def test_settle_waits_while_node_writes_keep_coming_and_gives_up_at_the_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    writes = iter(range(10**6))
    monkeypatch.setattr(common, "api_requests",
                        lambda _server, _context: {"PUT nodes": float(next(writes))})
    clock = [0.0]  # moves only when settle sleeps

    def sleep(seconds: float) -> None:
        clock[0] += seconds

    waited = common.settle("127.0.0.1:1", ssl.create_default_context(), quiet_s=10.0,
                           timeout_s=30.0, clock=lambda: clock[0], sleep=sleep)
    assert waited == 30.0  # every read saw a new write: it stopped at the timeout
