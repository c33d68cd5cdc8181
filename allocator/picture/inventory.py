"""A node's GPU cards, read from its Node object (pure).

Four sources, most precise first:

0. the node agent's own description, when it writes one (:meth:`allocator.picture.
   agent_watch.AgentWatch.describe`: a device plugin's register annotation, what the node
   agent itself serves, unhealthy and cordoned cards left out);
1. the node annotation :attr:`Vocabulary.node_cards_annotation` — a JSON list of
   ``{"index", "model", "memoryMiB"}``, one per card; the only source that describes nodes
   with cards of different sizes or models;
2. NVIDIA GPU Feature Discovery labels (``nvidia.com/gpu.product``, ``nvidia.com/gpu.memory``
   in MiB per card, ``nvidia.com/gpu.count``; CONTRACTS.md §1);
3. what the cluster's node agent registers in ``status.allocatable``
   (:attr:`tessera.agent_profiles.NodeAgent.capacity`): elastic-gpu-agent
   ``<domain>/gpu-core`` / 100 cards and ``<domain>/gpu-memory`` MiB split evenly among them;
   nano-gpu-agent ``nano-gpu/gpu-percent`` / 100 cards (no memory: give it by GFD labels or
   the annotation); gpushare ``aliyun.com/gpu-count`` cards and ``aliyun.com/gpu-mem`` in its
   unit; volcano-vgpu ``volcano.sh/vgpu-cores`` / 100 cards and ``volcano.sh/vgpu-memory``
   MiB. A count of cards x split count is left to source 0. The model then comes from
   :attr:`Vocabulary.node_model_label` or the GFD product label.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from allocator.ranking.cards import Card
from tessera.agent_profiles import Capacity, NodeAgent
from tessera.vocabulary import (
    GFD_COUNT_LABEL,
    GFD_MEMORY_LABEL,
    GFD_PRODUCT_LABEL,
    Vocabulary,
)

# Bounds on what a node object may claim. Anyone who can label or annotate a node (or a
# broken device plugin) writes these numbers, and the allocator builds one object per card:
# a count of 1,000,000,000 must be a reported problem, not a billion cards.
#: Cards one node may have (index 0 to MAX_NODE_CARDS - 1); real nodes have 1-16.
MAX_NODE_CARDS: Final = 1024
#: Memory of one card (16 TiB); the largest cards today have under 0.2 TiB.
MAX_CARD_MEMORY_MIB: Final = 16 * 1024 * 1024


@dataclass(frozen=True)
class Inventory:
    """The cards of one node, where that description came from, and any problem reading it."""

    cards: tuple[Card, ...]
    source: str  # "annotation" | "gfd" | "allocatable" | "none" | the agent's own name
    problem: str = ""


def _int_quantity(value: object) -> int | None:
    """An integer extended-resource quantity (``"800"``). Extended resources are integers
    (the API server refuses fractional ones), so anything else is a bad node object."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        text = value.strip()
        # isascii: "²".isdigit() is True but int() refuses it; 30 digits: no huge parses.
        if text.isascii() and text.isdigit() and len(text) <= 30:
            return int(text)
    return None


def _check_cards(count: int, memory_mib: int, what: str) -> str:
    """The problem with ``count`` cards of ``memory_mib`` each, or ``""``."""
    if count > MAX_NODE_CARDS:
        return f"{what}: {count} cards is more than the {MAX_NODE_CARDS} a node may have"
    if memory_mib > MAX_CARD_MEMORY_MIB:
        return (f"{what}: {memory_mib} MiB per card is more than the {MAX_CARD_MEMORY_MIB} "
                f"a card may have")
    return ""


def _cards_from_annotation(text: str) -> tuple[Card, ...]:
    try:
        raw = json.loads(text)
    except RecursionError:  # "[[[…": json.loads recurses per level
        raise ValueError("JSON nested too deeply") from None
    if not isinstance(raw, list) or not raw:
        raise ValueError("must be a non-empty JSON list")
    if len(raw) > MAX_NODE_CARDS:
        raise ValueError(f"{len(raw)} cards is more than the {MAX_NODE_CARDS} a node may have")
    cards: list[Card] = []
    for item in raw:
        if not isinstance(item, dict):
            raise ValueError("each card must be a JSON object")
        index, memory, model = item.get("index"), item.get("memoryMiB"), item.get("model", "")
        if (isinstance(index, bool) or not isinstance(index, int)
                or not 0 <= index < MAX_NODE_CARDS):
            raise ValueError(f"card index {index!r} must be an integer 0-{MAX_NODE_CARDS - 1}")
        if (isinstance(memory, bool) or not isinstance(memory, int)
                or not 0 < memory <= MAX_CARD_MEMORY_MIB):
            raise ValueError(f"card {index}: memoryMiB {memory!r} must be an integer "
                             f"1-{MAX_CARD_MEMORY_MIB}")
        if not isinstance(model, str):
            raise ValueError(f"card {index}: model must be a string")
        cards.append(Card(index=index, model=model, memory_mib=memory))
    if len({c.index for c in cards}) != len(cards):
        raise ValueError("card indices repeat")
    return tuple(sorted(cards, key=lambda c: c.index))


