"""Kubernetes Events about the allocator's decisions: what they say, and how often (pure).

Three events, on the pod, as kube-scheduler and KAI record theirs (``events.k8s.io/v1``, so
``kubectl describe pod`` lists them with ``From tessera-allocator``):

* Normal ``Allocated`` (action Binding): ``allocated cards 0,1 of node X (policy binpack)``;
* Warning ``FailedAllocation`` (Binding): ``binding to node X failed: <the bind's error>``;
* Warning ``NoGPUFit`` (Filtering): ``0/5 nodes can take the GPU request: 3 nodes: ...``.

Rate limits follow client-go (``tools/events/event_broadcaster.go`` and
``tools/record/events_cache.go``, kubernetes v1.34):

* **series**: an event equal to one sent in the last :attr:`Limits.finish_seconds` (same pod,
  type, reason, action, note) is not created again; its ``series.count`` grows. The second
  occurrence is patched at once (as client-go does); later ones at most every
  :attr:`Limits.series_flush_seconds`, and a finished series gets its final count.
* **spam filter**: per pod, a token bucket of :attr:`Limits.pod_burst` new events refilled
  one per :attr:`Limits.pod_refill_seconds` (client-go's ``EventSourceObjectSpamFilter``:
  25, one per 5 minutes), so a pod whose refusal reason changes on every retry cannot flood.
* **overall**: :attr:`Limits.burst` writes, refilled :attr:`Limits.per_second`; a create
  beyond it is dropped, a series update waits for the next flush.

Nothing here does I/O or reads a clock: times are passed in. :mod:`allocator.kube.recorder` sends.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from allocator.decisions import PodRef

#: ``reportingController``; ``kubectl describe`` shows it in the ``From`` column.
REPORTING_CONTROLLER = "tessera-allocator"
NORMAL, WARNING = "Normal", "Warning"
ALLOCATED, FAILED_ALLOCATION, NO_GPU_FIT = "Allocated", "FailedAllocation", "NoGPUFit"
BINDING, FILTERING = "Binding", "Filtering"
#: kube-scheduler's own reason and action for a preemption (``Preempted``, ``Preempting``).
PREEMPTED, PREEMPTING = "Preempted", "Preempting"
#: A preemption whose preemptor was not bound by its deadline (its hold freed).
PREEMPTION_EXPIRED = "PreemptionExpired"
#: Field limits of events.k8s.io/v1 (kubernetes ``pkg/apis/core/validation/events.go``:
#: ``NoteLengthLimit`` bytes of note; reportingInstance, action and reason 128 characters).
NOTE_LIMIT = 1024
FIELD_LIMIT = 128


@dataclass(frozen=True)
class EventSpec:
    """One event about a pod, before it has a name or a time."""

    pod: PodRef
    type: str
    reason: str
    action: str
    note: str


def allocated(pod: PodRef, node: str, cards: tuple[int, ...], policy: str) -> EventSpec:
    which = f"card {cards[0]}" if len(cards) == 1 else f"cards {','.join(map(str, cards))}"
    return EventSpec(pod, NORMAL, ALLOCATED, BINDING,
                     f"allocated {which} of node {node} (policy {policy})")


def bind_failed(pod: PodRef, node: str, message: str) -> EventSpec:
    return EventSpec(pod, WARNING, FAILED_ALLOCATION, BINDING,
                     f"binding to node {node} failed: {message}")


def refused(pod: PodRef, summary: str) -> EventSpec:
    return EventSpec(pod, WARNING, NO_GPU_FIT, FILTERING, summary)


def bind_warning(pod: PodRef, reason: str, note: str) -> EventSpec:
    """What the node agent warns about a pod it is bound for (``NodeAgent.warn``)."""
    return EventSpec(pod, WARNING, reason, BINDING, note)


def _cards(cards: tuple[int, ...]) -> str:
    return f"card {cards[0]}" if len(cards) == 1 else f"cards {','.join(map(str, cards))}"


def preempted_victim(victim: PodRef, preemptor: PodRef, node: str,
                     cards: tuple[int, ...]) -> EventSpec:
    return EventSpec(victim, NORMAL, PREEMPTED, PREEMPTING,
                     f"preempted by {preemptor.key} for {_cards(cards)} of node {node}")


def preempting(preemptor: PodRef, victims: tuple[PodRef, ...], node: str,
               cards: tuple[int, ...]) -> EventSpec:
    names = ", ".join(v.key for v in victims)
    return EventSpec(preemptor, NORMAL, PREEMPTED, PREEMPTING,
                     f"preempting {names} for {_cards(cards)} of node {node}")


def preemption_expired(preemptor: PodRef, node: str, cards: tuple[int, ...]) -> EventSpec:
    return EventSpec(preemptor, WARNING, PREEMPTION_EXPIRED, PREEMPTING,
                     f"not bound to node {node} by the preemption's deadline: the hold of "
                     f"{_cards(cards)} is freed, the pod may preempt again")


def clip(text: str, limit_bytes: int) -> str:
    """``text`` cut to ``limit_bytes`` of UTF-8 (never mid-character), marked with '...'."""
    data = text.encode()
    if len(data) <= limit_bytes:
        return text
    return data[: limit_bytes - 3].decode(errors="ignore") + "..."


def micro_time(seconds: float) -> str:
    """A ``metav1.MicroTime`` (RFC 3339 with microseconds, UTC)."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# ---------------------------------------------------------------------- writes
