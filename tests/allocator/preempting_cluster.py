"""The node the preemption unit tests start from: two cards, each shared by two priority-1
half-card pods the allocator bound, over the in-memory API."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from alloc_harness import make_app
from builders import make_gpu_pod, make_node, request, share, whole
from fake_kube import FakeKube
from flask import Flask

from allocator.service.app import Runtime
from allocator.verbs.config import AllocatorConfig

HALF = request(share(core=50, mem=8000))
WHOLE = request(whole())


def priority_pod(name: str, req: Any, priority: int, **spec: Any) -> dict[str, Any]:
    """A GPU pod asking ``req``, with ``spec.priority`` (as the Priority admission plugin
    fills it in) and any other spec fields."""
    pod = make_gpu_pod(name, req, uid=f"u-{name}")
    pod["spec"].update(priority=priority, **spec)
    return pod


#: The four priority-1 pods of :func:`full_node`'s default node.
FOUR_LOW: Final = (("a", 1), ("b", 1), ("c", 1), ("d", 1))


def full_node(preemption: bool = True, pods: Sequence[tuple[str, int]] = FOUR_LOW,
              req: Any = HALF) -> tuple[FakeKube, Flask, Runtime]:
    """n1: two cards filled by ``pods`` ((name, priority) each asking ``req``, of the class
    ``p<priority>``) bound by the allocator; by default each card shared by two priority-1
    half-card pods (a, b, c, d)."""
    fake = FakeKube()
    fake.add_node(make_node("n1", count=2))
    app, rt = make_app(fake, core=AllocatorConfig(preemption=preemption))
    for name, priority in pods:
        fake.add_pod(priority_pod(name, req, priority, priorityClassName=f"p{priority}"))
        rt.allocator.bind("default", name, f"u-{name}", "n1")
        rt.state.apply_pod(fake.get_pod("default", name))
    return fake, app, rt
