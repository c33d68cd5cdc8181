"""Cards reserved for a preemption in flight: the card-level counterpart of kube-scheduler's
nominated pods (pure).

kube-scheduler keeps a preemptor's room from the moment it nominates it: every filter of a
pod of lower or equal priority runs as if the nominated pods of higher or equal priority were
already on their node (kubernetes v1.34.4 ``pkg/scheduler/framework/runtime/framework.go``,
``addGENominatedPods``, lines 1059-1081, the test at line 1071: ``PodPriority(pi.GetPod()) >=
PodPriority(pod) && pi.GetPod().UID != pod.UID``), and a pod of higher priority ignores them;
a preemption decided on a node clears the nominations of lower priority there
(``framework/preemption/preemption.go`` lines 447-457 and 527-533,
``getLowerPriorityNominatedPods`` at 687-702). Here a reservation is the node and the cards
a preemption chose, from its decision until its preemptor binds, is deleted, its deadline
passes or a pod of higher priority takes the cards.

The rule (docs/decisions/0025-reserved-cards.md says why this one): for a pod of
priority lower than or equal to the preemptor's, other than the preemptor, the reserved
**cards are unavailable**: no share, no whole card is placed there, and evicting their pods
frees nothing (their memory counts as taken by something no eviction removes, as memory
measured in use by a process Tessera did not place, :mod:`.release`). A preemption frees on
its cards only what its preemptor needs (its victims are the fewest), so what the card has
left beyond that is little, and for the time of one preemption.

And the victims of a preemption in flight are nobody else's victims: they are leaving
already, so another preemption counts their room as free (on cards reserved against it that
changes nothing) and evicts nobody more for it. A preemptor of higher priority whom that room
is enough for evicts nobody: its own filter takes the room once they are gone, which ends the
lower preemption.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Protocol

from allocator.preemption.model import GpuPod, NodeOffer, Preemptor
from allocator.preemption.release import without
from allocator.ranking.cards import CardState, NodeState
from allocator.ranking.fit import fits
from tessera.vocabulary import Allocation, PodRequest


@dataclass(frozen=True, slots=True)
class Reservation:
    """One preemption in flight as others must respect it."""

    #: The preemptor's UID (it is never kept from its own cards).
    preemptor: str
    #: The preemptor's priority (``spec.priority``).
    priority: int
    node: str
    cards: tuple[int, ...]
    #: The victims' UIDs.
    victims: tuple[str, ...] = ()


def reserved_against(reservations: Iterable[Reservation], uid: str,
                     priority: int) -> dict[str, frozenset[int]]:
    """The cards reserved against a pod (``uid``, ``priority``), by node: those of the other
    preemptors of priority higher than or equal to ``priority``."""
    found: dict[str, set[int]] = {}
    for r in reservations:
        if r.preemptor != uid and r.priority >= priority and r.cards:
            found.setdefault(r.node, set()).update(r.cards)
    return {node: frozenset(cards) for node, cards in found.items()}


def outranked(reservations: Iterable[Reservation], uid: str, priority: int, node: str,
              cards: Collection[int]) -> list[str]:
    """The preemptors whose reservation a pod (``uid``, ``priority``) placed on ``cards`` of
    ``node`` takes: of strictly lower priority, a card in common."""
    taken = set(cards)
    return [r.preemptor for r in reservations
            if r.node == node and r.preemptor != uid and r.priority < priority
            and taken.intersection(r.cards)]


def room_left(state: NodeState, request: PodRequest, cards: Collection[int],
              leaving: Iterable[GpuPod]) -> bool:
    """Whether a preemptor of ``request`` still fits on its ``cards`` of ``state`` once the
    pods ``leaving`` (its victims) are gone: a pod of higher priority placed beside it on
    those cards may have left it its room (its preemption then goes on)."""
    others = {c.card.index for c in state.cards} - set(cards)
    return fits(request, blocked(without(state, leaving), others))


def blocked(state: NodeState, cards: Collection[int]) -> NodeState:
    """``state`` with ``cards`` unavailable: all their memory taken by something no eviction
    frees, and taken whole (no share, no whole card placed there)."""
    if not cards:
        return state
    return NodeState(state.name, tuple(_block(c) if c.card.index in cards else c
                                       for c in state.cards))


def _block(card: CardState) -> CardState:
    return replace(card, whole=True, foreign_memory_mib=card.card.memory_mib)


class Placed(Protocol):
    """Where a pod is (the picture's record of it)."""

    @property
    def allocation(self) -> Allocation: ...


def respecting(offers: Iterable[NodeOffer], reservations: Collection[Reservation],
               preemptor: Preemptor, placed: Callable[[str], Placed | None],
               evicted: Mapping[str, str]) -> list[NodeOffer]:
    """``offers`` as a preemption for ``preemptor`` may use them: the victims of a preemption
    in flight and the pods ``evicted`` (UID -> node) gone (their room free, none a victim
    again; ``placed``: where a pod is, by UID), and the cards reserved against it
    unavailable (their pods no victims either)."""
    leaving = {v: r.node for r in reservations if r.preemptor != preemptor.uid
               for v in r.victims}
    leaving.update(evicted)
    against: Mapping[str, frozenset[int]] = reserved_against(reservations, preemptor.uid,
                                                             preemptor.priority)
    out = []
    for offer in offers:
        cards = against.get(offer.name, frozenset())
        gone = [GpuPod(uid, "", "", where.allocation) for uid, node in leaving.items()
                if node == offer.name and (where := placed(uid)) is not None]
        pods = tuple(p for p in offer.pods if p.uid not in leaving and not any(
            i in cards for c in p.containers for i in c.card_indices))
        if len(pods) == len(offer.pods) and not cards and not gone:
            out.append(offer)
        else:
            out.append(NodeOffer(blocked(without(offer.state, gone), cards), pods))
    return out
