"""Watch faults (410 Gone, dropped streams, API errors) and Lease leader election."""

from __future__ import annotations

import threading
from typing import Any

from alloc_harness import NOW, make_app, synced_allocator
from builders import VOCAB, make_gpu_pod, make_node, request, whole
from fake_kube import FakeKube

from allocator.errors import ApiError, Conflict
from allocator.kube.leader import LeaderElector
from allocator.picture.state import ClusterState
from allocator.picture.watch import Reflector, initial_sync, reflectors
from allocator.verbs.core import AllocatorConfig, assemble
from tessera.vocabulary import Allocation, ContainerAllocation, encode_allocation


def _setup(bound_pods: bool) -> tuple[FakeKube, ClusterState, Reflector, Reflector, list[float]]:
    fake = FakeKube()
    fake.add_node(make_node("n1", count=2))
    state = ClusterState(VOCAB)
    sleeps: list[float] = []
    nodes, pods = reflectors(fake, state, threading.Event(), sleeps.append,
                             bound_pods=bound_pods)
    initial_sync(fake, state, nodes, pods, sleeps.append, threading.Event())
    return fake, state, nodes, pods, sleeps


def _bound_pod(fake: FakeKube, name: str, node: str = "n1") -> None:
    """A pod bound by (another replica of) the allocator: record + nodeName on the API."""
    fake.add_pod(make_gpu_pod(name, request(whole()), uid=f"u-{name}"))
    alloc = synced_allocator(fake)
    alloc.bind("default", name, f"u-{name}", node)


def test_watch_events_add_and_release_cards(bound_pods: bool) -> None:
    fake, state, _nodes, pods, _ = _setup(bound_pods)
    assert state.synced
    _bound_pod(fake, "a")
    pods.step(0.5)
    view = state.view("n1")
    assert view is not None and view.state.idle_cards == 1
    fake.set_phase("default", "a", "Failed")
    pods.step(0.5)
    view = state.view("n1")
    assert view is not None and view.state.idle_cards == 2


def test_a_deleted_pod_releases_its_cards(bound_pods: bool) -> None:
    fake, state, _nodes, pods, _ = _setup(bound_pods)
    _bound_pod(fake, "a")
    pods.step(0.5)
    fake.delete_pod("default", "a")
    pods.step(0.5)
    assert state.record("u-a") is None


def test_410_gone_relists_and_the_state_catches_up(bound_pods: bool) -> None:
    fake, state, _nodes, pods, _ = _setup(bound_pods)
    _bound_pod(fake, "a")
    fake.compacted_below = fake.rv + 1  # everything we could resume from is gone
    relists = pods.relists
    pods.step(0.5)  # Gone
    assert pods.resource_version == ""
    pods.step(0.5)  # relist + watch
    assert pods.relists == relists + 1
    assert state.record("u-a") is not None


def test_a_dropped_stream_resumes_from_the_last_seen_version_without_relisting(
        bound_pods: bool) -> None:
    fake, state, _nodes, pods, sleeps = _setup(bound_pods)
    _bound_pod(fake, "a")
    _bound_pod(fake, "b")
    fake.drop_after = (1, ApiError("connection reset by peer"))
    relists = pods.relists
    delay = pods.step(0.5)
    assert sleeps == [0.5] and delay == 1.0  # backed off
    seen = pods.resource_version
    assert seen != "" and pods.relists == relists
    pods.step(delay)
    assert ("watch_pods", seen) in fake.calls  # resumed where it stopped
    assert state.record("u-a") is not None and state.record("u-b") is not None
    assert pods.relists == relists


def test_api_errors_back_off_exponentially_up_to_a_cap(bound_pods: bool) -> None:
    fake, _state, _nodes, pods, sleeps = _setup(bound_pods)
    fake.fail("watch_pods", ApiError("HTTP 500"), times=10)
    delay = 0.5
    for _ in range(10):
        delay = pods.step(delay)
    assert sleeps[:4] == [0.5, 1.0, 2.0, 4.0]
    assert max(sleeps) == pods.backoff_max


def test_one_watch_of_bound_pods_feeds_the_cards_and_the_node_cpu() -> None:
    fake, state, _nodes, pods, _ = _setup(bound_pods=True)
    listed: list[list[str]] = []
    cpu_pod = {"metadata": {"uid": "u-cpu", "name": "cpu", "namespace": "default"},
               "spec": {"nodeName": "n1", "containers": [
                   {"name": "c", "resources": {"requests": {"cpu": "2"}}}]},
               "status": {"phase": "Running"}}
    fake.add_pod(cpu_pod)
    _bound_pod(fake, "a")
    free_cpu = state.resources.free_cpu["n1"]
    pods.step(0.5)
    view = state.view("n1")
    assert view is not None and view.state.idle_cards == 1  # the GPU pod's card
    assert state.resources.free_cpu["n1"] == free_cpu - 2000
    # A relist hands only the GPU pods to ``listed`` (the workload mix's seed).
    _nodes2, relisting = reflectors(fake, state, threading.Event(), lambda _s: None,
                                    bound_pods=True,
                                    listed=lambda p: listed.append(
                                        [o["metadata"]["name"] for o in p]))
    relisting.relist()
    assert listed == [["a"]]
    assert state.record("u-a") is not None and state.resources.free_cpu["n1"] == free_cpu - 2000
    fake.delete_pod("default", "cpu")
    fake.set_phase("default", "a", "Succeeded")
    relisting.watch_once()
    view = state.view("n1")
    assert view is not None and view.state.idle_cards == 2
    assert state.resources.free_cpu["n1"] == free_cpu


