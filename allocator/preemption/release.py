"""A node's cards as they would be without some pods, and with them back (pure).

Removing a pod subtracts what each of its containers booked on each card the node state shows
it holding there (a card that does not name the pod as a holder is left alone: the picture's
allocation and node state disagree, and freeing room that may not exist would choose a victim
whose eviction does not help). Putting a pod back is
:func:`allocator.ranking.cards.apply_placement`. Memory measured in use by processes Tessera did
not place stays: evicting pods never frees it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from allocator.preemption.model import GpuPod
from allocator.ranking.cards import CardState, NodeState, apply_placement
from tessera.vocabulary import WHOLE_CARD_PERCENT, ContainerAllocation


def without(node: NodeState, pods: Iterable[GpuPod]) -> NodeState:
    """``node`` with every allocation of ``pods`` taken off its cards."""
    position = {c.card.index: i for i, c in enumerate(node.cards)}
    cards = list(node.cards)
    for pod in pods:
        for container in pod.containers:
            for index in container.card_indices:
                pos = position.get(index)
                if pos is not None:
                    cards[pos] = _release(cards[pos], pod.uid, container)
    return NodeState(node.name, tuple(cards))


def with_back(node: NodeState, pod: GpuPod, before: NodeState) -> NodeState:
    """``node`` with ``pod``'s allocation on its cards again: the part :func:`without` took
    off, that is the cards where ``before`` (the node before anyone was taken off) shows it."""
    return apply_placement(node, shown(before, pod), pod.uid)


def shown(node: NodeState, pod: GpuPod) -> tuple[ContainerAllocation, ...]:
    """``pod``'s containers, each on the cards of ``node`` that name it as a holder."""
    holders = {c.card.index: c.holders for c in node.cards}
    out = []
    for container in pod.containers:
        holder = (pod.uid, container.name)
        cards = tuple(i for i in container.card_indices if holder in holders.get(i, ()))
        if cards:
            out.append(replace(container, card_indices=cards))
    return tuple(out)


def _release(card: CardState, uid: str, container: ContainerAllocation) -> CardState:
    holder = (uid, container.name)
    if holder not in card.holders:
        return card
    holders = list(card.holders)
    holders.remove(holder)
    if container.is_whole:
        core = card.core_used - WHOLE_CARD_PERCENT
        memory = card.memory_used_mib - card.card.memory_mib
        # Two whole holders of one card are a recorded conflict: the card stays taken whole
        # while 100% is still booked on it.
        whole = card.whole and core >= WHOLE_CARD_PERCENT
    else:
        core = card.core_used - container.core_percent
        memory = card.memory_used_mib - container.memory_mib
        whole = card.whole
    return CardState(card.card, max(0, core), max(0, memory), whole, tuple(holders),
                     card.foreign_memory_mib, card.busy_percent)
