"""Pods the allocator recently refused, with filter's reasons: the page's "pending" list.

Bounded and recent by construction: at most :data:`LIMIT` pods (the least recently refused
go first), each forgotten once it fits or is bound, or :data:`TTL_SECONDS` after its last
refusal (kube-scheduler retries an unschedulable pod at least every 5 minutes, so a pod still
pending keeps its entry fresh; a deleted one fades away).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from allocator.decisions import DecisionHooks, PodRef, reason_counts

LIMIT = 256
TTL_SECONDS = 600.0
#: Distinct reasons kept per pod (most frequent first): the page lists them all.
REASONS_KEPT = 8


@dataclass(frozen=True)
class Refusal:
    pod: PodRef
    #: (reason, nodes giving it), most frequent first.
    reasons: tuple[tuple[str, int], ...]
    nodes: int
    first: float
    last: float
    attempts: int

    def as_json(self) -> dict[str, object]:
        """The entry of ``/status`` ``refused``."""
        return {"namespace": self.pod.namespace, "name": self.pod.name, "uid": self.pod.uid,
                "attempts": self.attempts, "nodes": self.nodes, "first": self.first,
                "last": self.last,
                "reasons": [{"reason": reason, "nodes": n} for reason, n in self.reasons]}


class RecentRefusals(DecisionHooks):
    def __init__(self, clock: Callable[[], float] = time.time, limit: int = LIMIT,
                 ttl_seconds: float = TTL_SECONDS) -> None:
        self._clock = clock
        self._limit = limit
        self._ttl = ttl_seconds
        self._lock = threading.Lock()
        self._by_pod: OrderedDict[PodRef, Refusal] = OrderedDict()

    def refused(self, pod: PodRef, reasons: Mapping[str, str]) -> None:
        now = self._clock()
        counts = tuple(reason_counts(reasons)[:REASONS_KEPT])
        with self._lock:
            old = self._by_pod.pop(pod, None)
            self._by_pod[pod] = Refusal(
                pod, counts, len(reasons), old.first if old else now, now,
                old.attempts + 1 if old else 1)
            while len(self._by_pod) > self._limit:
                self._by_pod.popitem(last=False)

    def fits(self, pod: PodRef) -> None:
        self._forget(pod)

    def allocated(self, pod: PodRef, node: str, cards: tuple[int, ...], policy: str) -> None:
        self._forget(pod)

    def _forget(self, pod: PodRef) -> None:
        if pod in self._by_pod:  # lock-free miss: the common case on the verbs' path
            with self._lock:
                self._by_pod.pop(pod, None)

    def recent(self) -> list[Refusal]:
        """Refusals still fresh, the most recent first."""
        cutoff = self._clock() - self._ttl
        with self._lock:
            for pod in [p for p, r in self._by_pod.items() if r.last < cutoff]:
                del self._by_pod[pod]
            return list(reversed(self._by_pod.values()))
