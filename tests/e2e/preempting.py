"""What the preemption e2e tests share: priority classes, the full node, what was evicted."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from devcluster.cluster import DevCluster
from devcluster.nodes import uniform
from devcluster.workloads import (
    container,
    create_priority_classes,
    get_object,
    list_objects,
    make_pod,
    wait_for,
)
from kubectl_tessera.report import card_usage, overcommitments
from tessera.vocabulary import decode_allocation

LOW, HIGH, HIGH_NEVER = "tessera-e2e-low", "tessera-e2e-high", "tessera-e2e-high-never"
HALF_CARD = {"elasticgpu.io/gpu-core": "50"}
WHOLE_CARD = {"elasticgpu.io/gpu-core": "100"}
SMALL = ("a", "b", "c", "d")


def priority_classes(dev: DevCluster) -> None:
    """Priority 1 for the small pods, 100 for the preemptor (and 100 that never preempts)."""
    create_priority_classes(dev.api_client, ((LOW, 1, True), (HIGH, 100, True),
                                             (HIGH_NEVER, 100, False)))


def pod(name: str, selector: dict[str, str], limits: dict[str, str], priority_class: str
        ) -> dict[str, Any]:
    doc = make_pod(name, [container(limits=limits)], node_selector=selector)
    doc["spec"]["priorityClassName"] = priority_class
    return doc


def bound_node(core_v1: Any, namespace: str, name: str) -> str | None:
    node = get_object(core_v1.read_namespaced_pod, name, namespace)["spec"].get("nodeName")
    return str(node) if node else None


def past_the_start_of(core_v1: Any, namespace: str, name: str) -> None:
    """Returns once the clock is past the second in which ``name`` started (its
    ``status.startTime``, whole seconds, written by KWOK on this machine's clock): a pod
    created now starts in a later second, so the start times order the two."""

    def started() -> float | None:
        text = (get_object(core_v1.read_namespaced_pod, name, namespace).get("status")
                or {}).get("startTime")
        return datetime.fromisoformat(text).timestamp() if text else None

    second = wait_for(f"{name} started", started, timeout=60, interval=0.05)
    time.sleep(max(0.0, second + 1 - time.time()))


def fill_node(dev: DevCluster, core_v1: Any, namespace: str, pool: Any) -> tuple[
        str, dict[str, str], dict[str, int]]:
    """One node, two cards, each shared by two priority-1 half-card pods, all bound, "d" the
    youngest; the node, the selector and each small pod's card."""
    priority_classes(dev)
    node = f"{namespace}-t4"
    selector: dict[str, str] = pool([uniform(node, 2, "Tesla-T4", 15360)])
    for index, name in enumerate(SMALL):
        if index:
            # One after the other: their start times (seconds) then order them.
            past_the_start_of(core_v1, namespace, SMALL[index - 1])
        core_v1.create_namespaced_pod(namespace, pod(name, selector, HALF_CARD, LOW))
        wait_for(f"{name} bound", lambda n=name: bound_node(core_v1, namespace, n), timeout=60,
                 interval=0.05)
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
