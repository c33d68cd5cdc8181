"""``defrag-plan``: the fewest moves, against plans worked out by hand."""

from __future__ import annotations

import pytest
from plugin_builders import gpu_node, gpu_pod, picture_of, scenario, shares, wholes

from kubectl_tessera import defrag
from tessera.vocabulary import (
    Allocation,
    ContainerAllocation,
    ContainerRequest,
    PodRequest,
    encode_allocation,
)


def test_one_card_is_freed_by_moving_one_half_onto_another_half() -> None:
    plan = defrag.plan(picture_of(*scenario()), 1, "binpack")
    assert plan.feasible and plan.exact
    assert plan.freed == (("n1", 0),)
    # binpack sends a to the fuller node: n2, onto c's half card (n2 #1 is d's, whole).
    assert [(m.pod, m.from_node, m.from_cards, m.to_node, m.to_cards) for m in plan.moves] == [
        ("default/a", "n1", (0,), "n2", (0,))]
    assert (plan.idle_before, plan.idle_after) == (0, 1)


def test_two_cards_cannot_be_freed_when_the_halves_have_nowhere_to_go() -> None:
    plan = defrag.plan(picture_of(*scenario()), 2, "binpack")
    assert not plan.feasible and plan.moves == ()
    assert "no way to empty 2 more card(s)" in plan.note


def test_the_pod_that_fits_elsewhere_moves_not_the_first_cheap_one() -> None:
    # #0: one 70% pod (fits nowhere else), #1: two 20% pods, #2: one 50% pod (fits on #1).
    nodes = [gpu_node("n1", count=3)]
    pods = [gpu_pod("big", shares(70), node="n1", cards=[0]),
            gpu_pod("s1", shares(20), node="n1", cards=[1]),
            gpu_pod("s2", shares(20), node="n1", cards=[1]),
            gpu_pod("half", shares(50), node="n1", cards=[2])]
    plan = defrag.plan(picture_of(nodes, pods), 1, "binpack")
    assert [(m.pod, m.to_cards) for m in plan.moves] == [("default/half", (1,))]
    assert plan.freed == (("n1", 2),)


def test_whole_card_pods_are_never_moved_and_idle_cards_already_count() -> None:
    nodes = [gpu_node("n1")]
    pods = [gpu_pod("w", wholes(1), node="n1", cards=[0])]
    plan = defrag.plan(picture_of(nodes, pods), 1, "binpack")
    assert plan.feasible and plan.moves == () and plan.idle_before == 1
    plan = defrag.plan(picture_of(nodes, pods), 2, "binpack")
    assert not plan.feasible


def test_only_cards_of_the_model_asked_count() -> None:
    nodes = [gpu_node("t4", count=1, model="T4"), gpu_node("a10", count=2, model="A10")]
    pods = [gpu_pod("x", shares(30), node="a10", cards=[0]),
            gpu_pod("y", shares(30), node="a10", cards=[1])]
    assert defrag.plan(picture_of(nodes, pods), 1, "binpack").moves == ()  # the T4 is idle
    plan = defrag.plan(picture_of(nodes, pods), 1, "binpack", model="A10")
    assert len(plan.moves) == 1 and plan.moves[0].to_node == "a10"


def test_a_move_never_lands_on_a_card_it_frees_or_another_idle_card_when_it_counts() -> None:
    nodes = [gpu_node("n1", count=2), gpu_node("n2", count=1)]
    pods = [gpu_pod("p", shares(40), node="n1", cards=[0])]
    plan = defrag.plan(picture_of(nodes, pods), 3, "binpack")
    # Three idle cards means p must leave, and there is nowhere it does not take one.
    assert not plan.feasible