@dataclass(frozen=True)
class Write:
    """One API write: create the Event ``name``, or patch its series to ``count``."""

    create: bool
    spec: EventSpec
    name: str
    first: float
    count: int = 1
    last: float = 0.0

    def as_create(self) -> Write:
        """The same write as a create (a series whose Event expired from the API server)."""
        return Write(True, self.spec, self.name, self.first, self.count, self.last)


def event_object(write: Write, instance: str) -> dict[str, Any]:
    """The ``events.k8s.io/v1`` Event a create write posts."""
    spec = write.spec
    regarding = {"apiVersion": "v1", "kind": "Pod", "namespace": spec.pod.namespace,
                 "name": spec.pod.name}
    if spec.pod.uid:
        # kubectl describe selects events by involvedObject.uid too.
        regarding["uid"] = spec.pod.uid
    event: dict[str, Any] = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": write.name, "namespace": spec.pod.namespace},
        "eventTime": micro_time(write.first),
        "reportingController": REPORTING_CONTROLLER,
        "reportingInstance": clip(instance, FIELD_LIMIT),
        "action": spec.action,
        "reason": spec.reason,
        "type": spec.type,
        "note": clip(spec.note, NOTE_LIMIT),
        "regarding": regarding,
    }
    if write.count > 1:
        event["series"] = series(write)
    return event


def series(write: Write) -> dict[str, Any]:
    return {"count": write.count, "lastObservedTime": micro_time(write.last)}


def series_patch(write: Write) -> dict[str, Any]:
    """The JSON merge patch a series write sends."""
    return {"series": series(write)}


class Held(StrEnum):
    """An occurrence that causes no write now."""

    COUNTED = "counted"  # in its series; a later flush sends the count
    DROPPED = "dropped"  # over a rate limit


# ---------------------------------------------------------------------- limits
@dataclass(frozen=True)
class Limits:
    series_flush_seconds: float = 30.0
    finish_seconds: float = 360.0
    pod_burst: int = 25
    pod_refill_seconds: float = 300.0
    burst: int = 50
    per_second: float = 10.0
    #: Series and per-pod buckets remembered; the least recently used go beyond it.
    max_tracked: int = 4096


