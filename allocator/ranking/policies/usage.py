"""usage: Genius's score, on measured figures: the least busy card with the most free memory.

Genius (one of the systems Tessera replaces) scores nodes and cards by what its monitor
measures: lower utilisation and more free memory first. Here a card's load is the mean of its
compute term (the measured utilisation, or the booked core share when that is higher: a pod
just placed is not measured yet) and its memory term (booked plus measured foreign memory, of
the card's capacity); the score is one minus the mean squared load after the placement, so a
pod goes to the idlest node and, on it, the idlest card, as spread does on bookings alone.
Without metrics (allocator/picture/measured.py) every busy figure is 0 and it is spread on bookings.
"""

from __future__ import annotations

from allocator.ranking.cards import CardState, NodeState
from allocator.ranking.policies.base import Policy, PolicyContext


def measured_load(card: CardState) -> float:
    """0 (idle) .. 1 (full): mean of the compute and memory terms (module doc)."""
    compute = max(card.busy_percent, card.core_used) / 100
    if card.card.memory_mib <= 0:
        return compute
    memory = (card.memory_used_mib + card.foreign_memory_mib) / card.card.memory_mib
    return (compute + min(1.0, memory)) / 2


class Usage(Policy):
    name = "usage"

    def score(self, before: NodeState, after: NodeState, ctx: PolicyContext) -> float:
        if not after.cards:
            return 0.0
        return 1.0 - sum(measured_load(c) ** 2 for c in after.cards) / len(after.cards)
