"""The node the preemption unit tests start from: two cards, each shared by two priority-1
half-card pods the allocator bound, over the in-memory API."""

from __future__ import annotations

from typing import Any

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


def full_node(preemption: bool = True) -> tuple[FakeKube, Flask, Runtime]:
    """n1: two cards, each shared by two priority-1 half-card pods (a, b, c, d) bound by the
    allocator."""
    fake = FakeKube()
    fake.add_node(make_node("n1", count=2))
    app, rt = make_app(fake, core=AllocatorConfig(preemption=preemption))
    for name in ("a", "b", "c", "d"):
        fake.add_pod(priority_pod(name, HALF, 1))
        rt.allocator.bind("default", name, f"u-{name}", "n1")
        rt.state.apply_pod(fake.get_pod("default", name))
    return fake, app, rt