@dataclass
class _Bucket:
    tokens: float
    at: float

    def take(self, now: float, burst: float, per_second: float) -> bool:
        # Times may arrive slightly out of order (stamped on several verb threads, queued
        # after): an earlier time adds nothing, it never takes tokens back.
        if now > self.at:
            self.tokens = min(burst, self.tokens + (now - self.at) * per_second)
            self.at = now
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True


@dataclass
class _Series:
    name: str
    first: float
    count: int
    sent: int
    last: float
    sent_at: float


@dataclass
class Correlator:
    """Decides, for each event observed, which write (if any) goes to the API server.

    Not thread-safe: one recorder thread owns it."""

    limits: Limits = field(default_factory=Limits)
    _series: OrderedDict[EventSpec, _Series] = field(default_factory=OrderedDict)
    _pods: OrderedDict[str, _Bucket] = field(default_factory=OrderedDict)
    _overall: _Bucket | None = None
    _last_name: tuple[str, int] = ("", 0)

    def observe(self, spec: EventSpec, now: float) -> Write | Held:
        """The write for this occurrence (a create or a series patch), or why none."""
        known = self._series.get(spec)
        if known is not None and now - known.last <= self.limits.finish_seconds:
            self._series.move_to_end(spec)
            known.count += 1
            known.last = max(known.last, now)
            if known.sent == 1 or now - known.sent_at >= self.limits.series_flush_seconds:
                return self._update(spec, known, now) or Held.COUNTED
            return Held.COUNTED
        if not self._pod_bucket(spec.pod, now) or not self._take_overall(now):
            return Held.DROPPED
        name = self._name(spec.pod, now)
        self._series[spec] = _Series(name, now, 1, 1, now, now)
        self._series.move_to_end(spec)
        while len(self._series) > self.limits.max_tracked:
            self._series.popitem(last=False)
        return Write(True, spec, name, now, 1, now)

    def due(self, now: float) -> list[Write]:
        """Series updates whose time has come, and the final count of finished series."""
        out: list[Write] = []
        finished: list[EventSpec] = []
        for spec, s in self._series.items():
            done = now - s.last > self.limits.finish_seconds
            if done:
                finished.append(spec)
            if s.count > s.sent and (done or now - s.sent_at
                                     >= self.limits.series_flush_seconds):
                write = self._update(spec, s, now)
                if write is not None:
                    out.append(write)
        for spec in finished:
            del self._series[spec]
        return out

    def tracked(self) -> int:
        return len(self._series)

    def _update(self, spec: EventSpec, s: _Series, now: float) -> Write | None:
        if not self._take_overall(now):
            return None  # stays unsent: the next due() tries again
        s.sent, s.sent_at = s.count, now
        return Write(False, spec, s.name, s.first, s.count, s.last)

    def _pod_bucket(self, pod: PodRef, now: float) -> bool:
        key = pod.uid or pod.key
        bucket = self._pods.get(key)
        if bucket is None:
            bucket = self._pods[key] = _Bucket(float(self.limits.pod_burst), now)
            while len(self._pods) > self.limits.max_tracked:
                self._pods.popitem(last=False)
        self._pods.move_to_end(key)
        return bucket.take(now, self.limits.pod_burst, 1.0 / self.limits.pod_refill_seconds)

    def _take_overall(self, now: float) -> bool:
        if self._overall is None:
            self._overall = _Bucket(float(self.limits.burst), now)
        return self._overall.take(now, self.limits.burst, self.limits.per_second)

    def _name(self, pod: PodRef, now: float) -> str:
        # client-go's name: "<object name>.<UnixNano in hex>"; kept unique when two events
        # share a nanosecond (a clock that does not advance, in tests), of one pod or not.
        nanos = int(now * 1e9)
        _, last_nanos = self._last_name
        if nanos <= last_nanos:
            nanos = last_nanos + 1
        self._last_name = (pod.key, nanos)
        # Object names are at most 253 characters; pod names at most 253 already.
        return f"{pod.name[:236]}.{nanos:x}"
