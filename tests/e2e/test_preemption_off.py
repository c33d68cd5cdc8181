"""With preemption turned off (``--preemption=false``, as manifests/components/no-preemption
and the Helm value ``allocator.preemption: false`` run it), a GPU pod of high priority that
fits nowhere waits: nobody is evicted (tests/e2e/test_preemption.py has it on, as shipped)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from conftest import ALL_DIALECTS, NodePool
from dev_clusters import running
from preempting import HIGH, SMALL, WHOLE_CARD, fill_node, overcommitted, pod, stays_pending

from devcluster.binaries import Binaries
from devcluster.cluster import DevCluster, Options

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def cluster(binaries: Binaries, request: pytest.FixtureRequest) -> Iterator[DevCluster]:
    """This module's cluster (it overrides the session's: its allocator does not preempt)."""
    dev = DevCluster(binaries, None, Options(preemption=False, webhook_args=(ALL_DIALECTS,),
                                             allocator_args=(ALL_DIALECTS,)))
    with running(dev, request, "dev cluster"):
        yield dev


def test_with_preemption_off_a_pod_of_higher_priority_evicts_nobody(
    cluster: DevCluster, core_v1: Any, namespace: str, pool: NodePool
) -> None:
    node, selector, _cards = fill_node(cluster, core_v1, namespace, pool)
    core_v1.create_namespaced_pod(namespace, pod("big", selector, WHOLE_CARD, HIGH))
    stays_pending(core_v1, namespace, "big", set(SMALL))
    assert overcommitted(cluster, core_v1, namespace, node) == []
