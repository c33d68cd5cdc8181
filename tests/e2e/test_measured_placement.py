"""Measured GPU figures end to end: a real Prometheus (built from its Go module) scrapes the
stand-in dcgm-exporter whose figures each test sets; the allocator reads Prometheus's query
API; kube-scheduler places real pods through it. And Genius's ``genius/priority`` ordering the
real scheduler's queue through PriorityClasses (webhook/priority.py).

One cluster for this module, with the allocator pointed at the module's Prometheus (polled
every second, stale after three) and the webhook mapping Genius priorities to levels 0-10.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ALL_DIALECTS, NodePool
from dev_clusters import running
from test_hostile_cluster import status

from devcluster.binaries import Binaries
from devcluster.cluster import DevCluster, Options
from devcluster.dcgm import CardFigures, FakeDcgmExporter
from devcluster.nodes import uniform
from devcluster.prometheus import PrometheusServer, ensure_prometheus
from devcluster.workloads import (
    container,
    create_priority_classes,
    delete_pods,
    get_object,
    make_pod,
    pending_reason,
    wait_for,
)

pytestmark = pytest.mark.e2e

GIB = 1024
A100 = "NVIDIA-A100-SXM4-80GB"
LEVELS = 10


@pytest.fixture(scope="module")
def dcgm() -> Iterator[FakeDcgmExporter]:
    exporter = FakeDcgmExporter().start()
    yield exporter
    exporter.stop()


@pytest.fixture(scope="module")
def prometheus(dcgm: FakeDcgmExporter, tmp_path_factory: pytest.TempPathFactory
               ) -> Iterator[PrometheusServer]:
    server = PrometheusServer(ensure_prometheus(), tmp_path_factory.mktemp("prometheus"),
                              [dcgm.address], scrape_seconds=1).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def cluster(binaries: Binaries, prometheus: PrometheusServer, request: pytest.FixtureRequest
            ) -> Iterator[DevCluster]:
    """This module's cluster (it overrides the session's: its allocator reads Prometheus)."""
    dev = DevCluster(binaries, None, Options(
        webhook_args=(ALL_DIALECTS, f"--genius-priority-levels={LEVELS}"),
        allocator_args=(ALL_DIALECTS, f"--prometheus-url={prometheus.url}",
                        "--prometheus-interval-seconds=1", "--prometheus-stale-seconds=3")))
    with running(dev, request, "dev cluster"):
        _priority_classes(dev)
        yield dev


def _priority_classes(dev: DevCluster) -> None:
    """The classes the chart creates with ``geniusPriorityLevels`` (templates/genius-priority)."""
    create_priority_classes(dev.api_client, [(f"tessera-genius-priority-{level}", level, False)
                                             for level in range(LEVELS + 1)])


def card_doc(cluster: DevCluster, node: str) -> dict[str, Any] | None:
    for n in status(cluster)["nodes"]:
        if n["name"] == node:
            card: dict[str, Any] = n["cards"][0]
            return card
    return None


def wait_measured(cluster: DevCluster, node: str, foreign_mib: int, busy: int = 0) -> None:
    """Until the allocator has applied these figures to the node's card (through Prometheus)."""
    def applied() -> bool:
        card = card_doc(cluster, node)
        return card is not None and (card["foreignMemoryMiB"], card["busyPercent"]) == (
            foreign_mib, busy)

    wait_for(f"{node}'s measured figures in the allocator", applied, timeout=60)


def share_pod(name: str, selector: dict[str, str], memory_mib: int, core: int = 20,
              policy: str | None = None) -> dict[str, Any]:
    annotations = {"elasticgpu.io/gpu-policy": policy} if policy else None
    return make_pod(name, [container(limits={"elasticgpu.io/gpu-core": str(core),
                                             "elasticgpu.io/gpu-memory": str(memory_mib)})],
                    node_selector=selector, annotations=annotations)


