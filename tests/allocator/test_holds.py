"""Filter's holds: a pod's cards on the one node filter answers are held for its bind, so the
filters of the pods after it (which kube-scheduler sends while it binds) count them as
taken; the bind claims them; every other way out (asked again, bound elsewhere, the node's
cards changed, the request changed, no bind within the hold's time, a failed bind) releases
them, and no card is ever given twice."""

from __future__ import annotations

import copy
import threading
from dataclasses import replace
from typing import Any

import pytest
from alloc_harness import NOW, sync
from builders import VOCAB, make_gpu_pod, make_node, request, share, whole
from fake_kube import FakeKube

from allocator.errors import ApiError, BindError
from allocator.picture.holds import Hold, Holds
from allocator.picture.records import Stage
from allocator.picture.state import ClusterState
from allocator.service.app import EXTENSION, Runtime, create_app
from allocator.service.config import Settings
from allocator.verbs.core import Allocator, AllocatorConfig, assemble
from tessera.vocabulary import (
    PodRequest,
    decode_allocation,
    encode_allocation,
    encode_request,
)


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


def _allocator(fake: FakeKube, clock: Clock | None = None, **config: Any) -> Allocator:
    state = ClusterState(VOCAB)
    sync(state, fake)
    return assemble(state, fake, AllocatorConfig(**config), clock=clock or Clock())


def _pods(fake: FakeKube, count: int, req: PodRequest) -> list[dict[str, Any]]:
    pods = [make_gpu_pod(f"p{i}", req, uid=f"u{i}") for i in range(count)]
    for pod in pods:
        fake.add_pod(pod)
    return pods


def _one_card_nodes(count: int) -> FakeKube:
    fake = FakeKube()
    for i in range(count):
        fake.add_node(make_node(f"n{i}", count=1, memory_mib=16000))
    return fake


def test_a_held_card_is_taken_for_the_next_filters_and_the_bind_claims_it() -> None:
    fake = _one_card_nodes(2)
    a, b, c = _pods(fake, 3, request(whole()))
    alloc = _allocator(fake)
    names = ["n0", "n1"]
    first = alloc.filter(a, names).nodes
    assert len(first) == 1
    rec = alloc.state.record("u0")
    assert rec is not None and rec.stage is Stage.HELD and rec.node == first[0]
    # Not bound yet: the next pod is sent to the other node, the third to none.
    second = alloc.filter(b, names).nodes
    assert len(second) == 1 and second != first
    third = alloc.filter(c, names)
    assert third.nodes == [] and set(third.failed) == set(names)
    assert alloc.state.holds() == 2
    # The bind claims what filter held: the same card, now a bind's reservation and bound.
    out = alloc.bind("default", "p0", "u0", first[0])
    assert out.outcome == "bound" and out.cards == rec.allocation.card_indices()
    written = decode_allocation(
        fake.pods[("default", "p0")]["metadata"]["annotations"][VOCAB.allocation_annotation])
    assert written.containers == rec.allocation.containers and written.allocated_at == NOW
    bound = alloc.state.record("u0")
    assert bound is not None and bound.stage is Stage.BOUND
    assert alloc.state.holds() == 1


def test_a_pod_asked_again_drops_its_own_hold_first() -> None:
    fake = _one_card_nodes(1)
    (a,) = _pods(fake, 1, request(whole()))
    alloc = _allocator(fake)
    assert alloc.filter(a, ["n0"]).nodes == ["n0"]
    view = alloc.state.view("n0")
    assert view is not None and view.state.cards[0].whole
    # kube-scheduler asks again (a later plugin failed, the pod went back to the queue):
    # the pod's own hold does not stand in its way, and it is held once.
    assert alloc.filter(a, ["n0"]).nodes == ["n0"]
    assert alloc.state.holds() == 1


