"""Tessera end to end: webhook, real kube-scheduler, our extender binding, fake GPU nodes."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from devcluster import kwok
from devcluster.binaries import repo_root
from devcluster.checks import admission_problems, allocation_problems, fits_now
from devcluster.cluster import DevCluster
from devcluster.nodes import Card, GpuNodeSpec, Inventory, uniform
from devcluster.workloads import (
    container,
    delete_pods,
    get_object,
    list_objects,
    load_manifests,
    make_pod,
    pending_reason,
    wait_for,
    wait_settled,
)
from kubectl_tessera.report import card_usage, node_cards, overcommitments
from tessera.vocabulary import decode_request

pytestmark = pytest.mark.e2e

NodePool = Callable[[list[GpuNodeSpec]], dict[str, str]]
EXAMPLES = repo_root() / "examples" / "pods"
EXAMPLE_FILES = sorted(p.name for p in EXAMPLES.glob("*.yaml"))


def pool_nodes(prefix: str) -> list[GpuNodeSpec]:
    """One node per inventory form; the mixed node carries the models examples constrain to."""
    return [
        uniform(f"{prefix}-a10", 4, "NVIDIA-A10", 24576, inventory=Inventory.GFD),
        uniform(f"{prefix}-t4", 2, "Tesla-T4", 15360, inventory=Inventory.EVEN),
        GpuNodeSpec(
            f"{prefix}-mixed",
            (Card("NVIDIA-A100-80GB", 81920), Card("NVIDIA-A100-40GB", 40960),
             Card("Tesla-T4", 15360)),
            inventory=Inventory.CARDS,
        ),
    ]


def confined(pod: dict[str, Any], selector: dict[str, str], name: str | None = None
             ) -> dict[str, Any]:
    pod = copy.deepcopy(pod)
    pod["spec"]["nodeSelector"] = {**pod["spec"].get("nodeSelector", {}), **selector}
    if name is not None:
        pod["metadata"]["name"] = name
    return pod


def api_usage(core_v1: Any, cluster: DevCluster, namespace: str, selector: dict[str, str]
              ) -> dict[str, Any]:
    """Card usage of the pool read back from the API (never from the allocator's cache)."""
    label = ",".join(f"{k}={v}" for k, v in selector.items())
    nodes = list_objects(core_v1.list_node, label_selector=label)
    pods = list_objects(core_v1.list_namespaced_pod, namespace)
    return card_usage(nodes, pods, cluster.vocabulary)


@pytest.mark.parametrize("example", EXAMPLE_FILES)
def test_every_seed_example_is_mutated_scheduled_and_bound_with_a_consistent_record(
    cluster: DevCluster, core_v1: Any, namespace: str, pool: NodePool, example: str
) -> None:
    selector = pool(pool_nodes(namespace))
    (pod,) = load_manifests_from(EXAMPLES / example)
    core_v1.create_namespaced_pod(namespace, confined(pod, selector))
    name = pod["metadata"]["name"]

    def bound() -> dict[str, Any] | None:
        obj = get_object(core_v1.read_namespaced_pod, name, namespace)
        return obj if obj["spec"].get("nodeName") else None

    obj = wait_for(f"{example} to be bound", bound, timeout=60)
    node = get_object(core_v1.read_node, obj["spec"]["nodeName"])
    assert admission_problems(obj, cluster.vocabulary) == []
    assert allocation_problems(obj, node_cards(node, cluster.vocabulary), cluster.vocabulary) == []
    assert overcommitments(api_usage(core_v1, cluster, namespace, selector)) == []
    # kube-scheduler reports the binding our extender made (no default binder for these pods).
    assert pending_reason(core_v1, namespace, name) is None


def load_manifests_from(path: Path) -> list[dict[str, Any]]:
    return [p for p in load_manifests(path.parent) if p["metadata"]["name"] == path.stem] or (
        pytest.fail(f"{path} holds no pod named {path.stem}")
    )


def test_a_genius_pod_wanting_three_cards_stays_pending_with_our_reason_on_two_card_nodes(
    core_v1: Any, namespace: str, pool: NodePool
) -> None:
    selector = pool([uniform(f"{namespace}-{i}", 2, "Tesla-T4", 15360) for i in range(2)])
    pod = make_pod("three-cards", labels={"genius/gpu-number": "3"}, node_selector=selector)
    core_v1.create_namespaced_pod(namespace, pod)

    message = wait_for(
        "a FailedScheduling event", lambda: pending_reason(core_v1, namespace, "three-cards"),
        timeout=60,
    )
    # The allocator's filter reason, as kube-scheduler relays it in its event.
    assert "needs 3 whole cards" in message
    obj = get_object(core_v1.read_namespaced_pod, "three-cards", namespace)
    assert not obj["spec"].get("nodeName")


def mixed_shapes(count: int) -> list[dict[str, Any]]:
    """Single-container pods in every request form, whole cards and shares."""
    shapes: list[tuple[dict[str, str], dict[str, str], dict[str, str]]] = [
        ({"elasticgpu.io/gpu-core": "25", "elasticgpu.io/gpu-memory": "4096"}, {}, {}),
        ({"elasticgpu.io/gpu-memory": "2048"}, {}, {}),
        ({"elasticgpu.io/gpu-core": "100"}, {}, {}),
        ({"elasticgpu.io/gpu-percent": "30"}, {}, {}),
        ({"elasticgpu.io/gpu": "0.5"}, {}, {}),
        ({"nano-gpu.io/gpu-core": "20", "nano-gpu.io/gpu-memory": "1"}, {}, {}),
        ({"aliyun.com/gpu-mem": "3"}, {}, {}),
        ({}, {"genius/gpu-number": "1"}, {}),
        ({"elasticgpu.io/gpu-core": "200"}, {}, {}),
        ({"elasticgpu.io/gpu-core": "10", "elasticgpu.io/gpu-memory": "1024"}, {},
         {"elasticgpu.io/gpu-model": "NVIDIA-A100-80GB|NVIDIA-A100-40GB"}),
    ]
    pods = []
    for i in range(count):
        limits, labels, annotations = shapes[i % len(shapes)]
        ctr = [container(limits=limits)] if limits else None
        pods.append(make_pod(f"p{i:03d}", ctr, labels=labels, annotations=annotations))
    return pods


def create_all(core_v1: Any, namespace: str, pods: list[dict[str, Any]]) -> None:
    with ThreadPoolExecutor(max_workers=8) as executor:
        list(executor.map(lambda p: core_v1.create_namespaced_pod(namespace, p), pods))


def test_two_hundred_mixed_pods_at_once_never_overcommit_a_card_and_every_fitting_pod_binds(
    cluster: DevCluster, core_v1: Any, namespace: str, pool: NodePool
) -> None:
    selector = pool([
        *pool_nodes(namespace),
        uniform(f"{namespace}-a10b", 2, "NVIDIA-A10", 24576, inventory=Inventory.EVEN),
    ])
    pods = [confined(p, selector) for p in mixed_shapes(200)]
    create_all(core_v1, namespace, pods)

    bound, pending = wait_settled(
        core_v1, namespace, [p["metadata"]["name"] for p in pods], timeout=300
    )
    usage = api_usage(core_v1, cluster, namespace, selector)
    assert overcommitments(usage) == []
    assert bound and pending  # the pool is far too small for 200 pods: some of each
    nodes = {n: get_object(core_v1.read_node, n) for n in {p["spec"]["nodeName"]
                                                            for p in bound.values()}}
    for pod in bound.values():
        cards = node_cards(nodes[pod["spec"]["nodeName"]], cluster.vocabulary)
        assert allocation_problems(pod, cards, cluster.vocabulary) == [], pod["metadata"]["name"]
    pods_now = {p["metadata"]["name"]: p for p in list_objects(core_v1.list_namespaced_pod,
                                                               namespace)}
    for name, reason in pending.items():
        request = decode_request(
            pods_now[name]["metadata"]["annotations"][cluster.vocabulary.request_annotation]
        )
        assert fits_now(request, usage) is None, f"{name} fits but is pending: {reason}"
        assert reason.startswith("0/"), reason  # kube-scheduler's FitError summary


def test_killing_and_restarting_the_allocator_mid_stream_allocates_no_card_twice(
    cluster: DevCluster, core_v1: Any, namespace: str, pool: NodePool
) -> None:
    selector = pool([uniform(f"{namespace}-{i}", 4, "NVIDIA-A10", 24576) for i in range(3)])
    # 12 cards x 4 quarters = 48 places for 64 quarter-card pods.
    pods = [
        make_pod(f"q{i:02d}", [container(limits={"elasticgpu.io/gpu-core": "25",
                                                 "elasticgpu.io/gpu-memory": "4096"})],
                 node_selector=selector)
        for i in range(64)
    ]
    def bound_now() -> int:
        return sum(1 for p in list_objects(core_v1.list_namespaced_pod, namespace)
                   if p["spec"].get("nodeName"))

    try:
        with ThreadPoolExecutor(max_workers=1) as background:
            creating = background.submit(create_all, core_v1, namespace, pods)
            wait_for("the first binds", lambda: bound_now() >= 8, timeout=60, interval=0.02)
            cluster.services.kill_allocator()
            at_crash = bound_now()
            creating.result()
        # The scheduler meanwhile fails its extender calls and backs the pods off.
        time.sleep(1.0)
    finally:
        cluster.services.restart_allocator()  # also when the test failed: later tests need it
    assert at_crash < 48, "the crash came after every place was taken: nothing was tested"

    bound, pending = wait_settled(
        core_v1, namespace, [p["metadata"]["name"] for p in pods], timeout=240
    )
    usage = api_usage(core_v1, cluster, namespace, selector)
    assert overcommitments(usage) == []
    assert len(bound) == 48
    assert all(u.core_used == 100 for cards in usage.values() for u in cards)
    assert len(pending) == 16


def test_completed_and_deleted_pods_free_their_cards_for_the_next_pods(
    cluster: DevCluster, core_v1: Any, namespace: str, pool: NodePool
) -> None:
    """KWOK plays the kubelet: the first pod's workload ends (the annotation says it runs
    for 0 s more) and KWOK reports it Succeeded."""
    selector = pool([uniform(f"{namespace}-n", 2, "Tesla-T4", 15360)])

    def whole(name: str, cards: int) -> dict[str, Any]:
        return make_pod(name, [container(limits={"elasticgpu.io/gpu-core": str(100 * cards)})],
                        node_selector=selector)

    def node_of(name: str) -> str | None:
        value: str | None = get_object(core_v1.read_namespaced_pod, name, namespace)[
            "spec"].get("nodeName")
        return value

    core_v1.create_namespaced_pod(namespace, whole("first", 2))
    wait_for("first to be bound", lambda: node_of("first"), timeout=60)
    core_v1.create_namespaced_pod(namespace, whole("second", 1))
    wait_for("second to be refused", lambda: pending_reason(core_v1, namespace, "second"),
             timeout=60)

    core_v1.patch_namespaced_pod(
        "first", namespace, {"metadata": {"annotations": {kwok.RUN_FOR_ANNOTATION: "0s"}}})
    wait_for("second to get a freed card", lambda: node_of("second"), timeout=120)

    core_v1.create_namespaced_pod(namespace, whole("third", 2))
    wait_for("third to be refused", lambda: pending_reason(core_v1, namespace, "third"),
             timeout=60)
    delete_pods(core_v1, namespace, ["second"])
    wait_for("third to get both cards", lambda: node_of("third"), timeout=120)
    assert overcommitments(api_usage(core_v1, cluster, namespace, selector)) == []
