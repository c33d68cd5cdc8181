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

Priority holds (docs/metrics.md, "Room that appears"): when a release leaves room that a
refused pod fits in, the room is held in the picture for the refused pod kube-scheduler's queue
would pop first (the highest :func:`~allocator.verbs.priority.pod_priority`, then the least
recently refused) before any pod is asked again, so a pod filtered meanwhile (a lower-priority
one kube-scheduler retried on the same event) is not given those cards. The hold is a filter
hold in that pod's name (:meth:`ClusterState.hold <allocator.picture.state.ClusterState.hold>`):
its own filter, asked again, replaces it; it ends when the pod binds elsewhere or is deleted,
and its deadline (:attr:`AllocatorConfig.hold_seconds
<allocator.verbs.config.AllocatorConfig.hold_seconds>`) ends it otherwise. Releases are judged
before each filter (:meth:`RequeueOnRelease.settle`), not only by the asking thread: a filter
never places a pod in room a release left that a refused pod of the queue's order is owed.

The race this closes: a refusal judged on a picture without the release, recorded after the
watch applied that release, found no refusal to ask again (the release was not even noted
when nothing was remembered). A refusal now carries the release count filter read before
judging (:meth:`RequeueOnRelease.mark`); the nodes released since are judged again for it.

Bounded: at most :data:`LIMIT` refused pods are remembered (the least recently refused go
first); each is asked again at most once per refusal; the releases waiting to be read are a
set of node names, and each distinct request is judged once per node. The asking runs in
its own thread (:meth:`RequeueOnRelease.run`): the watch only notes the node.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Collection
from dataclasses import dataclass

from allocator.decisions import PodRef
from allocator.verbs.priority import pod_priority
from tessera.vocabulary import PodRequest

__all__ = ["LIMIT", "PER_NODE", "WINDOW_SECONDS", "Refused", "RequeueOnRelease",
           "pod_priority", "requeue_patch"]

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
#: Releases remembered for refusals judged before them (:meth:`RequeueOnRelease.mark`).
RECENT_RELEASES = 1024
#: Nodes a refusal remembers as lacking room at most; a pod refused on more may be held room
#: on any node (a hold it does not claim ends at its deadline).
NODES_REMEMBERED = 256


@dataclass(frozen=True)
class Refused:
    pod: PodRef
    request: PodRequest
    at: float
    #: :func:`pod_priority`: a release holds room for and asks the highest first, as
    #: kube-scheduler's queue would pop them (PrioritySort).
    priority: int = 0
    #: The nodes the pod lacked room on (None: too many to remember, or not said): room is
    #: held for it only there (the other nodes kube-scheduler's plugins left out).
    nodes: frozenset[str] | None = None


