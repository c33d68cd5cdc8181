"""The measured figures' poller: Prometheus's query API, read in the background.

A thin shell over :mod:`allocator.picture.measured`: every ``interval_seconds`` it asks
Prometheus for dcgm-exporter's figures, parses them and puts them on the picture
(:meth:`allocator.picture.state.ClusterState.apply_sample`). Never on a verb's path: filter,
prioritize and bind read the picture as it is. When queries fail for longer than
``stale_seconds`` the figures are taken off (placement by bookings alone, as without
metrics) and the source says so: ``/status`` ``measured``, the page's note,
``tessera_allocator_measured_fresh`` 0. Never a refusal, never an error on a verb.
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any, Final

from allocator.picture.measured import MeasuredConfig, MeasureError, Sample, parse_sample
from allocator.picture.state import ClusterState

logger = logging.getLogger(__name__)

#: The largest reply read (a larger one is a failed query: figures left as they were).
MAX_REPLY_BYTES: Final = 128 * 1024 * 1024

#: (URL, timeout seconds) -> the reply's body; raises OSError or MeasureError.
Fetch = Callable[[str, float], bytes]


def http_get(url: str, timeout: float) -> bytes:
    """GET ``url``; Prometheus answers a failed query with a JSON body and a 4xx/5xx status,
    whose body is returned for :func:`parse_sample` to read the error from."""
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            body: bytes = reply.read(MAX_REPLY_BYTES + 1)
    except urllib.error.HTTPError as exc:
        body = exc.read(64 * 1024)
        if not body:
            raise MeasureError(f"HTTP {exc.code}") from exc
    if len(body) > MAX_REPLY_BYTES:
        raise MeasureError(f"reply larger than {MAX_REPLY_BYTES} bytes")
    return body


class MeasuredSource:
    """Polls Prometheus and keeps the picture's measured figures fresh, or takes them off."""

    def __init__(self, config: MeasuredConfig, state: ClusterState, *,
                 fetch: Fetch = http_get, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.state = state
        self._fetch = fetch
        self._clock = clock
        self._lock = threading.Lock()
        self._last_success = 0.0
        self._last_error = ""
        self._applied = False
        self._sample: Sample | None = None
        self.queries: dict[str, int] = {"ok": 0, "failed": 0}

    def poll_once(self) -> bool:
        """One query; True when its figures were applied."""
        try:
            sample = parse_sample(self._fetch(self.config.query_url(), self.config.timeout_seconds),
                                  self.config.node_label)
        except (OSError, MeasureError, ValueError) as exc:
            self._failed(f"{type(exc).__name__}: {exc}")
            return False
        changed = self.state.apply_sample(sample, self.config)
        with self._lock:
            self._last_success = self._clock()
            self._last_error = ""
            self._sample = sample
            self._applied = True
            self.queries["ok"] += 1
        logger.debug("measured figures of %d cards on %d nodes applied, %d nodes changed",
                     sample.cards, len(sample.nodes), changed)
        return True

    def _failed(self, why: str) -> None:
        with self._lock:
            self.queries["failed"] += 1
            first = not self._last_error
            self._last_error = why[:500]
            drop = self._applied and not self._fresh_locked()
            if drop:
                self._applied = False
                self._sample = None
        if first:
            logger.warning("measured figures: query to %s failed: %s", self.config.url, why)
        if drop:
            self.state.apply_sample(None, self.config)
            logger.warning("measured figures are stale: placing by bookings alone until a "
                           "query to %s works", self.config.url)

    def _fresh_locked(self) -> bool:
        return (self._last_success > 0
                and self._clock() - self._last_success <= self.config.stale_seconds)

    @property
    def fresh(self) -> bool:
        with self._lock:
            return self._applied and self._fresh_locked()

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.poll_once()
            except Exception:  # a bug: logged; the allocator goes on placing by bookings
                logger.exception("measured figures: poll failed")
            stop.wait(self.config.interval_seconds)

    def status(self) -> dict[str, Any]:
        """``/status`` ``measured``: where from, fresh or not, and what was read."""
        with self._lock:
            sample, last, error = self._sample, self._last_success, self._last_error
            fresh = self._applied and self._fresh_locked()
        doc: dict[str, Any] = {
            "source": self.config.url,
            "fresh": fresh,
            "lastSuccess": last or None,
            "lastError": error or None,
            "nodes": len(sample.nodes) if sample is not None else 0,
            "cards": sample.cards if sample is not None else 0,
            "skippedSeries": dict(sample.skipped) if sample is not None else {},
        }
        doc["note"] = self.note(fresh, error)
        return doc

    def note(self, fresh: bool, error: str) -> str:
        if fresh:
            return ""
        if not self._last_success:
            return (f"measured GPU figures from {self.config.url} not read yet"
                    f"{': ' + error if error else ''}: placing by bookings alone")
        return (f"measured GPU figures from {self.config.url} are stale"
                f"{' (' + error + ')' if error else ''}: placing by bookings alone")
