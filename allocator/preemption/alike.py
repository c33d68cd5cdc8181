"""Nodes alike in cards and pods get alike victims: each such group is worked out once.

A fleet full of the same low-priority workload has many nodes whose cards, usage and pods
differ only by names. The selection (:func:`~allocator.preemption.victims.select_victims`)
reads no name and no start time but through the order it gives: it reads each card's index,
usage signature (the ranking's own :func:`~allocator.ranking.cards.card_signature`: model,
memory, usage, idle, shares left), whether the preemptor may use it (its UUID and sharing mode
are not in the signature) and, for a preemptor binding one NUMA node per container, its NUMA
node; and, with the pods in order of importance, each pod's priority, the containers the node
state shows it holding, and which budgets select it. Two nodes equal in all of those get the
victims at the same places in that order, the same budget count and the same placement (the
start times of the victims, which the choice of node reads, are each node's own).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from allocator.preemption.model import Budget, GpuPod, NodeOffer, NodeVictims, importance
from allocator.preemption.release import shown
from allocator.ranking.cards import card_signature
from allocator.ranking.search import eligible
from tessera.vocabulary import PodRequest


def by_importance(node: NodeOffer) -> list[GpuPod]:
    """The node's pods, most important first (ties in the node's order, as the selection)."""
    return sorted(node.pods, key=importance)


def shape(node: NodeOffer, pods: Sequence[GpuPod], budgets: Sequence[Budget],
          preemptor: PodRequest) -> Hashable:
    """What the selection on ``node`` for ``preemptor`` depends on, without names; ``pods``
    are :func:`by_importance`'s."""
    numa = preemptor.one_numa_node
    cards = tuple((c.card.index, card_signature(c), eligible(preemptor, c.card),
                   c.card.numa if numa else -1) for c in node.state.cards)
    return cards, tuple((p.priority, shown(node.state, p),
                         tuple(p.uid in b.pods for b in budgets)) for p in pods)


class AlikeNodes:
    """The selections worked out so far, by node shape (one preemption decision's life)."""

    def __init__(self) -> None:
        self._found: dict[Hashable, tuple[NodeVictims, tuple[int, ...]] | str] = {}

    def recall(self, key: Hashable, node: NodeOffer, pods: Sequence[GpuPod]
               ) -> NodeVictims | str | None:
        """The selection on ``node`` (its pods :func:`by_importance`) if a node of its shape
        was worked out, else None."""
        known = self._found.get(key)
        if known is None or isinstance(known, str):
            return known
        first, places = known
        return NodeVictims(node.name, tuple(pods[i] for i in places),
                           first.pdb_violations, first.containers)

    def keep(self, key: Hashable, pods: Sequence[GpuPod], result: NodeVictims | str) -> None:
        if isinstance(result, str):
            self._found[key] = result
            return
        place = {id(p): i for i, p in enumerate(pods)}
        self._found[key] = (result, tuple(place[id(v)] for v in result.victims))
