"""bench/speed/request_wait_cost.py: the allocator's request pool against a local TLS server
that answers after a delay, the calling thread's CPU per request."""

from __future__ import annotations

import sys

import pytest

from bench.speed import request_wait_cost


def test_each_delay_gets_a_row_of_cpu_per_request(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "argv", ["request_wait_cost", "--requests", "5",
                                      "--delays", "0", "2"])
    request_wait_cost.main()
    rows = capsys.readouterr().out.splitlines()
    assert rows[0].split() == ["delay_ms", "cpu_us_per_request"]
    delays = [float(row.split()[0]) for row in rows[1:]]
    costs = [float(row.split()[1]) for row in rows[1:]]
    assert delays == [0.0, 2.0] and all(cost > 0 for cost in costs)
