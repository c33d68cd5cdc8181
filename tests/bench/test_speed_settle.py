"""The speed benchmarks' wait for a grown cluster's node writes to stop
(bench/speed/common.py ``settle``), over a stand-in for the API server's request counts."""

from __future__ import annotations

import ssl

import pytest

import bench.speed.common as common


class FakeClock:
    """Time that moves only when settle sleeps."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_settle_reads_an_api_server_that_has_served_no_node_writes_of_a_kind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A fresh cluster has PATCHed nodes but never PUT one: the count is absent, not 0.
    monkeypatch.setattr(common, "api_requests",
                        lambda _server, _context: {"PATCH nodes": 3.0, "GET pods": 9.0})
    clock = FakeClock()
    waited = common.settle("127.0.0.1:1", ssl.create_default_context(), quiet_s=10.0,
                           clock=clock, sleep=clock.sleep)
    assert waited == 10.0  # no new write: quiet after quiet_s


def test_settle_waits_while_node_writes_keep_coming_and_gives_up_at_the_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    writes = iter(range(10**6))
    monkeypatch.setattr(common, "api_requests",
                        lambda _server, _context: {"PUT nodes": float(next(writes))})
    clock = FakeClock()
    waited = common.settle("127.0.0.1:1", ssl.create_default_context(), quiet_s=10.0,
                           timeout_s=30.0, clock=clock, sleep=clock.sleep)
    assert waited == 30.0  # every read saw a new write: it stopped at the timeout
