"""Card-aware preemption on the real control plane (allocator/verbs/preempt.py): a GPU pod of
high priority that fits nowhere gets one card back from the fewest pods of lower priority,
evicted through the Eviction API; a pod that may not preempt evicts nobody.

On the session cluster (preemption on, as shipped): each test's pods are confined to its own
node, so its preemptor can evict nobody else's pods, and nobody else's pods land there."""

from __future__ import annotations

import time
from typing import Any

import pytest
from conftest import NodePool
from preempting import (
    HIGH,
    HIGH_NEVER,
    LOW,
    SMALL,
    WHOLE_CARD,
    bound_node,
    card_of,
    fill_node,
    live,
    overcommitted,
    pod,
    stays_pending,
)

from devcluster.cluster import DevCluster
from devcluster.workloads import get_object, list_objects, wait_for

pytestmark = pytest.mark.e2e


def test_the_pods_of_one_card_make_way_for_a_whole_card_of_higher_priority(
    cluster: DevCluster, core_v1: Any, namespace: str, pool: NodePool
) -> None:
    node, selector, cards = fill_node(cluster, core_v1, namespace, pool)
    core_v1.create_namespaced_pod(namespace, pod("big", selector, WHOLE_CARD, HIGH))
    assert wait_for("big bound", lambda: bound_node(core_v1, namespace, "big"),
                    timeout=90) == node
    card = card_of(cluster, core_v1, namespace, "big")
    gone = set(SMALL) - live(core_v1, namespace)
    # Exactly the two pods of the card it got: the minimal set, and nobody else.
    assert gone == {name for name, c in cards.items() if c == card}
    assert overcommitted(cluster, core_v1, namespace, node) == []

    def preempted() -> set[str]:
        return {e["involvedObject"]["name"]
                for e in list_objects(core_v1.list_namespaced_event, namespace)
                if e.get("reason") == "Preempted"
                and e.get("reportingComponent") == "tessera-allocator"}

    # Sent by the evicting worker and the recorder's thread: they may trail the bind.
    wait_for("the Preempted events", lambda: preempted() >= {*gone, "big"}, timeout=20)
    note = get_object(core_v1.read_namespaced_pod, "big", namespace)["metadata"][
        "annotations"][cluster.vocabulary.preemption_annotation]
    assert f'"node":"{node}"' in note and f'"cards":[{card}]' in note


def test_the_card_whose_pods_a_disruption_budget_protects_is_left_alone(
    cluster: DevCluster, core_v1: Any, namespace: str, pool: NodePool
) -> None:
    from kubernetes import client

    node, selector, cards = fill_node(cluster, core_v1, namespace, pool)
    # Blind to budgets, the card of the youngest pod would be freed (the older pods are put
    # back first): that one is protected.
    guarded_card = cards["d"]
    guarded = {name for name, c in cards.items() if c == guarded_card}
    for name in guarded:
        core_v1.patch_namespaced_pod(name, namespace, {"metadata": {"labels": {"app": "db"}}})
    policy = client.PolicyV1Api(cluster.api_client)
    policy.create_namespaced_pod_disruption_budget(namespace, {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "db"},
        # minAvailable: a bare pod has no scale for maxUnavailable to be read against.
        "spec": {"minAvailable": len(guarded), "selector": {"matchLabels": {"app": "db"}}}})
    wait_for("the budget counted", lambda: (get_object(
        policy.read_namespaced_pod_disruption_budget, "db", namespace).get("status") or {}
    ).get("expectedPods") == len(guarded), timeout=60)
    core_v1.create_namespaced_pod(namespace, pod("big", selector, WHOLE_CARD, HIGH))
    assert wait_for("big bound", lambda: bound_node(core_v1, namespace, "big"),
                    timeout=90) == node
    assert card_of(cluster, core_v1, namespace, "big") != guarded_card
    assert set(SMALL) - live(core_v1, namespace) == set(SMALL) - guarded
    assert overcommitted(cluster, core_v1, namespace, node) == []


