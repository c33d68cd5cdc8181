"""The allocator's Events on the real control plane, as a person reads them: ``kubectl describe
pod`` (the allocator writes them as its shipped RBAC allows, and nothing else)."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from allocator.ranking.policies import DEFAULT_POLICY
from devcluster.cluster import DevCluster
from devcluster.nodes import uniform
from devcluster.workloads import (
    container,
    get_object,
    list_objects,
    make_pod,
    wait_for,
)

pytestmark = pytest.mark.e2e


def describe(cluster: DevCluster, namespace: str, name: str) -> str:
    result = subprocess.run(
        [str(cluster.binaries.kubectl), f"--kubeconfig={cluster.kubeconfig}", "describe",
         "pod", name, "-n", namespace],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def allocator_events(core_v1: Any, namespace: str, name: str) -> list[dict[str, Any]]:
    return [e for e in list_objects(core_v1.list_namespaced_event, namespace)
            if e["involvedObject"].get("name") == name
            and e.get("reportingComponent") == "tessera-allocator"]


def test_kubectl_describe_shows_which_cards_of_which_node_the_pod_got(
    cluster: DevCluster, core_v1: Any, namespace: str, pool: Any
) -> None:
    selector = pool([uniform(f"{namespace}-a10", 2, "NVIDIA-A10", 24576)])
    node = f"{namespace}-a10"
    core_v1.create_namespaced_pod(namespace, make_pod(
        "two-cards", [container(limits={"elasticgpu.io/gpu-core": "200"})],
        node_selector=selector))
    wait_for("two-cards to be bound", lambda: get_object(
        core_v1.read_namespaced_pod, "two-cards", namespace)["spec"].get("nodeName"), timeout=60)
    wait_for("the Allocated event", lambda: allocator_events(core_v1, namespace, "two-cards"),
             timeout=30)

    text = describe(cluster, namespace, "two-cards")
    events = text[text.index("Events:"):]
    line = next(ln for ln in events.splitlines() if "Allocated" in ln)
    assert line.split()[:2] == ["Normal", "Allocated"]
    assert "tessera-allocator" in line
    assert line.endswith(f"allocated cards 0,1 of node {node} (policy {DEFAULT_POLICY})")


def test_a_pod_no_node_can_take_gets_one_warning_whose_count_grows(
    cluster: DevCluster, core_v1: Any, namespace: str, pool: Any
) -> None:
    selector = pool([uniform(f"{namespace}-t4", 1, "Tesla-T4", 15360)])
    core_v1.create_namespaced_pod(namespace, make_pod(
        "too-big", [container(limits={"elasticgpu.io/gpu-core": "300"})],
        node_selector=selector))

    def repeated() -> dict[str, Any] | None:
        found = [e for e in allocator_events(core_v1, namespace, "too-big")
                 if e["reason"] == "NoGPUFit"]
        # The scheduler retries with a back-off: the second refusal patches the series.
        return found[0] if len(found) == 1 and (found[0].get("series") or {}).get(
            "count", 1) >= 2 else None

    event = wait_for("a repeated NoGPUFit event", repeated, timeout=60)
    assert event["type"] == "Warning"
    assert event["message"].startswith("0/1 nodes can take the GPU request: 1 node: ")
    text = describe(cluster, namespace, "too-big")
    assert "NoGPUFit" in text and "tessera-allocator" in text
