"""How a preemption under way ends (:mod:`allocator.verbs.preempt` calls these outside its
lock, once per entry it removed from its table of preemptions in flight): what the deadline
undoes, and the outcome told to the decision hooks
(:meth:`~allocator.decisions.DecisionHooks.preemption_ended`: ``/metrics`` counts each)."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from allocator.decisions import DecisionHooks, PreemptionEnd
from allocator.verbs.preempt_ports import InFlight, Picture, PreemptApi
from allocator.verbs.preempt_writes import clear_note

logger = logging.getLogger(__name__)


def tell_ended(hooks: DecisionHooks, entries: Iterable[InFlight],
               outcome: PreemptionEnd) -> None:
    """Tell ``hooks`` of the preemptions among ``entries`` that ended as ``outcome`` (an entry
    without a node is a pod no preemption helped: nothing began, nothing ends)."""
    for entry in entries:
        if entry.node:
            hooks.preemption_ended(entry.pod, entry.node, outcome)


def bound_outcome(entry: InFlight, node: str) -> PreemptionEnd:
    """A preemptor bound to ``node``: on the node its victims left, or elsewhere (the
    evictions were not needed after all)."""
    return PreemptionEnd.BOUND if entry.node == node else PreemptionEnd.BOUND_ELSEWHERE


def expire(entry: InFlight, state: Picture, api: PreemptApi, hooks: DecisionHooks,
           annotation: str) -> None:
    """No bind by the deadline (the worker's thread): the hold freed (the room goes to the
    next pod), the Event (``preemption_expired``), the outcome, the note and our nomination
    cleared. Without a node (the ``preemptVerb``'s answer over several nodes: nothing held,
    nothing begun here) only its note is cleared."""
    ref = entry.pod
    if not entry.node:
        logger.info("preemptVerb answer for %s over several nodes expired", ref.key)
        clear_note(api, annotation, ref, entry.node)
        return
    state.release_hold(ref.uid)
    logger.info("preemption for %s on %s expired", ref.key, entry.node)
    hooks.preemption_expired(ref, entry.node, entry.cards)
    tell_ended(hooks, (entry,), PreemptionEnd.DEADLINE)
    clear_note(api, annotation, ref, entry.node)
