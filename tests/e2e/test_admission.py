"""Admission through the real API server: a refusal reaches a kubectl user verbatim."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster.cluster import DevCluster
from devcluster.workloads import container, list_objects, make_pod

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        (
            {"elasticgpu.io/gpu-core": "150"},
            ["container 'main'", "elasticgpu.io/gpu-core=150 is invalid", "whole cards"],
        ),
        ({"elasticgpu.io/gpu-percent": "101"}, ["container 'main'", "gpu-percent"]),
    ],
)
def test_a_refused_gpu_request_comes_back_to_kubectl_with_our_message(
    cluster: DevCluster, core_v1: Any, namespace: str, tmp_path: Path,
    limits: dict[str, str], expected: list[str],
) -> None:
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(yaml.safe_dump(make_pod("refused", [container(limits=limits)])))
    result = subprocess.run(
        [str(cluster.binaries.kubectl), f"--kubeconfig={cluster.kubeconfig}",
         f"--namespace={namespace}", "create", "-f", str(manifest)],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert result.returncode != 0, result.stdout
    # kube-apiserver's wording for a webhook refusal (k8s.io/apiserver
    # pkg/admission/plugin/webhook/errors/statuserror.go ToStatusErr), then our message.
    assert 'admission webhook "pods.tessera.elasticgpu.io" denied the request' in result.stderr
    for fragment in expected:
        assert fragment in result.stderr
    assert list_objects(core_v1.list_namespaced_pod, namespace) == []
