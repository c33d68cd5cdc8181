"""The preemptions in flight as reservations of their cards (the pure rule:
:mod:`allocator.preemption.reserved`), and how one ends when a pod of higher priority takes
its cards (:class:`~allocator.verbs.preempt.Preempt` calls these; why:
docs/decisions/0025-reserved-cards.md).

A reservation lasts from the decision (the entry remembered with its node, before any
eviction) until the preemptor binds, is deleted, its deadline passes or a pod of higher
priority takes its cards: the entry's life in the table of preemptions in flight.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from functools import partial

from allocator.decisions import DecisionHooks, PodRef, PreemptionEnd
from allocator.preemption import GpuPod, NodeOffer, Preemptor
from allocator.preemption.reserved import (
    Reservation,
    outranked,
    reserved_against,
    respecting,
    room_left,
)
from allocator.verbs.evictions import Worker
from allocator.verbs.preempt_ends import tell_ended
from allocator.verbs.preempt_ports import InFlight, Picture, PreemptApi
from allocator.verbs.preempt_writes import clear_note

logger = logging.getLogger(__name__)

#: Victims evicted and not yet seen gone remembered at most (the oldest forgotten first).
LEAVING_LIMIT = 4096


def reservations_of(entries: Iterable[InFlight], now: float) -> tuple[Reservation, ...]:
    """The reservations of the preemptions among ``entries`` (with a node, before their
    deadline)."""
    return tuple(Reservation(e.pod.uid, e.priority, e.node, e.cards, e.victims)
                 for e in entries if e.node and e.until > now)


def end_outranked(entries: Iterable[InFlight], hooks: DecisionHooks, worker: Worker,
                  api: PreemptApi, annotation: str) -> None:
    """The preemptions ``entries`` (taken out of the table) are over: a pod of higher priority
    took their cards. Told as :data:`~allocator.decisions.PreemptionEnd.OUTRANKED`; their
    notes and our nominations cleared by the worker (a change of the pod, on which
    kube-scheduler tries it again: it may preempt again at once). A hold already placed for
    one ends at its deadline or with its own filter."""
    for entry in entries:
        logger.info("preemption for %s on %s ended: a pod of higher priority took its cards",
                    entry.pod.key, entry.node)
        tell_ended(hooks, (entry,), PreemptionEnd.OUTRANKED)
        worker.submit(partial(clear_note, api, annotation, entry.pod, entry.node))


class Reserving:
    """The reservations side of :class:`~allocator.verbs.preempt.Preempt` (which sets these
    attributes): what filter, the requeue's holds and other preemptions ask of it."""

    in_flight: OrderedDict[str, InFlight]
    state: Picture
    clock: Callable[[], float]
    hooks: DecisionHooks
    worker: Worker
    api: PreemptApi
    annotation: str
    _lock: threading.Lock
    #: Victims evicted, by UID, with their node, until the picture has them no more (the
    #: oldest first, bounded): leaving, whatever became of their preemption since.
    leaving: OrderedDict[str, str]

    def reservations(self) -> tuple[Reservation, ...]:
        """The preemptions in flight, as the cards they reserve."""
        now = self.clock()
        with self._lock:
            return reservations_of(self.in_flight.values(), now)

    def going(self, entry: InFlight) -> bool:
        """Whether ``entry``'s evictions go on: its preemption still in flight, and its pod
        not placed on another node meanwhile (room the requeue held for it, or a bind)."""
        with self._lock:
            current = self.in_flight.get(entry.pod.uid)
        if current is None or (current.node, current.victims) != (entry.node, entry.victims):
            return False
        placed = self.state.record(entry.pod.uid)
        return placed is None or placed.node == entry.node

    def evicted(self, node: str, victim: PodRef, going: bool) -> None:
        """``victim`` is being evicted from ``node`` (``going``), or its eviction failed:
        leaving, or not (:meth:`left`)."""
        with self._lock:
            if not going:
                self.leaving.pop(victim.uid, None)
                return
            self.leaving[victim.uid] = node
            while len(self.leaving) > LEAVING_LIMIT:
                self.leaving.popitem(last=False)

    def left(self) -> dict[str, str]:
        """The victims evicted the picture still has, with their node; those gone forgotten."""
        with self._lock:
            for uid in [u for u in self.leaving if self.state.record(u) is None]:
                del self.leaving[uid]
            return dict(self.leaving)

    def respected(self, preemptor: Preemptor, offers: list[NodeOffer]) -> list[NodeOffer]:
        """``offers`` as a preemption for ``preemptor`` may use them: reserved cards and the
        victims of other preemptions (:func:`~allocator.preemption.reserved.respecting`)."""
        return respecting(offers, self.reservations(), preemptor, self.state.record,
                          self.left())

    def reserved(self, uid: str, priority: int) -> dict[str, frozenset[int]]:
        """The cards reserved against a pod (``uid``, ``priority``), by node."""
        if not self.in_flight:  # lock-free miss: the common case on filter's path
            return {}
        return reserved_against(self.reservations(), uid, priority)

    def taken(self, uid: str, priority: int, node: str, cards: tuple[int, ...], *,
              placed: bool = True) -> None:
        """A pod (``uid``, ``priority``) was placed (``placed``) or preempts on ``cards`` of
        ``node``: the preemptions of lower priority reserving one of them are over, a
        placed pod's only when it left their preemptor no room there (kube-scheduler clears
        lower nominations on a node it preempts on; a pod merely bound there does not)."""
        if not self.in_flight:  # lock-free miss: the common case on filter's path
            return
        now = self.clock()
        with self._lock:
            entries = {e.pod.uid: e for e in self.in_flight.values()}
        over = [entries[u] for u in outranked(reservations_of(entries.values(), now), uid,
                                              priority, node, cards)]
        view = self.state.view(node) if over and placed else None
        if view is not None:
            over = [e for e in over if not room_left(view.state, e.request, e.cards, [
                GpuPod(v, "", "", r.allocation) for v in (*e.victims, e.pod.uid)
                if (r := self.state.record(v)) is not None])]  # its own hold counts free
        with self._lock:
            ended = [self.in_flight.pop(e.pod.uid) for e in over
                     if self.in_flight.get(e.pod.uid) is e]
        end_outranked(ended, self.hooks, self.worker, self.api, self.annotation)
