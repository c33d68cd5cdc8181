"""What the preemption e2e tests share: priority classes, the full node, what was evicted."""

from __future__ import annotations

import time
from typing import Any

from devcluster.cluster import DevCluster
from devcluster.nodes import uniform
from devcluster.workloads import container, get_object, list_objects, make_pod, wait_for
from kubectl_tessera.report import card_usage, overcommitments
from tessera.vocabulary import decode_allocation

LOW, HIGH, HIGH_NEVER = "tessera-e2e-low", "tessera-e2e-high", "tessera-e2e-high-never"
HALF_CARD = {"elasticgpu.io/gpu-core": "50"}
WHOLE_CARD = {"elasticgpu.io/gpu-core": "100"}
SMALL = ("a", "b", "c", "d")


def priority_classes(dev: DevCluster) -> None:
    """Priority 1 for the small pods, 100 for the preemptor (and 100 that never preempts)."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    api = client.SchedulingV1Api(dev.api_client)
    for name, value, policy in ((LOW, 1, None), (HIGH, 100, None), (HIGH_NEVER, 100, "Never")):
        body: dict[str, Any] = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                "metadata": {"name": name}, "value": value}
        if policy:
            body["preemptionPolicy"] = policy
        try:
            api.create_priority_class(body)
        except ApiException as exc:
            if exc.status != 409:
                raise
    # The Priority admission plugin resolves classes from its informer: let it see them.
    time.sleep(2)


def pod(name: str, selector: dict[str, str], limits: dict[str, str], priority_class: str
        ) -> dict[str, Any]:
    doc = make_pod(name, [container(limits=limits)], node_selector=selector)
    doc["spec"]["priorityClassName"] = priority_class
    return doc


def bound_node(core_v1: Any, namespace: str, name: str) -> str | None:
    node = get_object(core_v1.read_namespaced_pod, name, namespace)["spec"].get("nodeName")
    return str(node) if node else None


def fill_node(dev: DevCluster, core_v1: Any, namespace: str, pool: Any) -> tuple[
        str, dict[str, str], dict[str, int]]:
    """One node, two cards, each shared by two priority-1 half-card pods, all bound, "d" the
    youngest; the node, the selector and each small pod's card."""
    priority_classes(dev)
    node = f"{namespace}-t4"
    selector: dict[str, str] = pool([uniform(node, 2, "Tesla-T4", 15360)])
    for name in SMALL:
        # One after the other, a second apart: their start times (seconds) then order them.
        core_v1.create_namespaced_pod(namespace, pod(name, selector, HALF_CARD, LOW))
        wait_for(f"{name} bound", lambda n=name: bound_node(core_v1, namespace, n), timeout=60)
        time.sleep(1.1)
    return node, selector, {name: card_of(dev, core_v1, namespace, name) for name in SMALL}


def card_of(dev: DevCluster, core_v1: Any, namespace: str, name: str) -> int:
    got = get_object(core_v1.read_namespaced_pod, name, namespace)
    text = got["metadata"]["annotations"][dev.vocabulary.allocation_annotation]
    (container_cards,) = decode_allocation(text).containers
    (card,) = container_cards.card_indices
    return card


def live(core_v1: Any, namespace: str) -> set[str]:
    """The pods not being deleted."""
    return {p["metadata"]["name"] for p in list_objects(core_v1.list_namespaced_pod, namespace)
            if not p["metadata"].get("deletionTimestamp")}


def overcommitted(dev: DevCluster, core_v1: Any, namespace: str, node: str) -> list[str]:
    nodes = [get_object(core_v1.read_node, node)]
    pods = list_objects(core_v1.list_namespaced_pod, namespace)
    return overcommitments(card_usage(nodes, pods, dev.vocabulary))


def stays_pending(core_v1: Any, namespace: str, name: str, small: set[str],
                  seconds: float = 15.0) -> None:
    """For ``seconds``: the pod stays unbound and every small pod stays."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert bound_node(core_v1, namespace, name) is None
        assert live(core_v1, namespace) >= small, "a small pod was evicted"
        time.sleep(1)
