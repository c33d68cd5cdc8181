"""The preemptions' API work, off filter's thread: one worker, a bounded queue of jobs.

Why: filter answers kube-scheduler one pod at a time, and a preemption's writes (the note, the
nomination, one eviction per victim, each up to the client's timeout) would hold that answer
and every pod behind it. Filter only enqueues (``put_nowait``: it never waits); a full queue
refuses the job, and the pod is looked at again at a later refusal. One thread keeps a
preemption's victims in order (a 429 stops the rest, as before) and never runs two
preemptions' evictions at once: the API server's eviction rate is bounded by it.

Between jobs the worker calls ``tick`` (deadlines, the restore on becoming leader) at most
every :data:`TICK_SECONDS`.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Final

logger = logging.getLogger(__name__)

#: Jobs waiting at most (each is one preemption: a note and a few evictions).
QUEUE_SIZE: Final = 64
#: How often the worker ticks when no job comes.
TICK_SECONDS: Final = 1.0

Job = Callable[[], None]


class Worker:
    """One thread's bounded queue of jobs; ``tick`` between them. Never raises out of a job."""

    def __init__(self, tick: Callable[[], None], size: int = QUEUE_SIZE) -> None:
        self._tick = tick
        self._queue: queue.Queue[Job] = queue.Queue(size)

    def submit(self, job: Job) -> bool:
        """Queue ``job``; False when the queue is full (never waits)."""
        try:
            self._queue.put_nowait(job)
        except queue.Full:
            return False
        return True

    def pending(self) -> int:
        return self._queue.qsize()

    def drain(self) -> None:
        """Run the queued jobs on the calling thread, tick, then run what the tick queued
        (tests)."""
        self._run_queued()
        self._safe_tick()
        self._run_queued()

    def _run_queued(self) -> None:
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                return
            self._run(job)

    def run(self, stop: threading.Event) -> None:
        """Take jobs as they come until ``stop`` is set; tick between them."""
        while not stop.is_set():
            try:
                job = self._queue.get(timeout=TICK_SECONDS)
            except queue.Empty:
                job = None
            if job is not None:
                self._run(job)
            self._safe_tick()

    @staticmethod
    def _run(job: Job) -> None:
        try:
            job()
        except Exception:  # an API error the job did not expect, or a bug: the next goes on
            logger.exception("preemption job failed")

    def _safe_tick(self) -> None:
        try:
            self._tick()
        except Exception:
            logger.exception("preemption tick failed")
