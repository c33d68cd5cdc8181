"""Hostile pods and nodes on the real control plane (issue 9, items 1 and 7).

A pod bound to a node, labelled as a GPU pod and carrying an allocation record that cannot be
read ("[[[…", an ``at`` of 400 digits) wedged the allocator: its pod list raised, so after a
restart ``/readyz`` never turned green and every GPU pod stayed Pending. A node annotation of
brackets wedged the node list the same way, and a GPU count of a billion built a billion cards.
Here the allocator is restarted with such objects in the cluster: it must become ready, show
them in ``/status`` and its metrics, and still schedule a normal GPU pod — also after more of
them arrive through its watch.

The forged records are written the way the allocator writes its own (label PATCH, then a
Binding carrying the annotation, as the allocator's own identity): the worst case, a record
that got past any admission policy on who may write Tessera's keys (an older cluster, or one
written before the policy existed). Any user who can create a pod can otherwise create one
with ``spec.nodeName``, the label and the annotation; the webhook never sees it (no GPU key).
"""

from __future__ import annotations

import json
import ssl
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from allocator.kube.client import KubeClient
from devcluster.cluster import DevCluster
from devcluster.nodes import delete_nodes, uniform
from devcluster.workloads import (
    container,
    get_object,
    make_pod,
    wait_for,
)
from tessera.vocabulary import GFD_COUNT_LABEL, GFD_MEMORY_LABEL, GFD_PRODUCT_LABEL

pytestmark = pytest.mark.e2e

NodePool = Any

HOSTILE_RECORDS = {
    "brackets": "[" * 3000,
    "at-digits": '{"v":1,"node":"x","at":' + "9" * 400
                 + ',"containers":[{"name":"main","cards":[0]}]}',
    "at-inf": '{"v":1,"node":"x","at":1e999,"containers":[{"name":"main","cards":[0]}]}',
}


def allocator_get(cluster: DevCluster, path: str) -> str:
    """GET an allocator endpoint over its mutual TLS, as the admin."""
    cp = cluster.control_plane
    context = ssl.create_default_context(cafile=str(cp.ca_file))
    context.load_cert_chain(str(cp.pki_dir / "admin.crt"), str(cp.pki_dir / "admin.key"))
    url = f"https://127.0.0.1:{cluster.services.allocator_port}{path}"
    with urllib.request.urlopen(url, timeout=10, context=context) as response:
        text: str = response.read().decode()
        return text


def status(cluster: DevCluster) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(allocator_get(cluster, "/status"))
    return doc


def forge(core_v1: Any, api: KubeClient, cluster: DevCluster, namespace: str, name: str,
          node: str, record: str) -> str:
    """A pod on ``node`` with the GPU-pod label and ``record`` as its allocation; its uid."""
    vocab = cluster.vocabulary
    pod = make_pod(name)  # no GPU key: the webhook is not called
    pod["spec"]["schedulerName"] = "nobody"  # kube-scheduler leaves it alone
    uid: str = core_v1.create_namespaced_pod(namespace, pod).metadata.uid
    api.patch_pod(namespace, name, {"metadata": {"uid": uid,
                                                 "labels": {vocab.gpu_pod_label: "true"}}})
    api.bind_pod(namespace, name, uid, node, {vocab.allocation_annotation: record})
    return uid


@pytest.fixture
def allocator_api(cluster: DevCluster) -> Iterator[KubeClient]:
    """The allocator's own identity (its shipped RBAC), closed after the test."""
    from kubernetes import client, config

    cfg = client.Configuration()
    config.load_kube_config(
        config_file=str(cluster.control_plane.kubeconfig_path("tessera-allocator")),
        client_configuration=cfg)
    with client.ApiClient(cfg) as api_client:
        yield KubeClient(api_client)


@pytest.fixture
def hostile_nodes(cluster: DevCluster, core_v1: Any, namespace: str) -> Iterator[list[str]]:
    """Nodes outside every test's pool: cards annotation of brackets; a billion GPUs."""
    vocab = cluster.vocabulary
    brackets, huge = f"{namespace}-brackets", f"{namespace}-huge"
    cluster.add_nodes([uniform(brackets, 1, "Tesla-T4", 15360),
                       uniform(huge, 1, "Tesla-T4", 15360)])
    try:
        core_v1.patch_node(brackets, {"metadata": {"annotations": {
            vocab.node_cards_annotation: "[" * 3000}}})
        core_v1.patch_node(huge, {"metadata": {"labels": {
            GFD_PRODUCT_LABEL: "Tesla-T4", GFD_MEMORY_LABEL: "15360",
            GFD_COUNT_LABEL: "1000000000"}}})
        yield [brackets, huge]
    finally:
        delete_nodes(core_v1, [brackets, huge])


def test_hostile_pods_and_nodes_neither_wedge_a_restarted_allocator_nor_its_watch(
    cluster: DevCluster, core_v1: Any, namespace: str, pool: NodePool,
    hostile_nodes: list[str], allocator_api: KubeClient,
) -> None:
    node = f"{namespace}-n"
    selector = pool([uniform(node, 1, "Tesla-T4", 15360)])
    api = allocator_api
    forged = {forge(core_v1, api, cluster, namespace, f"forged-{key}", node, record): key
              for key, record in HOSTILE_RECORDS.items()}

    # Started after them: its first list meets every one (this raised and retried forever).
    cluster.services.restart_allocator()  # waits for /readyz, or fails the test

    doc = status(cluster)
    assert set(forged) <= set(doc["ignoredRecords"])
    problems = {n["name"]: n["problem"] for n in doc["nodes"]}
    brackets, huge = hostile_nodes
    assert "nested too deeply" in problems[brackets]
    assert "1000000000 cards" in problems[huge]
    assert [len(n["cards"]) for n in doc["nodes"] if n["name"] == huge] == [1]  # allocatable
    metrics = allocator_get(cluster, "/metrics")
    gauges = {line.split()[0]: float(line.split()[1]) for line in metrics.splitlines()
              if line.startswith(("tessera_allocator_ignored_pod_records ",
                                  "tessera_allocator_nodes_with_problems "))}
    assert gauges["tessera_allocator_ignored_pod_records"] >= len(forged)
    assert gauges["tessera_allocator_nodes_with_problems"] >= 2

    def bound(name: str) -> dict[str, Any] | None:
        obj = get_object(core_v1.read_namespaced_pod, name, namespace)
        return obj if obj["spec"].get("nodeName") else None

    gpu = {cluster.vocabulary.core_resource: "100"}
    core_v1.create_namespaced_pod(namespace, make_pod(
        "normal", [container(limits=gpu)], node_selector=selector))
    assert wait_for("the normal GPU pod to be bound", lambda: bound("normal"),
                    timeout=60)["spec"]["nodeName"] == node

    # More through the watch, then a change the watch must still deliver: the normal pod
    # goes, and its card is free again in the allocator's picture.
    late = forge(core_v1, api, cluster, namespace, "forged-late", node, "[" * 3000)
    wait_for("the late forged record in /status",
             lambda: late in status(cluster)["ignoredRecords"] or None, timeout=30)
    core_v1.delete_namespaced_pod("normal", namespace, grace_period_seconds=0)

    def card_free() -> bool | None:
        (entry,) = [n for n in status(cluster)["nodes"] if n["name"] == node]
        return entry["coreUsed"] == 0 or None

    wait_for("the normal pod's card to be released by the watch", card_free, timeout=30)
