"""The node-watch race: a node kube-scheduler names before our node watch has delivered it is
read from the API (consistent, coalesced, rate-limited, bounded) before filter answers."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from alloc_harness import make_app
from builders import VOCAB, make_gpu_pod, make_node, request, whole
from fake_kube import FakeKube

from allocator.picture.nodelookup import NodeLookup
from allocator.picture.state import ClusterState
from allocator.ports import Obj


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _run_now(fn: Callable[[], None]) -> None:
    fn()


def _reads(fake: FakeKube) -> list[str]:
    return [c[1] for c in fake.calls if c[0] == "get_node"]


def test_a_node_created_after_the_last_watch_event_is_read_and_filtered_on_its_cards() -> None:
    fake = FakeKube()
    app, rt = make_app(fake)  # synced on an empty cluster; no watch runs in this test
    fake.add_node(make_node("fresh", count=2))
    body = app.test_client().post("/scheduler/filter", json={
        "Pod": make_gpu_pod("p", request(whole(cards=3)), uid="u-p"), "Nodes": None,
        "NodeNames": ["fresh"]}).get_json()
    # The reason is about the pod and the node's cards, not about our watch.
    reasons = {**(body["FailedNodes"] or {}), **(body.get("FailedAndUnresolvableNodes") or {})}
    assert "fresh" in reasons
    assert "unknown" not in reasons["fresh"], reasons
    assert "3" in reasons["fresh"] and "2" in reasons["fresh"], reasons
    assert _reads(fake) == ["fresh"]
    assert rt.state.view("fresh") is not None


def test_a_fitting_fresh_node_is_returned_as_fitting() -> None:
    fake = FakeKube()
    app, _rt = make_app(fake)
    fake.add_node(make_node("fresh", count=2))
    body = app.test_client().post("/scheduler/filter", json={
        "Pod": make_gpu_pod("p", request(whole()), uid="u-p"), "Nodes": None,
        "NodeNames": ["fresh"]}).get_json()
    assert body["NodeNames"] == ["fresh"], body


def test_a_known_best_node_answers_without_reading_a_name_the_watch_has_not_delivered(
        ) -> None:
    """Filter ranks the nodes it knows first (``FastRanker.best_known``): when one
    of its best was asked it answers at once; the unknown name is read only when no known
    node answers."""
    fake = FakeKube()
    fake.add_node(make_node("known", count=2))
    app, _rt = make_app(fake)
    fake.add_node(make_node("fresh", count=4))
    client = app.test_client()

    def filtered(cards: int, uid: str) -> list[str]:
        body = client.post("/scheduler/filter", json={
            "Pod": make_gpu_pod("p", request(whole(cards=cards)), uid=uid), "Nodes": None,
            "NodeNames": ["fresh", "known"]}).get_json()
        names: list[str] = body["NodeNames"]
        return names

    assert filtered(1, "u-1") == ["known"] and _reads(fake) == []
    assert filtered(3, "u-3") == ["fresh"] and _reads(fake) == ["fresh"]  # known lacks cards


def test_a_name_the_api_does_not_have_is_asked_again_only_after_the_interval() -> None:
    fake = FakeKube()
    state = ClusterState(VOCAB)
    clock = Clock()
    lookup = NodeLookup(fake.get_node, state, clock=clock, spawn=_run_now, min_interval=1.0)
    for _ in range(5):
        lookup.ensure(["ghost"])
        clock.now += 0.1
    assert _reads(fake) == ["ghost"]
    clock.now += 1.0
    lookup.ensure(["ghost"])
    assert _reads(fake) == ["ghost", "ghost"]
    assert state.view("ghost") is None


def test_one_call_starts_at_most_max_names_reads() -> None:
    fake = FakeKube()
    lookup = NodeLookup(fake.get_node, ClusterState(VOCAB), clock=Clock(), spawn=_run_now,
                        max_names=3)
    lookup.ensure([f"n{i}" for i in range(10)])
    assert len(_reads(fake)) == 3


def test_concurrent_filters_share_the_read_in_flight_and_a_hanging_read_is_not_waited_out(
) -> None:
    gate = threading.Event()
    reads: list[str] = []

    def slow_get(name: str) -> Obj | None:
        reads.append(name)
        gate.wait(5)
        return make_node(name, count=1)

    state = ClusterState(VOCAB)
    lookup = NodeLookup(slow_get, state, max_wait=0.2)
    done: list[float] = []

    def filter_thread() -> None:
        lookup.ensure(["n1"])
        done.append(1)

    threads = [threading.Thread(target=filter_thread) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=3)
    assert len(done) == 4  # every caller gave up waiting at max_wait
    assert reads == ["n1"]  # one read for all of them
    gate.set()
    for _ in range(100):
        if state.view("n1") is not None:
            break
        threading.Event().wait(0.02)
    assert state.view("n1") is not None  # the read still lands when it returns


def test_an_older_watch_event_does_not_undo_a_newer_read() -> None:
    state = ClusterState(VOCAB)
    assert state.apply_looked_up_node(make_node("n1", count=4, rv="20")) is True
    # The watch now delivers the node's ADDED event, from before its capacity was set.
    bare: dict[str, Any] = {"metadata": {"name": "n1", "resourceVersion": "15"}}
    state.apply_node(bare)
    view = state.view("n1")
    assert view is not None and len(view.state.cards) == 4
    # Once the watch reaches the read (or passes it), it is the source of truth again.
    state.apply_node(make_node("n1", count=2, rv="25"))
    view = state.view("n1")
    assert view is not None and len(view.state.cards) == 2
    state.apply_node({"metadata": {"name": "n1", "resourceVersion": "24"}})
    view = state.view("n1")
    assert view is not None and len(view.state.cards) == 0


def test_a_read_never_overwrites_a_node_the_watch_already_has() -> None:
    state = ClusterState(VOCAB)
    state.apply_node(make_node("n1", count=4, rv="30"))
    assert state.apply_looked_up_node(make_node("n1", count=1, rv="10")) is False
    view = state.view("n1")
    assert view is not None and len(view.state.cards) == 4


def test_a_filter_reads_a_node_the_watch_has_not_delivered_then_knows_it() -> None:
    fake = FakeKube()
    app, rt = make_app(fake)
    fake.add_node(make_node("fresh", count=2))
    args = {"Pod": make_gpu_pod("p", request(whole()), uid="u-p"), "Nodes": None,
            "NodeNames": ["fresh"]}
    body = app.test_client().post("/scheduler/filter", json=args).get_json()
    assert body["NodeNames"] == ["fresh"] and _reads(fake) == ["fresh"]
    # known now: not read again
    again = app.test_client().post("/scheduler/filter", json=args).get_json()
    assert again["NodeNames"] == ["fresh"] and _reads(fake) == ["fresh"]
    assert rt.allocator.filter(args["Pod"], ["gone"]).nodes == []
    # a name read and found absent a moment ago is not read again
    reads = _reads(fake)
    assert rt.allocator.filter(args["Pod"], ["gone"]).nodes == []
    assert _reads(fake) == reads
