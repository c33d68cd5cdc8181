"""The allocator's request bodies under granian: complete, within the deadline, before the
app runs.

granian calls a WSGI app in one of its threads as soon as the headers are in, and its
``wsgi.input`` reads from the connection with no deadline (granian ``src/wsgi/types.rs``,
``WSGIBody.read``): a client that stalls its body would hold that thread for as long as it
likes. :class:`CompleteBodies` has a :class:`BodyReaders` thread read the body while granian's
thread waits at most the body policy's deadline, then answers 408. Only a complete request
runs the app, in one of ``threads`` app slots (requests that wait on other services, the
allocator's binds, have ``threads`` slots of their own, so they never keep the quick ones
waiting: ``slow_paths``); granian has
:data:`~tessera.serving.granian.server.BODY_WAIT_THREADS` more threads for the waiting, so
stalled bodies hold no app slot. Once the 408 is sent granian ends the request, and the
reader returns (the 408 goes out as an iterator: :func:`_then_wait`); at most
:data:`BODY_READER_THREADS` readers exist, and past that a body is refused with 503 at once.
"""

from __future__ import annotations

import io
import logging
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final

from tessera.serving.policy import BodyPolicy, Refusal, WsgiApp, call_wsgi, status_line

logger = logging.getLogger(__name__)

#: The most body readers that may exist at once (module doc): each one waiting on a stalled
#: client costs a thread until its 408 is sent.
BODY_READER_THREADS: Final = 256
#: Request methods that carry no body worth reading (a body sent anyway stays unread).
_NO_BODY_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS", "DELETE"})


class PendingRead:
    """The outcome of one body read, for the one request waiting for it: a plain lock,
    released when the read ends. Not a ``concurrent.futures.Future``: its ``Condition`` runs
    Python code on both sides of every wait, and every request with a body waits once
    (docs/benchmarks.md, issue 13's twelfth pass)."""

    __slots__ = ("_body", "_ended", "_error")

    def __init__(self) -> None:
        self._ended = threading.Lock()
        self._ended.acquire()
        self._body = b""
        self._error: BaseException | None = None

    def end(self, body: bytes = b"", error: BaseException | None = None) -> None:
        """The read ended with ``body``, or failed with ``error``."""
        self._body, self._error = body, error
        self._ended.release()

    def result(self, timeout: float | None = None) -> bytes:
        """The body, once the read has ended (:class:`TimeoutError` if not within
        ``timeout`` seconds; the read's own error if it failed)."""
        if not self._ended.acquire(timeout=-1 if timeout is None else timeout):
            raise TimeoutError("the body's read has not ended")
        self._ended.release()  # ended for good: a later call answers at once
        if self._error is not None:
            raise self._error
        return self._body


class BodyReaders:
    """Daemon threads that run body reads for :class:`CompleteBodies`, made on demand, at
    most ``limit``. Daemon threads, not a ``ThreadPoolExecutor``: the executor's threads are
    joined at exit, and one waiting on a stalled client would hold the worker's exit."""

    def __init__(self, limit: int = BODY_READER_THREADS) -> None:
        self.limit = limit
        self._jobs: queue.SimpleQueue[tuple[Callable[[], bytes], PendingRead]] = (
            queue.SimpleQueue())
        self._lock = threading.Lock()
        self._threads = 0
        #: jobs queued or running; never more than the threads (each job has its thread)
        self._busy = 0

    def submit(self, read: Callable[[], bytes]) -> PendingRead | None:
        """``read()``'s outcome to wait for, or None when every reader is taken (all
        ``limit`` busy)."""
        with self._lock:
            if self._busy == self._threads:
                if self._threads >= self.limit:
                    return None
                self._threads += 1
                threading.Thread(target=self._run, name=f"body-{self._threads}",
                                 daemon=True).start()
            self._busy += 1
        pending = PendingRead()
        self._jobs.put((read, pending))
        return pending

    def _run(self) -> None:
        while True:
            read, pending = self._jobs.get()
            try:
                body = read()
            except BaseException as exc:  # the waiter reports it
                self._free()
                pending.end(error=exc)
            else:
                # free before the waiter wakes: its next body must find this reader idle
                self._free()
                pending.end(body)

    def _free(self) -> None:
        with self._lock:
            self._busy -= 1


