"""Whole-card pods on a fragmented cluster (bench/speed/sampled_window.py, small): 150 nodes
of three cards, all but the last 10 with 40% left on every card, through the real
kube-scheduler, webhook and allocator of a dev cluster each. With the shipped
``percentageOfNodesToScore`` (100) every try sees the empty nodes; with kube-scheduler's
adaptive sample (a 100-node window) a try may see none of them and be refused. Either way
every pod is bound, and only on an empty node's cards."""

from __future__ import annotations

import pytest

from bench.speed.sampled_window import Case, run_case
from devcluster.binaries import Binaries

pytestmark = pytest.mark.e2e


def small(percentage: int) -> Case:
    return Case(nodes=150, cards=3, good=10, layout="contiguous", pods=20,
                percentage=percentage)


def test_with_every_node_in_the_window_no_try_is_refused(binaries: Binaries) -> None:
    row = run_case(small(100), binaries, timeout=120.0)
    assert row["window_nodes"] == 150
    assert (row["bound"], row["on_fragmented"]) == (20, 0)
    assert row["attempts_unschedulable"] == 0
    assert row["filters_per_pod"] == 1.0


def test_with_a_sampled_window_every_pod_is_still_bound_on_free_cards(
        binaries: Binaries) -> None:
    row = run_case(small(0), binaries, timeout=120.0)
    assert row["window_nodes"] == 100
    assert (row["bound"], row["on_fragmented"]) == (20, 0)
    # a refused try is scheduled again: one more filter for each
    assert row["attempts_scheduled"] == 20
    assert row["filters_per_pod"] >= 1.0
