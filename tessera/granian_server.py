"""How the allocator meets the network: granian's WSGI interface (Rust HTTP/1.1 and HTTP/2,
rustls), one worker process.

Why not the webhook's stack (gunicorn's asyncio worker, :mod:`tessera.transport`): on the
scheduling path every pod costs kube-scheduler two HTTPS calls to the extender. granian
parses them and does TLS outside Python, and it offers HTTP/2, which kube-scheduler's extender
client takes (apimachinery ``SetTransportDefaults``): every call shares one connection, so
no mutual-TLS handshake recurs (docs/benchmarks.md, issue 13's tenth pass).

What granian does not do, and this module does:

- **Complete bodies within a deadline.** granian calls a WSGI app in one of its threads as
  soon as the headers are in, and its ``wsgi.input`` reads from the connection with no
  deadline (granian ``src/wsgi/types.rs``, ``WSGIBody.read``): a client that stalls its body
  would hold that thread for as long as it likes. :class:`CompleteBodies` has a
  :class:`BodyReaders` thread read the body while granian's thread waits at most
  :data:`~tessera.transport.BODY_SECONDS`, then answers 408. Only a complete request runs the
  app, in one of ``threads`` app slots (requests that wait on other services, the
  allocator's binds, have ``threads`` slots of their own, so they never keep the quick ones
  waiting: ``slow_paths``); granian has :data:`BODY_WAIT_THREADS` more threads
  for the waiting, so stalled bodies hold no app slot, and it takes that many at once, each
  renewed every 10 s, to delay other requests. Once the 408 is sent granian ends the request,
  and the reader returns (the 408 goes out as an iterator: :func:`_then_wait`); at most
  :data:`BODY_READER_THREADS` readers exist, and past that a body is refused with 503 at once.
- **Renewed TLS files reach the new worker.** granian resolves the files' symlinks once, when
  the server is made; :func:`serve` resolves them again for each worker it starts (a Secret
  volume's ``..data`` swap).
- **Certificate renewal.** granian reads its TLS files when a worker starts. A
  :class:`TlsFilesWatch` thread in the worker notices changed files; once they load as a
  pair it stops the worker gracefully (the allocator steps down and releases its Lease) and
  granian's main process starts a new one, which serves the new files: the same process
  (pid), a new worker, as a restart of the allocator would be (it re-reads the cluster).
- **Exit hooks.** granian's worker is a ``multiprocessing`` child, which leaves through
  ``os._exit``: ``atexit`` handlers would never run. The worker runs them from a
  ``multiprocessing`` finaliser, which runs on its way out (the Lease release).
- **JSON logs.** granian's own lines (logger ``_granian``, from Rust too) go through the
  root logger's JSON handler (:mod:`tessera.logs`).

What is lost against the webhook's stack: failed TLS handshakes are not reported in an
INFO log line (rustls gives no hook; granian logs each at DEBUG, ``TCP handshake failed`` or,
from 2.8.9, ``TCP accept failed``) and new TLS connections are not counted.
"""

from __future__ import annotations

import atexit
import http
import io
import logging
import multiprocessing.util
import os
import queue
import signal
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Final

from granian.constants import HTTPModes, Interfaces, Loops, SSLProtocols
from granian.http import HTTP1Settings
from granian.log import LogLevels

from tessera import logs, transport
from tessera.serving import ServingConfig
from tessera.transport import BODY_SECONDS, FIRST_REQUEST_SECONDS, WsgiApp

logger = logging.getLogger(__name__)