def test_a_hold_nobody_claims_expires() -> None:
    fake = _one_card_nodes(1)
    a, b = _pods(fake, 2, request(whole()))
    clock = Clock()
    alloc = _allocator(fake, clock, hold_seconds=15)
    assert alloc.filter(a, ["n0"]).nodes == ["n0"]
    clock.now += 14.9
    assert alloc.filter(b, ["n0"]).nodes == []  # still held for p0
    clock.now += 0.2
    assert alloc.filter(b, ["n0"]).nodes == ["n0"]  # p0's hold expired: p1 holds now
    rec = alloc.state.record("u0")
    assert rec is None
    # p0's bind comes after all: placed afresh, and the card is p1's.
    with pytest.raises(BindError, match="node n0"):
        alloc.bind("default", "p0", "u0", "n0")
    assert alloc.bind("default", "p1", "u1", "n0").outcome == "bound"


def test_a_bind_to_another_node_releases_the_hold_and_places_the_pod_afresh() -> None:
    fake = _one_card_nodes(2)
    (a,) = _pods(fake, 1, request(whole()))
    alloc = _allocator(fake)
    held = alloc.filter(a, ["n0", "n1"]).nodes[0]
    other = "n1" if held == "n0" else "n0"
    assert alloc.bind("default", "p0", "u0", other).outcome == "bound"
    assert alloc.state.holds() == 0
    rec = alloc.state.record("u0")
    assert rec is not None and rec.node == other
    held_view = alloc.state.view(held)
    assert held_view is not None and held_view.state.core_used == 0


def test_a_node_whose_cards_changed_is_placed_afresh_at_bind() -> None:
    fake = FakeKube()
    fake.add_node(make_node("n0", count=2, memory_mib=16000))
    (a,) = _pods(fake, 1, request(share(core=30, mem=2000)))
    alloc = _allocator(fake)
    assert alloc.filter(a, ["n0"]).nodes == ["n0"]
    req = alloc.reader.pod_request(a)
    # The device plugin now reports one card of another size: the hold's card may be gone,
    # so the hold cannot be claimed (and is released)...
    alloc.state.apply_node(make_node("n0", count=1, memory_mib=24000))
    assert alloc.state.claim_hold("u0", "n0", req) is None
    assert alloc.state.record("u0") is None and alloc.state.holds() == 0
    # ...while an unchanged node's hold is claimed.
    assert alloc.filter(a, ["n0"]).nodes == ["n0"]
    claimed = alloc.state.claim_hold("u0", "n0", req)
    assert claimed is not None and claimed.node == "n0"
    alloc.state.unreserve("u0")
    # The bind after a change places the pod afresh on the cards there now.
    assert alloc.filter(a, ["n0"]).nodes == ["n0"]
    alloc.state.apply_node(make_node("n0", count=1, memory_mib=20000))
    out = alloc.bind("default", "p0", "u0", "n0")
    assert out.outcome == "bound" and out.cards == (0,)
    view = alloc.state.view("n0")
    assert view is not None and view.state.core_used == 30 and not view.state.cards[0].whole
    assert alloc.state.holds() == 0


def test_a_request_changed_since_filter_is_placed_afresh_at_bind() -> None:
    fake = FakeKube()
    fake.add_node(make_node("n0", count=2, memory_mib=16000))
    (a,) = _pods(fake, 1, request(share(core=30, mem=2000)))
    alloc = _allocator(fake)
    assert alloc.filter(a, ["n0"]).nodes == ["n0"]
    # The pod's request was edited before its bind (the bind reads the pod again).
    changed = copy.deepcopy(fake.pods[("default", "p0")])
    changed["metadata"]["annotations"][VOCAB.request_annotation] = encode_request(
        request(whole()))
    fake.pods[("default", "p0")] = changed
    # Filter's copy of the pod gone (as after RECENT_PODS others): the bind reads the pod.
    alloc.reader.recall("default", "p0", "u0")
    out = alloc.bind("default", "p0", "u0", "n0")
    assert out.outcome == "bound"
    view = alloc.state.view("n0")
    assert view is not None and [card.whole for card in view.state.cards] == [True, False]
    assert view.state.core_used == 100 and alloc.state.holds() == 0


