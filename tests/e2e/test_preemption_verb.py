"""kube-scheduler's own preemption made card-aware (the extender's ``preemptVerb``,
allocator/verbs/preempt_verb.py) on the real control plane, preemption on as shipped.

The node is short of CPU in sum, so kube-scheduler's in-tree filters refuse the pod (the
extender's filter is not even asked) and its own dry run finds candidates: by priority, then
age, it would delete only the youngest small pod, which frees CPU but no whole card (the pod
would then be refused by the cards, and filter's path evict the other pod of that card: two
preemptions). It asks the allocator's ``preemptVerb``, which keeps that pod and adds the other
pod of its card; kube-scheduler deletes both at once, filter's path evicts nobody, and the pod
binds to that card. The allocator killed the moment the verb's note is written and restarted,
a priority-1 pod created meanwhile does not get that card, and the restarted allocator evicts
nobody (kube-scheduler deletes the victims it was answered).
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from conftest import NodePool
from preempting import (
    HALF_CARD,
    HIGH,
    LOW,
    SMALL,
    WHOLE_CARD,
    bound_node,
    card_of,
    live,
    overcommitted,
    pod,
    priority_classes,
    stays_pending,
)
from test_hostile_cluster import status

from devcluster.cluster import DevCluster
from devcluster.nodes import uniform
from devcluster.workloads import get_object, list_objects, wait_for

pytestmark = pytest.mark.e2e

#: Each pod asks one CPU; the node has one per small pod, so the preemptor's CPU is short in
#: sum (kube-scheduler's NodeResourcesFit counts it; the card resources it ignores).
CPU = {"cpu": "1"}


def _fill_cpu_short_node(cluster: DevCluster, core_v1: Any, namespace: str, pool: NodePool
                        ) -> tuple[str, dict[str, str], dict[str, int]]:
    """The node of two cards and one CPU per small pod, all bound, "d" the youngest; the
    node, the selector and each small pod's card."""
    priority_classes(cluster)
    node = f"{namespace}-t4"
    selector = pool([uniform(node, 2, "Tesla-T4", 15360, cpu=str(len(SMALL)))])
    for name in SMALL:
        # A second apart: their start times (seconds) order them, "d" the youngest.
        core_v1.create_namespaced_pod(namespace, pod(name, selector, {**HALF_CARD, **CPU}, LOW))
        wait_for(f"{name} bound", lambda n=name: bound_node(core_v1, namespace, n), timeout=60)
        time.sleep(1.1)
    return node, selector, {name: card_of(cluster, core_v1, namespace, name) for name in SMALL}


def _preempted_by(core_v1: Any, namespace: str) -> tuple[set[str], set[str]]:
    """The pods a ``Preempted`` Event names: by the allocator, by kube-scheduler."""
    preempted = [e for e in list_objects(core_v1.list_namespaced_event, namespace)
                 if e.get("reason") == "Preempted"]
    ours = {e["involvedObject"]["name"] for e in preempted
            if e.get("reportingComponent") == "tessera-allocator"}
    theirs = {e["involvedObject"]["name"] for e in preempted
              if e.get("reportingComponent") != "tessera-allocator"}
    return ours, theirs


def test_kube_schedulers_own_preemption_evicts_the_pods_of_one_card_not_its_youngest_pod(
    cluster: DevCluster, core_v1: Any, namespace: str, pool: NodePool
) -> None:
    node, selector, cards = _fill_cpu_short_node(cluster, core_v1, namespace, pool)
    before = status(cluster)["preemptVerb"]["cardLevel"]

    core_v1.create_namespaced_pod(namespace, pod("big", selector, {**WHOLE_CARD, **CPU}, HIGH))
    assert wait_for("big bound", lambda: bound_node(core_v1, namespace, "big"),
                    timeout=90) == node
    card = card_of(cluster, core_v1, namespace, "big")
    gone = set(SMALL) - live(core_v1, namespace)
    # Exactly the two pods of the card it got; kube-scheduler alone would delete "d" only.
    assert gone == {name for name, c in cards.items() if c == card}
    assert len(gone) == 2
    assert overcommitted(cluster, core_v1, namespace, node) == []
    # kube-scheduler asked the verb, which answered card-level victims; kube-scheduler
    # preempted both, and filter's path nobody.
    assert status(cluster)["preemptVerb"]["cardLevel"] > before
    assert _preempted_by(core_v1, namespace) == (set(), gone)


def _note(cluster: DevCluster, core_v1: Any, namespace: str, name: str) -> dict[str, Any] | None:
    """The pod's preemption note, once written (the verb writes it before it answers)."""
    meta = get_object(core_v1.read_namespaced_pod, name, namespace)["metadata"]
    text = (meta.get("annotations") or {}).get(cluster.vocabulary.preemption_annotation)
    return json.loads(text) if text else None


def test_an_allocator_restart_after_the_verbs_answer_keeps_the_card_and_evicts_nobody(
    cluster: DevCluster, core_v1: Any, namespace: str, pool: NodePool
) -> None:
    node, selector, cards = _fill_cpu_short_node(cluster, core_v1, namespace, pool)
    core_v1.create_namespaced_pod(namespace, pod("big", selector, {**WHOLE_CARD, **CPU}, HIGH))
    # The allocator dies the moment the verb's note is written: its answer gone back or not,
    # kube-scheduler's deletions done or not, the preemptor not bound (its bind is ours).
    note = wait_for("big's preemption note", lambda: _note(cluster, core_v1, namespace, "big"),
                    timeout=60, interval=0.005)
    cluster.services.kill_allocator()
    bound_at_kill = bound_node(core_v1, namespace, "big")
    try:
        # Created while no allocator runs; its CPU fits beside big's nomination, and only
        # the card big's victims free would take it.
        core_v1.create_namespaced_pod(namespace, pod("low", selector, {**WHOLE_CARD, **CPU},
                                                     LOW))
        time.sleep(2.0)
    finally:
        cluster.services.restart_allocator()  # also when the test failed: later tests need it
    assert bound_at_kill is None, "big bound before the kill: nothing was tested"
    assert note["evictor"] == "kube-scheduler" and note["node"] == node
    assert wait_for("big bound", lambda: bound_node(core_v1, namespace, "big"),
                    timeout=90) == node
    card = card_of(cluster, core_v1, namespace, "big")
    gone = set(SMALL) - live(core_v1, namespace)
    assert gone == {name for name, c in cards.items() if c == card}
    # "low" never took big's card (big would have preempted it: low would be gone), and
    # nobody was evicted by the allocator, before or after its restart.
    stays_pending(core_v1, namespace, "low", set(SMALL) - gone, seconds=3)
    assert "low" in live(core_v1, namespace)
    assert _preempted_by(core_v1, namespace) == (set(), gone)
    assert overcommitted(cluster, core_v1, namespace, node) == []
