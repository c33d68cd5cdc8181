"""40 pods on one 8-card node under HAMi's lock, through kube-scheduler and the allocator
process, with the node stand-in at HAMi's client rate (5 requests/s, burst 10: each Allocate
takes about as long as the plugin's, 1.5 s): every pod runs and no bind fails, so no Warning
Event says one did (docs/hami.md, "Speed under the lock"; the time against the plugin's limit
is the benchmark's, bench/hami_one_node.py, not asserted here)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from dev_clusters import running

from devcluster.binaries import Binaries
from devcluster.cluster import DevCluster
from devcluster.nodes import uniform
from devcluster.options import Options
from devcluster.plugin_client import ClientRate
from devcluster.workloads import container, ensure_namespace, events_by_reason, make_pod, wait_for
from tessera.agent_profiles import AgentProfile

pytestmark = pytest.mark.e2e

PODS, CARDS, MIB = 40, 8, 81920
NODE = "hami-lock-node"


@pytest.fixture(scope="module")
def cluster(binaries: Binaries, request: pytest.FixtureRequest) -> Iterator[DevCluster]:
    """The hami profile with the stand-in fleet at HAMi's client rate."""
    dev = DevCluster(binaries, None, Options(agent_profile=AgentProfile.HAMI,
                                             hami_client_rate=ClientRate()))
    with running(dev, request, "hami rate-limited dev cluster",
                 [uniform(NODE, CARDS, "H100", MIB, labels={"only": NODE})]):
        yield dev


def test_forty_pods_on_one_node_all_run_and_no_bind_fails_as_a_warning_event(
        cluster: DevCluster) -> None:
    core: Any = cluster.core_v1()
    namespace = "hami-lock"
    ensure_namespace(core, namespace)
    for i in range(PODS):  # a fifth of a card each, in HAMi's own form: 40 fill 8 cards
        pod = make_pod(f"p{i}", [container("main", {
            "nvidia.com/gpu": "1", "nvidia.com/gpucores": "20",
            "nvidia.com/gpumem": str(MIB // 5)})])
        pod["spec"]["nodeSelector"] = {"only": NODE}
        core.create_namespaced_pod(namespace, pod)

    def all_running() -> bool:
        items = core.list_namespaced_pod(namespace).items
        return sum(1 for p in items if p.status.phase == "Running") == PODS

    wait_for(f"{PODS} pods Running", all_running, timeout=400, interval=0.5)
    # the last Allocate still releases the lock after its pod's success
    wait_for("every Allocate done", lambda: cluster.hami_fleet.served >= PODS, timeout=30)
    events = events_by_reason(core, namespace)
    assert events["bind_failures"] == 0, events
    assert events["by_reason"].get("Warning/FailedAllocation", 0) == 0, events
    assert events["by_reason"].get("Normal/Allocated", 0) == PODS, events
