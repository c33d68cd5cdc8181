"""Fake GPU nodes: Node objects whose status carries GPU capacity, kept alive by KWOK.

A device plugin advertises its resources in ``status.capacity``/``status.allocatable``: which
ones depends on the cluster's node agent (:func:`advertised`, per agent profile:
elastic-gpu-agent ``gpu-core`` 100 per card and ``gpu-memory`` MiB, CONTRACTS.md §1, Node
capacity; nano-gpu-agent, gpushare, HAMi and Volcano's vGPU plugin theirs); here we create the
Node with them. Then KWOK takes the node over (see
kwok.py): it reports it Ready and renews its Lease, as a kubelet would. The per-card
description comes in the three forms the allocator reads: totals only (even split, the
upstream baseline), NVIDIA GPU Feature Discovery labels, and our per-card annotation (mixed
cards).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from allocator.hami.codec import FLAVORS
from devcluster import kwok
from devcluster.hami_node import register_annotations
from tessera.agent_profiles import HAMI_RESOURCES, VOLCANO_RESOURCES, AgentProfile, NodeAgent
from tessera.vocabulary import (
    GFD_COUNT_LABEL,
    GFD_MEMORY_LABEL,
    GFD_PRODUCT_LABEL,
    Vocabulary,
)


class Inventory(StrEnum):
    """How a node describes its cards."""

    EVEN = "even"  # totals only; the allocator splits memory evenly
    GFD = "gfd"  # GPU Feature Discovery labels (all cards alike)
    CARDS = "cards"  # our per-card annotation (cards may differ)


@dataclass(frozen=True)
class Card:
    model: str
    memory_mib: int


@dataclass(frozen=True)
class GpuNodeSpec:
    name: str
    cards: tuple[Card, ...]
    inventory: Inventory = Inventory.EVEN
    labels: Mapping[str, str] = field(default_factory=dict)
    cpu: str = "64"
    memory: str = "256Gi"
    pods: str = "250"
    #: Further extended resources (e.g. a non-GPU one for the control-plane smoke test).
    extra_resources: Mapping[str, str] = field(default_factory=dict)

    @property
    def total_memory_mib(self) -> int:
        return sum(c.memory_mib for c in self.cards)

    @property
    def models(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(c.model for c in self.cards))


def uniform(name: str, count: int, model: str, memory_mib: int, **kwargs: Any) -> GpuNodeSpec:
    return GpuNodeSpec(name, tuple(Card(model, memory_mib) for _ in range(count)), **kwargs)


#: The vGPUs a HAMi or Volcano vGPU plugin registers per card (its deviceSplitCount default:
#: Project-HAMi/HAMi v2.10.0 charts/hami/values.yaml devicePlugin.deviceSplitCount, and
#: volcano-vgpu-device-plugin v1.12.0 cmd/vgpu/main.go --device-split-count).
VGPU_SPLIT_COUNT = 10


def advertised(cards: tuple[Card, ...], agent: NodeAgent) -> dict[str, str]:
    """The extended resources the agent's device plugin registers for ``cards`` (pure):
    what :attr:`NodeAgent.capacity` reads back, plus the vGPU counts that carry no card
    count (HAMi ``nvidia.com/gpu``, Volcano ``volcano.sh/vgpu-number``: cards x split)."""
    resources: dict[str, str] = {}
    capacity = agent.capacity
    if capacity is not None:
        resources[capacity.count] = str(capacity.per_card * len(cards))
        if capacity.memory is not None:
            resources[capacity.memory] = str(
                sum(c.memory_mib for c in cards) // capacity.memory_unit_mib)
    vgpus = {AgentProfile.HAMI: HAMI_RESOURCES.count,
             AgentProfile.VOLCANO_VGPU: VOLCANO_RESOURCES.count}.get(agent.profile)
    if vgpus is not None:
        resources[vgpus] = str(VGPU_SPLIT_COUNT * len(cards))
    return resources


def node_object(spec: GpuNodeSpec, vocabulary: Vocabulary,
                agent: NodeAgent | None = None) -> dict[str, Any]:
    """The Node to create (pure), with its status (capacity) and handed to KWOK, as a kubelet
    registers its node: one create (a Node's create keeps its status,
    pkg/registry/core/node/strategy.go), so KWOK's first event for it is ADDED with
    everything in place. KWOK's lease mode takes up only nodes it first sees as ADDED."""
    labels = {"kubernetes.io/hostname": spec.name, "kubernetes.io/os": "linux", **spec.labels}
    annotations: dict[str, str] = {kwok.MANAGED_ANNOTATION: kwok.MANAGED_VALUE}
    if len(spec.models) == 1:
        labels[vocabulary.node_model_label] = spec.models[0]
    if spec.inventory is Inventory.GFD:
        if len(spec.models) != 1 or len({c.memory_mib for c in spec.cards}) != 1:
            raise ValueError(f"{spec.name}: GFD labels describe identical cards only")
        labels[GFD_PRODUCT_LABEL] = spec.models[0]
        labels[GFD_MEMORY_LABEL] = str(spec.cards[0].memory_mib)
        labels[GFD_COUNT_LABEL] = str(len(spec.cards))
    if spec.inventory is Inventory.CARDS:
        annotations[vocabulary.node_cards_annotation] = json.dumps(
            [
                {"index": i, "model": c.model, "memoryMiB": c.memory_mib}
                for i, c in enumerate(spec.cards)
            ]
        )
    profile = agent.profile if agent is not None else None
    if profile in (AgentProfile.HAMI, AgentProfile.VOLCANO_VGPU):
        # The device plugin registers its cards when it starts (docs/hami.md).
        flavor = FLAVORS[str(profile)]
        annotations.update(register_annotations(
            spec.name, [(c.model, c.memory_mib) for c in spec.cards], flavor))
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": spec.name, "labels": labels, "annotations": annotations},
        "spec": {},
        **_status(spec, agent or NodeAgent(vocabulary=vocabulary)),
    }


def _status(spec: GpuNodeSpec, agent: NodeAgent) -> dict[str, Any]:
    """The ``status``: capacity == allocatable. Conditions are KWOK's to report (its
    node-initialize stage keeps the capacity it finds)."""
    resources = {
        "cpu": spec.cpu,
        "memory": spec.memory,
        "pods": spec.pods,
        **advertised(spec.cards, agent),
        **spec.extra_resources,
    }
    return {"status": {"capacity": resources, "allocatable": resources}}


#: Lifts the ``node.kubernetes.io/not-ready:NoSchedule`` taint the TaintNodesByCondition
#: admission plugin puts on every new Node (plugin/pkg/admission/nodetaint). The node lifecycle
#: controller would lift it too once KWOK reports Ready, a few seconds later (its monitor
#: period); a kubelet-less test needs no such wait.
_UNTAINT: dict[str, Any] = {"spec": {"taints": []}}


def create_nodes(core_v1: Any, specs: Iterable[GpuNodeSpec], vocabulary: Vocabulary,
                 agent: NodeAgent | None = None) -> None:
    """Register each node with the capacity ``agent`` advertises (elastic-gpu-agent by
    default), handed to KWOK, then lift the not-ready taint (``core_v1``:
    kubernetes.client.CoreV1Api)."""
    for spec in specs:
        core_v1.create_node(node_object(spec, vocabulary, agent))
        core_v1.patch_node(spec.name, _UNTAINT)


def delete_nodes(core_v1: Any, names: Iterable[str]) -> None:
    from kubernetes.client.exceptions import ApiException

    for name in names:
        try:
            core_v1.delete_node(name)
        except ApiException as exc:
            if exc.status != 404:
                raise
