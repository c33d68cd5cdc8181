"""A preemption's cards are reserved from its decision to its preemptor's bind
(allocator/preemption/reserved.py, allocator/verbs/reservations.py): kube-scheduler's
nominated pods at card level. Each rule over the in-memory API, and the pure rule alone."""

from __future__ import annotations

from typing import Any

import pytest
from alloc_harness import NOW, make_app
from builders import VOCAB, cards, make_node, request, share
from fake_kube import FakeKube
from preempting_cluster import HALF, WHOLE, full_node, priority_pod

from allocator.decisions import PodRef
from allocator.errors import BindError
from allocator.preemption import GpuPod, NodeOffer, Preemptor
from allocator.preemption.reserved import (
    Reservation,
    blocked,
    outranked,
    reserved_against,
    respecting,
)
from allocator.ranking.cards import empty_node
from allocator.ranking.fit import fits
from allocator.service.app import Runtime
from allocator.verbs.config import AllocatorConfig
from allocator.verbs.filter import RESERVED
from allocator.verbs.preempt import Preempt
from allocator.verbs.preempt_note import Note, encode_note
from tessera.vocabulary import Allocation, ContainerAllocation

QUARTER = request(share(core=25, mem=4000))
NOTE = VOCAB.preemption_annotation


def _pod(name: str, req: Any, priority: int) -> dict[str, Any]:
    return priority_pod(name, req, priority, priorityClassName=f"p{priority}")