class RequeueOnRelease:
    """``fits(request, node)``: whether a pod of ``request`` fits on ``node`` now;
    ``ask_again(pod)``: the API write that makes kube-scheduler schedule ``pod`` again;
    ``hold(refused, node)``: hold room on ``node`` for a refused pod, True when held (None:
    no priority holds). Clock injected for tests."""

    def __init__(self, fits: Callable[[PodRequest, str], bool],
                 ask_again: Callable[[PodRef], None], *,
                 window_seconds: float = WINDOW_SECONDS, per_node: int = PER_NODE,
                 limit: int = LIMIT,
                 clock: Callable[[], float] = time.monotonic,
                 hold: Callable[[Refused, str], bool] | None = None) -> None:
        self._fits = fits
        self._ask_again = ask_again
        self.hold = hold
        self.window_seconds = window_seconds
        self.per_node = per_node
        self.limit = limit
        self._clock = clock
        self._lock = threading.Condition()
        #: Held while releases are judged (:meth:`due`): a filter's :meth:`settle` waits for
        #: a judging the asking thread began, else it could place a pod in room about to be
        #: held for another.
        self._judging = threading.Lock()
        self._refused: OrderedDict[str, Refused] = OrderedDict()
        self._released: set[str] = set()
        #: Releases counted, the last few by count (for refusals judged before them).
        self._releases = 0
        self._recent: deque[tuple[int, str]] = deque(maxlen=RECENT_RELEASES)
        #: Pods judged due by :meth:`settle`, for the asking thread.
        self._asking: dict[str, PodRef] = {}
        #: Room held for a refused pod after a release, counted (``/metrics`` may read it).
        self.held = 0
        #: The holds made here not yet taken over by the pod's own filter: pod UID -> (node,
        #: priority), the oldest first, at most ``limit`` (:meth:`outranked`).
        self._holds: OrderedDict[str, tuple[str, int]] = OrderedDict()

    # ------------------------------------------------------------------ from filter
    def mark(self) -> int:
        """The releases counted so far: read before judging a pod, given to :meth:`refused`."""
        return self._releases

    def refused(self, pod: PodRef, request: PodRequest, priority: int = 0, *,
                nodes: Collection[str] | None = None, since: int | None = None) -> None:
        """Filter left ``pod`` (of :func:`pod_priority` ``priority``) with no node, some for
        lack of room (``nodes``: those); ``since``: :meth:`mark` before it judged."""
        if not pod.uid:
            return
        short = (frozenset(nodes) if nodes is not None and len(nodes) <= NODES_REMEMBERED
                 else None)
        with self._lock:
            self._refused.pop(pod.uid, None)
            self._refused[pod.uid] = Refused(pod, request, self._clock(), priority, short)
            while len(self._refused) > self.limit:
                self._refused.popitem(last=False)
            if since is not None and since < self._releases:
                # Released while this pod was judged on a picture without the release.
                self._released.update(node for count, node in self._recent if count > since)
                self._lock.notify()

    def fitted(self, uid: str) -> None:
        """Filter found the pod a node: nothing to ask again."""
        if uid in self._refused:  # lock-free miss: the common case on filter's path
            with self._lock:
                self._refused.pop(uid, None)

    def settle(self) -> None:
        """Judge the releases noted so far now (holds made for refused pods; the asking left
        to :meth:`run`): filter calls it before it places a pod."""
        if not self._released and not self._judging.locked():  # lock-free: the common case
            return
        due = self.due()
        if due:
            with self._lock:
                self._asking.update((pod.uid, pod) for pod in due)
                self._lock.notify()

    def outranked(self, priority: int, names: Collection[str]) -> list[tuple[str, str]]:
        """The holds made here for pods of lower priority than ``priority`` on ``names``:
        (pod UID, node) each, forgotten here. A pod kube-scheduler's queue pops before the
        held-for one takes the room as the queue would give it."""
        if not self._holds:  # lock-free miss: the common case on filter's path
            return []
        with self._lock:
            found = [(uid, node) for uid, (node, held_at) in self._holds.items()
                     if held_at < priority and node in names]
            for uid, _node in found:
                del self._holds[uid]
        return found

    def held_for(self, pod: PodRef, node: str, priority: int) -> None:
        """Room on ``node`` was held for ``pod`` by its preemption (its victims gone): the
        one hold of that room, as one made here (a pod of higher ``priority`` filtered
        meanwhile takes it, :meth:`outranked`), and the pod asked again (kube-scheduler's
        retry comes through here, not through a judging of the release that would find the
        room taken by its own hold)."""
        with self._lock:
            self.held += 1
            self._holds.pop(pod.uid, None)
            self._holds[pod.uid] = (node, priority)
            while len(self._holds) > self.limit:
                self._holds.popitem(last=False)
            self._asking[pod.uid] = pod
            self._lock.notify()

    def forget(self, uid: str) -> None:
        """The watch saw the pod deleted: no room is held for it, nor is it asked again."""
        with self._lock:
            self._refused.pop(uid, None)
            self._holds.pop(uid, None)
            self._asking.pop(uid, None)

    def taken_over(self, uid: str) -> None:
        """The pod's own filter runs: a hold made here for it is its filter's now."""
        if uid in self._holds:  # lock-free miss
            with self._lock:
                self._holds.pop(uid, None)

    # ------------------------------------------------------------------ from the watch
    def released(self, node: str) -> None:
        """Our watch released a pod's cards on ``node`` (called under the state's lock: only
        notes it)."""
        with self._lock:
            self._releases += 1
            self._recent.append((self._releases, node))
            if self._refused:
                self._released.add(node)
                self._lock.notify()

    # ------------------------------------------------------------------ the asking
    def due(self) -> list[PodRef]:
        """The pods to ask again for the releases noted so far (forgotten here: a new
        refusal remembers a pod again), room held on each node for the first of them, and
        forgets refusals older than the window."""
        with self._judging:
            return self._due()

    def _due(self) -> list[PodRef]:
        with self._lock:
            nodes, self._released = self._released, set()
            cutoff = self._clock() - self.window_seconds
            while self._refused and next(iter(self._refused.values())).at < cutoff:
                self._refused.popitem(last=False)
            # highest priority first; within one, the least recently refused (stable sort)
            candidates = sorted(self._refused.values(), key=lambda r: -r.priority)
        due: dict[str, PodRef] = {}
        for node in sorted(nodes):
            self._judge(node, candidates, due)
        with self._lock:
            for uid in due:
                self._refused.pop(uid, None)
        return list(due.values())

    def _judge(self, node: str, candidates: list[Refused], due: dict[str, PodRef]) -> None:
        """The refused pods to ask again for room on ``node``, in the queue's order; room held
        for the first that fits (then the others are judged against what is left)."""
        fits: dict[PodRequest, bool] = {}  # refused pods mostly share a few requests
        asked_here = 0
        held = self.hold is None
        for r in candidates:
            if asked_here == self.per_node:
                break
            if r.pod.uid in due or (r.nodes is not None and node not in r.nodes):
                continue
            if r.request not in fits:
                fits[r.request] = self._fits(r.request, node)
            if not fits[r.request]:
                continue
            if not held and self.hold is not None and self.hold(r, node):
                held = True
                self._note_hold(r, node)
                fits.clear()  # the held room is taken now
            due[r.pod.uid] = r.pod
            asked_here += 1

    def _note_hold(self, r: Refused, node: str) -> None:
        with self._lock:
            self.held += 1
            self._holds.pop(r.pod.uid, None)
            self._holds[r.pod.uid] = (node, r.priority)
            while len(self._holds) > self.limit:
                self._holds.popitem(last=False)

    def run(self, stop: threading.Event) -> None:
        """Ask again as releases come, until ``stop`` is set."""
        while not stop.is_set():
            with self._lock:
                if not self._released and not self._asking:
                    self._lock.wait(timeout=1.0)
                asking, self._asking = self._asking, {}
            for pod in [*asking.values(), *self.due()]:
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
