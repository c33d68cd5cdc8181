"""A node's cards from its Node object: annotation, GFD labels, allocatable baseline."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from builders import VOCAB, make_node

from allocator.picture.inventory import read_inventory
from allocator.picture.state import ClusterState
from allocator.ranking.fit import Card
from tessera.agent_profiles import AgentProfile, NodeAgent


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


def _node_with(allocatable: dict[str, str], labels: dict[str, str] | None = None
               ) -> dict[str, Any]:
    return {"metadata": {"name": "n", "labels": labels or {}},
            "status": {"allocatable": {"cpu": "8", **allocatable}}}


@pytest.mark.parametrize(
    ("profile", "allocatable", "cards"),
    [
        # elastic-gpu-agent v0.4.1: 100 gpu-core devices a card, one gpu-memory device a MiB.
        (AgentProfile.ELASTIC,
         {"elasticgpu.io/gpu-core": "200", "elasticgpu.io/gpu-memory": "32768"}, (2, 16384)),
        # nano-gpu-agent 0.3: 100 nano-gpu/gpu-percent devices a card, no memory resource.
        (AgentProfile.NANO_GPU, {"nano-gpu/gpu-percent": "400"}, (4, 0)),
        # gpushare-device-plugin: aliyun.com/gpu-count cards, aliyun.com/gpu-mem in GiB.
        (AgentProfile.ALIYUN, {"aliyun.com/gpu-count": "2", "aliyun.com/gpu-mem": "30"},
         (2, 15 * 1024)),
        # volcano-vgpu-device-plugin v1.12.0: 100 vgpu-cores a card, vgpu-memory in MiB,
        # vgpu-number cards x split count (not read).
        (AgentProfile.VOLCANO_VGPU,
         {"volcano.sh/vgpu-number": "20", "volcano.sh/vgpu-cores": "200",
          "volcano.sh/vgpu-memory": "30000"}, (2, 15000)),
    ],
    ids=str,
)
def test_a_nodes_cards_are_read_from_what_its_agent_registers(
    profile: AgentProfile, allocatable: dict[str, str], cards: tuple[int, int],
) -> None:
    inv = read_inventory(_node_with(allocatable), VOCAB, NodeAgent(profile))
    assert inv.source == "allocatable"
    assert (len(inv.cards), inv.cards[0].memory_mib) == cards
    # Another profile's resources are not this agent's cards.
    other = AgentProfile.ELASTIC if profile is not AgentProfile.ELASTIC else AgentProfile.ALIYUN
    assert read_inventory(_node_with(allocatable), VOCAB, NodeAgent(other)).cards == ()


def test_a_nano_node_says_its_memory_is_missing_unless_gfd_gives_it() -> None:
    nano = NodeAgent(AgentProfile.NANO_GPU)
    bare = read_inventory(_node_with({"nano-gpu/gpu-percent": "100"}), VOCAB, nano)
    assert "memory" in bare.problem
    labelled = read_inventory(_node_with(
        {"nano-gpu/gpu-percent": "100"},
        {"nvidia.com/gpu.count": "1", "nvidia.com/gpu.memory": "16384"}), VOCAB, nano)
    assert labelled.source == "gfd" and labelled.cards[0].memory_mib == 16384


def test_hami_nodes_are_not_counted_from_their_vgpu_count() -> None:
    # nvidia.com/gpu is cards x split count (HAMi v2.10.0 device plugin): no card count.
    inv = read_inventory(_node_with({"nvidia.com/gpu": "40"}), VOCAB, NodeAgent(AgentProfile.HAMI))
    assert inv.cards == () and inv.problem == ""