def test_a_failed_bind_releases_the_claimed_hold() -> None:
    fake = _one_card_nodes(1)
    a, b = _pods(fake, 2, request(whole()))
    alloc = _allocator(fake)
    assert alloc.filter(a, ["n0"]).nodes == ["n0"]
    fake.fail("bind_pod", ApiError("POST binding: HTTP 500: etcd timeout", 500))
    with pytest.raises(BindError, match="etcd timeout"):
        alloc.bind("default", "p0", "u0", "n0")
    assert alloc.state.record("u0") is None and alloc.state.holds() == 0
    assert alloc.filter(b, ["n0"]).nodes == ["n0"]


def test_a_relist_keeps_the_holds() -> None:
    fake = _one_card_nodes(1)
    (a,) = _pods(fake, 1, request(whole()))
    alloc = _allocator(fake)
    alloc.filter(a, ["n0"])
    # The list does not show the pod (nothing of a hold is in the API), and is newer than it.
    alloc.state.replace_pods([])
    rec = alloc.state.record("u0")
    assert rec is not None and rec.stage is Stage.HELD and alloc.state.holds() == 1


def test_a_pod_that_ends_or_goes_releases_its_hold() -> None:
    fake = _one_card_nodes(1)
    (a,) = _pods(fake, 1, request(whole()))
    alloc = _allocator(fake)
    alloc.filter(a, ["n0"])
    alloc.state.remove_pod(a)
    assert alloc.state.holds() == 0 and alloc.state.record("u0") is None
    view = alloc.state.view("n0")
    assert view is not None and view.state.core_used == 0


def test_no_holds_when_configured_off_or_when_filter_names_several_nodes() -> None:
    fake = _one_card_nodes(2)
    (a,) = _pods(fake, 1, request(whole()))
    off = _allocator(fake, hold_seconds=0)
    assert len(off.filter(a, ["n0", "n1"]).nodes) == 1 and off.state.holds() == 0
    every = _allocator(fake, filter_best=False)
    assert every.filter(a, ["n0", "n1"]).nodes == ["n0", "n1"] and every.state.holds() == 0


def test_filters_and_binds_in_many_threads_never_give_a_card_twice() -> None:
    """kube-scheduler's pipeline, roughly: filters one after another, each pod's bind in a
    thread of its own; some binds go to another node than filter held, some never come.
    Whatever the interleaving, the cards written to the API never overlap and the picture
    equals what the API says plus the holds still open."""
    fake = FakeKube()
    for i in range(4):
        fake.add_node(make_node(f"n{i}", count=2, memory_mib=16000))
    shapes = [request(whole()), request(share(core=30, mem=3000)), request(share(core=60))]
    pods = [make_gpu_pod(f"p{i}", shapes[i % 3], uid=f"u{i}") for i in range(60)]
    for pod in pods:
        fake.add_pod(pod)
    alloc = _allocator(fake)
    names = [f"n{i}" for i in range(4)]
    binds: list[threading.Thread] = []
    errors: list[BaseException] = []

    def bind(pod: dict[str, Any], node: str) -> None:
        meta = pod["metadata"]
        try:
            alloc.bind("default", meta["name"], meta["uid"], node)
        except BindError:
            pass  # refused: the pod is filtered again, as kube-scheduler would
        except BaseException as exc:  # reported below
            errors.append(exc)

    for k, pod in enumerate(pods):
        nodes = alloc.filter(pod, names).nodes
        if not nodes or k % 7 == 3:
            continue  # no room, or a bind that never comes
        node = nodes[0] if k % 5 else names[(k + 1) % 4]  # every fifth: elsewhere
        thread = threading.Thread(target=bind, args=(pod, node))
        thread.start()
        binds.append(thread)
    for thread in binds:
        thread.join()
    assert not errors
    # What the API says: no card over-committed, nothing written twice.
    used: dict[tuple[str, int], int] = {}
    for pod in fake.pods.values():
        text = (pod["metadata"].get("annotations") or {}).get(VOCAB.allocation_annotation)
        if not text:
            continue
        allocation = decode_allocation(text)
        assert allocation.node == pod["spec"]["nodeName"]
        for container in allocation.containers:
            for card in container.card_indices:
                key = (allocation.node, card)
                used[key] = used.get(key, 0) + (container.core_percent or 100)
    assert used and all(core <= 100 for core in used.values()), used
    for name in names:
        view = alloc.state.view(name)
        assert view is not None and all(card.free_core >= 0 for card in view.state.cards)
    bound = {m["uid"] for pod in fake.pods.values() for m in [pod["metadata"]]
             if pod["spec"].get("nodeName")}
    held = {uid for uid in (f"u{i}" for i in range(60))
            if (rec := alloc.state.record(uid)) is not None and rec.stage is Stage.HELD}
    assert alloc.state.holds() == len(held) and not (held & bound)