def test_a_search_cut_short_by_its_budget_says_it_is_not_exact(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(defrag, "SEARCH_BUDGET", 1)
    nodes = [gpu_node("n1", count=3)]
    pods = [gpu_pod("big", shares(70), node="n1", cards=[0]),
            gpu_pod("half", shares(50), node="n1", cards=[2]),
            gpu_pod("s1", shares(40), node="n1", cards=[1])]
    plan = defrag.plan(picture_of(nodes, pods), 1, "binpack")
    # The one re-placement allowed tries to empty #0 (big fits nowhere): no plan, not exact.
    assert not plan.feasible and not plan.exact
    assert "budget" in plan.note


def test_the_card_being_emptied_does_not_make_its_node_look_full_to_the_policy() -> None:
    # One half on each node, one idle card each. Were x #0 counted as full while a moves,
    # binpack would take x for the fuller node and put a on x #1, the idle card.
    nodes = [gpu_node("x"), gpu_node("y")]
    pods = [gpu_pod("a", shares(50), node="x", cards=[0]),
            gpu_pod("b", shares(50), node="y", cards=[0])]
    plan = defrag.plan(picture_of(nodes, pods), 3, "binpack")
    assert [(m.pod, m.to_node, m.to_cards) for m in plan.moves] == [("default/a", "y", (0,))]
    assert plan.idle_after == 3


def test_a_pod_spread_over_two_cards_frees_both_with_one_move() -> None:
    two = PodRequest((ContainerRequest("x", core_percent=30, memory_mib=1000),
                      ContainerRequest("y", core_percent=30, memory_mib=1000)))
    record = Allocation("n1", (ContainerAllocation("x", (0,), 30, 1000),
                               ContainerAllocation("y", (1,), 30, 1000)), 0.0, "uid-m")
    nodes = [gpu_node("n1", count=4)]
    pods = [gpu_pod("m", two, node="n1", allocation_text=encode_allocation(record)),
            gpu_pod("p", shares(40), node="n1", cards=[2]),
            gpu_pod("q", shares(40), node="n1", cards=[3])]
    plan = defrag.plan(picture_of(nodes, pods), 2, "binpack")
    assert plan.exact and [m.pod for m in plan.moves] == ["default/m"]
    assert plan.freed == (("n1", 0), ("n1", 1))
    # binpack stacks both its containers on the fullest card, p's: 40 + 30 + 30 = 100%.
    assert plan.moves[0].to_cards == (2,)


def test_on_one_node_frees_the_cards_a_two_card_pod_needs_together() -> None:
    # One half on each node: three idle cards in all, but no node with two.
    nodes = [gpu_node("x"), gpu_node("y")]
    pods = [gpu_pod("a", shares(50), node="x", cards=[0]),
            gpu_pod("b", shares(50), node="y", cards=[0])]
    assert defrag.plan(picture_of(nodes, pods), 2, "binpack").moves == ()
    plan = defrag.plan(picture_of(nodes, pods), 2, "binpack", on_one_node=True)
    assert plan.feasible and plan.exact and plan.node == "x"
    assert [(m.pod, m.to_node, m.to_cards) for m in plan.moves] == [("default/a", "y", (0,))]
    assert (plan.idle_before, plan.idle_after) == (1, 2)


def test_on_one_node_moves_a_whole_card_pod_to_an_idle_card_elsewhere() -> None:
    nodes = [gpu_node("x"), gpu_node("y", count=1)]
    pods = [gpu_pod("w", wholes(1), node="x", cards=[1])]
    plan = defrag.plan(picture_of(nodes, pods), 2, "binpack", on_one_node=True)
    assert [(m.pod, m.to_node) for m in plan.moves] == [("default/w", "y")]
    # Nowhere to go once y is taken too.
    pods.append(gpu_pod("v", wholes(1), node="y", cards=[0]))
    plan = defrag.plan(picture_of(nodes, pods), 2, "binpack", on_one_node=True)
    assert not plan.feasible and "no node can get 2 idle card(s)" in plan.note


def test_on_one_node_with_a_node_already_free_moves_nothing() -> None:
    nodes = [gpu_node("x"), gpu_node("y")]
    pods = [gpu_pod("a", shares(50), node="x", cards=[0])]
    plan = defrag.plan(picture_of(nodes, pods), 2, "binpack", on_one_node=True)
    assert plan.feasible and plan.moves == () and plan.node == "y"
