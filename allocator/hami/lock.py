"""HAMi's node lock, taken before the Binding and waited for when held (not failed on).

The contract (Project-HAMi/HAMi v2.10.0 ``pkg/util/nodelock/nodelock.go``): the scheduler
sets the Node annotation ``hami.io/mutex.lock`` to ``<RFC 3339>,<namespace>,<pod>`` with a
merge patch carrying the Node's ``resourceVersion`` (so two lockers cannot both win), binds,
and the device plugin's ``Allocate`` finds the pod through the lock
(``pkg/util/util.go`` ``GetAllocatePodByNode``), then releases it
(``updatePodAnnotationsAndReleaseLock``). A lock older than five minutes, or whose pod is gone,
is taken over by the next locker (``LockNode``).

hami-scheduler fails a bind that finds the node locked and kube-scheduler retries the pod
after its backoff; that is what makes a node of HAMi pods fill slowly. Here a bind waits:
the binds of one node queue in process (one thread at a time asks the API server, the rest
wait on a lock), each for at most ``wait_seconds`` (under the bind verb's timeout); a free
lock is taken at once. The waiting thread reads the node again as soon as our node watch
shows the lock released (:meth:`NodeLocks.released`), polling only in case the watch lags:
the plugin starts the node's next pod at once instead of up to a poll later.

The node is not read before the lock is taken when our node watch has shown it
(:meth:`NodeLocks.watched`): the patch carries that copy's ``resourceVersion``, so it takes
the lock only if the node is still exactly as watched (its register annotation, which the
bind's writer reads, included); a 409 means the watch lagged and the node is read. A poll
that woke without a watch event reads the node too.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from allocator.errors import ApiError, Conflict, NotFound
from allocator.hami.codec import (
    BIND_FAILED,
    BIND_SUCCESS,
    LOCK_EXPIRY_SECONDS,
    Flavor,
    HamiFormatError,
    NodeLock,
    encode_lock,
    parse_lock,
)

logger = logging.getLogger(__name__)

Obj = dict[str, Any]


class LockApi(Protocol):
    def get_node(self, name: str) -> Obj | None: ...
    def patch_node(self, name: str, patch: Obj) -> None: ...
    def get_pod(self, namespace: str, name: str) -> Obj: ...


class NodeLockTimeout(Exception):
    """The node's lock stayed held by another pod for the whole wait."""


@dataclass(frozen=True)
class LockSettings:
    #: Under the bind verb's httpTimeout (10 s in the shipped scheduler configurations):
    #: kube-scheduler must hear the bind's failure, not give up on a bind still running.
    wait_seconds: float = 8.0
    expiry_seconds: float = LOCK_EXPIRY_SECONDS
    first_poll_seconds: float = 0.01
    max_poll_seconds: float = 0.2
    #: Binds parked waiting for a held lock, all nodes together, beyond which one more fails
    #: at once (None: no cap). Off by default: measured at 1,000 nodes (docs/hami.md), a cap
    #: of six made kube-scheduler filter each refused pod again and again (42 filters a pod)
    #: and bound fewer pods than waiting did, though waiting binds take request threads.
    max_waiting: int | None = None
    #: A lock this old whose plugin releases it is checked for a finished or gone pod (the
    #: plugin died before releasing); younger ones are simply waited for.
    owner_check_after_seconds: float = 2.0


def _annotations(node: Mapping[str, Any]) -> Mapping[str, str]:
    return (node.get("metadata") or {}).get("annotations") or {}