def node_of(core_v1: Any, namespace: str, name: str, timeout: float = 60) -> str:
    def bound() -> str | None:
        pod = get_object(core_v1.read_namespaced_pod, name, namespace)
        node = (pod.get("spec") or {}).get("nodeName")
        return str(node) if node else None

    return wait_for(f"pod {name} bound", bound, timeout=timeout)


def test_a_card_others_fill_takes_no_share_and_the_pod_waits_with_that_reason(
    cluster: DevCluster, core_v1: Any, namespace: str, pool: NodePool, dcgm: FakeDcgmExporter
) -> None:
    busy, free = f"{namespace}-busy", f"{namespace}-free"
    dcgm.set(CardFigures(busy, 0, used_mib=70 * GIB, total_mib=80 * GIB, util_percent=30))
    selector = pool([uniform(busy, 1, A100, 80 * GIB)])
    wait_measured(cluster, busy, 70 * GIB, 25)
    core_v1.create_namespaced_pod(namespace, share_pod("wants-20", selector, 20 * GIB))
    reason = wait_for("the pod's FailedScheduling reason",
                      lambda: pending_reason(core_v1, namespace, "wants-20"), timeout=60)
    assert "gpu 0: 70 GiB used by processes Tessera did not place" in reason
    # A card with room appears: the pod goes there, never onto the busy card.
    dcgm.set(CardFigures(free, 0, used_mib=0, total_mib=80 * GIB))
    pool([uniform(free, 1, A100, 80 * GIB)])
    assert node_of(core_v1, namespace, "wants-20") == free


def test_under_usage_the_pod_goes_to_the_idle_one_of_two_equal_nodes(
    cluster: DevCluster, core_v1: Any, namespace: str, pool: NodePool, dcgm: FakeDcgmExporter
) -> None:
    hot, idle = f"{namespace}-hot", f"{namespace}-idle"
    dcgm.set(CardFigures(hot, 0, used_mib=0, total_mib=80 * GIB, util_percent=90),
             CardFigures(idle, 0, used_mib=0, total_mib=80 * GIB, util_percent=0))
    selector = pool([uniform(hot, 1, A100, 80 * GIB), uniform(idle, 1, A100, 80 * GIB)])
    wait_measured(cluster, hot, 0, 100)
    for i in range(3):
        name = f"usage-{i}"
        core_v1.create_namespaced_pod(namespace, share_pod(name, selector, 4 * GIB, core=10,
                                                           policy="usage"))
        assert node_of(core_v1, namespace, name) == idle


def test_a_high_genius_priority_created_behind_fifty_low_ones_binds_first(
    cluster: DevCluster, core_v1: Any, namespace: str, pool: NodePool
) -> None:
    """One free card the pods' nodeSelector does not match yet: every pod waits in
    kube-scheduler's queue; the label that opens the node moves them all back at once, and the
    queue (PrioritySort) pops the highest priority first.

    Opened by a label rather than by a pod that frees the card: kube-scheduler judges the label
    itself, and the allocator knows the node's free card before, so the first pod popped is
    judged on the truth (a freed card may reach kube-scheduler before the allocator's watch; a
    cordon leaves a taint the node controller lifts later)."""
    node = f"{namespace}-one"
    selector = pool([uniform(node, 1, A100, 80 * GIB)])
    wait_for("the allocator to know the node", lambda: card_doc(cluster, node), timeout=30)
    opened = {**selector, "tessera.e2e/open": "yes"}

    def genius(name: str, level: int) -> dict[str, Any]:
        return make_pod(name, labels={"genius/gpu-number": "1", "genius/priority": str(level)},
                        node_selector=opened)

    low = [f"low-{i:02d}" for i in range(50)]
    for name in low:
        core_v1.create_namespaced_pod(namespace, genius(name, 1))
    core_v1.create_namespaced_pod(namespace, genius("high", 9))
    high = get_object(core_v1.read_namespaced_pod, "high", namespace)
    assert high["spec"]["priorityClassName"] == "tessera-genius-priority-9"
    assert high["spec"]["priority"] == 9 and high["spec"]["preemptionPolicy"] == "Never"
    assert get_object(core_v1.read_namespaced_pod, low[0], namespace)["spec"]["priority"] == 1
    wait_for("every pod tried and refused",
             lambda: all(pending_reason(core_v1, namespace, n) for n in [*low, "high"]),
             timeout=120, interval=1)
    time.sleep(3)  # past every pod's first backoff: all of them wait in the same queue
    core_v1.patch_node(node, {"metadata": {"labels": {"tessera.e2e/open": "yes"}}})
    assert node_of(core_v1, namespace, "high", timeout=90) == node
    time.sleep(2)
    bound_low = [n for n in low if (get_object(core_v1.read_namespaced_pod, n, namespace)
                                    .get("spec") or {}).get("nodeName")]
    assert bound_low == []


