"""Tessera's pod keys are the allocator's alone: the shipped ValidatingAdmissionPolicy
(manifests/base/pod-keys-policy.yaml) on the real API server, against a normal user.

The user ``alice`` may create, update and delete pods in her namespace only (the pod rules of
the built-in ``edit`` role), as any developer. The dev cluster runs the shipped webhook, so
what the policy sees on CREATE is the mutated pod, with alice as ``request.userInfo``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from devcluster.cluster import DevCluster
from devcluster.workloads import container, make_pod, wait_for
from tessera.vocabulary import (
    Allocation,
    ContainerAllocation,
    decode_request,
    encode_allocation,
)

pytestmark = pytest.mark.e2e

USER = "alice"


@pytest.fixture
def alice(cluster: DevCluster, namespace: str) -> Iterator[Any]:
    """CoreV1Api as alice, with ``edit`` in ``namespace`` (and nothing else)."""
    from kubernetes import client, config

    rbac: Any = client.RbacAuthorizationV1Api(cluster.api_client)
    # What the built-in "edit" role grants on pods (its rules are aggregated by
    # kube-controller-manager, which the dev cluster does not run).
    rbac.create_namespaced_role(namespace, {
        "metadata": {"name": "pod-editor"},
        "rules": [{"apiGroups": [""], "resources": ["pods"],
                   "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]}],
    })
    rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": "alice-edit"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                    "name": "pod-editor"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}],
    })
    path = cluster.control_plane.write_kubeconfig(f"user-{namespace}", USER)
    api = config.new_client_from_config(config_file=str(path))  # type: ignore[no-untyped-call]
    yield client.CoreV1Api(api)
    api.close()


def forged_record(cluster: DevCluster, node: str) -> dict[str, str]:
    allocation = Allocation(node=node, containers=(
        ContainerAllocation(name="main", card_indices=(0,)),))
    return {cluster.vocabulary.allocation_annotation: encode_allocation(allocation),
            "elasticgpu.io/container-main": "0", "elasticgpu.io/assumed": "true"}


def refused(call: Any, *args: Any) -> str:
    from kubernetes.client.exceptions import ApiException

    with pytest.raises(ApiException) as caught:
        call(*args)
    assert caught.value.status in (403, 422), caught.value.body
    message: str = json.loads(caught.value.body)["message"]
    assert "tessera-pod-keys" in message
    return message


def gpu_pod(name: str) -> dict[str, Any]:
    return make_pod(name, [container("main", limits={"elasticgpu.io/gpu-core": "50"})])


def test_a_user_cannot_create_a_pod_with_a_forged_allocation_and_node(
    cluster: DevCluster, alice: Any, namespace: str,
) -> None:
    pod = make_pod("forged", [container("main")])
    pod["metadata"]["annotations"] = forged_record(cluster, "gpu-node-1")
    pod["spec"]["nodeName"] = "gpu-node-1"
    assert "written by Tessera's allocator at bind only" in refused(
        alice.create_namespaced_pod, namespace, pod)


def test_a_user_cannot_mark_a_pod_without_gpu_as_a_gpu_pod(
    cluster: DevCluster, alice: Any, namespace: str,
) -> None:
    v = cluster.vocabulary
    pod = make_pod("fake-gpu", [container("main")])
    pod["metadata"]["annotations"] = {v.request_annotation: '{"containers":[]}'}
    pod["metadata"]["labels"] = {v.gpu_pod_label: "true"}
    assert "set by Tessera's webhook on pods that request GPU" in refused(
        alice.create_namespaced_pod, namespace, pod)


def test_the_webhooks_keys_pass_and_replace_what_the_user_wrote(
    cluster: DevCluster, alice: Any, namespace: str,
) -> None:
    v = cluster.vocabulary
    pod = gpu_pod("honest")
    pod["metadata"]["annotations"] = {v.request_annotation: "made up"}  # replaced by the webhook
    created = alice.create_namespaced_pod(namespace, pod)
    meta = created.metadata
    assert decode_request(meta.annotations[v.request_annotation]).containers[0].core_percent == 50
    assert meta.labels[v.gpu_pod_label] == "true"


@pytest.mark.parametrize("change", ["add-record", "edit-request", "drop-label", "drop-request"])
def test_a_user_cannot_change_tesseras_keys_on_an_existing_pod(
    cluster: DevCluster, alice: Any, namespace: str, change: str,
) -> None:
    v = cluster.vocabulary
    name = f"p-{change}"
    alice.create_namespaced_pod(namespace, gpu_pod(name))
    patch: dict[str, Any] = {
        "add-record": {"metadata": {"annotations": forged_record(cluster, "n1")}},
        "edit-request": {"metadata": {"annotations": {v.request_annotation: "{}"}}},
        "drop-label": {"metadata": {"labels": {v.gpu_pod_label: None}}},
        "drop-request": {"metadata": {"annotations": {v.request_annotation: None}}},
    }[change]
    refused(alice.patch_namespaced_pod, name, namespace, patch)
    # Anything else about the pod stays hers to change.
    alice.patch_namespaced_pod(name, namespace, {"metadata": {"labels": {"team": "a"}}})


def test_the_allocators_bind_still_writes_the_record(
    cluster: DevCluster, core_v1: Any, namespace: str, pool: Any,
) -> None:
    from devcluster.nodes import uniform

    selector = pool([uniform(f"{namespace}-n1", 2, "T4", 16384)])
    pod = gpu_pod("bound")
    pod["spec"]["nodeSelector"] = selector
    core_v1.create_namespaced_pod(namespace, pod)

    def recorded() -> Any:
        p = core_v1.read_namespaced_pod("bound", namespace)
        annotations = p.metadata.annotations or {}
        return p if p.spec.node_name and \
            cluster.vocabulary.allocation_annotation in annotations else None

    bound = wait_for("bound pod with its allocation record", recorded, 60)
    assert bound.metadata.annotations["elasticgpu.io/assumed"] == "true"
    assert bound.metadata.annotations["elasticgpu.io/container-main"] in ("0", "1")
    # elastic-gpu-agent reads annotations only: the bind wrote no agent label, just the
    # Binding (the webhook's GPU-pod label was there from admission).
    labels = bound.metadata.labels or {}
    assert "elasticgpu.io/assumed" not in labels
    assert labels[cluster.vocabulary.gpu_pod_label] == "true"
