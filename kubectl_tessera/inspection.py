"""``inspect``: nodes x cards, model, core and memory used/total, who holds what (pure).

The table is the demo's (:func:`kubectl_tessera.report.render_table`), filled from the
picture, i.e. from the allocator's reading of nodes and records; what a pod holds on a card
is :func:`kubectl_tessera.report.holdings`, the one definition of "used". The JSON/YAML
document keeps the key names of the allocator's ``/status`` where they mean the same thing,
and adds per pod what it holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kubectl_tessera.picture import GpuNode, Picture
from kubectl_tessera.report import CardInfo, CardUsage, holdings, render_table
from tessera.vocabulary import WHOLE_CARD_PERCENT


def card_usage(picture: Picture, nodes: Sequence[GpuNode]) -> dict[str, list[CardUsage]]:
    """The report's per-card usage of these nodes, from the picture's records."""
    usage = {n.name: [CardUsage(CardInfo(c.index, c.model, c.memory_mib)) for c in n.cards]
             for n in nodes}
    for pod in picture.holders:
        cards = usage.get(pod.node)
        if cards is None:
            continue
        assert pod.allocation is not None
        for index, holding in holdings(pod.key, pod.allocation).items():
            match = next((u for u in cards if u.card.index == index), None)
            if match is None:
                # A record naming a card the node does not have: shown, never dropped.
                match = CardUsage(CardInfo(index, "<no such card>", 0))
                cards.append(match)
            match.holdings.append(holding)
    return usage


def select_nodes(picture: Picture, name: str | None) -> list[GpuNode]:
    """Every GPU node, or the one named (an empty list when it has no GPU cards)."""
    if name is None:
        return list(picture.nodes)
    node = picture.node(name)
    return [node] if node is not None else []


def notes(picture: Picture, nodes: Sequence[GpuNode]) -> list[str]:
    """Problems worth a line under the table: unreadable inventories, over-commitment,
    records that do not count."""
    names = {n.name for n in nodes}
    out: list[str] = []
    for n in nodes:
        if n.problem:
            out.append(f"node {n.name}: {n.problem}")
        out.extend(f"node {n.name}: {p}" for p in n.overcommitted)
        if n.unschedulable:
            out.append(f"node {n.name}: cordoned")
    for p in picture.pods:
        if p.allocation_problem and (not p.node or p.node in names):
            out.append(f"pod {p.key}: allocation record ignored: {p.allocation_problem}")
    return out


def measured_figures(nodes: Sequence[GpuNode]) -> dict[str, dict[int, tuple[int, int]]] | None:
    """Per node and card index, the measured (foreign MiB, busy %) (None: none were read)."""
    if not any(n.measured for n in nodes):
        return None
    return {n.name: {card.index: figures for card, figures in zip(n.cards, n.measured,
                                                                  strict=True)}
            for n in nodes if n.measured}


def render(picture: Picture, nodes: Sequence[GpuNode], *, wide: bool = False,
           colour: bool = False, measured: bool = False) -> str:
    """The table; ``measured``: Prometheus was read (an empty column says nothing measured)."""
    figures = measured_figures(nodes)
    text = render_table(card_usage(picture, nodes), wide=wide, colour=colour,
                        measured=figures if figures is not None or not measured else {})
    extra = notes(picture, nodes)
    if extra:
        text += "\n" + "\n".join(f"! {line}" for line in extra) + "\n"
    return text


def document(picture: Picture, nodes: Sequence[GpuNode]) -> dict[str, Any]:
    """The JSON/YAML form: per node and card what is used and by which pod containers."""
    usage = card_usage(picture, nodes)
    out_nodes: list[dict[str, Any]] = []
    figures = measured_figures(nodes) or {}
    for n in nodes:
        cards = []
        for u in sorted(usage[n.name], key=lambda u: u.card.index):
            others, busy = figures.get(n.name, {}).get(u.card.index, (0, 0))
            cards.append({
                "index": u.card.index,
                "model": u.card.model,
                "memoryMiB": u.card.memory_mib,
                "coreUsedPercent": u.core_used,
                "memoryUsedMiB": u.memory_used,
                "whole": any(h.whole for h in u.holdings),
                "foreignMemoryMiB": others,
                "busyPercent": busy,
                "pods": [{
                    "namespace": h.pod.split("/", 1)[0],
                    "name": h.pod.split("/", 1)[1],
                    "containers": list(h.containers),
                    "whole": h.whole,
                    "corePercent": WHOLE_CARD_PERCENT if h.whole else h.core_percent,
                    "memoryMiB": u.card.memory_mib if h.whole else h.memory_mib,
                } for h in u.holdings],
            })
        out_nodes.append({
            "name": n.name,
            "source": n.source,
            "problem": n.problem or None,
            "overCommitted": list(n.overcommitted),
            "unschedulable": n.unschedulable,
            "coreTotal": n.state.core_total,
            "coreUsed": n.state.core_used,
            "memoryTotalMiB": n.state.memory_total_mib,
            "memoryUsedMiB": n.state.memory_used_mib,
            "idleCards": n.state.idle_cards,
            "cards": cards,
        })
    names = {n.name for n in nodes}
    ignored = {p.key: p.allocation_problem for p in picture.pods
               if p.allocation_problem and (not p.node or p.node in names)}
    return {"nodes": out_nodes, "ignoredRecords": ignored}
