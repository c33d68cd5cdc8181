"""What the allocator decided about a pod, told to whoever listens: the hooks of the core.

The verbs (:mod:`allocator.verbs`) call these at the moments a person would want to know of:
a pod bound with its cards, a bind that failed, a pod no offered node could take (with each
node's reason), and a pod that fits again. The Events recorder (:mod:`allocator.kube.recorder`) and
the page's recent-refusals map (:mod:`allocator.service.pending`) listen; tests listen with a list.

Hooks run on the verbs' threads, so a listener must be quick (enqueue, update a small map)
and must not raise; :class:`Fanout` makes sure a faulty one cannot fail a verb.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PodRef:
    """A pod by identity (what an Event's ``regarding`` needs)."""

    namespace: str
    name: str
    uid: str

    @classmethod
    def of(cls, pod: Mapping[str, object]) -> PodRef:
        meta = pod.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        return cls(str(meta.get("namespace") or "default"), str(meta.get("name") or ""),
                   str(meta.get("uid") or ""))

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class PreemptionEnd(StrEnum):
    """How a preemption under way ended (the ``outcome`` of ``/metrics``'
    ``tessera_allocator_preemptions_ended_total``): only ``bound`` led to the bind it was made
    for."""

    #: The preemptor was bound on the node its victims were evicted from.
    BOUND = "bound"
    #: The preemptor was bound, but on another node: the evictions were not needed after all.
    BOUND_ELSEWHERE = "bound_elsewhere"
    #: The deadline passed before the preemptor was bound.
    DEADLINE = "deadline"
    #: The preemptor was deleted before it was bound.
    DELETED = "deleted"
    #: Dropped from the bounded table of preemptions under way (more than its size at once),
    #: or a ``preemptVerb`` answer replaced by the answer to kube-scheduler's next call.
    FORGOTTEN = "forgotten"
    #: A pod of higher priority took its reserved cards (placed there, or preempting there):
    #: its preemptor may preempt again at its next refusal.
    OUTRANKED = "outranked"


class DecisionHooks:
    """Every hook the core offers, each a no-op by default."""

    def allocated(self, pod: PodRef, node: str, cards: tuple[int, ...], policy: str) -> None:
        """The pod is bound to ``node`` holding ``cards`` (its allocation record written)."""

    def bind_failed(self, pod: PodRef, node: str, message: str) -> None:
        """A bind of the pod to ``node`` did not happen (``message`` as kube-scheduler gets
        it); nothing of it remains."""

    def refused(self, pod: PodRef, reasons: Mapping[str, str]) -> None:
        """Filter left the pod no node: ``reasons`` has one entry per offered node."""

    def fits(self, pod: PodRef) -> None:
        """Filter found the pod at least one node (an earlier refusal no longer holds)."""

    def preempted(self, preemptor: PodRef, victims: tuple[PodRef, ...], node: str,
                  cards: tuple[int, ...]) -> None:
        """``victims`` were evicted from ``node`` so that ``preemptor`` gets ``cards``."""

    def preemption_expired(self, preemptor: PodRef, node: str, cards: tuple[int, ...]
                           ) -> None:
        """``preemptor`` was not bound by its preemption's deadline: its hold of ``cards`` of
        ``node`` is freed."""

    def preemption_started(self, preemptor: PodRef, victims: tuple[PodRef, ...], node: str,
                           cards: tuple[int, ...]) -> None:
        """A preemption for ``preemptor`` was decided: ``victims`` chosen on ``node`` so that
        it gets ``cards``; their evictions come next (:meth:`preempted` says who went)."""

    def preemption_ended(self, preemptor: PodRef, node: str, outcome: PreemptionEnd) -> None:
        """The preemption on ``node`` for ``preemptor`` is over, as ``outcome`` says."""


NO_HOOKS = DecisionHooks()


class Fanout(DecisionHooks):
    """Calls every listener in turn; a listener that raises is logged and skipped."""

    def __init__(self, listeners: Sequence[DecisionHooks]) -> None:
        self.listeners = tuple(listeners)

    def _each(self, hook: Callable[[DecisionHooks], None], what: str) -> None:
        for listener in self.listeners:
            try:
                hook(listener)
            except Exception:  # a listener's bug must never fail the verb that told it
                logger.exception("decision hook %s of %s failed", what,
                                 type(listener).__name__)

    def allocated(self, pod: PodRef, node: str, cards: tuple[int, ...], policy: str) -> None:
        self._each(lambda h: h.allocated(pod, node, cards, policy), "allocated")

    def bind_failed(self, pod: PodRef, node: str, message: str) -> None:
        self._each(lambda h: h.bind_failed(pod, node, message), "bind_failed")

    def refused(self, pod: PodRef, reasons: Mapping[str, str]) -> None:
        self._each(lambda h: h.refused(pod, reasons), "refused")

    def fits(self, pod: PodRef) -> None:
        self._each(lambda h: h.fits(pod), "fits")

    def preempted(self, preemptor: PodRef, victims: tuple[PodRef, ...], node: str,
                  cards: tuple[int, ...]) -> None:
        self._each(lambda h: h.preempted(preemptor, victims, node, cards), "preempted")

    def preemption_expired(self, preemptor: PodRef, node: str, cards: tuple[int, ...]
                           ) -> None:
        self._each(lambda h: h.preemption_expired(preemptor, node, cards),
                   "preemption_expired")

    def preemption_started(self, preemptor: PodRef, victims: tuple[PodRef, ...], node: str,
                           cards: tuple[int, ...]) -> None:
        self._each(lambda h: h.preemption_started(preemptor, victims, node, cards),
                   "preemption_started")

    def preemption_ended(self, preemptor: PodRef, node: str, outcome: PreemptionEnd) -> None:
        self._each(lambda h: h.preemption_ended(preemptor, node, outcome), "preemption_ended")


def reason_counts(reasons: Mapping[str, str]) -> list[tuple[str, int]]:
    """(reason, how many nodes gave it), most frequent first, then by reason: the shape of
    kube-scheduler's ``0/5 nodes are available: 3 Insufficient cpu, 2 ...``."""
    counts = Counter(reasons.values())
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))


def refusal_summary(reasons: Mapping[str, str]) -> str:
    """``0/3 nodes can take the GPU request: 2 nodes: <reason>; 1 node: <reason>``."""
    parts = [f"{n} node{'s' if n != 1 else ''}: {reason}"
             for reason, n in reason_counts(reasons)]
    return f"0/{len(reasons)} nodes can take the GPU request: " + "; ".join(parts)
