"""The newer front doors end to end: a pod written for KAI, Volcano, gpu-manager or Koordinator
is created through the real API server, mutated by the webhook, scheduled by kube-scheduler with
our extender and bound with a consistent allocation record; an impossible one comes back to
kubectl with our message. (The cluster's webhook reads every dialect: tests/e2e/conftest.py.)"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster.checks import admission_problems, allocation_problems
from devcluster.cluster import DevCluster
from devcluster.nodes import GpuNodeSpec, uniform
from devcluster.workloads import container, get_object, list_objects, make_pod, wait_for
from kubectl_tessera.report import node_cards
from tessera.quantity import parse_quantity
from tessera.vocabulary import ContainerRequest, decode_request

pytestmark = pytest.mark.e2e

NodePool = Callable[[list[GpuNodeSpec]], dict[str, str]]


def kai_pod(name: str, annotations: dict[str, str]) -> dict[str, Any]:
    """KAI's docs/gpu-sharing/gpu-sharing-non-default-container.yaml, in our pool."""
    return make_pod(name, [container("sidecar"), container("gpu-workload")],
                    annotations=annotations)


@pytest.mark.parametrize(
    ("pod", "expected_limits", "expected"),
    [
        pytest.param(
            kai_pod("kai", {"gpu-fraction": "0.5", "gpu-fraction-container-name": "gpu-workload"}),
            {"gpu-workload": {"elasticgpu.io/gpu-core": "50"}},
            ContainerRequest("gpu-workload", core_percent=50, memory_percent=50),
            id="kai",
        ),
        pytest.param(
            make_pod("volcano", [container(limits={
                "volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-cores": "50",
                "volcano.sh/vgpu-memory": "3000"})]),
            {"main": {"elasticgpu.io/gpu-core": "50", "elasticgpu.io/gpu-memory": "3000"}},
            ContainerRequest("main", core_percent=50, memory_mib=3000),
            id="volcano",
        ),
        pytest.param(
            make_pod("gpu-manager", [container(
                limits={"tencent.com/vcuda-core": "50", "tencent.com/vcuda-memory": "30"},
                requests={"tencent.com/vcuda-core": "50", "tencent.com/vcuda-memory": "30"})]),
            {"main": {"elasticgpu.io/gpu-core": "50", "elasticgpu.io/gpu-memory": "7680"}},
            ContainerRequest("main", core_percent=50, memory_mib=7680),
            id="gpu-manager",
        ),
        pytest.param(
            make_pod("koordinator", [container(requests={
                "koordinator.sh/gpu-core": "60", "koordinator.sh/gpu-memory": "4Gi"})]),
            {"main": {"elasticgpu.io/gpu-core": "60", "elasticgpu.io/gpu-memory": "4096"}},
            ContainerRequest("main", core_percent=60, memory_mib=4096),
            id="koordinator",
        ),
    ],
)
def test_a_pod_in_each_new_dialect_is_mutated_scheduled_and_bound(
    cluster: DevCluster, core_v1: Any, namespace: str, pool: NodePool,
    pod: dict[str, Any], expected_limits: dict[str, dict[str, str]],
    expected: ContainerRequest,
) -> None:
    selector = pool([uniform(f"{namespace}-t4", 2, "Tesla-T4", 15360)])
    pod["spec"]["nodeSelector"] = selector
    name = pod["metadata"]["name"]
    core_v1.create_namespaced_pod(namespace, pod)

    def bound() -> dict[str, Any] | None:
        obj = get_object(core_v1.read_namespaced_pod, name, namespace)
        return obj if obj["spec"].get("nodeName") else None

    obj = wait_for(f"{name} to be bound", bound, timeout=60)
    vocabulary = cluster.vocabulary
    assert admission_problems(obj, vocabulary) == []
    request = decode_request(obj["metadata"]["annotations"][vocabulary.request_annotation])
    assert request.containers == (expected,)
    for ctr in obj["spec"]["containers"]:
        resources = ctr.get("resources") or {}
        wanted = {k: parse_quantity(v).value
                  for k, v in expected_limits.get(ctr["name"], {}).items()}
        # Only canonical keys remain, request == limit; compared as quantities because the
        # API server stores their canonical form ("3000" -> "3k").
        for part in ("limits", "requests"):
            stored = resources.get(part, {})
            assert {k: parse_quantity(v).value for k, v in stored.items()} == wanted
    node = get_object(core_v1.read_node, obj["spec"]["nodeName"])
    assert allocation_problems(obj, node_cards(node, vocabulary), vocabulary) == []


@pytest.mark.parametrize(
    ("pod", "fragments"),
    [
        pytest.param(make_pod("kai", annotations={"gpu-fraction": "1.5"}),
                     ["container 'main'", "gpu-fraction='1.5'"], id="kai"),
        pytest.param(make_pod("volcano", [container(limits={
            "volcano.sh/vgpu-number": "2", "volcano.sh/vgpu-memory": "1000"})]),
            # A share on each of 2 cards (HAMi's meaning), which elastic-gpu-agent cannot run.
            ["container 'main'", "on each of 2 cards", "gives a container's share one card"],
            id="volcano"),
        pytest.param(make_pod("gpu-manager", [container(limits={
            "tencent.com/vcuda-core": "150", "tencent.com/vcuda-memory": "10"})]),
            ["container 'main'", "tencent.com/vcuda-core=150"], id="gpu-manager"),
        pytest.param(make_pod("koordinator", [container(limits={
            "koordinator.sh/gpu-core": "50"})]),
            ["container 'main'", "koordinator.sh/gpu-core", "not a combination"],
            id="koordinator"),
        pytest.param(make_pod("koordinator-shared", [container(limits={
            "koordinator.sh/gpu.shared": "2", "koordinator.sh/gpu-core": "50",
            "koordinator.sh/gpu-memory-ratio": "50"})]),
            # 25% on each of 2 cards (devicehandler_gpu.go:53-96): elastic-gpu-agent cannot.
            ["container 'main'", "on each of 2 cards", "gives a container's share one card"],
            id="koordinator-shared"),
    ],
)
def test_an_impossible_pod_in_each_new_dialect_comes_back_to_kubectl_with_our_message(
    cluster: DevCluster, core_v1: Any, namespace: str, tmp_path: Path,
    pod: dict[str, Any], fragments: list[str],
) -> None:
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(yaml.safe_dump(pod))
    result = subprocess.run(
        [str(cluster.binaries.kubectl), f"--kubeconfig={cluster.kubeconfig}",
         f"--namespace={namespace}", "create", "-f", str(manifest)],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert result.returncode != 0, result.stdout
    assert 'admission webhook "pods.tessera.elasticgpu.io" denied the request' in result.stderr
    for fragment in fragments:
        assert fragment in result.stderr
    assert list_objects(core_v1.list_namespaced_pod, namespace) == []