#: The node agent's own description of a node's cards, from the node's annotations (source 0).
Described = Callable[[Mapping[str, str]], "Inventory | None"]


def read_inventory(node: Mapping[str, Any], vocabulary: Vocabulary,
                   agent: NodeAgent | None = None, own_description: Described | None = None
                   ) -> Inventory:
    """The node's cards (``agent``: the cluster's node agent, elastic-gpu-agent by default;
    ``own_description``: its own description, source 0). A node without GPU resources has none and
    no problem; a description that cannot be read is a problem (and the next source is
    tried)."""
    meta = node.get("metadata") or {}
    annotations: Mapping[str, str] = meta.get("annotations") or {}
    labels: Mapping[str, str] = meta.get("labels") or {}
    allocatable: Mapping[str, Any] = (node.get("status") or {}).get("allocatable") or {}

    problem = ""
    own = own_description(annotations) if own_description is not None else None
    if own is not None:
        if own.source != "none" or not own.problem:
            # Read (with cards or not): a problem is a part of its description left out.
            return own
        problem = own.problem
    described = annotations.get(vocabulary.node_cards_annotation)
    if described is not None:
        try:
            return Inventory(_cards_from_annotation(described), "annotation")
        except (ValueError, TypeError) as exc:
            # Fall back to coarser sources, but keep the reason visible in /status.
            problem = f"annotation {vocabulary.node_cards_annotation} ignored: {exc}"

    model = labels.get(vocabulary.node_model_label) or labels.get(GFD_PRODUCT_LABEL, "")
    gfd = _from_gfd_labels(labels, model)
    if isinstance(gfd, Inventory):
        return Inventory(gfd.cards, gfd.source, problem)
    capacity = (agent or NodeAgent(vocabulary=vocabulary)).capacity
    if capacity is None:
        return Inventory((), "none", problem or gfd)
    return _from_allocatable(allocatable, model, capacity, problem or gfd)


def _from_gfd_labels(labels: Mapping[str, str], model: str) -> Inventory | str:
    """The cards GFD's count and memory labels describe; else the problem with them (``""``
    when they are absent)."""
    count = _int_quantity(labels.get(GFD_COUNT_LABEL))
    memory = _int_quantity(labels.get(GFD_MEMORY_LABEL))
    if not (count and memory):
        return ""
    wrong = _check_cards(count, memory, "GFD labels ignored")
    if wrong:
        return wrong
    return Inventory(tuple(Card(i, model, memory) for i in range(count)), "gfd")


def _from_allocatable(allocatable: Mapping[str, Any], model: str, capacity: Capacity,
                      problem: str) -> Inventory:
    """What the node agent registers: ``capacity.count`` / ``per_card`` cards, memory split
    evenly; ``problem`` is what the finer sources left, reported unless this source has a
    first problem of its own."""
    raw_count = allocatable.get(capacity.count)
    units = _int_quantity(raw_count)
    memory = _int_quantity(allocatable.get(capacity.memory)) if capacity.memory else None
    count = (units or 0) // capacity.per_card
    if count <= 0:
        # Most nodes of a real cluster simply have no GPU (and a new node has no status
        # yet): that is no problem. Only an inventory we cannot read is one.
        if raw_count is not None and units is None:
            problem = problem or f"{capacity.count} {raw_count!r} is not an integer"
        elif units:
            problem = problem or (f"{capacity.count} {units} is less than one card "
                                  f"({capacity.per_card})")
        return Inventory((), "none", problem)
    per_card = (memory or 0) * capacity.memory_unit_mib // count
    wrong = _check_cards(count, per_card, f"{capacity.count} ignored")
    if wrong:
        return Inventory((), "none", problem or wrong)
    if per_card <= 0:
        missing = capacity.memory or "a memory resource (the agent registers none)"
        problem = problem or f"{missing} missing: cards have 0 MiB"
    cards = tuple(Card(i, model, per_card) for i in range(count))
    return Inventory(cards, "allocatable", problem)
