"""Sends the allocator's Events (:mod:`allocator.kube.events`) from a thread of its own.

The verbs only enqueue (``put_nowait`` on a bounded queue; a full queue drops and counts), so
an API server that is slow to take Events never slows a filter or a bind. One thread takes
each event in turn, asks the :class:`~allocator.kube.events.Correlator` what to write, and writes
it; between events it flushes the series updates that are due.

Writes that fail are logged and not retried (an Event is advice; client-go gives up too, after
its retries), except a series update whose Event the API server no longer has (Events expire,
an hour by default): that one is created afresh with its count, as client-go does.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping

from allocator.decisions import DecisionHooks, PodRef, refusal_summary
from allocator.errors import ApiError, NotFound
from allocator.kube import events
from allocator.kube.events import Correlator, EventSpec, Held, Write
from allocator.ports import KubeApi

logger = logging.getLogger(__name__)

QUEUE_SIZE = 1000
#: How often the thread wakes up to flush due series updates when nothing arrives, and how
#: often it looks for due updates at most (a look walks every series tracked: per event, it
#: cost more than the event itself once thousands were tracked).
TICK_SECONDS = 1.0
#: How long the thread lets events gather after a batch (fewer wake-ups under load; the
#: verbs' enqueue then finds no waiter to notify).
BATCH_SECONDS = 0.1


class EventRecorder(DecisionHooks):
    def __init__(
        self,
        api: KubeApi,
        instance: str,
        *,
        correlator: Correlator | None = None,
        clock: Callable[[], float] = time.time,
        on_outcome: Callable[[str], None] = lambda _outcome: None,
        queue_size: int = QUEUE_SIZE,
    ) -> None:
        self._api = api
        self._instance = f"{events.REPORTING_CONTROLLER}-{instance}"
        self._correlator = correlator or Correlator()
        self._clock = clock
        #: Called with "created", "updated", "dropped" or "failed" for every event.
        self._on_outcome = on_outcome
        self._queue: queue.Queue[tuple[EventSpec, float]] = queue.Queue(queue_size)
        self._next_due = float("-inf")

    # ------------------------------------------------------------------ hooks (verbs' threads)
    def allocated(self, pod: PodRef, node: str, cards: tuple[int, ...], policy: str) -> None:
        self.record(events.allocated(pod, node, cards, policy))

    def bind_failed(self, pod: PodRef, node: str, message: str) -> None:
        self.record(events.bind_failed(pod, node, message))

    def refused(self, pod: PodRef, reasons: Mapping[str, str]) -> None:
        if reasons:
            self.record(events.refused(pod, refusal_summary(reasons)))

    def preempted(self, preemptor: PodRef, victims: tuple[PodRef, ...], node: str,
                  cards: tuple[int, ...]) -> None:
        for victim in victims:
            self.record(events.preempted_victim(victim, preemptor, node, cards))
        self.record(events.preempting(preemptor, victims, node, cards))

    def preemption_expired(self, preemptor: PodRef, node: str, cards: tuple[int, ...]) -> None:
        self.record(events.preemption_expired(preemptor, node, cards))

    def record(self, spec: EventSpec) -> None:
        try:
            self._queue.put_nowait((spec, self._clock()))
        except queue.Full:
            self._on_outcome("dropped")

    # ------------------------------------------------------------------ the sending thread
    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self.process(timeout=TICK_SECONDS)
            stop.wait(BATCH_SECONDS)

    def process(self, timeout: float = 0.0) -> None:
        """Send what is queued (waiting up to ``timeout`` for the first), then what is due
        (looked for once per :data:`TICK_SECONDS` of the clock at most)."""
        try:
            item: tuple[EventSpec, float] | None = self._queue.get(timeout=timeout) \
                if timeout > 0 else self._queue.get_nowait()
        except queue.Empty:
            item = None
        while item is not None:
            spec, at = item
            write = self._correlator.observe(spec, at)
            if isinstance(write, Write):
                self._send(write)
            elif write is Held.DROPPED:
                self._on_outcome("dropped")
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                item = None
        now = self._clock()
        if now >= self._next_due:
            self._next_due = now + TICK_SECONDS
            for write in self._correlator.due(now):
                self._send(write)

    def _send(self, write: Write) -> None:
        pod = write.spec.pod
        try:
            if write.create:
                self._api.create_event(pod.namespace, events.event_object(write, self._instance))
                self._on_outcome("created")
                return
            try:
                self._api.patch_event(pod.namespace, write.name, events.series_patch(write))
            except NotFound:
                self._api.create_event(pod.namespace,
                                       events.event_object(write.as_create(), self._instance))
            self._on_outcome("updated")
        except ApiError as exc:
            self._on_outcome("failed")
            logger.warning("event %s %s on %s not recorded: %s", write.spec.reason,
                           write.name, pod.key, exc,
                           extra={"namespace": pod.namespace, "pod": pod.name, "uid": pod.uid})