@pytest.mark.parametrize("run", range(3))
def test_a_card_freed_by_a_delete_goes_to_the_priority_nine_pod_not_the_priority_one(
    cluster: DevCluster, core_v1: Any, namespace: str, pool: NodePool, run: int
) -> None:
    """Issue 47, item 4: the holder's delete reaches kube-scheduler before the allocator's
    watch, so the priority 9 pod, popped first, may be refused on the stale picture and the
    priority 1 pod popped right after it; the room is held for the priority 9 pod
    (allocator/verbs/requeue.py) and it binds there. Three runs: not one by luck."""
    node = f"{namespace}-full"
    selector = pool([uniform(node, 1, A100, 80 * GIB)])

    def genius(name: str, level: int) -> dict[str, Any]:
        return make_pod(name, labels={"genius/gpu-number": "1", "genius/priority": str(level)},
                        node_selector=selector)

    core_v1.create_namespaced_pod(namespace, genius("holder", 5))
    assert node_of(core_v1, namespace, "holder") == node
    core_v1.create_namespaced_pod(namespace, genius("low", 1))  # the older waiter
    core_v1.create_namespaced_pod(namespace, genius("high", 9))
    wait_for("both waiters tried and refused",
             lambda: all(pending_reason(core_v1, namespace, n) for n in ("low", "high")),
             timeout=60, interval=0.5)
    # Past both pods' backoff: the delete's event moves both to be popped at once, the
    # priority 9 pod first, the priority 1 pod right after it.
    time.sleep(3)
    delete_pods(core_v1, namespace, ["holder"])
    assert node_of(core_v1, namespace, "high", timeout=60) == node
    time.sleep(2)
    low = get_object(core_v1.read_namespaced_pod, "low", namespace)
    assert not (low.get("spec") or {}).get("nodeName"), f"run {run}: low took the card"


def test_prometheus_stopped_mid_run_places_by_bookings_with_a_status_line_and_no_error(
    cluster: DevCluster, core_v1: Any, namespace: str, pool: NodePool,
    dcgm: FakeDcgmExporter, prometheus: PrometheusServer
) -> None:
    node = f"{namespace}-n"
    dcgm.set(CardFigures(node, 0, used_mib=70 * GIB, total_mib=80 * GIB))
    selector = pool([uniform(node, 1, A100, 80 * GIB)])
    wait_measured(cluster, node, 70 * GIB)
    assert status(cluster)["measured"]["fresh"] is True
    prometheus.stop()
    try:
        doc = wait_for("the allocator to say its figures are stale",
                       lambda: (lambda d: d if not d["measured"]["fresh"] else None)(
                           status(cluster)), timeout=30)
        assert "placing by bookings alone" in doc["measured"]["note"]
        wait_measured(cluster, node, 0)  # the figures are off: bookings alone
        core_v1.create_namespaced_pod(namespace, share_pod("after-stop", selector, 20 * GIB))
        assert node_of(core_v1, namespace, "after-stop") == node  # as without metrics
        log = Path(cluster.control_plane.log_dir / "allocator.log").read_text()
        assert "Traceback" not in log
    finally:
        prometheus.start()
    wait_for("fresh figures again", lambda: status(cluster)["measured"]["fresh"], timeout=60)