def _full_node(pods: int = 4, req: Any = HALF, first: int = 1) -> tuple[FakeKube, Runtime]:
    """n1: two cards full of pods bound by the allocator (``pods`` of ``req``), of priority
    1 but the first half: ``first``."""
    fake, _app, rt = full_node(pods=[(f"low{n}", first if n < pods // 2 else 1)
                                     for n in range(pods)], req=req)
    return fake, rt


def _preempt(rt: Runtime) -> Preempt:
    assert rt.preempt is not None
    return rt.preempt


def _filter(rt: Runtime, fake: FakeKube, name: str) -> list[str]:
    out = rt.allocator.filter(fake.get_pod("default", name), ["n1"])
    _preempt(rt).worker.drain()  # the evictions (the worker's thread in a service)
    return out.nodes


def _evicted(fake: FakeKube) -> list[str]:
    return [name for call, name in fake.calls if call == "create_eviction"]


def _gone(rt: Runtime, names: list[str]) -> None:
    for name in names:
        rt.state.remove_pod({"metadata": {"uid": f"u-{name}"}})


def _cards(rt: Runtime, name: str) -> set[int]:
    record = rt.state.record(f"u-{name}")
    assert record is not None
    return set(record.allocation.card_indices())


def _metric(rt: Runtime, outcome: str) -> float | None:
    return rt.metrics.registry.get_sample_value(
        "tessera_allocator_preemptions_ended_total", {"outcome": outcome})


# ----------------------------------------------------------------------------- the pure rule
R10 = Reservation("u-p", 10, "n1", (0,), ("u-v",))


@pytest.mark.parametrize(("uid", "priority", "reserved"), [
    ("u-other", 9, {"n1": frozenset({0})}),   # lower: kept off
    ("u-other", 10, {"n1": frozenset({0})}),  # equal: kept off, as kube-scheduler's >=
    ("u-other", 11, {}),                      # higher: ignores it
    ("u-p", 10, {}),                          # the preemptor itself
])
def test_a_reservation_binds_pods_of_lower_or_equal_priority_but_its_own(
        uid: str, priority: int, reserved: dict[str, frozenset[int]]) -> None:
    assert reserved_against([R10], uid, priority) == reserved


def test_only_a_pod_of_higher_priority_on_a_reserved_card_outranks_it() -> None:
    assert outranked([R10], "u-x", 11, "n1", (0, 1)) == ["u-p"]
    assert outranked([R10], "u-x", 11, "n1", (1,)) == []  # the other card
    assert outranked([R10], "u-x", 10, "n1", (0,)) == []  # equal priority
    assert outranked([R10], "u-x", 11, "n2", (0,)) == []


def test_a_blocked_card_takes_neither_a_share_nor_a_whole_pod() -> None:
    node = empty_node("n1", cards(16000, 16000))
    assert fits(QUARTER, node) and fits(WHOLE, node)
    only_one = blocked(node, {0})
    assert fits(WHOLE, only_one)  # card 1
    both = blocked(node, {0, 1})
    assert not fits(QUARTER, both) and not fits(WHOLE, both)


def test_a_victim_in_flight_is_nobody_elses_victim_and_reserved_cards_free_nothing() -> None:
    node = empty_node("n1", cards(16000, 16000))
    pods = tuple(GpuPod(f"u-{n}", "default", n, Allocation("n1", (
        ContainerAllocation("c", (card,), 50, 8000, False),)), priority=1)
        for n, card in (("v", 0), ("w", 1)))
    offer = NodeOffer(node, pods)
    where = {p.uid: p for p in pods}
    (equal,) = respecting([offer], [R10], Preemptor("u-q", WHOLE, 10), where.get, {})
    assert [p.uid for p in equal.pods] == ["u-w"]
    assert equal.state == blocked(node, {0})  # card 0 blocked: evicting frees nothing there
    (higher,) = respecting([offer], [R10], Preemptor("u-q", WHOLE, 20), where.get, {})
    assert [p.uid for p in higher.pods] == ["u-w"]  # u-v is leaving already
    assert higher.state == node


# ----------------------------------------------------------------------------- through filter
def test_two_preemptors_of_one_priority_never_choose_the_same_victims() -> None:
    fake, rt = _full_node()
    for name in ("p1", "p2"):
        fake.add_pod(_pod(name, WHOLE, 10))
    _filter(rt, fake, "p1")
    first = _evicted(fake)
    _filter(rt, fake, "p2")
    second = _evicted(fake)[len(first):]
    assert len(first) == 2 and len(second) == 2
    assert not set(first) & set(second)
    (a, b) = sorted(_preempt(rt).snapshot(), key=lambda f: f.pod.name)
    assert set(a.cards).isdisjoint(b.cards)


def test_an_equal_priority_preemptor_finds_nothing_where_only_reserved_cards_would_do() -> None:
    fake, rt = _full_node()
    rt.state.remove_pod({"metadata": {"uid": "u-low2"}})  # card 1 half free, its
    rt.state.remove_pod({"metadata": {"uid": "u-low3"}})  # other half too: card 1 free
    fake.add_pod(_pod("p1", WHOLE, 10))
    fake.add_pod(_pod("p2", WHOLE, 10))
    assert _filter(rt, fake, "p1") == ["n1"]  # card 1 free: no preemption
    rt.allocator.bind("default", "p1", "u-p1", "n1")
    _filter(rt, fake, "p2")  # preempts card 0
    taken = _evicted(fake)
    fake.add_pod(_pod("p3", WHOLE, 10))
    assert _filter(rt, fake, "p3") == []
    assert _evicted(fake) == taken  # card 0's pods are p2's victims: none left to take


def test_room_freed_before_the_last_victim_goes_is_not_given_to_a_lower_or_equal_pod() -> None:
    fake, rt = _full_node(pods=8, req=QUARTER)  # two cards, four quarters each
    fake.add_pod(_pod("big", WHOLE, 10))
    _filter(rt, fake, "big")
    victims = _evicted(fake)
    assert len(victims) == 4
    _gone(rt, victims[:2])  # half of the card free, the preemptor not yet
    for name, priority in (("lower", 1), ("equal", 10)):
        fake.add_pod(_pod(name, QUARTER, priority))
        out = rt.allocator.filter(fake.get_pod("default", name), ["n1"])
        assert out.nodes == [] and out.failed == {"n1": RESERVED}
    fake.add_pod(_pod("low-whole", WHOLE, 1))
    assert _filter(rt, fake, "low-whole") == []
    _gone(rt, victims[2:])
    held = rt.state.record("u-big")
    assert held is not None and held.stage == "held"
    assert _filter(rt, fake, "big") == ["n1"]


def test_a_lower_pod_still_gets_the_cards_no_preemption_reserved() -> None:
    fake, rt = _full_node(pods=4, req=QUARTER)  # one card full of priority 1
    for n in range(3):  # the other three quarters taken by pods nobody may evict
        fake.add_pod(_pod(f"high{n}", QUARTER, 20))
        rt.allocator.bind("default", f"high{n}", f"u-high{n}", "n1")
    fake.add_pod(_pod("big", WHOLE, 10))
    _filter(rt, fake, "big")
    (flight,) = _preempt(rt).snapshot()
    assert set(flight.cards).isdisjoint(_cards(rt, "high0"))
    fake.add_pod(_pod("elsewhere", QUARTER, 1))  # a node not asked is never answered
    assert rt.allocator.filter(fake.get_pod("default", "elsewhere"), ["n2"]).nodes == []
    fake.add_pod(_pod("lower", QUARTER, 1))
    assert _filter(rt, fake, "lower") == ["n1"]
    assert _cards(rt, "lower").isdisjoint(flight.cards)
    held = rt.state.record("u-lower")
    assert held is not None and held.stage == "held"  # a hold for its bind, as always


def test_the_requeue_holds_no_reserved_room_for_a_lower_pod() -> None:
    fake, rt = _full_node(pods=8, req=QUARTER)
    fake.add_pod(_pod("lower", QUARTER, 1))
    assert _filter(rt, fake, "lower") == []  # refused: remembered by the requeue
    fake.add_pod(_pod("big", WHOLE, 10))
    _filter(rt, fake, "big")
    victims = _evicted(fake)
    _gone(rt, victims[:1])  # a release the requeue judges for the refused pod
    requeue = rt.allocator.requeue
    assert requeue is not None
    requeue.settle()
    assert rt.state.record("u-lower") is None  # nothing held for it on the reserved card


def test_a_higher_pod_takes_reserved_room_and_the_lower_preemption_ends() -> None:
    fake, rt = _full_node(pods=8, req=QUARTER)
    fake.add_pod(_pod("big", WHOLE, 10))
    _filter(rt, fake, "big")
    victims = _evicted(fake)
    (flight,) = _preempt(rt).snapshot()
    _gone(rt, victims[:1])
    fake.add_pod(_pod("top", QUARTER, 50))
    assert _filter(rt, fake, "top") == ["n1"]
    assert _cards(rt, "top") <= set(flight.cards)
    assert _preempt(rt).snapshot() == ()  # over: its preemptor may preempt again
    assert _metric(rt, "outranked") == 1
    assert NOTE not in (fake.get_pod("default", "big")["metadata"].get("annotations") or {})
    _filter(rt, fake, "big")  # refused again: it preempts again, other victims
    again = _evicted(fake)[len(victims):]
    assert again and not set(again) & set(victims)


def test_a_higher_preemption_on_reserved_cards_ends_the_lower_one() -> None:
    fake, rt = _full_node(first=2)  # card 0's pods put back first: card 1's are the victims
    fake.add_pod(_pod("p10", HALF, 10))
    _filter(rt, fake, "p10")
    (low,) = _preempt(rt).snapshot()
    fake.add_pod(_pod("p50", WHOLE, 50))
    _filter(rt, fake, "p50")
    (high,) = _preempt(rt).snapshot()  # p10's preemption is over
    assert high.pod.name == "p50"
    assert set(high.victims).isdisjoint(low.victims)
    assert set(high.cards) & set(low.cards)  # the fewest victims: the card p10's victim leaves
    assert _metric(rt, "outranked") == 1


def test_a_restarted_allocator_keeps_the_reserved_cards_from_its_note() -> None:
    fake, _rt = _full_node(pods=8, req=QUARTER)
    fake.add_pod(_pod("big", WHOLE, 10))
    # The last leader wrote the note (card 0: low0..low3 its victims) and died before the
    # evictions; the watch of the new one sees two victims gone already.
    note = Note("n1", (0,), NOW + 30, ("u-low0", "u-low1", "u-low2", "u-low3"))
    fake.patch_pod("default", "big", {"metadata": {"annotations": {NOTE: encode_note(note)}}})
    for name in ("low0", "low1"):
        fake.delete_pod("default", name)
    _app, after = make_app(fake, core=AllocatorConfig(preemption=True))
    _preempt(after).worker.drain()  # restored
    fake.add_pod(_pod("lower", QUARTER, 1))
    out = after.allocator.filter(fake.get_pod("default", "lower"), ["n1"])
    assert out.nodes == [] and out.failed == {"n1": RESERVED}


def test_evictions_stop_when_the_preemption_ends_and_an_evicted_pod_is_no_victim_again(
        ) -> None:
    fake, rt = _full_node()
    fake.add_pod(_pod("big", WHOLE, 10))
    evict = fake.create_eviction

    def evict_then_bind_elsewhere(namespace: str, name: str) -> None:
        evict(namespace, name)  # the first victim goes; then big is bound on another node
        _preempt(rt).allocated(PodRef("default", "big", "u-big"), "n2", (0,), "binpack")

    fake.create_eviction = evict_then_bind_elsewhere  # type: ignore[method-assign]
    _filter(rt, fake, "big")
    fake.create_eviction = evict  # type: ignore[method-assign]
    first = _evicted(fake)
    assert len(first) == 1  # the second victim stays: nobody needs its card now
    # The evicted pod is still in the picture (terminating): its room counts as free for the
    # next preemptor, which evicts only its card-mate, never it again.
    fake.add_pod(_pod("next", WHOLE, 10))
    _filter(rt, fake, "next")
    again = _evicted(fake)[1:]
    assert len(again) == 1 and again != first
    assert _cards(rt, again[0]) == _cards(rt, first[0])  # the card the first one leaves


def test_a_higher_pod_placed_beside_a_preemptor_ends_it_only_when_it_took_its_room() -> None:
    fake = FakeKube()
    fake.add_node(make_node("n1", count=1))
    _app, rt = make_app(fake, core=AllocatorConfig(preemption=True))
    for name, req in (("a", QUARTER), ("q", HALF)):  # a quarter left free
        fake.add_pod(_pod(name, req, 1))
        rt.allocator.bind("default", name, f"u-{name}", "n1")
    fake.add_pod(_pod("big", HALF, 10))
    _filter(rt, fake, "big")
    assert _evicted(fake) == ["q"]
    fake.add_pod(_pod("top", QUARTER, 50))
    assert _filter(rt, fake, "top") == ["n1"]  # the free quarter: big keeps its room
    assert [f.pod.name for f in _preempt(rt).snapshot()] == ["big"]
    assert _metric(rt, "outranked") == 0
    _gone(rt, ["q"])  # big's half held for it now
    fake.add_pod(_pod("top2", QUARTER, 50))
    assert _filter(rt, fake, "top2") == ["n1"]  # a quarter of the half q left: no room
    assert _preempt(rt).snapshot() == ()
    assert _metric(rt, "outranked") == 1


def test_a_pod_being_evicted_is_no_victim_of_a_preemption_decided_meanwhile() -> None:
    fake, rt = _full_node()
    for name in ("big", "next"):
        fake.add_pod(_pod(name, WHOLE, 10))
    evict = fake.create_eviction
    chosen: list[tuple[str, ...]] = []

    def decide_during_the_eviction(namespace: str, name: str) -> None:
        if not chosen:  # big bound elsewhere while the API evicts; next preempts now
            _preempt(rt).allocated(PodRef("default", "big", "u-big"), "n2", (0,), "binpack")
            rt.allocator.filter(fake.get_pod("default", "next"), ["n1"])
            chosen.extend(f.victims for f in _preempt(rt).snapshot())
        evict(namespace, name)

    fake.create_eviction = decide_during_the_eviction  # type: ignore[method-assign]
    _filter(rt, fake, "big")
    (victims,) = chosen
    assert f"u-{_evicted(fake)[0]}" not in victims


def test_a_preemption_decided_after_a_concurrent_filter_placed_its_pod_evicts_nobody() -> None:
    fake, rt = _full_node()
    fake.add_pod(_pod("big", WHOLE, 10))
    listing = fake.list_pod_disruption_budgets

    def bound_meanwhile(*args: Any, **kwargs: Any) -> Any:
        # kube-scheduler gave up waiting for this filter, tried the pod again, and another
        # filter placed it where room appeared: it is bound while this one decides (the
        # budgets are read once the decision has victims).
        _preempt(rt).allocated(PodRef("default", "big", "u-big"), "n2", (0,), "binpack")
        return listing(*args, **kwargs)

    fake.list_pod_disruption_budgets = bound_meanwhile  # type: ignore[method-assign]
    _filter(rt, fake, "big")
    assert _evicted(fake) == []
    assert _preempt(rt).snapshot() == ()


def test_evictions_stop_when_the_preemptor_is_placed_on_another_node_meanwhile() -> None:
    fake, rt = _full_node()
    fake.add_node(make_node("n2", count=1))
    rt.state.apply_node(fake.get_node("n2"))
    fake.add_pod(_pod("x", WHOLE, 50))
    rt.allocator.bind("default", "x", "u-x", "n2")
    fake.add_pod(_pod("big", WHOLE, 10))
    evict = fake.create_eviction

    def room_appears_elsewhere(namespace: str, name: str) -> None:
        evict(namespace, name)
        if rt.state.record("u-x") is not None:  # x leaves n2: big's filter holds it there
            rt.state.remove_pod({"metadata": {"uid": "u-x"}})
            assert rt.allocator.filter(fake.get_pod("default", "big"), ["n2"]).nodes == ["n2"]

    fake.create_eviction = room_appears_elsewhere  # type: ignore[method-assign]
    out = rt.allocator.filter(fake.get_pod("default", "big"), ["n1", "n2"])
    assert out.nodes == []
    _preempt(rt).worker.drain()
    assert len(_evicted(fake)) == 1  # the second victim stays: big is placed on n2


def test_a_bind_placing_a_lower_pod_afresh_keeps_off_the_reserved_cards() -> None:
    fake, rt = _full_node(pods=8, req=QUARTER)
    fake.add_pod(_pod("big", WHOLE, 10))
    _filter(rt, fake, "big")
    _gone(rt, _evicted(fake)[:2])  # half of the reserved card free, no hold for "lower"
    fake.add_pod(_pod("lower", QUARTER, 1))
    with pytest.raises(BindError):
        rt.allocator.bind("default", "lower", "u-lower", "n1")
    assert rt.state.record("u-lower") is None
