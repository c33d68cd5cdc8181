"""Pods that filter left with no node for lack of room, asked again when our watch releases
room they now fit in.

Why: kube-scheduler and the allocator learn of a completed or deleted pod through separate
watches. kube-scheduler re-tries a pod the extender refused on any cluster event (v1.34.4
``schedule_one.go`` gives it the pseudo-plugin ``Extender``, which registers for every event:
``framework/runtime/framework.go``, ``defaultEnqueueExtension``), so the release's own event
may bring a waiting pod to filter before our watch has applied the release. Filter then still
says "no room", and the pod waits for the next cluster event: on a quiet cluster up to five
minutes (``--pod-max-in-unschedulable-pods-duration``).

Filter does not wait for our picture to catch up. A consistent read of every GPU pod, which it
did before, costs seconds on a big cluster (32 MB for 3,950 pods), and kube-scheduler runs
filter one pod at a time: every pod of the cluster waited with each refused one
(docs/benchmarks.md, issue 13's sixteenth pass). Instead :class:`RequeueOnRelease` remembers
the pods refused for lack of room; when our watch releases a pod's cards on a node, every pod
refused within the last :data:`WINDOW_SECONDS` that now fits on that node (at most
:data:`PER_NODE` of them, the highest ``spec.priority`` first, then the least recently
refused) is asked again: a new value of
:attr:`~tessera.vocabulary.Vocabulary.requeue_annotation` on it is an update of an unscheduled
pod, on which kube-scheduler's queue moves an extender-refused pod back to be scheduled
(``Extender`` registers for every pod event). A pod refused before the window had its retry for
this release already, or will have it: kube-scheduler retries on the release's event, and that
retry is a refusal inside the window if our watch was late.

Bounded: at most :data:`LIMIT` refused pods are remembered (the least recently refused go
first); each is asked again at most once per refusal; the releases waiting to be read are a
set of node names, and each distinct request is judged once per node. The asking runs in
its own thread (:meth:`RequeueOnRelease.run`): the watch only notes the node.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from allocator.decisions import PodRef
from tessera.vocabulary import PodRequest

logger = logging.getLogger(__name__)

#: How long after a refusal a release still asks the pod again: how late our watch may apply
#: a release that kube-scheduler's informer has already delivered. Short, because a pod
#: refused before the release is re-tried by kube-scheduler on the release's own event.
WINDOW_SECONDS = 2.0
#: Pods asked again per node released, the highest priority first, then the least recently
#: refused: a release frees room for a few pods, and every pod asked again costs an API write
#: and a scheduling attempt.
PER_NODE = 4
#: Refused pods remembered at most (hostile filter bodies can name any number of pods).
LIMIT = 4096


@dataclass(frozen=True)
class Refused:
    pod: PodRef
    request: PodRequest
    at: float
    #: ``spec.priority``: a release asks the highest first, as kube-scheduler's queue would
    #: pop them (PrioritySort), so room freed for one pod goes to the one it would schedule.
    priority: int = 0


def pod_priority(pod: Mapping[str, Any]) -> int:
    """The pod's ``spec.priority`` (the Priority admission plugin sets it; 0 when absent)."""
    spec = pod.get("spec")
    value = spec.get("priority") if isinstance(spec, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


class RequeueOnRelease:
    """``fits(request, node)``: whether a pod of ``request`` fits on ``node`` now;
    ``ask_again(pod)``: the API write that makes kube-scheduler schedule ``pod`` again.
    Clock injected for tests."""

    def __init__(self, fits: Callable[[PodRequest, str], bool],
                 ask_again: Callable[[PodRef], None], *,
                 window_seconds: float = WINDOW_SECONDS, per_node: int = PER_NODE,
                 limit: int = LIMIT,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._fits = fits
        self._ask_again = ask_again
        self.window_seconds = window_seconds
        self.per_node = per_node
        self.limit = limit
        self._clock = clock
        self._lock = threading.Condition()
        self._refused: OrderedDict[str, Refused] = OrderedDict()
        self._released: set[str] = set()

    # ------------------------------------------------------------------ from filter
    def refused(self, pod: PodRef, request: PodRequest, priority: int = 0) -> None:
        """Filter left ``pod`` (of ``spec.priority`` ``priority``) with no node, some for lack
        of room."""
        if not pod.uid:
            return
        with self._lock:
            self._refused.pop(pod.uid, None)
            self._refused[pod.uid] = Refused(pod, request, self._clock(), priority)
            while len(self._refused) > self.limit:
                self._refused.popitem(last=False)

    def fitted(self, uid: str) -> None:
        """Filter found the pod a node: nothing to ask again."""
        if uid in self._refused:  # lock-free miss: the common case on filter's path
            with self._lock:
                self._refused.pop(uid, None)

    # ------------------------------------------------------------------ from the watch
    def released(self, node: str) -> None:
        """Our watch released a pod's cards on ``node`` (called under the state's lock: only
        notes it)."""
        with self._lock:
            if self._refused:
                self._released.add(node)
                self._lock.notify()

    # ------------------------------------------------------------------ the asking
    def due(self) -> list[PodRef]:
        """The pods to ask again for the releases noted so far (forgotten here: a new
        refusal remembers a pod again), and forgets refusals older than the window."""
        with self._lock:
            nodes, self._released = self._released, set()
            cutoff = self._clock() - self.window_seconds
            while self._refused and next(iter(self._refused.values())).at < cutoff:
                self._refused.popitem(last=False)
            # highest priority first; within one, the least recently refused (stable sort)
            candidates = sorted(self._refused.values(), key=lambda r: -r.priority)
        due: dict[str, PodRef] = {}
        for node in sorted(nodes):
            fits: dict[PodRequest, bool] = {}  # refused pods mostly share a few requests
            asked_here = 0
            for r in candidates:
                if asked_here == self.per_node:
                    break
                if r.pod.uid in due:
                    continue
                if r.request not in fits:
                    fits[r.request] = self._fits(r.request, node)
                if fits[r.request]:
                    due[r.pod.uid] = r.pod
                    asked_here += 1
        with self._lock:
            for uid in due:
                self._refused.pop(uid, None)
        return list(due.values())

    def run(self, stop: threading.Event) -> None:
        """Ask again as releases come, until ``stop`` is set."""
        while not stop.is_set():
            with self._lock:
                if not self._released:
                    self._lock.wait(timeout=1.0)
            for pod in self.due():
                try:
                    self._ask_again(pod)
                except Exception as exc:  # gone meanwhile, or the API down: the pod's next
                    # retry (any cluster event) finds the room anyway
                    logger.info("pod %s (uid %s) not asked again after a release: %s",
                                pod.key, pod.uid, exc)


def requeue_patch(annotation: str, pod: PodRef, stamp: str) -> dict[str, object]:
    """The JSON merge patch that asks ``pod`` again: ``annotation`` set to ``stamp`` (a
    value it did not have), the UID as a precondition (a pod recreated under the name is
    left alone: the API server refuses a changed ``metadata.uid``)."""
    return {"metadata": {"uid": pod.uid, "annotations": {annotation: stamp}}}
