"""Preempt: when filter refused a GPU pod on every node for want of card room, evict the
fewest pods of lower priority that make room on one node, through the Eviction API.

The pure core decides (:func:`allocator.preemption.choose_preemption`) over the offers
:mod:`allocator.verbs.preempt_offers` reads; this verb acts on its answer:

- **Once per preemptor**, remembered (bounded, oldest dropped) until its deadline; from the
  decision its cards are **reserved** (:mod:`allocator.verbs.reservations`): pods of lower or
  equal priority are not placed there, its victims are nobody else's, and a pod of higher
  priority that takes them ends it (:meth:`Preempt.taken`).
- **Off filter's thread**: the worker (:mod:`allocator.verbs.evictions`) writes the note
  and ``status.nominatedNodeName``, then evicts the victims in order (a 429 stops the rest).
- **The hold**: once the watch has seen every victim go (:meth:`Preempt.released`), the
  cards are held in the preemptor's name until its deadline and the requeue asks it again
  (:meth:`~allocator.verbs.requeue.RequeueOnRelease.held_for`).
- **Restart, new leader**: rebuilt from the notes of pending pods (:meth:`Preempt.restore`).
- **The end** (:mod:`allocator.verbs.preempt_ends`): the bind, the preemptor deleted, the
  deadline (hold freed, note and nomination cleared, Event ``PreemptionExpired``).
- **The preemptVerb** (:mod:`allocator.verbs.preempt_verb`): its answer remembered here, its
  note written before the answer goes (:mod:`allocator.verbs.preempt_answers`); kube-scheduler
  evicts its victims, never this path, a restored one included.

On unless :attr:`~allocator.verbs.config.AllocatorConfig.preemption` is unset (docs/preemption.md).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import Any, Final

from allocator.decisions import DecisionHooks, PodRef, PreemptionEnd
from allocator.errors import ApiError
from allocator.preemption import (
    NoPreemption,
    Preemption,
    Preemptor,
    freed_first,
    policy_of,
    priority_of,
)
from allocator.preemption.reserved import blocked
from allocator.ranking.cards import NodeState
from allocator.ranking.fit import place_and_keep
from allocator.verbs import preempt_offers
from allocator.verbs.evictions import Worker
from allocator.verbs.preempt_answers import Answering
from allocator.verbs.preempt_ends import bound_outcome, expire, tell_ended
from allocator.verbs.preempt_note import ALLOCATOR, KUBE_SCHEDULER, Note, noted
from allocator.verbs.preempt_ports import HeldRoom, InFlight, Picture, PreemptApi
from allocator.verbs.preempt_writes import (
    PENDING,
    clear_note,
    evict,
    pending_uids,
    still_pending,
    write_note,
)
from allocator.verbs.reservations import Reserving
from tessera.vocabulary import Allocation, PodRequest, RequestError

logger = logging.getLogger(__name__)

#: Preemptions remembered at most (the oldest forgotten first).
MAX_IN_FLIGHT: Final = 1024
#: Seconds a preemption is given to free its cards before the pod may preempt again.
DEADLINE_SECONDS: Final = 60.0
#: Seconds a pod no preemption helped is not looked at again.
RETRY_SECONDS: Final = 10.0
#: Placing the held pod: a bind elsewhere on the node meanwhile means placing again.
HOLD_PLACEMENTS: Final = 3
#: Seconds between checks that the preemptors in flight are still pending pods.
CHECK_SECONDS: Final = 5.0


class Preempt(Reserving, Answering, DecisionHooks):
    """The preempting step of a refused filter (leader only); as a decision hook, it forgets
    a preemption once its pod is bound; its cards reserved meanwhile (:class:`Reserving`).

    ``clock`` is the wall clock (deadlines are written to the pod); ``request_of`` reads a
    pod's GPU request (a restore reads pods); ``ready``: synced and the leader (a restore
    runs each time it turns true). Lock order: the picture's, the requeue's, this one (never
    held calling the picture or the API; :meth:`released` runs under the picture's lock)."""

    def __init__(self, state: Picture, api: PreemptApi, hooks: DecisionHooks,
                 clock: Callable[[], float], annotation: str, gpu_pods: str,
                 deadline_seconds: float = DEADLINE_SECONDS,
                 max_in_flight: int = MAX_IN_FLIGHT, *,
                 request_of: Callable[[Mapping[str, Any]], PodRequest | None] | None = None,
                 ready: Callable[[], bool] = lambda: True) -> None:
        self.state = state
        self.api = api
        self.hooks = hooks
        self.clock = clock
        self.annotation = annotation
        self.gpu_pods = gpu_pods  # the label selector of every GPU pod
        self.deadline_seconds = deadline_seconds
        self.max_in_flight = max_in_flight
        self.request_of = request_of
        self.ready = ready
        self.in_flight: OrderedDict[str, InFlight] = OrderedDict()
        self.leaving: OrderedDict[str, str] = OrderedDict()  # victims evicted (Reserving)
        #: Told of a hold placed (the requeue asks the preemptor again); None: nobody.
        self.requeue: HeldRoom | None = None
        self.worker = Worker(self.tick)
        self._ended: list[InFlight] = []  # past their deadline, for the worker to report
        self._restored = False
        self._checked_at = float("-inf")
        self._restoring = threading.Lock()
        self._lock = threading.Lock()

    def __call__(self, pod: Mapping[str, Any], request: PodRequest,
                 names: Sequence[str]) -> Preemption | NoPreemption | None:
        """Preempt for ``pod`` among the refused ``names``: the preemption decided (its
        evictions queued), why none helps, or None when the pod was looked at lately (a
        preemption in flight, or none helped). Never raises."""
        ref = PodRef.of(pod)
        now = self.clock()
        claim = InFlight(ref, request, now + RETRY_SECONDS)
        if not ref.uid or not self._claim(claim, now):
            return None
        preemptor = Preemptor(ref.uid, request, priority_of(pod), policy_of(pod))
        try:
            decision = preempt_offers.decide(self.api, self.gpu_pods, self.state, preemptor,
                                             names, self.snapshot(),
                                             partial(self.respected, preemptor))
        except ApiError as exc:
            logger.warning("preemption for %s not tried: %s", ref.key, exc)
            return None
        if isinstance(decision, NoPreemption):
            logger.info("no preemption for %s: %s", ref.key, decision.reason)
            return decision
        victims = tuple(PodRef(v.namespace, v.name, v.uid) for v in decision.victims)
        if self._act(claim, InFlight(ref, request, now + self.deadline_seconds, decision.node,
                                     decision.cards, tuple(v.uid for v in victims),
                                     priority=preemptor.priority, victim_refs=victims)):
            self.taken(ref.uid, preemptor.priority, decision.node, decision.cards, placed=False)
        return decision

    def snapshot(self) -> tuple[InFlight, ...]:
        """The preemptions in flight (with a node), oldest first."""
        with self._lock:
            return tuple(f for f in self.in_flight.values() if f.node)

    def _claim(self, entry: InFlight, now: float) -> bool:
        """Remember ``entry`` unless its pod was looked at lately (those past their deadline
        go to the worker to be ended, :meth:`tick`)."""
        with self._lock:
            self._take_expired(now)
            claimed = entry.pod.uid not in self.in_flight
            dropped = self._remember(entry) if claimed else []
        tell_ended(self.hooks, dropped, PreemptionEnd.FORGOTTEN)
        return claimed

    def _take_expired(self, now: float) -> None:
        """(Under this lock.)"""
        for uid in [u for u, f in self.in_flight.items() if f.until <= now]:
            ended = self.in_flight.pop(uid)
            if ended.node or ended.evictor == KUBE_SCHEDULER:  # noted: the note is cleared
                self._ended.append(ended)

    def _remember(self, entry: InFlight) -> list[InFlight]:
        """(Under this lock.) Remember ``entry``; the oldest dropped (told FORGOTTEN after)."""
        self.in_flight[entry.pod.uid] = entry
        dropped = []
        while len(self.in_flight) > self.max_in_flight:
            dropped.append(self.in_flight.popitem(last=False)[1])
        return dropped

    def _act(self, claim: InFlight, entry: InFlight) -> bool:
        """Remember ``entry`` and queue its evictions, unless its pod was placed (room held for
        it by the requeue, or bound), deleted or forgotten while it was decided."""
        placed = self.state.record(entry.pod.uid) is not None
        with self._lock:
            if placed or self.in_flight.get(entry.pod.uid) is not claim:
                return False
            dropped = self._remember(entry)
        tell_ended(self.hooks, dropped, PreemptionEnd.FORGOTTEN)
        if self.worker.submit(partial(self._carry_out, entry)):
            self.hooks.preemption_started(entry.pod, entry.victim_refs, entry.node,
                                          entry.cards)
            return True
        logger.warning("preemption for %s not started: too many in the queue", entry.pod.key)
        with self._lock:
            if self.in_flight.get(entry.pod.uid) is entry:  # looked at again later
                self.in_flight[entry.pod.uid] = replace(
                    entry, node="", cards=(), victims=(), victim_refs=(),
                    until=self.clock() + RETRY_SECONDS)
        return False

    # ------------------------------------------------------------------ the worker's side
    def _carry_out(self, entry: InFlight) -> None:
        """Note, nominate, evict in order (the worker's thread)."""
        ref = entry.pod
        if not self.going(entry):
            return  # bound, placed elsewhere, deleted or forgotten while queued: nobody goes
        write_note(self.api, self.annotation, ref,
                   Note(entry.node, entry.cards, entry.until, entry.victims))
        with self._lock:
            ended = entry.pod.uid not in self.in_flight
        if ended:
            # Ended (its pod bound, deleted or forgotten) while the note was written: nobody
            # goes, and no note may say a preemption was made.
            clear_note(self.api, self.annotation, ref, entry.node)
            return
        self._evict(entry, entry.victim_refs)

    def _evict(self, entry: InFlight, victims: tuple[PodRef, ...]) -> None:
        evict(self.api, self.hooks, entry, victims, partial(self.going, entry),
              partial(self.evicted, entry.node))

    def tick(self, now: float | None = None) -> None:
        """The worker between jobs: a restore on becoming ready, and the end of each
        preemption past its deadline."""
        now = self.clock() if now is None else now
        self._restore_when_ready(now)
        with self._lock:
            self._take_expired(now)
            ended, self._ended = self._ended, []
            check = now >= self._checked_at + CHECK_SECONDS and any(
                f.node for f in self.in_flight.values())
        for entry in ended:
            expire(entry, self.state, self.api, self.hooks, self.annotation)
        if check:
            self._checked_at = now
            try:
                pending = pending_uids(self.api)
            except ApiError as exc:
                logger.info("preemptors in flight not checked: %s", exc)
                return
            for entry in self.snapshot():
                if entry.pod.uid not in pending:
                    self._gone(entry)

    # ------------------------------------------------------------------ restore
    def _restore_when_ready(self, now: float) -> None:
        if not self.ready():
            self._restored = False  # a leadership gained later restores again
            return
        self.caught_up(now)

    def caught_up(self, now: float | None = None) -> bool:
        """The preemptions in flight restored since this process became ready as leader;
        restores them now if not (the verbs ask before they answer, so no pod is placed in
        room a restored preemption holds). False while the API fails it."""
        if self._restored:  # lock-free: the common case on the verbs' path
            return True
        with self._restoring:
            if not self._restored:
                try:
                    self.restore(self.clock() if now is None else now)
                    self._restored = True
                except ApiError as exc:
                    logger.warning("preemptions in flight not restored (tried again): %s",
                                   exc)
                except Exception:  # a bug: never a verb's failure, nor a list per verb
                    logger.exception("preemptions in flight not restored")
                    self._restored = True
        return self._restored

    def restore(self, now: float) -> int:
        """Rebuild the preemptions in flight from the notes of pending pods (a restart, a new
        leader): each remembered with its deadline (capped at now plus ours), its cards held
        at once when every victim is gone, the victims the last leader did not evict evicted
        now (never those kube-scheduler deletes: a ``preemptVerb``'s answer; one without a
        node is remembered only, so filter's path evicts nobody for its pod). Notes past
        their deadline are cleared. How many were restored."""
        pods, _ = self.api.list_pods_by_field(PENDING, partial(noted, self.annotation))
        restored = 0
        for pod, note in (found for found in pods if found is not None):
            ref = PodRef.of(pod)
            try:
                request = self.request_of(pod) if self.request_of is not None else None
            except RequestError:
                request = None  # unreadable now: its note is cleared
            if note.until <= now or request is None or not ref.uid:
                clear_note(self.api, self.annotation, ref, note.node)
                continue
            entry = InFlight(ref, request, min(note.until, now + self.deadline_seconds),
                             note.node, note.cards, note.victims, priority=priority_of(pod),
                             evictor=note.evictor)
            with self._lock:
                dropped = self._remember(entry)
            tell_ended(self.hooks, dropped, PreemptionEnd.FORGOTTEN)
            restored += 1
            logger.info("preemption for %s on %s restored (its victims evicted by %s)",
                        ref.key, note.node or "several nodes", note.evictor)
            left = tuple(PodRef(r.namespace, r.name, r.uid)
                         for r in map(self.state.record, note.victims) if r is not None)
            if left and note.evictor == ALLOCATOR:  # the last leader stopped before: go on
                self.worker.submit(partial(self._evict, entry, left))
            if note.node:  # without one (the verb's answer over several nodes): no hold
                self._hold_when_free(entry)
        return restored

    # ------------------------------------------------------------------ the hold
    def released(self, node: str) -> None:
        """Room was released on ``node`` (the picture tells it, under its lock): hold the
        cards of each preemption there whose victims are all gone. Never raises."""
        if not self.in_flight:  # lock-free miss: the common case
            return
        now = self.clock()
        with self._lock:
            waiting = [f for f in self.in_flight.values()
                       if f.node == node and f.until > now and not f.held]
        for entry in waiting:
            self._hold_when_free(entry)

    def _hold_when_free(self, entry: InFlight) -> None:
        if any(self.state.record(uid) is not None for uid in entry.victims):
            return  # a victim still terminating: its cards are not free yet
        try:
            self._hold(entry)
        except Exception:  # the picture's watch must go on
            logger.exception("hold for %s on %s failed", entry.pod.key, entry.node)

    def _hold(self, entry: InFlight) -> None:
        ref, state = entry.pod, self.state

        def keep(allocation: Allocation, version: int) -> bool:
            return state.hold(ref.uid, ref.namespace, ref.name, allocation, version, None,
                              until=entry.until, made_for=entry.request)

        if state.record(ref.uid) is not None:
            return  # held by its own filter, or bound, already
        placed = place_and_keep(entry.request, partial(self._node_now, entry),
                                freed_first(entry.cards), ref.uid, keep, HOLD_PLACEMENTS)
        if not isinstance(placed, Allocation):
            return
        held = replace(entry, held=True)
        with self._lock:
            current = self.in_flight.get(ref.uid)
            if current is entry:
                self.in_flight[ref.uid] = held
        if current is not entry:  # deleted or bound meanwhile: the hold is nobody's
            state.release_hold(ref.uid)
            return
        self.worker.submit(partial(self._check, held))  # the watch may not see a deletion
        if self.requeue is not None:
            self.requeue.held_for(ref, entry.node, entry.priority)

    def _check(self, entry: InFlight) -> None:
        """(The worker.) End the preemption if its preemptor is no longer a pending pod."""
        if still_pending(self.api, entry.pod) is False:
            self._gone(entry)

    def _gone(self, entry: InFlight) -> None:
        """The preemptor is deleted (or bound elsewhere): forgotten here and by the requeue,
        its hold freed (the room goes to the next refused pod)."""
        uid = entry.pod.uid
        with self._lock:
            if self.in_flight.get(uid) is not entry:
                return
            del self.in_flight[uid]
        logger.info("preemption for %s ended: the pod is gone", entry.pod.key)
        tell_ended(self.hooks, (entry,), PreemptionEnd.DELETED)
        if self.requeue is not None:
            self.requeue.forget(uid)
        self.state.release_hold(uid)

    def _node_now(self, entry: InFlight) -> tuple[NodeState, int] | None:
        """The node as ``entry``'s hold may use it: cards reserved for others left out."""
        view = self.state.view(entry.node)
        if view is None:
            return None
        against = self.reserved(entry.pod.uid, entry.priority).get(entry.node, ())
        return blocked(view.state, against), view.version

    # ------------------------------------------------------------------ the end
    def allocated(self, pod: PodRef, node: str, cards: tuple[int, ...], policy: str) -> None:
        """A pod was bound: a preemption for it is over."""
        with self._lock:
            entry = self.in_flight.pop(pod.uid, None)
        if entry is not None:
            tell_ended(self.hooks, (entry,), bound_outcome(entry, node))

    def pod_gone(self, uid: str) -> None:
        """The watch saw the pod deleted: a preemption for it is over (its hold gone too)."""
        if uid in self.in_flight:  # lock-free miss
            with self._lock:
                entry = self.in_flight.pop(uid, None)
            if entry is not None:
                tell_ended(self.hooks, (entry,), PreemptionEnd.DELETED)
