"""The allocator's API facts, checked against the real kube-apiserver (as its own identity,
under its shipped RBAC): the Binding carries the allocation record onto the pod atomically
with spec.nodeName, and a gracefully stopped leader releases its Lease."""

from __future__ import annotations

from typing import Any

import pytest

from allocator.kube.client import KubeClient
from allocator.ports import Obj
from devcluster.cluster import DevCluster
from devcluster.nodes import uniform
from devcluster.workloads import container, get_object, make_pod

pytestmark = pytest.mark.e2e

NodePool = Any


def test_a_binding_puts_the_allocation_record_on_the_pod_in_the_same_update_as_its_node(
    cluster: DevCluster, core_v1: Any, namespace: str, pool: NodePool
) -> None:
    vocab = cluster.vocabulary
    selector = pool([uniform(f"{namespace}-n", 1, "Tesla-T4", 15360)])
    node = f"{namespace}-n"
    # A real GPU pod (the webhook labels it): a label alone on a pod that asks for no GPU is
    # refused by the pod keys policy.
    pod = make_pod("direct", [container("main", limits={vocab.core_resource: "100"})],
                   node_selector=selector)
    pod["spec"]["schedulerName"] = "nobody"  # kube-scheduler leaves it to us
    created = core_v1.create_namespaced_pod(namespace, pod)
    uid, rv = created.metadata.uid, created.metadata.resource_version
    api = KubeClient.from_config(str(cluster.control_plane.kubeconfig_path("tessera-allocator")))
    annotations = {vocab.allocation_annotation: '{"test": true}',
                   f"{vocab.domain}/container-main": "0"}

    api.bind_pod(namespace, "direct", uid, node, annotations)

    bound = get_object(core_v1.read_namespaced_pod, "direct", namespace)
    assert bound["spec"]["nodeName"] == node
    for key, value in annotations.items():
        assert bound["metadata"]["annotations"][key] == value
    # One update: the first event after creation already has both.
    events: list[Obj] = []
    for kind, obj in api.watch_pods(vocab.gpu_pod_selector, rv, 2):
        if (obj.get("metadata") or {}).get("uid") == uid:
            events.append(obj)
            assert kind == "MODIFIED"
            break
    assert events, "no watch event for the binding"
    first = events[0]
    assert first["spec"]["nodeName"] == node
    assert first["metadata"]["annotations"][vocab.allocation_annotation] == '{"test": true}'


def test_an_allocator_stopped_gracefully_releases_its_lease(cluster: DevCluster) -> None:
    from kubernetes import client

    services = cluster.services
    leases = client.CoordinationV1Api(cluster.api_client)

    def spec() -> Any:
        return leases.read_namespaced_lease("tessera-allocator",
                                            services.allocator_namespace).spec

    assert spec().holder_identity == "devcluster-allocator"
    try:
        services.allocator.stop()  # SIGTERM to the process group, as the kubelet sends it
        released = spec()
        assert not released.holder_identity
        assert released.lease_duration_seconds == 1
    finally:
        services.restart_allocator()  # later tests need it
    assert spec().holder_identity == "devcluster-allocator"
