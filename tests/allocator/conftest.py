"""Fixtures shared by the allocator's unit tests."""

from __future__ import annotations

import pytest


@pytest.fixture(params=[False, True], ids=["gpu-pods", "bound-pods"])
def bound_pods(request: pytest.FixtureRequest) -> bool:
    """Which pod selection a watch test runs on; both are shipped
    (:func:`allocator.picture.watch.reflectors`: GPU pods by label, or every bound pod when node
    CPU and memory are on)."""
    return bool(request.param)