def test_initial_sync_retries_until_the_api_answers() -> None:
    fake = FakeKube()
    fake.add_node(make_node("n1"))
    fake.fail("list_nodes", ApiError("connection refused"), times=2)
    state = ClusterState(VOCAB)
    sleeps: list[float] = []
    nodes, pods = reflectors(fake, state, threading.Event(), sleeps.append, bound_pods=True)
    initial_sync(fake, state, nodes, pods, sleeps.append, threading.Event())
    assert state.synced and sleeps == [0.5, 1.0]
    assert state.view("n1") is not None


def test_node_changes_update_the_inventory_and_deleted_nodes_disappear() -> None:
    fake, state, nodes, _pods, _ = _setup(bound_pods=False)
    fake.add_node(make_node("n1", count=4))
    fake.add_node(make_node("n2", count=1))
    nodes.step(0.5)
    v1 = state.view("n1")
    assert v1 is not None and len(v1.state.cards) == 4
    with fake.lock:
        node = fake.nodes.pop("n2")
        fake._bump("nodes", "DELETED", node)
    nodes.step(0.5)
    assert state.view("n2") is None


def test_a_fresh_reservation_survives_a_stale_watch_event() -> None:
    fake, state, _nodes, _pods, _ = _setup(bound_pods=False)
    fake.add_pod(make_gpu_pod("a", request(whole()), uid="u-a"))
    alloc = assemble(state, fake, AllocatorConfig(), clock=lambda: NOW)  # the watched state
    alloc.bind("default", "a", "u-a", "n1")
    # Replay the pod's old ADDED event (no nodeName, no record): the cards stay taken.
    state.apply_pod(make_gpu_pod("a", request(whole()), uid="u-a"))
    assert state.record("u-a") is not None


# ----------------------------------------------------------------------------- leases


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _electors(fake: FakeKube, clock: Clock) -> tuple[LeaderElector, LeaderElector]:
    return (LeaderElector(fake, "tessera-system", "tessera-allocator", "a", clock=clock),
            LeaderElector(fake, "tessera-system", "tessera-allocator", "b", clock=clock))


def test_only_one_of_two_replicas_leads() -> None:
    fake, clock = FakeKube(), Clock()
    a, b = _electors(fake, clock)
    assert a.try_acquire_or_renew() is True
    assert b.try_acquire_or_renew() is False
    clock.now += 5
    assert a.try_acquire_or_renew() is True
    assert b.try_acquire_or_renew() is False
    assert a.is_leader and not b.is_leader
    lease = fake.leases[("tessera-system", "tessera-allocator")]
    assert lease["spec"]["holderIdentity"] == "a"
    assert lease["spec"]["renewTime"].endswith("Z")


def test_the_follower_takes_over_after_the_leader_stops_renewing() -> None:
    fake, clock = FakeKube(), Clock()
    a, b = _electors(fake, clock)
    a.try_acquire_or_renew()
    b.try_acquire_or_renew()
    clock.now += 11  # past the renew deadline: the old leader steps down by itself
    assert not a.is_leader
    clock.now += 5  # past the lease duration as observed by b
    assert b.try_acquire_or_renew() is True
    lease = fake.leases[("tessera-system", "tessera-allocator")]
    assert lease["spec"]["holderIdentity"] == "b"
    assert lease["spec"]["leaseTransitions"] == 1
    assert a.try_acquire_or_renew() is False


def test_a_leader_keeps_leading_through_a_short_api_outage() -> None:
    fake, clock = FakeKube(), Clock()
    a, _b = _electors(fake, clock)
    a.try_acquire_or_renew()
    fake.fail("get_lease", ApiError("HTTP 503"))
    clock.now += 2
    assert a.try_acquire_or_renew() is True
    fake.fail("get_lease", ApiError("HTTP 503"), times=10)
    clock.now += 9
    assert a.try_acquire_or_renew() is False


def test_a_lost_update_race_means_not_leader() -> None:
    fake, clock = FakeKube(), Clock()
    a, b = _electors(fake, clock)
    a.try_acquire_or_renew()
    clock.now += 20
    assert b.try_acquire_or_renew() is False  # first sight of a's record starts b's timer
    clock.now += 20
    fake.fail("replace_lease", Conflict("the object has been modified", 409))
    assert b.try_acquire_or_renew() is False
    assert not b.is_leader
    assert b.try_acquire_or_renew() is True


