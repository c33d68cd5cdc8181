"""The live replay on a small sample: every 4th node of the synthetic trace in openb's format
(30 nodes, 104 GPUs; tests/openb_synthetic.py) and the seeded sequence until 100% of their
GPUs arrived, through the real kube-scheduler, webhook and allocator of its own dev cluster
(bench/openb/live.py). The machinery's test: it needs no copy of the real trace."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from openb_synthetic import synthetic_trace

from bench.openb.live import Result, Settings, run
from devcluster.binaries import Binaries

pytestmark = pytest.mark.e2e

GPUS = 104
LINE = re.compile(
    r"^allocated (\d{1,3}\.\d\d)% of GPUs at 100% arrived \(default seed 42, 30 nodes, "
    r"104 GPUs, arrived (\d+\.\d\d)%; (\d+) pods: (\d+) placed, (\d+) failed .+\)$")


@pytest.fixture(scope="module")
def small(binaries: Binaries, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Result]:
    with synthetic_trace(tmp_path_factory.mktemp("openb")):
        yield run(Settings(nodes_every=4), binaries)


def test_the_small_live_replay_keeps_every_invariant(small: Result) -> None:
    # No card over-committed; every bound GPU pod has a record for its node holding exactly
    # the trace's request; the records add up to what the cards hold.
    assert small.tally.problems == []
    summary = small.summary
    assert summary.allocated_milli == small.tally.allocated_milli
    assert summary.capacity_milli == small.tally.capacity_milli == GPUS * 1000
    assert summary.arrived_milli >= summary.capacity_milli
    # Every pod was bound or found unschedulable (and deleted): nothing is left in flight.
    assert summary.placed + summary.failed == summary.created
    assert 0 < summary.allocated_milli <= summary.capacity_milli


def test_the_last_line_reads_back_the_numbers(small: Result) -> None:
    match = LINE.match(small.summary.line())
    assert match, small.summary.line()
    allocated, arrived, created, placed, failed = match.groups()
    assert float(allocated) == round(100 * small.tally.allocated_milli / (GPUS * 1000), 2)
    assert float(arrived) >= 100.0
    assert (int(created), int(placed), int(failed)) == (
        small.summary.created, small.summary.placed, small.summary.failed)