def test_a_held_pod_seen_bound_with_its_cards_keeps_them_after_the_hold_s_time() -> None:
    """The watch shows the pod bound with an allocation (a bind of the previous leader, say)
    while filter's hold stands: the record is the truth from then on, and neither the hold's
    expiry nor a later release may drop it."""
    fake = _one_card_nodes(1)
    a, b = _pods(fake, 2, request(whole()))
    clock = Clock()
    alloc = _allocator(fake, clock, hold_seconds=15)
    alloc.filter(a, ["n0"])
    held = alloc.state.record("u0")
    assert held is not None
    bound = copy.deepcopy(fake.pods[("default", "p0")])
    bound["spec"]["nodeName"] = "n0"
    bound["metadata"]["annotations"][VOCAB.allocation_annotation] = encode_allocation(
        replace(held.allocation, allocated_at=NOW))
    alloc.state.apply_pod(bound)
    assert alloc.state.holds() == 0
    clock.now += 60
    alloc.expire_holds()
    alloc.state.release_hold("u0")
    rec = alloc.state.record("u0")
    assert rec is not None and rec.stage is Stage.CONFIRMED
    assert alloc.filter(b, ["n0"]).nodes == []  # the card is still taken


def test_operators_documents_show_no_stale_hold_on_a_quiet_cluster() -> None:
    fake = _one_card_nodes(1)
    (a,) = _pods(fake, 1, request(whole()))
    clock = Clock()
    app = create_app(Settings(leader_election=False), api=fake, start=False, clock=clock)
    runtime: Runtime = app.extensions[EXTENSION]
    sync(runtime.state, fake)
    client = app.test_client()
    client.post("/scheduler/filter", json={"Pod": a, "NodeNames": ["n0"]})

    def holders() -> list[dict[str, str]]:
        doc = client.get("/status").get_json()
        return [p for n in doc["nodes"] for c in n["cards"] for p in c["pods"]]

    assert [p["stage"] for p in holders()] == ["held"]
    clock.now += runtime.settings.core.hold_seconds + 1  # no filter comes after it
    assert holders() == []
    assert 'kind="allocated",node="n0"} 0.0' in client.get("/metrics").get_data(as_text=True)


def test_a_long_hold_does_not_keep_later_short_holds_from_expiring() -> None:
    holds = Holds()
    holds.add("long", Hold(until=100.0, cards=(), made_for=None))  # a preemption's hold
    holds.add("short", Hold(until=10.0, cards=(), made_for=None))  # filter's, made after it
    assert holds.take_expired(20.0) == ["short"]
    assert "long" in holds
    assert holds.take_expired(100.0) == ["long"]
    holds.add("a", Hold(until=5.0, cards=(), made_for=None))
    holds.add("b", Hold(until=6.0, cards=(), made_for=None))
    assert holds.take_expired(5.5) == ["a"]


def test_the_holds_per_node_follow_every_add_pop_and_expiry() -> None:
    holds = Holds()
    holds.add("a", Hold(until=5.0, cards=(), made_for=None, node="n1"))
    holds.add("b", Hold(until=6.0, cards=(), made_for=None, node="n1"))
    holds.add("c", Hold(until=7.0, cards=(), made_for=None, node="n2"))
    assert holds.per_node() == {"n1": 2, "n2": 1}
    holds.add("c", Hold(until=8.0, cards=(), made_for=None, node="n1"))  # held again elsewhere
    assert holds.per_node() == {"n1": 3}
    assert holds.pop("b") is not None and holds.pop("b") is None
    assert holds.take_expired(5.5) == ["a"]
    assert holds.per_node() == {"n1": 1}
    counted = holds.per_node()
    counted["n1"] += 5  # a copy: the table is not changed through it
    assert holds.per_node() == {"n1": 1}