#: The most body readers that may exist at once (module doc): each one waiting on a stalled
#: client costs a thread until its 408 is sent.
BODY_READER_THREADS: Final = 256
#: granian threads beyond the app's ``threads``, for requests waiting for their bodies
#: (module doc); granian makes them on demand and ends them when idle.
BODY_WAIT_THREADS: Final = 128
#: How often the worker looks at its TLS files (a renewal is served within about this long,
#: plus a worker's start).
TLS_FILES_POLL_SECONDS: Final = 1.0
#: granian's main process stops respawning (and exits) when a worker it has respawned ends
#: within 5.5 s (granian ``server/common.py``, ``_serve_loop``): a worker restarts for new
#: TLS files only once it is older than this.
WORKER_MIN_AGE_SECONDS: Final = 6.0
#: How long granian's main process waits for a stopping worker before killing it: the
#: allocator's exit hook waits up to 5 s for binds in flight, then releases its Lease.
WORKER_STOP_SECONDS: Final = 15
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

    As :class:`tessera.transport.WsgiBridge` does: a declared length over ``max_body_bytes``
    reaches the app with no body read, and a body without a declared length that grows past
    it with its first ``max_body_bytes`` + 1 bytes, so the app's own cap
    (``tessera.wire.read_body``) answers 413 in the app's words. A body not complete within
    ``body_seconds`` gets 408 JSON ``{"code", "message"}`` from here; one that cannot be
    given a reader, 503. The app's answer is collected whole in its slot
    (:func:`tessera.transport.call_wsgi`: an app that raises gets a logged 500).

    Requests whose path ``slow_paths`` names run in ``threads`` slots of their own: they
    wait on other services (the allocator's binds wait on the API server), and must not
    keep the others waiting for a slot."""

    def __init__(self, app: WsgiApp, *, threads: int, max_body_bytes: int,
                 body_seconds: float = BODY_SECONDS,
                 readers: BodyReaders | None = None,
                 slow_paths: frozenset[str] = frozenset()) -> None:
        self.app = app
        self.app_slots = threading.BoundedSemaphore(threads)
        self.slow_paths = slow_paths
        self.slow_slots = threading.BoundedSemaphore(threads)
        self.max_body_bytes = max_body_bytes
        self.body_seconds = body_seconds
        self.readers = readers or BodyReaders()

    def __call__(self, environ: dict[str, Any],
                 start_response: Callable[..., Any]) -> Iterable[bytes]:
        refusal = self._take_body(environ)
        if refusal is not None:
            status, message, reading = refusal
            answer = refuse(environ, start_response, status, message)
            return answer if reading is None else _then_wait(answer, reading)
        slow = environ.get("PATH_INFO") in self.slow_paths
        with self.slow_slots if slow else self.app_slots:
            status, headers, content = transport.call_wsgi(self.app, environ)
        start_response(_status_line(status), headers)
        return [content]

    def _take_body(self, environ: dict[str, Any]
                   ) -> tuple[int, str, PendingRead | None] | None:
        """Put the complete body in ``environ`` (module doc), or say why not (and the read
        still under way, if any)."""
        declared = str(environ.get("CONTENT_LENGTH") or "").strip()
        length = int(declared) if declared.isascii() and declared.isdigit() else None
        if (length == 0 or (length is not None and length > self.max_body_bytes)
                or (length is None and environ.get("REQUEST_METHOD") in _NO_BODY_METHODS)):
            environ["wsgi.input"] = io.BytesIO(b"")  # nothing read (class doc)
            return None
        stream = environ["wsgi.input"]
        limit = self.max_body_bytes + 1 if length is None else length
        reading = self.readers.submit(lambda: read_at_most(stream, limit))
        if reading is None:
            return 503, "too many request bodies are being received; try again", None
        try:
            body = reading.result(timeout=self.body_seconds)
        except TimeoutError:
            return 408, f"request body not received within {self.body_seconds:g} s", reading
        except Exception as exc:  # the client's connection, not our bug
            logger.info("request body could not be read: %s", exc)
            return 400, "request body could not be read", None
        environ["wsgi.input"] = io.BytesIO(body)
        if length is None:
            environ["CONTENT_LENGTH"] = str(len(body))
        return None


def _then_wait(answer: list[bytes], reading: PendingRead) -> Iterator[bytes]:
    """``answer``, then the end of the body's read, in granian's thread.

    Returned as an iterator, not a list, on purpose. granian 2.8 sends an iterator's chunks as
    they come; once this answer is sent, it ends the request (its body included), and the
    reader returns at once. Returned as a list while the reader still waits, the answer froze
    every Python thread of the worker until the client sent or left (measured: the thread
    that returned the list waited in granian's Rust code without giving up the GIL)."""
    yield from answer
    try:
        reading.result(timeout=BODY_SECONDS)
    except TimeoutError:
        logger.warning("a stalled request body was still being read %g s after its 408",
                       BODY_SECONDS)
    except Exception:  # the client left: what the wait was for
        pass


def _status_line(status: int) -> str:
    try:
        return f"{status} {http.HTTPStatus(status).phrase}"
    except ValueError:
        return f"{status} Unknown"


def refuse(environ: dict[str, Any], start_response: Callable[..., Any], status: int,
           message: str) -> list[bytes]:
    """An error answer in the services' JSON shape, asking an HTTP/1 client to close."""
    body = transport.error_body(status, message)
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
    if str(environ.get("SERVER_PROTOCOL", "")).startswith("HTTP/1"):
        headers.append(("Connection", "close"))  # no such header in HTTP/2
    start_response(_status_line(status), headers)
    return [body]


class TlsFilesWatch:
    """Watches the serving TLS files and calls ``on_change`` once when they changed and
    load (a half-written renewal is waited out), not before ``not_before`` (monotonic)."""

    def __init__(self, cert: str, key: str, client_ca: str | None,
                 on_change: Callable[[], None], *, not_before: float = 0.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.files = transport.CertificateFiles(cert, key, client_ca)
        self.on_change = on_change
        self.not_before = not_before
        self.clock = clock
        self.served = self.files.stamp()
        self._reported: tuple[Any, ...] | None = None

    def check(self) -> bool:
        """Whether the files changed since the worker loaded them and now load."""
        stamp = self.files.stamp()
        if stamp == self.served:
            return False
        try:
            self.files.load()
        except (OSError, ssl.SSLError) as exc:
            if stamp != self._reported:
                self._reported = stamp
                logger.warning("TLS files %s changed but do not load (%s); serving the "
                               "previous certificate", ", ".join(self.files.paths()), exc)
            return False
        return self.clock() >= self.not_before

    def run(self, stop: threading.Event, interval: float = TLS_FILES_POLL_SECONDS) -> None:
        while not stop.wait(interval):
            if self.check():
                self.on_change()
                return


def _stop_this_worker() -> None:
    logger.info("TLS files changed: stopping this worker; a new one serves them")
    os.kill(os.getpid(), signal.SIGTERM)


class WithoutThreadAdvice(logging.Filter):
    """Drops granian's warning that more request threads than twice the cores "seems quite
    high": the allocator's threads mostly wait on the API server (a bind), by design."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Configuration allows spawning up to")


def _granian_log_config() -> dict[str, Any]:
    """granian's loggers with no handler of their own: their lines reach the root logger's
    JSON handler (:func:`tessera.logs.configure`)."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {},
        "handlers": {},
        "filters": {"thread_advice": {"()": WithoutThreadAdvice}},
        "loggers": {
            "_granian": {"handlers": [], "propagate": True, "filters": ["thread_advice"]},
            "granian.access": {"handlers": [], "propagate": True},
        },
    }


def server_options(serving: ServingConfig, *, threads: int) -> dict[str, Any]:
    """granian ``Server`` settings: one worker, with threads for ``threads`` app slots (the
    slow paths' included) and for requests waiting for their bodies (module doc); with a
    certificate, HTTPS (TLS 1.2 or 1.3) with HTTP/2 offered; with a client CA too, a client
    certificate is required. A worker that ends is started again (a TLS renewal ends it)."""
    tls = bool(serving.tls_cert and serving.tls_key)
    return {
        "address": serving.host, "port": serving.port, "interface": Interfaces.WSGI,
        "workers": 1, "blocking_threads": threads + BODY_WAIT_THREADS, "loop": Loops.uvloop,
        "http": HTTPModes.auto, "websockets": False,
        "http1_settings": HTTP1Settings(header_read_timeout=int(FIRST_REQUEST_SECONDS * 1000)),
        "ssl_cert": Path(serving.tls_cert) if tls and serving.tls_cert else None,
        "ssl_key": Path(serving.tls_key) if tls and serving.tls_key else None,
        "ssl_ca": Path(serving.tls_client_ca) if tls and serving.tls_client_ca else None,
        "ssl_client_verify": bool(tls and serving.tls_client_ca),
        "ssl_protocol_min": SSLProtocols.tls12,
        "log_level": LogLevels(serving.log_level.lower()),
        "log_dictconfig": _granian_log_config(),
        "respawn_failed_workers": True, "workers_kill_timeout": WORKER_STOP_SECONDS,
    }


def serve(app_factory: Callable[[], WsgiApp], serving: ServingConfig, *, threads: int,
          max_body_bytes: int, proc_name: str,
          slow_paths: frozenset[str] = frozenset()) -> None:
    """Serve ``app_factory()`` (a WSGI app, made in the worker after fork, so its threads and
    API connections belong to it) as :func:`server_options` says, with bodies of at most
    ``max_body_bytes``, ``threads`` app slots and as many for ``slow_paths``
    (:class:`CompleteBodies`), until SIGTERM or SIGINT."""
    from granian.server.mp import MPServer

    def load() -> WsgiApp:
        logs.configure(serving.log_level)
        transport.hand_over_the_gil_often(None)
        app = CompleteBodies(app_factory(), threads=threads, max_body_bytes=max_body_bytes,
                             slow_paths=slow_paths)
        # the worker leaves through os._exit: run the app's exit hooks on the way (module doc)
        multiprocessing.util.Finalize(None, atexit._run_exitfuncs, exitpriority=10)
        if serving.tls_cert and serving.tls_key:
            watch = TlsFilesWatch(serving.tls_cert, serving.tls_key, serving.tls_client_ca,
                                  _stop_this_worker,
                                  not_before=time.monotonic() + WORKER_MIN_AGE_SECONDS)
            threading.Thread(target=watch.run, args=(threading.Event(),),
                             name="tls-files", daemon=True).start()
        return app

    options = server_options(serving, threads=threads * 2 if slow_paths else threads)

    class RenewingServer(MPServer):
        """Resolves the TLS files again for each worker it starts. granian resolves their
        symlinks once, when the server is made (``build_ssl_context``), and would hand a new
        worker the files a Secret volume's ``..data`` pointed to at the start."""

        def _spawn_worker(self, *args: Any, **kwargs: Any) -> Any:
            try:
                self.build_ssl_context(options["ssl_cert"], options["ssl_key"], None,
                                       options["ssl_protocol_min"], options["ssl_ca"], [],
                                       options["ssl_client_verify"])
            except (OSError, ssl.SSLError) as exc:
                logger.warning("TLS files do not load (%s); the new worker serves the "
                               "previous ones", exc)
            return super()._spawn_worker(*args, **kwargs)

    RenewingServer(proc_name, **options).serve(target_loader=load, wrap_loader=False)
