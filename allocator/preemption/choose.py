"""Which node to preempt on: kube-scheduler's order of candidates, over card-level victims.

kube-scheduler's ``pickOneNodeForPreemption`` (kubernetes v1.34.4
``pkg/scheduler/framework/preemption/preemption.go:592-678``) keeps, criterion after
criterion, the candidates of the best score, and stops as soon as one is left:

1. fewest PodDisruptionBudget violations (line 603);
2. the lowest highest-victim priority (line 607);
3. the smallest sum of victim priorities, each raised by 2^31 (line 613);
4. the fewest victims (line 625);
5. the latest earliest-start among the highest-priority victims (line 629);
6. then the first candidate left (line 677; its list comes from a Go map, so "first" is
   random there). Here it is the first in the order the nodes were given: the same inputs
   always give the same answer.

Sorting by the tuple of the five criteria is the same choice. kube-scheduler looks at a
sample of the nodes only (at least 100 or 10%, from a random offset, stopping once it has
enough: ``preemption.go:709-762``, ``default_preemption.go:185-204``) to bound its cost; the
card-level check is cheap enough to look at every node given, so the choice is the best of
all of them, and needs no randomness.
"""

from __future__ import annotations

from collections.abc import Sequence

from allocator.preemption.alike import AlikeNodes, by_importance, shape
from allocator.preemption.model import (
    Budget,
    NodeOffer,
    NodeVictims,
    NoPreemption,
    Preemption,
    PreemptionPolicy,
    Preemptor,
)
from allocator.preemption.victims import FITS_ALREADY, NO_LOWER_PRIORITY, select_victims
from allocator.ranking.cards import NodeState
from allocator.ranking.fit import Chooser

#: kube-scheduler's words for a pod that may not preempt (kubernetes v1.34.4
#: ``default_preemption.go:329-331``, ``PodEligibleToPreemptOthers``).
POLICY_NEVER = "not eligible due to preemptionPolicy=Never."
NO_NODES = "no nodes to preempt on"


def order_key(candidate: NodeVictims) -> tuple[int, int, int, int, float]:
    """Smaller is better: kube-scheduler's five criteria, in their order."""
    return (candidate.pdb_violations, candidate.highest_priority, candidate.priority_sum,
            len(candidate.victims), -candidate.earliest_start_of_highest)


def pick_one_node(candidates: Sequence[NodeVictims]) -> NodeVictims | None:
    """The candidate kube-scheduler's order prefers; the first given among equals."""
    if not candidates:
        return None
    return min(candidates, key=order_key)  # min keeps the first of equal keys


def candidates_on(preemptor: Preemptor, nodes: Sequence[NodeOffer],
                  budgets: Sequence[Budget] = (), chooser: Chooser | None = None
                  ) -> tuple[list[NodeVictims], dict[str, str]]:
    """Each node's victims where preemption helps there, and why not on the others (nodes
    alike in cards and pods worked out once: :mod:`allocator.preemption.alike`)."""
    found: list[NodeVictims] = []
    why: dict[str, str] = {}
    alike = AlikeNodes()
    for node in nodes:
        pods = by_importance(node)
        key = shape(node, pods, budgets, preemptor.request)
        result = alike.recall(key, node, pods)
        if result is None:
            result = select_victims(preemptor, node, budgets, chooser)
            alike.keep(key, pods, result)
        if isinstance(result, str):
            why[node.name] = result
        else:
            found.append(result)
    return found, why


def choose_preemption(preemptor: Preemptor, nodes: Sequence[NodeOffer],
                      budgets: Sequence[Budget] = (), chooser: Chooser | None = None
                      ) -> Preemption | NoPreemption:
    """Where to preempt for ``preemptor`` and whom, or why no preemption helps (also when the
    pod fits on one of ``nodes`` as it is).

    ``nodes`` are the nodes the pod was refused by (give every such node: the choice is the
    best among them); ``chooser`` places the preemptor on the node once the victims are gone
    (the placement policy's; None takes the lowest-indexed cards that work).
    """
    if preemptor.policy is PreemptionPolicy.NEVER:
        return NoPreemption(POLICY_NEVER)
    if not nodes:
        return NoPreemption(NO_NODES)
    found, why = candidates_on(preemptor, nodes, budgets, chooser)
    room = [name for name, reason in why.items() if reason == FITS_ALREADY]
    if room:
        # Room appeared since the pod was refused: evicting anyone now would be waste.
        return NoPreemption(f"fits without preemption on {len(room)} node"
                            f"{'s' if len(room) > 1 else ''} (first: {room[0]})", why)
    best = pick_one_node(found)
    if best is not None:
        return best
    return NoPreemption(_summary(why), why)


def nobody_lower(names: Sequence[str]) -> NoPreemption:
    """What :func:`choose_preemption` answers when none of the ``names`` nodes, each refused
    for want of card room, has a GPU pod of lower priority than the preemptor: each node's
    :data:`~allocator.preemption.victims.NO_LOWER_PRIORITY` (known without building a node's
    offer: a look at the priorities is enough)."""
    why = dict.fromkeys(names, NO_LOWER_PRIORITY)
    return NoPreemption(_summary(why), why) if why else NoPreemption(NO_NODES)


def freed_first(cards: tuple[int, ...]) -> Chooser:
    """A chooser that places a preemptor on the ``cards`` its victims freed (any other card
    scores 0)."""
    wanted = frozenset(cards)

    def score(_before: NodeState, after: NodeState) -> float:
        return float(sum(c.core_used for c in after.cards if c.card.index in wanted))

    return score


def _summary(why: dict[str, str]) -> str:
    """kube-scheduler's shape of message: how many nodes for each reason ("0/3 nodes can
    take the pod by preemption: 2 fits without preemption, 1 ...")."""
    counts: dict[str, int] = {}
    for reason in why.values():
        counts[reason] = counts.get(reason, 0) + 1
    parts = ", ".join(f"{n} {r}" for r, n in sorted(counts.items(), key=lambda rn: -rn[1]))
    return f"0/{len(why)} nodes can take the pod by preemption: {parts}"
