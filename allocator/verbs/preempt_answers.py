"""The ``preemptVerb``'s side of :class:`~allocator.verbs.preempt.Preempt` (which sets these
attributes): its answers remembered as preemptions in flight, and their notes written before
they go back to kube-scheduler (decision 0026).

kube-scheduler deletes the victims it is answered; the allocator never evicts them, now or
after a restart (the note says ``evictor: kube-scheduler``). What the two paths keep apart:

- a preemption of filter's path in flight (victims chosen, before its deadline): the verb
  answers no candidates, so kube-scheduler evicts nobody more for the pod;
- an answer of the verb in flight: filter's path evicts nobody for the pod until its
  deadline (:meth:`Preempt.__call__ <allocator.verbs.preempt.Preempt.__call__>` claims no
  pod already in the table).

A second call of the verb for a pod answered before replaces that answer, unless its freed
cards are held for the pod already: kube-scheduler asks again only when its last preemption
left no victim terminating on the pod's nominated node (v1.34.4
``pkg/scheduler/framework/plugins/defaultpreemption/default_preemption.go`` lines 328-352,
``PodEligibleToPreemptOthers``), e.g. when the answer never reached it (the allocator died
between the note and the reply) and nobody was deleted.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import replace

from allocator.decisions import DecisionHooks, PreemptionEnd
from allocator.verbs.preempt_ends import tell_ended
from allocator.verbs.preempt_note import ALLOCATOR, KUBE_SCHEDULER, MAX_ITEMS, Note
from allocator.verbs.preempt_ports import InFlight, PreemptApi
from allocator.verbs.preempt_writes import write_answer_note

logger = logging.getLogger(__name__)


class Answering:
    """The ``preemptVerb``'s answers, remembered (:mod:`allocator.verbs.preempt_verb`)."""

    in_flight: OrderedDict[str, InFlight]
    clock: Callable[[], float]
    hooks: DecisionHooks
    api: PreemptApi
    annotation: str
    _lock: threading.Lock
    #: Remember an entry (under the lock); the oldest dropped.
    _remember: Callable[[InFlight], list[InFlight]]

    def acting_for(self, uid: str) -> bool:
        """Whether the verb answers no candidates for the pod: filter's path chose victims
        for it, or an earlier answer's freed cards are held for it, before the deadline."""
        with self._lock:
            entry = self.in_flight.get(uid)
            return entry is not None and self._keeps(entry)

    def _keeps(self, entry: InFlight) -> bool:
        """(Under the lock.) Whether ``entry`` stands against a new answer for its pod."""
        return (bool(entry.victims) and entry.until > self.clock()
                and (entry.evictor == ALLOCATOR or entry.held))

    def remember_answer(self, entry: InFlight) -> bool:
        """Remember what the verb answers (``entry``, kube-scheduler evicts its victims) and
        write its note before the answer goes (replacing an earlier answer's): filter's path
        evicts nobody for the pod until the deadline, and a new leader restores it; with a
        node its cards are reserved too. False, remembering nothing, when filter's path chose
        victims for the pod meanwhile, or the note could not be written (kube-scheduler gets
        no candidates and tries the pod again)."""
        entry = replace(entry, evictor=KUBE_SCHEDULER)
        uid = entry.pod.uid
        with self._lock:
            earlier = self.in_flight.get(uid)
            if earlier is not None and self._keeps(earlier):
                return False
            dropped = self._remember(entry)
        # A replaced answer ends here (its successor starts below).
        tell_ended(self.hooks, [*dropped, *([earlier] if earlier else [])],
                   PreemptionEnd.FORGOTTEN)
        if not write_answer_note(self.api, self.annotation, entry.pod, answer_note(entry)):
            with self._lock:
                if self.in_flight.get(uid) is entry:
                    del self.in_flight[uid]
            return False
        if entry.node:  # several nodes answered: kube-scheduler picks one, nothing begins here
            self.hooks.preemption_started(entry.pod, entry.victim_refs, entry.node,
                                          entry.cards)
        return True


def answer_note(entry: InFlight) -> Note:
    """The note of the verb's answer ``entry``. Without a node (answered over several nodes)
    it names no card and at most :data:`MAX_ITEMS` victims (a reader needs none of them: such
    a note reserves nothing and is never held)."""
    if not entry.node:
        return Note("", (), entry.until, entry.victims[:MAX_ITEMS], KUBE_SCHEDULER)
    return Note(entry.node, entry.cards, entry.until, entry.victims, KUBE_SCHEDULER)
