"""With preemption off (the shipped default this release), a GPU pod of high priority that fits
nowhere waits: nobody is evicted (tests/e2e/test_preemption.py has it on)."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import NodePool
from preempting import HIGH, SMALL, WHOLE_CARD, fill_node, overcommitted, pod, stays_pending

from devcluster.cluster import DevCluster

pytestmark = pytest.mark.e2e


def test_with_preemption_off_a_pod_of_higher_priority_evicts_nobody(
    cluster: DevCluster, core_v1: Any, namespace: str, pool: NodePool
) -> None:
    node, selector, _cards = fill_node(cluster, core_v1, namespace, pool)
    core_v1.create_namespaced_pod(namespace, pod("big", selector, WHOLE_CARD, HIGH))
    stays_pending(core_v1, namespace, "big", set(SMALL))
    assert overcommitted(cluster, core_v1, namespace, node) == []
