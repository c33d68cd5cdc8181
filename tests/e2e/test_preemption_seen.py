"""What operators see of a real preemption (issue 47 item 5), on the real control plane with
preemption on: the allocator's /metrics counts the preemption, its victims and its end in the
preemptor's bind; ``kubectl tessera why`` (the real kubectl running the plugin) names the
preemption made, its node, cards and victims (the annotation and the Preempted Events), and
tells a pod whose policy is Never why it evicts nobody.

On the session cluster: the pods are confined to the test's own node, and the counters are
read as what this test added to them (other tests preempt on the same allocator)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from conftest import NodePool
from preempting import (
    HIGH,
    HIGH_NEVER,
    SMALL,
    WHOLE_CARD,
    bound_node,
    card_of,
    fill_node,
    live,
    pod,
)
from test_hostile_cluster import allocator_get, status
from test_kubectl_plugin import tessera

from devcluster.cluster import DevCluster
from devcluster.workloads import get_object, unschedulable_message, wait_for

pytestmark = pytest.mark.e2e


def sample(text: str, name: str) -> float:
    """One sample's value in the Prometheus text format (``name`` with its labels)."""
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    assert found, f"{name} not in /metrics"
    return float(found.group(1))


def test_a_real_preemption_is_counted_and_named_by_why(
    cluster: DevCluster, core_v1: Any, namespace: str, pool: NodePool
) -> None:
    node, selector, cards = fill_node(cluster, core_v1, namespace, pool)
    before = allocator_get(cluster, "/metrics")

    def added(text: str, name: str) -> float:
        """What this test added to a counter (the allocator is the session's)."""
        return sample(text, name) - sample(before, name)

    core_v1.create_namespaced_pod(namespace, pod("big", selector, WHOLE_CARD, HIGH))
    assert wait_for("big bound", lambda: bound_node(core_v1, namespace, "big"),
                    timeout=90) == node
    card = card_of(cluster, core_v1, namespace, "big")
    gone = set(SMALL) - live(core_v1, namespace)
    assert gone == {name for name, c in cards.items() if c == card}

    # The Binding is visible through the API a moment before the bind verb's thread reports
    # the preemption ended: wait for the count, then read everything from one scrape.
    def counted_end() -> str | None:
        text = allocator_get(cluster, "/metrics")
        ended = 'tessera_allocator_preemptions_ended_total{outcome="bound"}'
        return text if added(text, ended) >= 1 else None

    metrics = wait_for("the preemption's end counted", counted_end, timeout=30)
    assert added(metrics, "tessera_allocator_preemptions_total") == 1
    assert added(metrics, "tessera_allocator_preemption_victims_total") == len(gone)
    assert added(metrics, 'tessera_allocator_preemptions_ended_total{outcome="bound"}') == 1
    assert added(metrics, 'tessera_allocator_preemptions_ended_total{outcome="deadline"}') == 0
    # Not the in-flight gauge: it counts the session cluster's other preemptions too (a
    # module before this one may still be ending its own). This one is over:
    under_way = status(cluster)["preemptions"]
    assert [p for p in under_way if p["namespace"] == namespace] == []

    def made() -> dict[str, Any] | None:
        # The Events are written by the allocator's recorder thread: wait for them.
        word: dict[str, Any] | None = tessera(cluster, "why", f"{namespace}/big")[
            "preemption_made"]
        return word if word and word["victims"] else None

    word = wait_for("why names the preemption", made, timeout=30)
    assert word["kind"] == "made" and word["node"] == node and word["cards"] == [card]
    assert {v["pod"] for v in word["victims"]} == {f"{namespace}/{n}" for n in gone}
    assert word["reason"].endswith("it was bound there")

    # A pod of priority 100 that may not preempt: the plugin says why nobody goes.
    core_v1.create_namespaced_pod(namespace, pod("patient", selector, WHOLE_CARD, HIGH_NEVER))
    wait_for("patient found unschedulable", lambda: unschedulable_message(
        get_object(core_v1.read_namespaced_pod, "patient", namespace)), timeout=60)
    word = tessera(cluster, "why", f"{namespace}/patient")["preemption"]
    assert word["kind"] == "none" and "preemptionPolicy is Never" in word["reason"]
    assert set(SMALL) - live(core_v1, namespace) == gone  # nobody more evicted
