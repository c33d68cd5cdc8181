"""Node CPU and memory in the allocator (allocator/picture/resources.py): kube-scheduler's per-pod
request formula, the picture kept from the watch of bound pods and from our binds, and how
it reaches the policies."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from alloc_harness import make_app, sync
from builders import VOCAB, make_gpu_pod, make_node, request, share, whole
from fake_kube import FakeKube

from allocator.picture.requests import PodUsage, pod_requests, pod_usage
from allocator.picture.resources import NodeResources
from allocator.picture.state import ClusterState
from allocator.picture.watch import reflectors
from allocator.service.config import Settings
from allocator.verbs.core import AllocatorConfig
from tessera.vocabulary import ConfigError

GI = 1024**3
MI = 1024**2


def _ctr(name: str, cpu: str | None = None, memory: str | None = None,
         restart: str | None = None) -> dict[str, Any]:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    container: dict[str, Any] = {"name": name, "resources": {"requests": requests}}
    if restart:
        container["restartPolicy"] = restart
    return container


def _pod(uid: str = "u1", node: str | None = "n1", containers: list[dict[str, Any]] | None = None,
         init: list[dict[str, Any]] | None = None, phase: str = "Running",
         **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"containers": containers if containers is not None
                            else [_ctr("main", "1", "1Gi")], **spec}
    if init is not None:
        body["initContainers"] = init
    if node:
        body["nodeName"] = node
    return {"metadata": {"uid": uid, "name": uid, "namespace": "ns"}, "spec": body,
            "status": {"phase": phase}}


@pytest.mark.parametrize(("pod", "cpu", "memory"), [
    (_pod(containers=[_ctr("a", "500m", "1Gi"), _ctr("b", "1", "512Mi")]), 1500, GI + 512 * MI),
    (_pod(containers=[_ctr("a", "1")], init=[_ctr("i", "4", "64Mi")]), 4000, 64 * MI),
    # a sidecar counts with the app containers; a later init container runs beside it
    (_pod(containers=[_ctr("a", "1")],
          init=[_ctr("side", "1", restart="Always"), _ctr("i", "2")]), 3000, 0),
    (_pod(containers=[_ctr("a", "1")], init=[_ctr("side", "1", restart="Always")]), 2000, 0),
    (_pod(containers=[_ctr("a", "1", "1Gi")], overhead={"cpu": "250m", "memory": "120Mi"}),
     1250, GI + 120 * MI),
    # pod-level requests replace the containers' sum (PodLevelResources), overhead on top
    (_pod(containers=[_ctr("a", "1", "1Gi")], resources={"requests": {"cpu": "3"}},
          overhead={"cpu": "100m"}), 3100, GI),
    (_pod(containers=[{"name": "a"}]), 0, 0),
    (_pod(containers=[_ctr("a", "0.1")]), 100, 0),
    (_pod(containers=[_ctr("a", "1m")]), 1, 0),
])
def test_pod_requests_follow_kube_schedulers_formula(pod: dict[str, Any], cpu: int,
                                                     memory: int) -> None:
    assert pod_requests(pod) == (cpu, memory)


def test_a_resize_in_flight_counts_the_larger_of_spec_and_status() -> None:
    pod = _pod(containers=[_ctr("a", "1", "1Gi")])
    pod["status"]["containerStatuses"] = [
        {"name": "a", "allocatedResources": {"cpu": "2", "memory": "512Mi"}}]
    assert pod_requests(pod) == (2000, GI)
    pod["status"]["conditions"] = [{"type": "PodResizePending", "reason": "Infeasible"}]
    assert pod_requests(pod) == (2000, 512 * MI)  # an infeasible resize: the spec is not it


@pytest.mark.parametrize("pod", [
    _pod(containers=[_ctr("a", "lots")]),
    _pod(containers=[_ctr("a", "-1")]),
    _pod(containers="x"),  # type: ignore[arg-type]
    _pod(containers=[{"name": "a", "resources": {"requests": ["cpu"]}}]),
    _pod(containers=[_ctr("a", "1")], overhead="x"),
])
def test_an_unreadable_pod_is_kept_apart_with_a_reason(pod: dict[str, Any]) -> None:
    usage = pod_usage(pod)
    assert usage is not None and usage.problem
    resources = NodeResources()
    resources.apply_node("n1", make_node("n1"))
    resources.apply_pod(pod)
    resources.apply_pod(_pod("u2"))  # the next pod is still counted
    assert resources.free_cpu["n1"] == 63000
    assert "u1" in resources.noted()


@pytest.mark.parametrize("pod", [_pod(node=None), _pod(phase="Succeeded"),
                                 _pod(phase="Failed"), {"metadata": {}, "spec": {}}])
def test_pods_that_count_on_no_node_reduce_to_nothing(pod: dict[str, Any]) -> None:
    assert pod_usage(pod) is None


def _resources(*pods: dict[str, Any]) -> NodeResources:
    resources = NodeResources()
    resources.apply_node("n1", make_node("n1"))
    for pod in pods:
        resources.apply_pod(pod)
    return resources


def test_free_is_allocatable_minus_every_bound_pods_requests() -> None:
    resources = _resources(_pod("u1"), _pod("u2", containers=[_ctr("a", "2500m")]))
    assert resources.free_cpu["n1"] == 64000 - 1000 - 2500
    facts = resources.view()["n1"]
    assert facts.cpu_free_milli == 60500
    assert "ghost" not in resources.view()


def test_a_pod_that_ends_or_goes_releases_its_requests() -> None:
    resources = _resources(_pod("u1"), _pod("u2"))
    resources.apply_pod(_pod("u1", phase="Succeeded"))
    assert resources.free_cpu["n1"] == 63000
    resources.remove_pod(_pod("u2"))
    assert resources.free_cpu["n1"] == 64000
    assert resources.counts() == (1, 0)


def test_pods_of_a_node_not_seen_yet_count_once_it_arrives() -> None:
    resources = NodeResources()
    resources.apply_pod(_pod("u1", node="late"))
    assert "late" not in resources.free_cpu
    resources.apply_node("late", make_node("late"))
    assert resources.free_cpu["late"] == 63000


def test_a_bind_of_ours_counts_at_once_and_a_failed_one_releases() -> None:
    resources = _resources()
    resources.reserve("u1", "n1", 4000, GI)
    assert resources.free_cpu["n1"] == 60000
    resources.unreserve("u1")
    assert resources.free_cpu["n1"] == 64000


def test_a_relist_older_than_a_bind_keeps_its_reservation() -> None:
    resources = _resources()
    since = resources.epoch()  # the list request leaves ...
    resources.reserve("u1", "n1", 4000, GI)  # ... a bind finishes ...
    resources.replace_pods([], since)  # ... the list, without the pod, arrives
    assert resources.free_cpu["n1"] == 60000
    # the watch shows the pod bound: no longer a reservation, unreserve leaves it alone
    resources.apply_pod(_pod("u1", containers=[_ctr("a", "4", "1Gi")]))
    resources.unreserve("u1")
    assert resources.free_cpu["n1"] == 60000
    resources.replace_pods([], resources.epoch())  # a newer list without it: gone
    assert resources.free_cpu["n1"] == 64000


def test_the_watch_of_bound_pods_keeps_the_picture() -> None:
    fake = FakeKube()
    fake.add_node(make_node("n1"))
    fake.add_pod(_pod("cpu-only", containers=[_ctr("a", "3")]))
    fake.add_pod(_pod("pending", node=None))
    state = ClusterState(VOCAB)
    nodes, pods = reflectors(fake, state, threading.Event(), lambda _s: None, bound_pods=True)
    nodes.relist()
    pods.relist()
    assert state.resources.free_cpu["n1"] == 61000
    fake.set_phase("ns", "cpu-only", "Succeeded")  # leaves the selector: DELETED
    fake.add_pod(_pod("other", containers=[_ctr("a", "1")]))
    pods.watch_once()
    assert state.resources.free_cpu["n1"] == 63000


def test_a_node_whose_allocatable_cannot_be_read_has_no_facts() -> None:
    resources = NodeResources()
    node = make_node("n1")
    node["status"]["allocatable"]["cpu"] = "many"
    resources.apply_node("n1", node)
    assert resources.facts("n1") is None
    resources.apply_node("n2", make_node("n2"))
    assert resources.max_cpu_milli == 64000


def test_usage_records_are_compact_and_share_node_names() -> None:
    resources = _resources()
    for i in range(3):
        resources.apply_usage(PodUsage(f"u{i}", "n" + "1", 1000, GI))
    records = [resources.pod(f"u{i}") for i in range(3)]
    assert all(r is not None and r[0] is records[0][0] for r in records)  # type: ignore[index]


# ---------------------------------------------------------------------- through the allocator
def _cpu_gpu_pod(name: str, cpu: str, req: Any = None) -> dict[str, Any]:
    pod = make_gpu_pod(name, req or request(share(core=25, mem=1024)))
    pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = cpu
    return pod


def test_our_bind_counts_the_pods_cpu_before_any_watch_event() -> None:
    fake = FakeKube()
    fake.add_node(make_node("n1"))
    fake.add_pod(_cpu_gpu_pod("p", "6"))
    _, rt = make_app(fake)
    rt.allocator.bind("default", "p", "uid-p", "n1")
    assert rt.state.resources.free_cpu["n1"] == 58000
    sync(rt.state, fake)  # the relist shows it bound: still counted once
    assert rt.state.resources.free_cpu["n1"] == 58000


def test_with_node_resources_off_nothing_is_tracked_or_reserved() -> None:
    fake = FakeKube()
    fake.add_node(make_node("n1"))
    fake.add_pod(_cpu_gpu_pod("p", "6"))
    _, rt = make_app(fake, core=AllocatorConfig(node_resources=False))
    ctx = rt.allocator.reader.context(request(whole()), make_gpu_pod("q"))
    assert dict(ctx.node_facts) == {}
    rt.allocator.bind("default", "p", "uid-p", "n1")
    assert rt.state.resources.pod("uid-p") is None


def test_policies_see_node_facts_and_the_pods_cpu_through_their_context() -> None:
    fake = FakeKube()
    fake.add_node(make_node("n1"))
    fake.add_pod(_pod("cpu-only", containers=[_ctr("a", "10", "2Gi")]))
    _, rt = make_app(fake)
    pod = _cpu_gpu_pod("p", "1500m")
    ctx = rt.allocator.reader.context(request(share(core=25, mem=1024)), pod)
    assert ctx.node_facts["n1"].cpu_free_milli == 54000
    assert ctx.pod_cpu_milli == 1500


@pytest.mark.parametrize(("env", "on"), [({}, True), ({"TESSERA_NODE_RESOURCES": "false"}, False)])
def test_node_resources_are_on_by_default_and_can_be_turned_off(env: dict[str, str],
                                                                on: bool) -> None:
    assert Settings.from_env(env).core.node_resources is on


def test_a_bad_node_resources_switch_is_refused() -> None:
    with pytest.raises(ConfigError, match="TESSERA_NODE_RESOURCES"):
        Settings.from_env({"TESSERA_NODE_RESOURCES": "sometimes"})


def test_status_shows_free_cpu_and_pods_whose_requests_are_ignored() -> None:
    fake = FakeKube()
    fake.add_node(make_node("n1"))
    fake.add_pod(_pod("bad", containers=[_ctr("a", "lots")]))
    app, _ = make_app(fake)
    doc = app.test_client().get("/status").get_json()
    assert doc["nodes"][0]["cpuFreeMilli"] == 64000
    assert "bad" in doc["ignoredPodRequests"]
