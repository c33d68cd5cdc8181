"""What prioritize leaves out of its reply never changes kube-scheduler's choice.

The scheduler adds ``Score * weight`` to the nodes a reply names, nothing to the others, and
picks among the nodes of the highest total (kubernetes v1.34.4 ``schedule_one.go``,
``prioritizeNodes`` and ``selectHost``); these tests model exactly that."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from allocator.service.extender import worth_sending

WEIGHT = 1


def best_nodes(names: list[str], others: list[int], reply: dict[str, int]) -> set[str]:
    """The nodes kube-scheduler may pick: highest total of its own plugins' scores plus the
    extender's ``Score * weight * 10`` for the nodes the reply names."""
    totals = {n: o + reply.get(n, 0) * WEIGHT * 10 for n, o in zip(names, others, strict=True)}
    top = max(totals.values())
    return {n for n, t in totals.items() if t == top}


@given(st.lists(st.tuples(st.integers(0, 10), st.integers(0, 300)), min_size=1, max_size=40))
def test_the_scheduler_picks_among_the_same_nodes_with_the_full_or_the_sent_reply(
    scored: list[tuple[int, int]],
) -> None:
    names = [f"n{i}" for i in range(len(scored))]
    scores = [s for s, _ in scored]
    others = [o for _, o in scored]
    sent_names, sent_scores = worth_sending(names, scores)
    full = dict(zip(names, scores, strict=True))
    sent = dict(zip(sent_names, sent_scores, strict=True))
    assert best_nodes(names, others, sent) == best_nodes(names, others, full)
    assert all(0 < s <= 10 for s in sent_scores)


def test_nodes_at_the_lowest_score_are_left_out_and_equal_scores_send_nothing() -> None:
    assert worth_sending(["a", "b", "c"], [0, 7, 10]) == (["b", "c"], [7, 10])
    assert worth_sending(["a", "b", "c"], [3, 7, 3]) == (["b"], [4])
    assert worth_sending(["a", "b"], [10, 10]) == ([], [])
    assert worth_sending([], []) == ([], [])
