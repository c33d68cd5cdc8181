"""The control plane on its own: the real scheduler places a pod on a fake node."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from devcluster.nodes import GpuNodeSpec
from devcluster.workloads import container, get_object, make_pod, wait_for

pytestmark = pytest.mark.e2e

NodePool = Callable[[list[GpuNodeSpec]], dict[str, str]]

WIDGET = "example.com/widget"


def test_a_pod_with_a_plain_extended_resource_lands_on_the_only_node_that_has_it(
    core_v1: Any, namespace: str, pool: NodePool
) -> None:
    selector = pool(
        [
            GpuNodeSpec(f"{namespace}-plain", ()),
            GpuNodeSpec(f"{namespace}-widgets", (), extra_resources={WIDGET: "2"}),
        ]
    )
    pod = make_pod("widget", [container(limits={WIDGET: "1"})], node_selector=selector)
    core_v1.create_namespaced_pod(namespace, pod)

    def node_name() -> str | None:
        obj = get_object(core_v1.read_namespaced_pod, "widget", namespace)
        name: str | None = obj["spec"].get("nodeName")
        return name

    assert wait_for("the pod to be bound", node_name, timeout=60) == f"{namespace}-widgets"
