"""On-demand consistent reads of the GPU pods, for filters that would leave a pod nowhere.

Why: kube-scheduler and the allocator learn of a completed or deleted pod through separate
watches. The scheduler re-tries a waiting pod on that event (extender-rejected pods have no
rejecting plugin, so any event requeues them: ``pkg/scheduler/backend/queue/
scheduling_queue.go``, ``isPodWorthRequeuing``) and may call filter *before* our watch has
delivered the release. Filter would then still say "1 free", and the pod would wait for the
next cluster event — on a quiet cluster up to five minutes
(``--pod-max-in-unschedulable-pods-duration``). So before such a rejection stands, the
allocator lists the GPU pods (a consistent read) and releases what is gone
(:meth:`ClusterState.reconcile_pods`), then decides again.

Cost control: at most one list in flight (concurrent filters wait for it), at most one list
started per ``min_interval`` (a flood of unschedulable pods costs ~1 list per second), and no
filter waits longer than ``max_wait`` (well under kube-scheduler's 5 s extender
``httpTimeout``). Which list is fresh enough for a pod (:meth:`PodResync.needed`): one started
after this pod's previous rejection — the event that brought it back came later — and
otherwise one started within the last ``min_interval``.

The list runs in its own thread, so a hanging API call never holds a filter beyond
``max_wait``. Clock and thread start are injected for tests.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from functools import partial

from allocator.ports import Obj
from allocator.state import ClusterState

logger = logging.getLogger(__name__)

#: Pods whose last rejection time is remembered (beyond that the oldest are forgotten).
REMEMBERED_REJECTIONS = 4096
_NEVER = float("-inf")


def _thread(target: Callable[[], None]) -> None:
    threading.Thread(target=target, name="gpu-pod-resync", daemon=True).start()


class PodResync:
    def __init__(
        self,
        list_pods: Callable[[], Iterable[Obj]],
        state: ClusterState,
        *,
        min_interval: float = 1.0,
        max_wait: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        spawn: Callable[[Callable[[], None]], None] = _thread,
    ) -> None:
        self._list_pods = list_pods
        self._state = state
        self.min_interval = min_interval
        self.max_wait = max_wait
        self._clock = clock
        self._spawn = spawn
        self._cond = threading.Condition()
        self._running_since: float | None = None  # start of the list in flight
        self._last_start = _NEVER
        self._last_failed = False
        self._fresh_since = _NEVER  # start of the newest list reconciled into the state
        self._rejected: OrderedDict[str, float] = OrderedDict()
        self.lists = 0  # lists started (for tests and logs)

    # ------------------------------------------------------------------ per pod
    def needed(self, uid: str) -> float:
        """The earliest list start that makes the picture fresh enough for this pod."""
        with self._cond:
            previous = self._rejected.get(uid, _NEVER)
        return max(previous, self._clock() - self.min_interval)

    def rejected(self, uid: str) -> None:
        """The pod was just left without a node: its retry needs a list begun after now."""
        with self._cond:
            self._rejected[uid] = self._clock()
            self._rejected.move_to_end(uid)
            if len(self._rejected) > REMEMBERED_REJECTIONS:
                self._rejected.popitem(last=False)

    def forget(self, uid: str) -> None:
        with self._cond:
            self._rejected.pop(uid, None)

    # ------------------------------------------------------------------ the read
    def fresh(self, since: float) -> bool:
        """Whether :meth:`ensure` would return at once, True (no read, no wait)."""
        with self._cond:
            return self._fresh_since >= since

    def ensure(self, since: float) -> bool:
        """Make sure a list begun at or after ``since`` has been reconciled into the state,
        waiting at most ``max_wait``. False when that was not possible in time (the caller
        then answers from the watch's picture, as it would without this)."""
        deadline = self._clock() + self.max_wait
        while True:
            with self._cond:
                if self._fresh_since >= since:
                    return True
                now = self._clock()
                if now >= deadline:
                    return False
                if self._running_since is not None:
                    # Join the list in flight (it may be older than we need; then loop), but
                    # never wait on one that already hangs longer than a filter may wait.
                    until = min(deadline, self._running_since + self.max_wait)
                    if until <= now:
                        return False
                    self._cond.wait(until - now)
                    continue
                start_at = self._last_start + self.min_interval
                if start_at > now:
                    if self._last_failed or start_at >= deadline:
                        return False  # after a failed list, don't make filters queue up
                    self._cond.wait(start_at - now)
                    continue
                self._running_since = self._last_start = now
                self.lists += 1
            self._spawn(partial(self._run, now))

    def _run(self, started: float) -> None:
        ok = False
        try:
            mark = self._state.epoch()  # before the read: later changes are newer than it
            released = self._state.reconcile_pods(self._list_pods(), mark)
            ok = True
            if released:
                logger.info("GPU pod resync released the cards of %d pod(s) the watch had "
                            "not reported gone yet", len(released))
        except Exception as exc:
            logger.warning("GPU pod resync failed: %s", exc)
        finally:
            with self._cond:
                self._running_since = None
                self._last_failed = not ok
                if ok:
                    self._fresh_since = max(self._fresh_since, started)
                self._cond.notify_all()