def test_a_leader_that_stops_gracefully_releases_its_lease_and_the_follower_takes_over_at_once(
) -> None:
    fake, clock = FakeKube(), Clock()
    a, b = _electors(fake, clock)
    assert a.try_acquire_or_renew() is True
    assert b.try_acquire_or_renew() is False
    assert a.release() is True
    assert not a.is_leader
    lease = fake.leases[("tessera-system", "tessera-allocator")]
    assert lease["spec"]["holderIdentity"] == ""
    assert lease["spec"]["leaseDurationSeconds"] == 1
    clock.now += b.retry_period  # b's next retry, far short of the 15 s lease duration
    assert b.try_acquire_or_renew() is True
    assert fake.leases[("tessera-system", "tessera-allocator")]["spec"]["holderIdentity"] == "b"
    assert a.try_acquire_or_renew() is False  # a stopping replica never takes it back


def test_release_leaves_a_lease_held_by_another_replica_alone() -> None:
    fake, clock = FakeKube(), Clock()
    a, b = _electors(fake, clock)
    b.try_acquire_or_renew()
    assert a.release() is True
    assert fake.leases[("tessera-system", "tessera-allocator")]["spec"]["holderIdentity"] == "b"


def test_a_release_the_api_refuses_is_reported_and_the_lease_then_lapses() -> None:
    fake, clock = FakeKube(), Clock()
    a, _b = _electors(fake, clock)
    a.try_acquire_or_renew()
    fake.fail("replace_lease", ApiError("HTTP 503"))
    assert a.release() is False
    assert not a.is_leader
    assert fake.leases[("tessera-system", "tessera-allocator")]["spec"]["holderIdentity"] == "a"


def test_a_stopping_runtime_lets_binds_in_flight_finish_before_it_releases_the_lease() -> None:
    fake = FakeKube()
    fake.add_node(make_node("n1", count=2))
    _app, rt = make_app(fake, leader_election=True, identity="me")
    assert rt.elector is not None and rt.elector.try_acquire_or_renew()
    view = rt.state.view("n1")
    assert view is not None
    allocation = Allocation(node="n1", containers=(ContainerAllocation("c", (0,)),),
                            pod_uid="u-busy")
    assert rt.state.reserve("u-busy", "default", "busy", allocation, view.version)
    seen: list[tuple[bool, str]] = []

    def sleep(_seconds: float) -> None:
        # a bind still running: no longer leader, but the Lease is still held
        holder = fake.leases[("tessera-system", "tessera-allocator")]["spec"]["holderIdentity"]
        seen.append((rt.is_leader(), holder))
        rt.state.unreserve("u-busy")  # ... and now it has finished

    rt.sleep = sleep
    rt.close()
    assert seen == [(False, "me")]
    assert fake.leases[("tessera-system", "tessera-allocator")]["spec"]["holderIdentity"] == ""
    rt.close()  # idempotent: atexit may call it again
    assert len(seen) == 1


def _bound_record(uid: str, card: int) -> dict[str, Any]:
    alloc = Allocation(node="n1", containers=(ContainerAllocation("c", (card,)),), pod_uid=uid)
    return {"metadata": {"uid": uid, "namespace": "ns", "name": uid,
                         "annotations": {VOCAB.allocation_annotation: encode_allocation(alloc)}},
            "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}}


def test_a_relist_older_than_our_bind_neither_forgets_nor_overwrites_the_bound_pod() -> None:
    """410 Gone -> relist: the list was taken before our bind finished, so it lacks the pod
    (or shows it unbound). The bound record is newer than the list and must keep its cards."""
    state = ClusterState(VOCAB)
    state.replace_nodes([make_node("n1", count=5)])
    state.replace_pods([_bound_record("gone", 0), _bound_record("old", 1)])
    mark = state.epoch()  # the relist's list request leaves now...
    ours = Allocation(node="n1", containers=(ContainerAllocation("c", (2,)),), pod_uid="ours")
    view = state.view("n1")
    assert view is not None
    assert state.reserve("ours", "ns", "ours", ours, view.version)
    state.mark_bound("ours")  # ...our bind completes while it is on the wire
    unbound_copy = {"metadata": {"uid": "ours", "namespace": "ns", "name": "ours"},
                    "spec": {}, "status": {"phase": "Pending"}}
    state.replace_pods([_bound_record("old", 1), unbound_copy], mark)
    assert state.record("ours") is not None  # not forgotten, not overwritten by the old copy
    assert state.record("old") is not None
    assert state.record("gone") is None  # untouched since before the list and missing: gone
    state.replace_pods([_bound_record("old", 1)], mark)
    assert state.record("ours") is not None  # missing from the list altogether: still ours


def test_a_relist_drives_replace_with_the_mark_taken_before_the_list_request() -> None:
    from allocator.picture.watch import Reflector

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
