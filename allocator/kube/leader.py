"""Lease-based leader election (coordination.k8s.io/v1), as client-go's leaderelection does.

Only the leader answers the verbs; the follower keeps its cache warm and is not ready.
Expiry is judged by the *local* time at which we last saw the lease record change (never by
comparing the holder's renewTime with our clock), so clock skew between replicas is harmless.
The leader gives up when it cannot renew within ``renew_deadline`` (< ``lease_duration``), so
its last bind finishes before anyone else may take over. A leader that stops gracefully
releases its Lease (:meth:`LeaderElector.release`, as client-go's ``ReleaseOnCancel``), so a
follower takes over at its next retry instead of after the lease lapses. Time is injected.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from allocator.errors import ApiError, Conflict
from allocator.ports import KubeApi, Obj

logger = logging.getLogger(__name__)


def micro_time(ts: float) -> str:
    """metav1.MicroTime wire format (RFC 3339 with microseconds, UTC)."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class LeaderElector:
    api: KubeApi
    namespace: str
    name: str
    identity: str
    clock: Callable[[], float]
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    _leader: bool = False
    _last_renew: float = 0.0
    _observed: tuple[str, str] = ("", "")  # (holder, renewTime) last seen
    _observed_at: float = 0.0
    _stopping: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)
    #: One Lease read-modify-write at a time: a renewal in flight must not re-take the Lease
    #: right after release() gave it up.
    _api_lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def is_leader(self) -> bool:
        with self._lock:
            if self._leader and self.clock() - self._last_renew > self.renew_deadline:
                logger.warning("leader lease %s not renewed in time: stepping down", self.name)
                self._leader = False
            return self._leader

    def _body(self, now: float, lease: Obj | None, transitions: int) -> Obj:
        spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.lease_duration),
            "acquireTime": micro_time(now),
            "renewTime": micro_time(now),
            "leaseTransitions": transitions,
        }
        meta: Obj = {"name": self.name, "namespace": self.namespace}
        if lease is not None:
            meta["resourceVersion"] = (lease.get("metadata") or {}).get("resourceVersion")
            old = lease.get("spec") or {}
            if old.get("holderIdentity") == self.identity and old.get("acquireTime"):
                spec["acquireTime"] = old["acquireTime"]
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta,
                "spec": spec}

    def try_acquire_or_renew(self) -> bool:
        with self._api_lock:
            if self._stopping:
                return self._lost()
            return self._acquire_or_renew()

    def _acquire_or_renew(self) -> bool:
        now = self.clock()
        try:
            lease = self.api.get_lease(self.namespace, self.name)
            if lease is None:
                self.api.create_lease(self.namespace, self._body(now, None, 0))
                return self._won(now)
            spec = lease.get("spec") or {}
            holder = spec.get("holderIdentity") or ""
            record = (holder, spec.get("renewTime") or "")
            if record != self._observed:
                self._observed, self._observed_at = record, now
            transitions = int(spec.get("leaseTransitions") or 0)
            if holder and holder != self.identity:
                duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
                if now - self._observed_at < duration:
                    return self._lost()
                transitions += 1
            self.api.replace_lease(self.namespace, self.name,
                                   self._body(now, lease, transitions))
            return self._won(now)
        except Conflict:
            return self._lost()
        except ApiError as exc:
            logger.warning("leader election: %s", exc)
            return self.is_leader  # keep leadership until the renew deadline passes

    def step_down(self) -> None:
        """Stop leading for good (graceful stop): from now on :attr:`is_leader` is False, so
        no verb is answered and no bind creates its Binding; the Lease is still held."""
        with self._lock:
            self._stopping = True
        self._lost()

    def release(self) -> bool:
        """Step down and give the Lease up, so a follower takes over at its next retry
        (``retry_period``) rather than after ``lease_duration``. Call it once in-flight binds
        are done. As client-go does (``tools/leaderelection/leaderelection.go``,
        ``release``): the same Lease with ``holderIdentity`` empty and
        ``leaseDurationSeconds: 1``. True when released (or not ours to release)."""
        self.step_down()
        with self._api_lock:
            try:
                lease = self.api.get_lease(self.namespace, self.name)
                spec = (lease or {}).get("spec") or {}
                if lease is None or spec.get("holderIdentity") != self.identity:
                    return True  # never ours, or already someone else's
                now = micro_time(self.clock())
                self.api.replace_lease(self.namespace, self.name, {
                    "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace,
                                 "resourceVersion": (lease.get("metadata") or {}).get(
                                     "resourceVersion")},
                    "spec": {"holderIdentity": "", "leaseDurationSeconds": 1,
                             "acquireTime": now, "renewTime": now,
                             "leaseTransitions": int(spec.get("leaseTransitions") or 0)},
                })
            except ApiError as exc:
                logger.warning("could not release lease %s/%s (a follower takes over when it "
                               "lapses): %s", self.namespace, self.name, exc)
                return False
        logger.info("released lease %s/%s", self.namespace, self.name)
        return True

    def _won(self, now: float) -> bool:
        with self._lock:
            if not self._leader:
                logger.info("became leader (lease %s/%s)", self.namespace, self.name)
            self._leader, self._last_renew = True, now
        return True

    def _lost(self) -> bool:
        with self._lock:
            if self._leader:
                logger.warning("lost leadership (lease %s/%s)", self.namespace, self.name)
            self._leader = False
        return False

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self.try_acquire_or_renew()
            stop.wait(self.retry_period)
