"""Who got which card, read back from the API objects alone (pure).

This is an oracle independent of the allocator's cache: the e2e tests check over-commitment
with it and the demo prints its table. Node inventory mirrors the three forms fake nodes use
(per-card annotation, GFD labels, even split of totals).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tessera.vocabulary import (
    GFD_COUNT_LABEL,
    GFD_MEMORY_LABEL,
    GFD_PRODUCT_LABEL,
    WHOLE_CARD_PERCENT,
    Allocation,
    CodecError,
    Vocabulary,
    decode_allocation,
)

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True)
class CardInfo:
    index: int
    model: str
    memory_mib: int


@dataclass(frozen=True)
class Holding:
    """What one pod holds on one card (its containers combined)."""

    pod: str  # namespace/name
    containers: tuple[str, ...]
    whole: bool
    core_percent: int
    memory_mib: int


@dataclass
class CardUsage:
    card: CardInfo
    holdings: list[Holding] = field(default_factory=list)

    @property
    def core_used(self) -> int:
        return sum(WHOLE_CARD_PERCENT if h.whole else h.core_percent for h in self.holdings)

    @property
    def memory_used(self) -> int:
        return sum(self.card.memory_mib if h.whole else h.memory_mib for h in self.holdings)

    def problems(self, node: str) -> list[str]:
        where = f"{node} card {self.card.index}"
        found = []
        if any(h.whole for h in self.holdings) and len(self.holdings) > 1:
            found.append(f"{where}: whole card shared by {[h.pod for h in self.holdings]}")
        if self.core_used > WHOLE_CARD_PERCENT:
            found.append(f"{where}: core {self.core_used}% > 100%")
        if self.memory_used > self.card.memory_mib:
            found.append(f"{where}: memory {self.memory_used} > {self.card.memory_mib} MiB")
        return found


def node_cards(node: Mapping[str, Any], vocabulary: Vocabulary) -> list[CardInfo]:
    """A node's cards from its per-card annotation, else GFD labels, else an even split."""
    meta = node.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    labels = meta.get("labels") or {}
    described = annotations.get(vocabulary.node_cards_annotation)
    if described:
        return [
            CardInfo(int(c["index"]), str(c["model"]), int(c["memoryMiB"]))
            for c in json.loads(described)
        ]
    if GFD_COUNT_LABEL in labels:
        count = int(labels[GFD_COUNT_LABEL])
        return [
            CardInfo(i, labels.get(GFD_PRODUCT_LABEL, "?"), int(labels[GFD_MEMORY_LABEL]))
            for i in range(count)
        ]
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    count = int(allocatable.get(vocabulary.core_resource, "0")) // WHOLE_CARD_PERCENT
    if count == 0:
        return []
    memory = int(allocatable.get(vocabulary.memory_resource, "0")) // count
    model = labels.get(vocabulary.node_model_label, "?")
    return [CardInfo(i, model, memory) for i in range(count)]


def pod_key(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def holds_cards(pod: Mapping[str, Any]) -> bool:
    """Pods in a terminal phase have given their cards back."""
    return (pod.get("status") or {}).get("phase") not in TERMINAL_PHASES


def holdings(key: str, allocation: Allocation) -> dict[int, Holding]:
    """Per card index, what a pod holds there: every container its record puts on the card,
    init containers included, summed.

    This is what "used" means in every table (the demo's, ``kubectl tessera inspect``'s): what
    the allocator reserves (allocator/ranking/fit.py). Init containers run before the others,
    but the node agents hand a device out per container and never give an init container's
    share back, so the allocator reserves both, and so do we.
    """
    names: dict[int, list[str]] = {}
    whole: dict[int, bool] = {}
    core: dict[int, int] = {}
    memory: dict[int, int] = {}
    for c in allocation.containers:
        for index in c.card_indices:
            names.setdefault(index, []).append(c.name)
            whole[index] = whole.get(index, False) or c.is_whole
            core[index] = core.get(index, 0) + c.core_percent
            memory[index] = memory.get(index, 0) + c.memory_mib
    return {i: Holding(key, tuple(names[i]), whole[i], core[i], memory[i]) for i in sorted(names)}


def pod_holdings(pod: Mapping[str, Any], vocabulary: Vocabulary) -> tuple[str, dict[int, Holding]]:
    """The node and, per card, what the pod holds there (:func:`holdings`), from its
    allocation record. Raises CodecError for a bad record."""
    text = ((pod.get("metadata") or {}).get("annotations") or {})[vocabulary.allocation_annotation]
    allocation = decode_allocation(text)
    return allocation.node, holdings(pod_key(pod), allocation)


def card_usage(
    nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]], vocabulary: Vocabulary
) -> dict[str, list[CardUsage]]:
    """node name -> its cards with what every live, bound pod holds on each.

    Only bound pods count, on the node they are bound to: that is what the node agents act
    on. A record on a pod without ``spec.nodeName`` is a leftover of a bind that never
    completed (the allocator crashed between writing it and creating the Binding); it binds
    nothing and the next bind overwrites it. A record naming a card the node does not have
    is reported as a "<no such card>" card rather than dropped, so a test cannot miss it.
    """
    usage = {
        (n.get("metadata") or {})["name"]: [CardUsage(c) for c in node_cards(n, vocabulary)]
        for n in nodes
    }
    for pod in pods:
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        bound_to = (pod.get("spec") or {}).get("nodeName")
        if (vocabulary.allocation_annotation not in annotations or not bound_to
                or not holds_cards(pod)):
            continue
        _, holdings = pod_holdings(pod, vocabulary)
        node = str(bound_to)
        cards = usage.setdefault(node, [])
        for index, holding in holdings.items():
            match = next((u for u in cards if u.card.index == index), None)
            if match is None:
                match = CardUsage(CardInfo(index, "<no such card>", 0))
                cards.append(match)
            match.holdings.append(holding)
    return usage


