"""The release race: before filter leaves a pod with no node for lack of room, it brings the
GPU pods up to date with a consistent read (coalesced, rate-limited, bounded)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from alloc_harness import make_app, synced_allocator
from builders import VOCAB, make_gpu_pod, make_node, request, share, whole
from fake_kube import FakeKube

from allocator.core import Allocator
from allocator.errors import ApiError
from allocator.resync import PodResync
from allocator.state import ClusterState
from tessera.transport import INLINE, NeedsThread
from tessera.vocabulary import Allocation, ContainerAllocation, encode_allocation


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _run_now(fn: Callable[[], None]) -> None:
    fn()


def _one_card_taken(fake: FakeKube) -> Allocator:
    """n1 has one card, held by pod "a" (bound through the allocator)."""
    fake.add_node(make_node("n1", count=1))
    fake.add_pod(make_gpu_pod("a", request(whole()), uid="u-a"))
    alloc = synced_allocator(fake)
    alloc.bind("default", "a", "u-a", "n1")
    fake.add_pod(make_gpu_pod("b", request(whole()), uid="u-b"))
    return alloc


def _release(fake: FakeKube, how: str) -> None:
    """The holder goes away in the API; no watch event reaches the allocator."""
    if how == "deleted":
        fake.delete_pod("default", "a")
    else:
        fake.set_phase("default", "a", how)


@pytest.mark.parametrize("how", ["Succeeded", "Failed", "deleted"])
def test_a_release_the_watch_has_not_delivered_yet_does_not_leave_the_next_pod_waiting(
    how: str,
) -> None:
    fake = FakeKube()
    _one_card_taken(fake)
    app, rt = make_app(fake)  # the app wires the resync in, as in production
    assert rt.state.record("u-a") is not None
    _release(fake, how)
    body = app.test_client().post("/scheduler/filter", json={
        "Pod": make_gpu_pod("b", request(whole()), uid="u-b"), "Nodes": None,
        "NodeNames": ["n1"]}).get_json()
    assert body["NodeNames"] == ["n1"], body
    assert rt.state.record("u-a") is None
    assert ("list_pods", VOCAB.gpu_pod_selector) in fake.calls


def test_without_a_rejection_for_lack_of_room_nothing_is_listed() -> None:
    fake = FakeKube()
    alloc = _one_card_taken(fake)
    alloc.resync = PodResync(lambda: fake.list_pods(VOCAB.gpu_pod_selector)[0], alloc.state,
                             clock=Clock(), spawn=_run_now)
    listed = len([c for c in fake.calls if c[0] == "list_pods"])
    fake.add_node(make_node("n2", count=1))
    alloc.state.replace_nodes(fake.list_nodes()[0])
    whole_card = make_gpu_pod("b", request(whole()), uid="u-b")
    assert alloc.filter(whole_card, ["n1", "n2"]).nodes == ["n2"]
    wrong_model = make_gpu_pod("c", request(share(core=10), models=("A100",)), uid="u-c")
    assert alloc.filter(wrong_model, ["n1"]).unresolvable  # unresolvable: a list can't help
    assert len([c for c in fake.calls if c[0] == "list_pods"]) == listed


def test_a_pod_retried_right_after_its_rejection_waits_for_a_list_begun_after_it() -> None:
    fake = FakeKube()
    alloc = _one_card_taken(fake)
    alloc.resync = PodResync(lambda: fake.list_pods(VOCAB.gpu_pod_selector)[0], alloc.state,
                             min_interval=0.2, max_wait=2.0)
    pod_b = make_gpu_pod("b", request(whole()), uid="u-b")
    assert alloc.filter(pod_b, ["n1"]).failed == {"n1": "needs 1 whole card, 0 free"}
    assert alloc.resync.lists == 1
    _release(fake, "Succeeded")  # right after the rejection, within min_interval
    assert alloc.filter(pod_b, ["n1"]).nodes == ["n1"]
    assert alloc.resync.lists == 2


def test_a_flood_of_unschedulable_pods_costs_one_list_per_interval() -> None:
    fake = FakeKube()
    alloc = _one_card_taken(fake)
    clock = Clock()
    alloc.resync = PodResync(lambda: fake.list_pods(VOCAB.gpu_pod_selector)[0], alloc.state,
                             clock=clock, spawn=_run_now)
    for i in range(50):
        clock.now += 0.01
        out = alloc.filter(make_gpu_pod(f"w{i}", request(whole()), uid=f"u-w{i}"), ["n1"])
        assert out.failed
    assert alloc.resync.lists == 1
    clock.now += 1.0
    alloc.filter(make_gpu_pod("late", request(whole()), uid="u-late"), ["n1"])
    assert alloc.resync.lists == 2


def test_a_pod_retried_before_the_next_list_may_start_is_answered_without_waiting_past_the_bound(
) -> None:
    clock = Clock()
    resync = PodResync(lambda: [], ClusterState(VOCAB), clock=clock, spawn=_run_now,
                       min_interval=1.0, max_wait=0.5)
    assert resync.ensure(clock.now) is True
    clock.now += 0.2
    resync.rejected("u")
    clock.now += 0.1
    # the next list may start at +1.0, beyond this filter's deadline (+0.3 + 0.5): no wait
    assert resync.ensure(resync.needed("u")) is False
    assert resync.lists == 1


def test_concurrent_filters_share_the_list_in_flight() -> None:
    gate = threading.Event()
    calls: list[int] = []

    def slow_list() -> list[Any]:
        calls.append(1)
        gate.wait(5)
        return []

    resync = PodResync(slow_list, ClusterState(VOCAB), max_wait=10.0)
    since = resync.needed("any")
    results: list[bool] = []
    threads = [threading.Thread(target=lambda: results.append(resync.ensure(since)))
               for _ in range(8)]
    for t in threads:
        t.start()
    while not calls:
        threading.Event().wait(0.01)
    gate.set()
    for t in threads:
        t.join()
    assert results == [True] * 8
    assert calls == [1] and resync.lists == 1


def test_a_failing_list_leaves_the_picture_as_the_watch_has_it_and_holds_no_one() -> None:
    fake = FakeKube()
    alloc = _one_card_taken(fake)
    clock = Clock()
    fake.fail("list_pods", ApiError("HTTP 503"))
    alloc.resync = PodResync(lambda: fake.list_pods(VOCAB.gpu_pod_selector)[0], alloc.state,
                             clock=clock, spawn=_run_now)
    _release(fake, "deleted")
    pod_b = make_gpu_pod("b", request(whole()), uid="u-b")
    assert alloc.filter(pod_b, ["n1"]).failed  # list failed: the stale answer stands
    clock.now += 0.1
    assert alloc.filter(pod_b, ["n1"]).failed  # no new list before the interval, no waiting
    assert alloc.resync.lists == 1
    clock.now += 1.0
    assert alloc.filter(pod_b, ["n1"]).nodes == ["n1"]


def test_a_hanging_list_never_holds_a_filter_beyond_the_bound() -> None:
    gate = threading.Event()

    def hanging_list() -> list[Any]:
        gate.wait(10)
        return []

    resync = PodResync(hanging_list, ClusterState(VOCAB), max_wait=0.05)
    try:
        assert resync.ensure(resync.needed("u")) is False
        assert resync.ensure(resync.needed("v")) is False  # joins it, but not for long
        assert resync.lists == 1
    finally:
        gate.set()


def _bound(uid: str, card: int) -> dict[str, Any]:
    alloc = Allocation(node="n1", containers=(ContainerAllocation("c", (card,)),), pod_uid=uid)
    return {"metadata": {"uid": uid, "namespace": "ns", "name": uid,
                         "annotations": {VOCAB.allocation_annotation: encode_allocation(alloc)}},
            "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}}


def test_a_consistent_read_only_releases_what_did_not_change_after_it_began() -> None:
    state = ClusterState(VOCAB)
    state.replace_nodes([make_node("n1", count=5)])
    state.replace_pods([_bound("gone", 0), _bound("done", 1), _bound("alive", 2)])
    mark = state.epoch()
    # after the read began: a bind reserves, the watch confirms another pod
    inflight = Allocation(node="n1", containers=(ContainerAllocation("c", (3,)),),
                          pod_uid="inflight")
    view = state.view("n1")
    assert view is not None
    assert state.reserve("inflight", "ns", "inflight", inflight, view.version)
    state.apply_pod(_bound("late", 4))
    listed = [_bound("alive", 2), {**_bound("done", 1), "status": {"phase": "Succeeded"}}]
    assert sorted(state.reconcile_pods(listed, mark)) == ["done", "gone"]
    assert state.record("alive") is not None
    assert state.record("inflight") is not None  # newer than the read, and in flight
    assert state.record("late") is not None  # the watch saw it after the read began


def test_a_relist_older_than_our_bind_neither_forgets_nor_overwrites_the_bound_pod() -> None:
    """410 Gone -> relist: the list was taken before our bind finished, so it lacks the pod
    (or shows it unbound). The bound record is newer than the list and must keep its cards."""
    state = ClusterState(VOCAB)
    state.replace_nodes([make_node("n1", count=5)])
    state.replace_pods([_bound("gone", 0), _bound("old", 1)])
    mark = state.epoch()  # the relist's list request leaves now...
    ours = Allocation(node="n1", containers=(ContainerAllocation("c", (2,)),), pod_uid="ours")
    view = state.view("n1")
    assert view is not None
    assert state.reserve("ours", "ns", "ours", ours, view.version)
    state.mark_bound("ours")  # ...our bind completes while it is on the wire
    unbound_copy = {"metadata": {"uid": "ours", "namespace": "ns", "name": "ours"},
                    "spec": {}, "status": {"phase": "Pending"}}
    state.replace_pods([_bound("old", 1), unbound_copy], mark)
    assert state.record("ours") is not None  # not forgotten, not overwritten by the old copy
    assert state.record("old") is not None
    assert state.record("gone") is None  # untouched since before the list and missing: gone
    state.replace_pods([_bound("old", 1)], mark)
    assert state.record("ours") is not None  # missing from the list altogether: still ours


def test_a_relist_drives_replace_with_the_mark_taken_before_the_list_request() -> None:
    from allocator.watch import Reflector

    order: list[str] = []
    got: list[int] = []
    reflector = Reflector(
        "pods",
        lambda: (order.append("list"), ([], "7"))[1],
        lambda rv, t: iter(()),
        lambda items, since: got.append(since),
        lambda obj: None, lambda obj: None, lambda s: None, threading.Event(),
        mark=lambda: (order.append("mark"), 41)[1],
    )
    reflector.relist()
    assert order == ["mark", "list"]
    assert got == [41]
    assert reflector.resource_version == "7"


def test_answered_in_the_event_loop_a_filter_asks_for_a_thread_before_a_consistent_read(
) -> None:
    fake = FakeKube()
    _one_card_taken(fake)
    app, rt = make_app(fake)
    _release(fake, "deleted")
    args = {"Pod": make_gpu_pod("b", request(whole()), uid="u-b"), "Nodes": None,
            "NodeNames": ["n1"]}
    lists = fake.calls.count(("list_pods", VOCAB.gpu_pod_selector))
    with pytest.raises(NeedsThread):
        app.test_client().post("/scheduler/filter", json=args, environ_overrides={INLINE: True})
    assert fake.calls.count(("list_pods", VOCAB.gpu_pod_selector)) == lists  # none inline
    body = app.test_client().post("/scheduler/filter", json=args).get_json()
    assert body["NodeNames"] == ["n1"], body
    assert rt.state.record("u-a") is None
    assert fake.calls.count(("list_pods", VOCAB.gpu_pod_selector)) == lists + 1
