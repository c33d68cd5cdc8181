"""A cluster in a box: controllers turn workloads into pods, KWOK runs and ends them, namespaces
finalise, and Tessera's cards come back the way they do on a real cluster."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest

from devcluster import kwok
from devcluster.binaries import repo_root
from devcluster.checks import admission_problems
from devcluster.cluster import DevCluster
from devcluster.nodes import GpuNodeSpec, uniform
from devcluster.workloads import (
    container,
    ensure_namespace,
    get_object,
    list_objects,
    make_pod,
    wait_for,
)
from kubectl_tessera.report import card_usage, overcommitments

pytestmark = pytest.mark.e2e

NodePool = Callable[[list[GpuNodeSpec]], dict[str, str]]
DEPLOYMENTS = repo_root() / "examples" / "deployments"


def kubectl(cluster: DevCluster, *args: str) -> str:
    result = subprocess.run(
        [str(cluster.binaries.kubectl), "--kubeconfig", str(cluster.kubeconfig), *args],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def running(core_v1: Any, namespace: str, want: int) -> list[dict[str, Any]] | None:
    pods = [p for p in list_objects(core_v1.list_namespaced_pod, namespace)
            if p["spec"].get("nodeName") and p["status"].get("phase") == "Running"]
    return pods if len(pods) >= want else None


def test_the_seed_deployments_applied_verbatim_run_on_gpu_cards_within_60_seconds(
    cluster: DevCluster, core_v1: Any, namespace: str, pool: NodePool
) -> None:
    pool([uniform(f"{namespace}-a10", 4, "NVIDIA-A10", 24576)])
    for manifest in sorted(DEPLOYMENTS.glob("*.yaml")):
        kubectl(cluster, "apply", "-n", namespace, "-f", str(manifest))

    # The 60 s is the bound of the wait, not a timed assertion on a shared machine.
    pods = wait_for("the Deployments' 4 pods to be Running",
                    lambda: running(core_v1, namespace, 4), timeout=60)
    assert len(pods) == 4
    for pod in pods:
        assert pod["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet"
        assert admission_problems(pod, cluster.vocabulary) == []
        assert cluster.vocabulary.allocation_annotation in pod["metadata"]["annotations"]
    usage = card_usage(list_objects(core_v1.list_node), pods, cluster.vocabulary)
    assert overcommitments(usage) == []
    held = sum(len(u.holdings) for cards in usage.values() for u in cards)
    assert held == 4


def job(name: str, selector: dict[str, str], completions: int, run_for: str) -> dict[str, Any]:
    pod = make_pod(name, [container(limits={"elasticgpu.io/gpu-core": "100"})],
                   annotations={kwok.RUN_FOR_ANNOTATION: run_for}, node_selector=selector)
    pod["spec"]["restartPolicy"] = "Never"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "completions": completions,
            "parallelism": completions,
            "backoffLimit": 0,
            "template": {"metadata": {"annotations": pod["metadata"]["annotations"]},
                         "spec": pod["spec"]},
        },
    }


def test_a_jobs_pods_complete_and_give_their_card_to_the_next_one(
    cluster: DevCluster, core_v1: Any, namespace: str, pool: NodePool
) -> None:
    """Three pods each wanting the node's only card: they can only run one after another, so
    the Job completes only if every completion frees the card for the next pod."""
    from kubernetes import client

    selector = pool([uniform(f"{namespace}-t4", 1, "Tesla-T4", 15360)])
    batch = client.BatchV1Api(cluster.api_client)
    batch.create_namespaced_job(namespace, job("one-card-at-a-time", selector, 3, "2s"))

    def succeeded() -> int | None:
        status = get_object(batch.read_namespaced_job_status, "one-card-at-a-time",
                            namespace)["status"]
        return status.get("succeeded") if status.get("succeeded", 0) >= 3 else None

    assert wait_for("the Job's 3 completions", succeeded, timeout=90) == 3
    pods = list_objects(core_v1.list_namespaced_pod, namespace)
    assert len(pods) == 3
    assert {p["status"]["phase"] for p in pods} == {"Succeeded"}
    assert {p["spec"]["nodeName"] for p in pods} == {f"{namespace}-t4"}


def test_a_pod_whose_workload_ends_frees_its_cards_for_a_waiting_pod(
    cluster: DevCluster, core_v1: Any, namespace: str, pool: NodePool
) -> None:
    selector = pool([uniform(f"{namespace}-t4", 1, "Tesla-T4", 15360)])
    whole = [container(limits={"elasticgpu.io/gpu-core": "100"})]
    core_v1.create_namespaced_pod(namespace, make_pod("first", whole, node_selector=selector))
    wait_for("first to run", lambda: running(core_v1, namespace, 1), timeout=60)
    core_v1.create_namespaced_pod(namespace, make_pod("second", whole, node_selector=selector))

    def phase(name: str) -> str:
        value: str = get_object(core_v1.read_namespaced_pod, name, namespace)["status"]["phase"]
        return value

    time.sleep(3)  # the scheduler has tried "second" by now (and must not have placed it)
    assert phase("first") == "Running"
    assert not get_object(core_v1.read_namespaced_pod, "second", namespace)["spec"].get(
        "nodeName")
    # Its container exits: KWOK (the kubelet's stand-in) reports the pod Succeeded.
    core_v1.patch_namespaced_pod(
        "first", namespace, {"metadata": {"annotations": {kwok.RUN_FOR_ANNOTATION: "0s"}}})
    wait_for("first to succeed", lambda: phase("first") == "Succeeded", timeout=30)
    wait_for("second to run on the freed card",
             lambda: phase("second") == "Running", timeout=60)


def test_deleting_a_namespace_deletes_its_workloads_and_releases_their_cards(
    cluster: DevCluster, core_v1: Any, pool: NodePool, namespace: str
) -> None:
    selector = pool([uniform(f"{namespace}-a10", 2, "NVIDIA-A10", 24576)])
    doomed = f"{namespace}-doomed"[:63]
    ensure_namespace(core_v1, doomed)
    kubectl(cluster, "apply", "-n", doomed, "-f", str(DEPLOYMENTS / "cuda-10c.yaml"))
    wait_for("3 pods to run", lambda: running(core_v1, doomed, 3), timeout=60)

    kubectl(cluster, "delete", "namespace", doomed, "--wait=false")

    def gone() -> bool:
        names = {n["metadata"]["name"] for n in list_objects(core_v1.list_namespace)}
        return doomed not in names

    wait_for("the namespace to be finalised", gone, timeout=90)
    assert list_objects(core_v1.list_namespaced_pod, doomed) == []
    # The allocator saw every pod go: a pod wanting both cards whole gets them.
    both = make_pod("both-cards", [container(limits={"elasticgpu.io/gpu-core": "200"})],
                    node_selector=selector)
    core_v1.create_namespaced_pod(namespace, both)
    wait_for("a pod to get both freed cards", lambda: running(core_v1, namespace, 1),
             timeout=60)


def test_fake_nodes_are_ready_and_renew_their_lease_like_kubelets(
    cluster: DevCluster, core_v1: Any, pool: NodePool, namespace: str
) -> None:
    """A kubelet with node leases renews its Lease every quarter of 40 s and posts an
    unchanged status every 5 minutes; the node lifecycle controller counts the Lease as the
    heartbeat (devcluster/kwok.py)."""
    from kubernetes import client

    pool([uniform(f"{namespace}-n", 1, "Tesla-T4", 15360)])
    name = f"{namespace}-n"
    leases = client.CoordinationV1Api(core_v1.api_client)

    def ready() -> dict[str, Any] | None:
        node = get_object(core_v1.read_node, name)
        conditions = {c["type"]: c for c in node["status"].get("conditions") or []}
        return node if (conditions.get("Ready") or {}).get("status") == "True" else None

    node = wait_for("the node to be Ready", ready, timeout=60)
    assert node["status"]["allocatable"]["elasticgpu.io/gpu-core"] == "100"
    assert not node["spec"].get("taints")

    def renewed_at() -> str | None:
        try:
            lease = get_object(leases.read_namespaced_lease, name, "kube-node-lease")
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise
        assert lease["spec"]["leaseDurationSeconds"] == kwok.LEASE_SECONDS
        value: str | None = lease["spec"].get("renewTime")
        return value

    first = wait_for("the node's Lease", renewed_at, timeout=60)

    def later() -> str | None:
        now = renewed_at()
        return now if now not in (None, first) else None

    second = wait_for("a renewal of the Lease", later, timeout=60)
    # A quarter of the lease's duration (plus jitter and a loaded machine), well inside the
    # node lifecycle controller's 50 s grace period.
    gap = datetime.fromisoformat(second) - datetime.fromisoformat(first)
    assert gap.total_seconds() < kwok.LEASE_SECONDS / 2, gap
    lease = get_object(leases.read_namespaced_lease, name, "kube-node-lease")
    assert [o["name"] for o in lease["metadata"].get("ownerReferences") or []] == [name]
    assert not get_object(core_v1.read_node, name)["spec"].get("taints")


def test_a_deployment_created_while_the_webhook_is_down_gets_its_pods_once_it_is_back(
    cluster: DevCluster, core_v1: Any, namespace: str, pool: NodePool
) -> None:
    """docs/deploy.md, "When the webhook is down": GPU pods are refused meanwhile, and the
    ReplicaSet controller retries until the webhook answers again; nothing runs un-normalised."""
    pool([uniform(f"{namespace}-a10", 1, "NVIDIA-A10", 24576)])
    cluster.services.stop_webhook()
    try:
        kubectl(cluster, "apply", "-n", namespace, "-f", str(DEPLOYMENTS / "cuda-gpu-test.yaml"))

        def refused() -> str | None:
            events = list_objects(core_v1.list_namespaced_event, namespace)
            return next((e["message"] for e in events if e.get("reason") == "FailedCreate"),
                        None)

        message = wait_for("the ReplicaSet's FailedCreate event", refused, timeout=60)
        assert "pods.tessera" in message and "webhook" in message, message
        assert list_objects(core_v1.list_namespaced_pod, namespace) == []
    finally:
        cluster.services.restart_webhook()
    (pod,) = wait_for("the pod once the webhook is back",
                      lambda: running(core_v1, namespace, 1), timeout=90)
    assert admission_problems(pod, cluster.vocabulary) == []