def read_at_most(stream: Any, limit: int) -> bytes:
    """Up to ``limit`` bytes of ``stream`` (fewer at its end)."""
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        chunk = stream.read(limit - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


class CompleteBodies:
    """A WSGI app that runs ``app`` on complete request bodies only, at most ``threads`` at
    once (module doc).

    As the one body policy says (:class:`~tessera.serving.policy.BodyPolicy`): a declared
    length over the cap is refused unread, a body without one once it grows past the cap
    (413), a body not complete within the deadline gets 408, and one that cannot be given a
    reader 503, all in the services' JSON error shape. The app's answer is collected whole in
    its slot (:func:`~tessera.serving.policy.call_wsgi`: an app that raises gets a logged
    500).

    Requests whose path ``slow_paths`` names run in ``threads`` slots of their own: they
    wait on other services (the allocator's binds wait on the API server), and must not
    keep the others waiting for a slot."""

    def __init__(self, app: WsgiApp, *, threads: int, body: BodyPolicy,
                 readers: BodyReaders | None = None,
                 slow_paths: frozenset[str] = frozenset()) -> None:
        self.app = app
        self.app_slots = threading.BoundedSemaphore(threads)
        self.slow_paths = slow_paths
        self.slow_slots = threading.BoundedSemaphore(threads)
        self.body = body
        self.readers = readers or BodyReaders()

    def __call__(self, environ: dict[str, Any],
                 start_response: Callable[..., Any]) -> Iterable[bytes]:
        refusal, reading = self._take_body(environ)
        if refusal is not None:
            answer = refuse(environ, start_response, refusal)
            return answer if reading is None else _then_wait(answer, reading, self.body)
        slow = environ.get("PATH_INFO") in self.slow_paths
        with self.slow_slots if slow else self.app_slots:
            status, headers, content = call_wsgi(self.app, environ)
        start_response(status_line(status), headers)
        return [content]

    def _take_body(self, environ: dict[str, Any]
                   ) -> tuple[Refusal | None, PendingRead | None]:
        """Put the complete body in ``environ`` (module doc), or say why not (and the read
        still under way, if any)."""
        declared = str(environ.get("CONTENT_LENGTH") or "").strip()
        if self.body.declared_over_cap(declared):
            return self.body.too_large(), None  # nothing read
        length = int(declared) if declared.isascii() and declared.isdigit() else None
        if length == 0 or (length is None and environ.get("REQUEST_METHOD") in _NO_BODY_METHODS):
            environ["wsgi.input"] = io.BytesIO(b"")
            return None, None
        stream = environ["wsgi.input"]
        limit = self.body.read_limit(length)
        reading = self.readers.submit(lambda: read_at_most(stream, limit))
        if reading is None:
            return Refusal(503, "too many request bodies are being received; try again"), None
        try:
            body = reading.result(timeout=self.body.seconds)
        except TimeoutError:
            return self.body.too_slow(), reading
        except Exception as exc:  # the client's connection, not our bug
            logger.info("request body could not be read: %s", exc)
            return Refusal(400, "request body could not be read"), None
        if self.body.over_cap(len(body)):
            return self.body.too_large(), None
        environ["wsgi.input"] = io.BytesIO(body)
        if length is None:
            environ["CONTENT_LENGTH"] = str(len(body))
        return None, None


def _then_wait(answer: list[bytes], reading: PendingRead, body: BodyPolicy
               ) -> Iterator[bytes]:
    """``answer``, then the end of the body's read, in granian's thread.

    Returned as an iterator, not a list, on purpose. granian 2.8 sends an iterator's chunks as
    they come; once this answer is sent, it ends the request (its body included), and the
    reader returns at once. Returned as a list while the reader still waits, the answer froze
    every Python thread of the worker until the client sent or left (measured: the thread
    that returned the list waited in granian's Rust code without giving up the GIL)."""
    yield from answer
    try:
        reading.result(timeout=body.seconds)
    except TimeoutError:
        logger.warning("a stalled request body was still being read %g s after its 408",
                       body.seconds)
    except Exception:  # the client left: what the wait was for
        pass


def refuse(environ: dict[str, Any], start_response: Callable[..., Any],
           refusal: Refusal) -> list[bytes]:
    """An error answer in the services' JSON shape, asking an HTTP/1 client to close."""
    body = refusal.body
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
    if str(environ.get("SERVER_PROTOCOL", "")).startswith("HTTP/1"):
        headers.append(("Connection", "close"))  # no such header in HTTP/2
    start_response(status_line(refusal.status), headers)
    return [body]