def overcommitments(usage: Mapping[str, list[CardUsage]]) -> list[str]:
    return [p for node, cards in usage.items() for u in cards for p in u.problems(node)]


def describe_holding(h: Holding) -> str:
    parts = [f"{h.core_percent}% core"] if h.core_percent else []
    parts += [f"{h.memory_mib} MiB"] if h.memory_mib else []
    share = "whole card" if h.whole else ", ".join(parts)
    return f"{h.pod} [{','.join(h.containers)}] {share}"


#: ANSI colours of the core-used cell: idle, partly used, full (SGR codes).
_GREEN, _YELLOW, _RED, _RESET = "\033[32m", "\033[33m", "\033[31m", "\033[0m"


def _paint(text: str, u: CardUsage) -> str:
    if not u.holdings:
        colour = _GREEN
    elif u.core_used >= WHOLE_CARD_PERCENT or u.memory_used >= u.card.memory_mib:
        colour = _RED
    else:
        colour = _YELLOW
    return f"{colour}{text}{_RESET}"


#: Per node, per card index: (memory MiB used by processes Tessera did not place, busy %).
Measured = Mapping[str, Mapping[int, tuple[int, int]]]


def render_table(usage: Mapping[str, list[CardUsage]], *, wide: bool = False,
                 colour: bool = False, measured: Measured | None = None) -> str:
    """A per-node, per-card table of who got what.

    ``wide`` adds the free core and memory of each card, and with ``measured`` figures
    (allocator/picture/measured.py) what is measured next to what is booked: memory used by others
    and utilisation; ``colour`` paints the core-used cell (green idle, yellow partly used,
    red full) for a terminal. Cells are padded before they are painted, so the columns stay
    aligned.
    """
    lines: list[str] = []
    shown = wide and measured is not None
    free_head = f"{'core free':>10}  {'memory free':>14}  " if wide else ""
    if shown:
        free_head += f"{'measured: others / busy':>24}  "
    for node in sorted(usage):
        cards = usage[node]
        lines.append(f"{node}  ({len(cards)} card{'s' if len(cards) != 1 else ''})")
        lines.append(
            f"  {'card':<5}{'model':<20}{'core used':>10}  {'memory used / total':>22}  "
            f"{free_head}pods"
        )
        blank = f"{'':>10}  {'':>14}  " if wide else ""
        blank += f"{'':>24}  " if shown else ""
        for u in sorted(cards, key=lambda u: u.card.index):
            mem = f"{u.memory_used} / {u.card.memory_mib} MiB"
            core = f"{u.core_used:>9}%"
            if colour:
                core = _paint(core, u)
            free = ""
            if wide:
                others, busy = (measured or {}).get(node, {}).get(u.card.index, (0, 0))
                free_mem = f"{u.card.memory_mib - u.memory_used - others} MiB"
                free = f"{WHOLE_CARD_PERCENT - u.core_used:>9}%  {free_mem:>14}  "
                if shown:
                    free += f"{f'{others} MiB / {busy}%':>24}  "
            first = describe_holding(u.holdings[0]) if u.holdings else "-"
            lines.append(
                f"  #{u.card.index:<4}{u.card.model[:19]:<20}{core}  {mem:>22}  {free}{first}"
            )
            for h in u.holdings[1:]:
                lines.append(f"  {'':<5}{'':<20}{'':>10}  {'':>22}  {blank}"
                             f"{describe_holding(h)}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def decode_or_problem(pod: Mapping[str, Any], vocabulary: Vocabulary) -> str | None:
    """None when the pod's allocation record decodes, else the codec's message."""
    try:
        pod_holdings(pod, vocabulary)
    except (CodecError, KeyError) as exc:
        return f"{pod_key(pod)}: {exc}"
    return None
