"""``bench/allocator_inprocess.py --bodies``: the filter verb timed on request bodies as the
service gets them, every node's name in a new order per call."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from builders import NullApi

from allocator.service import extender
from allocator.verbs.core import Allocator, AllocatorConfig, assemble
from bench import allocator_inprocess as inprocess


def setup(nodes: int) -> tuple[Allocator, dict[str, Any], list[str]]:
    state = inprocess.build_state(nodes, random.Random(1))
    allocator = assemble(state, api=NullApi(),
                          config=AllocatorConfig(default_policy="fgd-cpu"))
    pod = inprocess.pod_obj(inprocess.MIX[0], "bench-pod")
    return allocator, pod, state.node_names()


def test_each_call_gets_every_name_in_a_new_order(monkeypatch: pytest.MonkeyPatch) -> None:
    allocator, pod, names = setup(30)
    seen: list[list[str]] = []
    real = extender.filter_reply

    def recording(alloc: Allocator, body: bytes) -> Any:
        seen.append(json.loads(body)["NodeNames"])
        return real(alloc, body)

    monkeypatch.setattr(extender, "filter_reply", recording)
    touched: list[int] = []
    samples = inprocess.measure_bodies(allocator, pod, names, 4, lambda: touched.append(1),
                                       random.Random(2))
    assert len(samples) == 4 and all(s > 0 for s in samples)
    assert len(seen) == 5  # one untimed call first, then the timed ones
    assert all(sorted(order) == sorted(names) for order in seen)
    assert len({tuple(order) for order in seen}) == 5
    assert len(touched) == 5  # one node changed before each call


def test_a_filter_error_stops_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    allocator, pod, names = setup(5)
    monkeypatch.setattr(extender, "filter_reply",
                        lambda _alloc, _body: {"Error": "not synced"})
    with pytest.raises(SystemExit, match="not synced"):
        inprocess.measure_bodies(allocator, pod, names, 2, lambda: None, random.Random(3))