class NodeLocks:
    """Takes and gives back HAMi's lock on nodes for this allocator's binds."""

    def __init__(self, api: LockApi, flavor: Flavor, settings: LockSettings | None = None,
                 clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.api, self.flavor = api, flavor
        self.settings = settings or LockSettings()
        self.clock, self.sleep = clock, sleep
        self._queues: dict[str, threading.Lock] = {}
        #: The node as last read by a locker (its register annotation serves the bind).
        self._seen: dict[str, Obj] = {}
        #: Per node, its resourceVersion and annotations as our node watch last showed them.
        self._watched: dict[str, tuple[str, Mapping[str, str]]] = {}
        #: Per node with a waiting bind: set when our node watch shows its lock free.
        self._free: dict[str, threading.Event] = {}
        self._guard = threading.Lock()
        self._waiting = 0

    def _queue(self, node: str) -> threading.Lock:
        with self._guard:
            return self._queues.setdefault(node, threading.Lock())

    def forget(self, node: str) -> None:
        with self._guard:
            self._queues.pop(node, None)
            self._seen.pop(node, None)
            self._watched.pop(node, None)
            self._free.pop(node, None)

    def watched(self, node: str, version: str, annotations: Mapping[str, str]) -> None:
        """Our node watch shows ``node`` at ``version`` with these annotations (kept as
        given: the watch's objects are not changed after)."""
        if version:
            self._watched[node] = (version, annotations)

    def _as_watched(self, node: str) -> Obj | None:
        kept = self._watched.get(node)
        if kept is None:
            return None
        version, annotations = kept
        return {"metadata": {"resourceVersion": version, "annotations": annotations}}

    def released(self, node: str) -> None:
        """Our node watch shows ``node`` without a lock: a bind waiting there reads it now."""
        free = self._free.get(node)
        if free is not None:
            free.set()

    def _wait_free(self, node: str, seconds: float) -> bool:
        """Wait for the watch to show ``node``'s lock released; whether it did."""
        free = self._free.get(node)
        if free is None:
            self.sleep(seconds)
            return False
        return free.wait(seconds)

    def seen(self, node: str) -> Obj | None:
        """The node as the last lock taken on it read it (None: not read yet)."""
        return self._seen.get(node)

    def acquire(self, node: str, namespace: str, name: str) -> None:
        """Hold the node's lock for pod ``namespace/name``; :class:`NodeLockTimeout` when
        another pod held it for the whole wait, :class:`ApiError` when the API failed."""
        if not self.flavor.lock_key:
            return
        deadline = time.monotonic() + self.settings.wait_seconds
        queue = self._queue(node)
        if queue.acquire(blocking=False):
            try:
                if self._take(node, namespace, name, deadline, may_wait=False):
                    return
            finally:
                queue.release()
        with self._guard:
            cap = self.settings.max_waiting
            if cap is not None and self._waiting >= cap:
                raise NodeLockTimeout(f"node {node} is locked and {self._waiting} binds already "
                                      f"wait for their nodes; try again")
            self._waiting += 1
        try:
            if not queue.acquire(timeout=max(0.0, self.settings.wait_seconds)):
                raise NodeLockTimeout(f"node {node}: {self.settings.wait_seconds:g}s waiting "
                                      f"behind other binds of this node")
            try:
                self._take(node, namespace, name, deadline, may_wait=True)
            finally:
                queue.release()
        finally:
            with self._guard:
                self._waiting -= 1

    def _take(self, node: str, namespace: str, name: str, deadline: float,
              may_wait: bool) -> bool:
        """Take the lock; False when it is held and ``may_wait`` is not set."""
        key = self.flavor.lock_key
        poll = self.settings.first_poll_seconds
        holder = ""
        if may_wait:
            with self._guard:
                free = self._free.setdefault(node, threading.Event())
        as_watched = True
        while True:
            if may_wait:
                free.clear()  # before the read: a release after it wakes the wait below
            current = self._as_watched(node) if as_watched else None
            if current is None:
                current = self.api.get_node(node)
                if current is None:
                    raise ApiError(f"node {node} not found", 404)
            value = _annotations(current).get(key)
            if value is None or self._stale(node, value, namespace, name):
                if self._patch(node, current, encode_lock(self.clock(), namespace, name)):
                    self._seen[node] = current
                    return True
                as_watched = False  # the node changed under us: read it at once
                continue
            if not may_wait:
                return False
            holder = value
            left = deadline - time.monotonic()
            if left <= 0:
                raise NodeLockTimeout(f"node {node} locked by {holder!r} for the whole "
                                      f"{self.settings.wait_seconds:g}s wait")
            as_watched = self._wait_free(node, min(poll, left))
            poll = min(poll * 2, self.settings.max_poll_seconds)

    def _stale(self, node: str, value: str, namespace: str, name: str) -> bool:
        """The lock may be taken over: ours already, expired, unreadable, or its pod is gone
        or finished with the plugin (which then failed to release it)."""
        try:
            lock = parse_lock(value)
        except HamiFormatError as exc:
            logger.warning("node %s: lock %r unreadable (%s): taken over", node, value, exc)
            return True
        if lock.held_by(namespace, name) and lock.namespace:
            return True
        if lock.expired(self.clock(), self.settings.expiry_seconds):
            logger.info("node %s: lock %r expired: taken over", node, value)
            return True
        if not lock.namespace:
            return False  # legacy form: only its age says it is stale
        if (self.flavor.plugin_releases_lock
                and self.clock() - lock.taken_at < self.settings.owner_check_after_seconds):
            return False
        return self._owner_done(lock)

    def _owner_done(self, lock: NodeLock) -> bool:
        try:
            pod = self.api.get_pod(lock.namespace, lock.name)
        except NotFound:
            return True
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        phase = annotations.get(self.flavor.bind_phase_key)
        status = (pod.get("status") or {}).get("phase")
        return phase in (BIND_SUCCESS, BIND_FAILED) or status in ("Succeeded", "Failed")

    def _patch(self, node: str, current: Mapping[str, Any], value: str | None) -> bool:
        version = (current.get("metadata") or {}).get("resourceVersion")
        try:
            self.api.patch_node(node, {"metadata": {
                "annotations": {self.flavor.lock_key: value}, "resourceVersion": version}})
        except Conflict:
            return False
        return True

    def release(self, node: str, namespace: str, name: str) -> None:
        """Give back our lock when the bind did not happen (the plugin will never see the
        pod). Best effort: a lock left behind expires."""
        if not self.flavor.lock_key:
            return
        for _attempt in range(5):
            try:
                current = self.api.get_node(node)
                if current is None:
                    return
                value = _annotations(current).get(self.flavor.lock_key)
                if value is None or not parse_lock(value).held_by(namespace, name):
                    return
                if self._patch(node, current, None):
                    return
            except (ApiError, HamiFormatError) as exc:
                logger.warning("node %s: releasing the lock of %s/%s failed: %s",
                               node, namespace, name, exc)
                return