def test_a_pod_whose_policy_is_never_evicts_nobody(
    cluster: DevCluster, core_v1: Any, namespace: str, pool: NodePool
) -> None:
    node, selector, _cards = fill_node(cluster, core_v1, namespace, pool)
    core_v1.create_namespaced_pod(namespace, pod("big", selector, WHOLE_CARD, HIGH_NEVER))
    stays_pending(core_v1, namespace, "big", set(SMALL))
    assert overcommitted(cluster, core_v1, namespace, node) == []


def _noted(cluster: DevCluster, core_v1: Any, namespace: str, name: str) -> str | None:
    """The pod's preemption note, once the allocator has written it (before any eviction)."""
    meta = get_object(core_v1.read_namespaced_pod, name, namespace)["metadata"]
    note = (meta.get("annotations") or {}).get(cluster.vocabulary.preemption_annotation)
    return str(note) if note else None


def test_an_allocator_restart_before_the_preemptors_bind_keeps_its_card_from_a_lower_pod(
    cluster: DevCluster, core_v1: Any, namespace: str, pool: NodePool
) -> None:
    node, selector, cards = fill_node(cluster, core_v1, namespace, pool)
    core_v1.create_namespaced_pod(namespace, pod("big", selector, WHOLE_CARD, HIGH))
    # The allocator dies the moment the note is written: the evictions done or not, the
    # preemptor not bound (the bind goes through the allocator).
    wait_for("big's preemption note", lambda: _noted(cluster, core_v1, namespace, "big"),
             timeout=60, interval=0.005)
    cluster.services.kill_allocator()
    bound_at_kill = bound_node(core_v1, namespace, "big")
    try:
        # Created while no allocator runs: kube-scheduler retries it as soon as one answers.
        core_v1.create_namespaced_pod(namespace, pod("low", selector, WHOLE_CARD, LOW))
        time.sleep(2.0)
    finally:
        cluster.services.restart_allocator()  # also when the test failed: later tests need it
    assert bound_at_kill is None, "big bound before the kill: nothing was tested"
    assert wait_for("big bound", lambda: bound_node(core_v1, namespace, "big"),
                    timeout=90) == node
    card = card_of(cluster, core_v1, namespace, "big")
    gone = set(SMALL) - live(core_v1, namespace)
    assert gone == {name for name, c in cards.items() if c == card}
    stays_pending(core_v1, namespace, "low", set(SMALL) - gone, seconds=5)
    assert overcommitted(cluster, core_v1, namespace, node) == []


def test_the_room_of_a_preemptor_deleted_before_its_bind_goes_to_the_next_pod(
    cluster: DevCluster, core_v1: Any, namespace: str, pool: NodePool
) -> None:
    node, selector, cards = fill_node(cluster, core_v1, namespace, pool)
    # Waiting already, of the small pods' priority: it may preempt nobody.
    core_v1.create_namespaced_pod(namespace, pod("next", selector, WHOLE_CARD, LOW))
    core_v1.create_namespaced_pod(namespace, pod("big", selector, WHOLE_CARD, HIGH))
    wait_for("big's preemption note", lambda: _noted(cluster, core_v1, namespace, "big"),
             timeout=60, interval=0.005)
    # Deleted once its evictions are done: deleted before them, it evicts nobody (the worker
    # stops a deleted preemptor's evictions) and no card is freed. Its victims: one card's
    # two half-card pods.
    wait_for("big's victims leaving",
             lambda: len(set(SMALL) - live(core_v1, namespace)) >= 2 or None,
             timeout=60, interval=0.005)
    core_v1.delete_namespaced_pod("big", namespace, grace_period_seconds=0)
    started = time.monotonic()
    # Well before the preemption's deadline (60 s): the room was not held for a deleted pod.
    assert wait_for("next bound", lambda: bound_node(core_v1, namespace, "next"),
                    timeout=40) == node
    assert time.monotonic() - started < 45
    card = card_of(cluster, core_v1, namespace, "next")
    assert set(SMALL) - live(core_v1, namespace) == {
        name for name, c in cards.items() if c == card}
    assert overcommitted(cluster, core_v1, namespace, node) == []
