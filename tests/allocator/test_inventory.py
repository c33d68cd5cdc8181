"""A node's cards from its Node object: annotation, GFD labels, allocatable baseline."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from builders import VOCAB, make_node

from allocator.picture.inventory import read_inventory
from allocator.picture.state import ClusterState
from allocator.ranking.fit import Card


@pytest.mark.parametrize(
    ("node", "source", "expected"),
    [
        (make_node(count=2, memory_mib=16384), "allocatable",
         (Card(0, "", 16384), Card(1, "", 16384))),
        (make_node(count=2, memory_mib=16384, model="T4"), "allocatable",
         (Card(0, "T4", 16384), Card(1, "T4", 16384))),
        (make_node(count=8, gfd=("NVIDIA-A100-SXM4-40GB", 2, 40960)), "gfd",
         (Card(0, "NVIDIA-A100-SXM4-40GB", 40960), Card(1, "NVIDIA-A100-SXM4-40GB", 40960))),
        (make_node(count=2, cards_annotation=[
            {"index": 1, "model": "A100", "memoryMiB": 81920},
            {"index": 0, "model": "T4", "memoryMiB": 15360}]), "annotation",
         (Card(0, "T4", 15360), Card(1, "A100", 81920))),
    ],
)
def test_inventory_prefers_the_most_precise_description(
    node: dict[str, Any], source: str, expected: tuple[Card, ...]
) -> None:
    inv = read_inventory(node, VOCAB)
    assert inv.source == source
    assert inv.cards == expected
    assert inv.problem == ""


@pytest.mark.parametrize(
    ("annotation", "problem"),
    [
        ("not json", "ignored"),
        ('[{"index": 0, "memoryMiB": 0}]', "memoryMiB"),
        ('[{"index": 0, "memoryMiB": 10}, {"index": 0, "memoryMiB": 10}]', "repeat"),
        ("[]", "non-empty"),
    ],
)
def test_a_bad_cards_annotation_falls_back_and_says_why(annotation: str, problem: str) -> None:
    node = make_node(count=2, memory_mib=1000)
    node["metadata"]["annotations"][VOCAB.node_cards_annotation] = annotation
    inv = read_inventory(node, VOCAB)
    assert inv.source == "allocatable"
    assert len(inv.cards) == 2
    assert problem in inv.problem


@pytest.mark.parametrize("allocatable", [{}, {"cpu": "8"}, {VOCAB.core_resource: "0"}])
def test_a_node_without_gpu_resources_has_no_cards_and_no_problem(
    allocatable: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    """Every CPU node of a real cluster, and a fake node before its status patch."""
    node = make_node(count=0)
    node["status"]["allocatable"] = allocatable
    inv = read_inventory(node, VOCAB)
    assert (inv.cards, inv.source, inv.problem) == ((), "none", "")
    caplog.set_level(logging.DEBUG)
    ClusterState(VOCAB).apply_node(node)
    assert [r.levelno for r in caplog.records] == [logging.DEBUG]


@pytest.mark.parametrize(
    ("core", "problem"),
    [("lots", "elasticgpu.io/gpu-core 'lots' is not an integer"),
     ("50", "elasticgpu.io/gpu-core 50 is less than one card (100)")],
)
def test_a_malformed_gpu_inventory_is_a_problem_and_a_warning(
    core: str, problem: str, caplog: pytest.LogCaptureFixture
) -> None:
    node = make_node(count=0)
    node["status"]["allocatable"][VOCAB.core_resource] = core
    inv = read_inventory(node, VOCAB)
    assert inv.cards == () and inv.problem == problem
    ClusterState(VOCAB).apply_node(node)
    assert [r.levelno for r in caplog.records] == [logging.WARNING]


def test_uneven_memory_is_split_evenly_rounding_down() -> None:
    node = make_node(count=3)
    node["status"]["allocatable"][VOCAB.memory_resource] = "1000"
    assert [c.memory_mib for c in read_inventory(node, VOCAB).cards] == [333, 333, 333]
