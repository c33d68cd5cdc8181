"""Node CPU and memory on the real control plane: the allocator's watch of every bound pod
(a field selector the real API server must accept, and a pod that goes arriving as DELETED)
and the prioritize-cpu-only verb over the allocator's mutual TLS."""

from __future__ import annotations

import json
import ssl
import urllib.request
from typing import Any

import pytest

from devcluster.cluster import DevCluster
from devcluster.nodes import uniform
from devcluster.workloads import container, make_pod, wait_for

pytestmark = pytest.mark.e2e

NodePool = Any


def _free_cpu(cluster: DevCluster, node: str) -> int | None:
    for entry in _call(cluster, "/status")["nodes"]:
        if entry["name"] == node:
            value: int | None = entry["cpuFreeMilli"]
            return value
    return None


def _call(cluster: DevCluster, path: str, doc: dict[str, Any] | None = None) -> Any:
    """GET (or POST ``doc`` to) an allocator endpoint over its mutual TLS, as the admin."""
    cp = cluster.control_plane
    context = ssl.create_default_context(cafile=str(cp.ca_file))
    context.load_cert_chain(str(cp.pki_dir / "admin.crt"), str(cp.pki_dir / "admin.key"))
    request = urllib.request.Request(
        f"https://127.0.0.1:{cluster.services.allocator_port}{path}",
        data=None if doc is None else json.dumps(doc).encode(),
        headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10, context=context) as response:
        return json.loads(response.read())


def test_a_cpu_pod_bound_to_a_node_counts_until_it_is_deleted(
        cluster: DevCluster, core_v1: Any, namespace: str, pool: NodePool) -> None:
    node = f"{namespace}-cpu"
    pool([uniform(node, 1, "Tesla-T4", 15360)])  # 64 cores allocatable
    wait_for("the allocator to see the node's CPU",
             lambda: _free_cpu(cluster, node) == 64000, timeout=30)
    pod = make_pod("cpu-only", [container("main", requests={"cpu": "3", "memory": "1Gi"})])
    pod["spec"]["nodeName"] = node  # bound at creation: no scheduler involved
    core_v1.create_namespaced_pod(namespace, pod)
    wait_for("the bound pod's CPU to count", lambda: _free_cpu(cluster, node) == 61000,
             timeout=30)

    reply = _call(cluster, "/scheduler/prioritize-cpu-only",
                  {"Pod": pod, "Nodes": None, "NodeNames": [node, "ghost"]})
    scores = {entry["Host"]: entry["Score"] for entry in reply}
    assert set(scores) <= {node, "ghost"}  # nodes at the lowest score may be left out
    assert all(0 <= score <= 10 for score in scores.values())
    assert scores.get("ghost", 0) <= scores.get(node, 0)  # an unknown node never leads

    core_v1.delete_namespaced_pod("cpu-only", namespace, grace_period_seconds=0)
    wait_for("the deleted pod's CPU to be released",
             lambda: _free_cpu(cluster, node) == 64000, timeout=30)
