"""The sampled-window benchmark's pure parts (bench/speed/sampled_window.py): kube-scheduler's
window size, where the empty nodes go, what a run is refused, and its readings."""

from __future__ import annotations

import itertools

import pytest

from bench.speed import sampled_window
from bench.speed.sampled_window import (
    Case,
    good_nodes,
    schedule_attempts,
    waits_row,
    window_nodes,
)


@pytest.mark.parametrize(("percentage", "nodes", "window"), [
    (100, 1000, 1000),   # the shipped value: every node
    (0, 1000, 420),      # adaptive: 50 - 1000/125 = 42%
    (0, 5000, 500),      # adaptive: 10%
    (0, 100_000, 5000),  # adaptive share floored at 5%
    (10, 1000, 100),
    (5, 1000, 100),      # never fewer than 100 nodes
    (0, 99, 99),         # below 100 nodes, every node
    (30, 150, 100),
])
def test_window_nodes_follows_kube_schedulers_num_feasible_nodes_to_find(
        percentage: int, nodes: int, window: int) -> None:
    assert window_nodes(percentage, nodes) == window


def test_contiguous_good_nodes_are_the_last_names() -> None:
    assert good_nodes(10, 3, "contiguous") == [7, 8, 9]


def test_spread_good_nodes_are_evenly_spaced_and_distinct() -> None:
    spread = good_nodes(1000, 50, "spread")
    assert len(set(spread)) == 50 and spread[-1] == 999
    assert {b - a for a, b in itertools.pairwise(spread)} == {20}


@pytest.mark.parametrize("good", [0, 11])
def test_good_nodes_refuses_a_count_outside_the_cluster(good: int) -> None:
    with pytest.raises(ValueError, match=r"good nodes must be 1\.\.10"):
        good_nodes(10, good, "spread")


def test_a_case_with_more_pods_than_the_good_nodes_cards_is_refused() -> None:
    with pytest.raises(ValueError, match=r"pods must be 1\.\.40"):
        Case(nodes=100, cards=4, good=10, layout="contiguous", pods=41, percentage=0)


def test_a_case_with_a_negative_count_of_waiting_pods_is_refused() -> None:
    with pytest.raises(ValueError, match="waiting pods must be 0 or more, not -1"):
        Case(nodes=100, cards=4, good=10, layout="spread", pods=5, percentage=0, waiting=-1)


def test_a_case_whose_filled_nodes_fit_no_whole_card_by_sums_is_refused() -> None:
    # two cards with 40% left each add up to 80: kube-scheduler itself would leave them out
    with pytest.raises(ValueError, match="2 cards"):
        Case(nodes=100, cards=2, good=10, layout="spread", pods=5, percentage=0)


SCHEDULER_TEXT = """\
# HELP scheduler_schedule_attempts_total Number of attempts to schedule pods.
# TYPE scheduler_schedule_attempts_total counter
scheduler_schedule_attempts_total{profile="default-scheduler",result="scheduled"} 150
scheduler_schedule_attempts_total{profile="default-scheduler",result="unschedulable"} 37
scheduler_schedule_attempts_total{profile="other",result="unschedulable"} 2
# HELP scheduler_pending_pods Number of pending pods.
# TYPE scheduler_pending_pods gauge
scheduler_pending_pods{queue="active"} 3
"""


def test_schedule_attempts_adds_up_every_profile_by_result() -> None:
    assert schedule_attempts(SCHEDULER_TEXT) == {"scheduled": 150, "unschedulable": 39}


def test_waits_row_reads_median_p90_and_the_last() -> None:
    assert waits_row([10.0, *map(float, range(1, 10))]) == {
        "wait_p50_s": 5.5, "wait_p90_s": 9.0, "last_bound_s": 10.0}
    assert waits_row([]) == {}


@pytest.mark.parametrize(("argv", "message"), [
    (["--percentages", "101"], "percentageOfNodesToScore is 0-100"),
    (["--pods", "500"], "pods must be 1..200"),
])
def test_main_refuses_a_bad_case_before_any_cluster(
        argv: list[str], message: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    def no_binaries() -> None:
        raise AssertionError("a cluster was started")

    monkeypatch.setattr(sampled_window, "ensure_binaries", no_binaries)
    with pytest.raises(SystemExit) as exited:
        sampled_window.main(argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err
