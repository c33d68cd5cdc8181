"""HAMi's webhook rules and the task priority against the real API server (dev cluster,
``hami`` agent profile; the cluster of test_hami, kept for the modules that follow it):

- a GPU pod with a privileged container is refused at creation naming the container, as
  HAMi v2.10.0's webhook denies it (``pkg/scheduler/webhook.go:99-102``);
- a pod asking ``nvidia.com/priority`` that the webhook never saw (kube-system is not sent to
  it) is scheduled by kube-scheduler with the extender, because every shipped scheduler
  configuration manages that resource as HAMi's chart does, and its bind warns on the pod
  that HAMi-core's ``CUDA_TASK_PRIORITY`` is missing (docs/hami.md)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from test_hami import (  # noqa: F401  (fixtures)
    MIB,
    _gpu,
    _pod,
    _serve_allocates,
    api,
    cluster,
    core_v1,
    namespace,
)

from allocator.hami.task_priority import TASK_PRIORITY_UNSET
from allocator.kube.client import KubeClient
from devcluster.cluster import DevCluster
from devcluster.hami_node import HamiNode, fake_devices
from devcluster.nodes import delete_nodes, uniform
from devcluster.workloads import container, list_objects, make_pod, wait_for

pytestmark = pytest.mark.e2e

UNSEEN = "kube-system"  # the webhook's namespaceSelector leaves it out (manifests/base)


def test_a_gpu_pod_with_a_privileged_container_is_refused_at_creation_naming_it(
        core_v1: Any, namespace: str) -> None:  # noqa: F811
    tool = container("tool")
    tool["securityContext"] = {"privileged": True}
    pod = make_pod("priv", [container("main", _gpu(core=20, mem=4096)), tool])
    with pytest.raises(ApiException) as refused:
        core_v1.create_namespaced_pod(namespace, pod)
    body = str(refused.value.body)
    assert "container 'tool' is privileged" in body and "HAMi's webhook refuses" in body
    assert list_objects(core_v1.list_namespaced_pod, namespace) == []


def test_a_task_priority_pod_the_webhook_never_saw_runs_and_is_warned_about(
        cluster: DevCluster, core_v1: Any, namespace: str,  # noqa: F811
        api: KubeClient) -> None:  # noqa: F811
    name = f"{namespace}-prio"
    cluster.add_nodes([uniform(name, 2, "H100", MIB, labels={"hami-prio": namespace})])
    node = HamiNode(api, name, fake_devices(name, 2, memory_mib=MIB))
    node.register("2026-11-29T07:00:00Z")
    stop = threading.Event()
    plugin = threading.Thread(target=_serve_allocates, args=(node, stop), daemon=True)
    plugin.start()
    pod_name = f"{namespace}-prio"
    # kube-scheduler's fit skips a zero request: the side container's 1 (HAMi-core's default,
    # so not warned about) is what no node advertises.
    pod = make_pod(pod_name, [container("main", {**_gpu(core=20, mem=4096),
                                                 "nvidia.com/priority": "0"}),
                              container("side", {"nvidia.com/priority": "1"})],
                   node_selector={"hami-prio": namespace})
    core_v1.create_namespaced_pod(UNSEEN, pod)
    try:
        wait_for("the unseen priority pod Running", lambda: _pod(
            core_v1, UNSEEN, pod_name)["status"].get("phase") == "Running", timeout=120)
        running = _pod(core_v1, UNSEEN, pod_name)
        main, side = running["spec"]["containers"]
        assert main["resources"]["limits"]["nvidia.com/priority"] == "0"  # never mutated
        assert side["resources"]["requests"]["nvidia.com/priority"] == "1"
        assert "CUDA_TASK_PRIORITY" not in {e["name"] for e in main.get("env") or []}
        assert running["spec"]["nodeName"] == name

        def warning() -> dict[str, Any] | None:
            events = list_objects(core_v1.list_namespaced_event, UNSEEN,
                                  field_selector=f"involvedObject.name={pod_name}")
            return next((e for e in events if e.get("reason") == TASK_PRIORITY_UNSET), None)

        event = wait_for("the TaskPriorityUnset warning", warning, timeout=30)
        assert event["type"] == "Warning"
        assert "'main' (0)" in event["message"] and "'side'" not in event["message"]
        assert "default priority (1, low)" in event["message"]
    finally:
        stop.set()
        plugin.join(5)
        core_v1.delete_namespaced_pod(pod_name, UNSEEN, grace_period_seconds=0)
        delete_nodes(core_v1, [name])
