"""How both services meet the network: gunicorn's asyncio worker, TLS, and a WSGI bridge.

Why not gunicorn's gthread worker (the one we used first): it hands every accepted connection
to a request thread, which then does the TLS handshake and reads the request headers with
blocking calls that have no deadline (gunicorn 27.0.1 ``workers/gthread.py``: ``TConn.init``
calls ``sock.ssl_wrap_socket`` and ``do_handshake`` in ``handle``; ``next(conn.parser)``
reads headers). A client that sends half a ClientHello, or its headers one byte at a time,
holds a thread for as long as it likes, and a handful of them starve the service
(bench/slow_clients.py, docs/security.md).

gunicorn's ``asgi`` worker (``workers/gasgi.py``) serves every connection from one asyncio
event loop: handshakes (``loop.create_server(ssl=...)``) and header parsing (``asgi/protocol.py``
``data_received``) wait in the loop and hold no thread. Our apps are Flask (WSGI), so
:class:`WsgiBridge` sits between: it reads the WHOLE body in the loop, bounded in size and
time, and only then runs the app in one of ``threads`` threads. A request reaches a thread
complete, so no client can hold one by being slow. (a2wsgi and asgiref's adapters stream the
body to the app from inside the thread, which lets a slow body hold the thread again.)

A request to one of the app's ``inline_paths`` (an attribute the app may declare: requests
that only compute, such as the allocator's filter) runs in the event loop itself, without the
hop to a request thread and back, which costs more than such a request's own work. The app
sees ``environ[INLINE]`` and raises :class:`NeedsThread` when it would block after all; the
request is then run again in a request thread. Only a request complete in memory gets there.

TLS: :class:`CertificateFiles` is gunicorn's ``ssl_context`` hook. The event loop has one
SSLContext for the listener, so rotated certificate files are picked up in its SNI callback,
which OpenSSL calls for every ClientHello (with or without SNI): when the files changed, a new
context is loaded and the connection switched to it (``SSLObject.context`` may be set there:
Python docs, ``SSLContext.sni_callback``). A kept-alive connection keeps its certificate.
Handshakes that fail (garbage, plain HTTP on the TLS port, a client certificate we do not
trust) are counted and reported in at most one log line per interval.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import ssl
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final

logger = logging.getLogger(__name__)

#: gunicorn's worker class: its asyncio worker, stopping promptly (tessera/worker.py).
WORKER_CLASS: Final = "tessera.worker.Worker"
#: How long a client may take to complete its TLS handshake.
HANDSHAKE_SECONDS: Final = 10.0
#: How long a new connection may take to send the headers of its first request (later ones
#: are bounded by gunicorn's keepalive timer). The API server's webhook timeout is at most
#: 30 s and 10 s by default, kube-scheduler's extender timeout 5 s by default.
FIRST_REQUEST_SECONDS: Final = 10.0
#: How long a client may take to send a request body once its headers are in.
BODY_SECONDS: Final = 10.0
#: How often a run of failed TLS handshakes is reported (one line per interval at most).
HANDSHAKE_REPORT_SECONDS: Final = 60.0

#: Set (True) in the environ of a request run in the event loop (module doc).
INLINE: Final = "tessera.inline"
#: How long a thread may keep the GIL while another waits for it (CPython's default: 5 ms).
#: The event loop answers requests inline; while the watches' threads are busy (a big
#: cluster's node heartbeats), every hand-over made a request wait up to the interval
#: (docs/benchmarks.md, issue 13's fourth pass).
GIL_SWITCH_SECONDS: Final = 0.001

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def hand_over_the_gil_often(_worker: Any) -> None:
    """gunicorn's ``post_worker_init`` hook: :data:`GIL_SWITCH_SECONDS` in the worker."""
    sys.setswitchinterval(GIL_SWITCH_SECONDS)


class NeedsThread(Exception):
    """Raised by an app serving a request in the event loop (``environ[INLINE]``) that would
    block: the bridge runs the request again in a request thread."""


class WsgiBridge:
    """An ASGI app that runs a WSGI app on complete requests only (module doc).

    At most ``max_body_bytes`` + 1 bytes of a body are ever held: a declared length over the
    cap reaches the app with no body read, a chunked body that grows past it with the first
    ``max_body_bytes`` + 1 bytes, so the app's own cap (``tessera.wire.read_body``) answers
    413 in the app's own words, without reading. A body not complete within
    ``body_seconds`` gets 408 JSON ``{"code", "message"}`` from here.
    """

    def __init__(self, app: WsgiApp, *, threads: int, max_body_bytes: int,
                 body_seconds: float = BODY_SECONDS) -> None:
        self.app = app
        #: paths whose requests run in the event loop (module doc)
        self.inline_paths: frozenset[str] = frozenset(getattr(app, "inline_paths", ()))
        self.max_body_bytes = max_body_bytes
        self.body_seconds = body_seconds
        self.threads = threads
        self._pool: ThreadPoolExecutor | None = None

    @property
    def pool(self) -> ThreadPoolExecutor:
        # Made on first use, in the worker process (gunicorn loads the app after fork).
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="request")
        return self._pool

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
        elif scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1003})

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        declared = _header(scope, b"content-length")
        if (declared is not None and declared.isascii() and declared.isdigit()
                and int(declared) > self.max_body_bytes):
            body, length = b"", declared  # nothing read
        else:
            read = await self._read_body(receive, send)
            if read is None:
                return
            body, length = read, None
        if scope.get("path") in self.inline_paths:
            try:
                status, headers, content = call_wsgi(
                    self.app, {**wsgi_environ(scope, body, length), INLINE: True})
            except NeedsThread:
                status, headers, content = await self._in_thread(scope, body, length)
        else:
            status, headers, content = await self._in_thread(scope, body, length)
        await _respond(send, status, headers, content)

    async def _in_thread(self, scope: Scope, body: bytes, length: str | None
                         ) -> tuple[int, list[tuple[str, str]], bytes]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.pool, call_wsgi, self.app,
                                          wsgi_environ(scope, body, length))

    async def _read_body(self, receive: Receive, send: Send) -> bytes | None:
        """The whole body (or its first ``max_body_bytes`` + 1 bytes), or None after an
        error answer (or a client that left)."""
        chunks: list[bytes] = []
        size = 0
        deadline = asyncio.get_running_loop().time() + self.body_seconds
        while True:
            try:
                # timeout_at, not wait_for: no task is made per message
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                await _refuse(send, 408, f"request body not received within "
                                         f"{self.body_seconds:g} s")
                return None
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            chunks.append(chunk)
            size += len(chunk)
            if size > self.max_body_bytes:
                # Enough to know it is too large; the app says so (class doc).
                return b"".join(chunks)[: self.max_body_bytes + 1]
            if not message.get("more_body", False):
                return b"".join(chunks)


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers") or ():
        if key.lower() == name:
            return str(value.decode("latin-1")).strip()
    return None


def error_body(status: int, message: str) -> bytes:
    """The services' JSON error answer: ``{"code", "message"}``."""
    return json.dumps({"code": status, "message": message}).encode()


async def _refuse(send: Send, status: int, message: str) -> None:
    body = error_body(status, message)
    await _respond(send, status, [("Content-Type", "application/json"),
                                  ("Connection", "close")], body)


async def _respond(send: Send, status: int, headers: list[tuple[str, str]],
                   body: bytes) -> None:
    await send({
        "type": "http.response.start",
        "status": status,
        "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers],
    })
    await send({"type": "http.response.body", "body": body, "more_body": False})


def wsgi_environ(scope: Scope, body: bytes, content_length: str | None = None
                 ) -> dict[str, Any]:
    """PEP 3333 environ for a complete request (pure); ``content_length`` defaults to the
    body's length."""
    server = scope.get("server") or ("localhost", 80)
    client = scope.get("client")
    root = scope.get("root_path", "")
    path = scope.get("path", "/")
    environ: dict[str, Any] = {
        "REQUEST_METHOD": scope.get("method", "GET"),
        "SCRIPT_NAME": root.encode("utf-8").decode("latin-1"),
        "PATH_INFO": path[len(root):] if root and path.startswith(root) else path,
        "QUERY_STRING": bytes(scope.get("query_string", b"")).decode("latin-1"),
        "SERVER_NAME": str(server[0]),
        "SERVER_PORT": str(server[1] or 0),
        "SERVER_PROTOCOL": f"HTTP/{scope.get('http_version', '1.1')}",
        "CONTENT_LENGTH": str(len(body)) if content_length is None else content_length,
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": scope.get("scheme", "http"),
        "wsgi.input": io.BytesIO(body),
        "wsgi.input_terminated": True,
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": False,
        "wsgi.run_once": False,
    }
    environ["PATH_INFO"] = environ["PATH_INFO"].encode("utf-8").decode("latin-1")
    if client:
        environ["REMOTE_ADDR"], environ["REMOTE_PORT"] = str(client[0]), str(client[1])
    for raw_name, raw_value in scope.get("headers") or ():
        name = raw_name.decode("latin-1").upper().replace("-", "_")
        value = raw_value.decode("latin-1")
        if name == "CONTENT_LENGTH":
            continue  # set above: the length of the body the app gets
        key = "CONTENT_TYPE" if name == "CONTENT_TYPE" else f"HTTP_{name}"
        environ[key] = f"{environ[key]},{value}" if key in environ else value
    return environ


def call_wsgi(app: WsgiApp, environ: dict[str, Any]) -> tuple[int, list[tuple[str, str]], bytes]:
    """Run the app to completion in this thread: (status, headers, body).

    :class:`NeedsThread` from a request run inline passes through (the bridge's to handle).
    An app that raises anything else gets a 500 and a logged traceback: a bug, never an
    answer to input (both apps turn every input problem into a 4xx themselves)."""
    started: list[Any] = []
    chunks: list[bytes] = []

    def start_response(status: str, headers: list[tuple[str, str]],
                       exc_info: Any = None) -> Callable[[bytes], None]:
        started[:] = [status, headers]
        return chunks.append

    try:
        result = app(environ, start_response)
        try:
            chunks.extend(result)
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()
    except Exception as exc:
        if isinstance(exc, NeedsThread) and environ.get(INLINE):
            raise  # the bridge runs it again in a request thread
        logger.exception("unexpected error serving %s %s", environ.get("REQUEST_METHOD"),
                         environ.get("PATH_INFO"))
        body = error_body(500, "internal error")
        return 500, [("Content-Type", "application/json")], body
    status, headers = started
    return int(status.split(" ", 1)[0]), list(headers), b"".join(chunks)


class TlsConnections:
    """How many TLS connections this process's listener has begun: one per ClientHello,
    whether its handshake then succeeds or not (:class:`HandshakeFailures` counts those that
    fail). Written only from the event loop (the SNI callback); a service's /metrics reads it.

    It shows what a client's connection reuse costs: a mutual-TLS handshake costs the
    service far more than a request on a kept-alive connection, and kube-scheduler keeps
    at most two idle connections per extender (docs/benchmarks.md, issue 13)."""

    def __init__(self) -> None:
        self.begun = 0


#: This process's count (one listener's context per process: gunicorn loads it in the
#: worker; :class:`CertificateFiles` counts into it unless given another).
TLS_CONNECTIONS: Final = TlsConnections()


class HandshakeFailures:
    """Failed TLS handshakes, reported as one warning per ``interval`` at most.

    A port scanner or a client speaking plain HTTP to a TLS port is not worth a log line
    each; that such clients exist, how many, and the last reason, is."""

    def __init__(self, interval: float = HANDSHAKE_REPORT_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self.clock = clock
        self.total = 0
        self._unreported = 0
        self._last_report: float | None = None
        self._lock = threading.Lock()

    def note(self, reason: str) -> None:
        with self._lock:
            self.total += 1
            self._unreported += 1
            now = self.clock()
            if self._last_report is not None and now - self._last_report < self.interval:
                return
            count, self._unreported, self._last_report = self._unreported, 0, now
        logger.warning("refused %d TLS handshake(s) since the last report (at most one "
                       "report per %gs); last: %s", count, self.interval, reason)


class CertificateFiles:
    """gunicorn's ``ssl_context`` hook over the serving certificate files (module doc).

    With ``client_ca``, clients must present a certificate it signed (mutual TLS). A change to
    any file is seen at the next handshake; files that do not load (half-written) keep the
    last good context and log why, at most once per change."""

    def __init__(self, cert: str, key: str, client_ca: str | None = None,
                 failures: HandshakeFailures | None = None,
                 connections: TlsConnections = TLS_CONNECTIONS) -> None:
        self.cert, self.key, self.client_ca = cert, key, client_ca
        self.failures = failures or HandshakeFailures()
        self.connections = connections
        self._stamp: tuple[Any, ...] | None = None
        self._current: ssl.SSLContext | None = None

    def __call__(self, config: Any, default_factory: Any) -> ssl.SSLContext:
        """The listener's context (gunicorn calls ``ssl_context(config, default_factory)``;
        both are unused: the files given here are the one source)."""
        self._stamp = self.stamp()
        listener = self._current = self.load()
        listener.sni_callback = self._on_client_hello
        failures = self.failures

        class CountedObject(ssl.SSLObject):
            def do_handshake(self) -> None:
                try:
                    super().do_handshake()
                except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                    raise
                except ssl.SSLError as exc:
                    failures.note(f"{exc.reason or exc}")
                    raise

        listener.sslobject_class = CountedObject
        return listener

    def paths(self) -> list[str]:
        """The files given, in order (no client CA when none)."""
        return [p for p in (self.cert, self.key, self.client_ca) if p]

    def stamp(self) -> tuple[Any, ...]:
        stamps: list[Any] = []
        for path in self.paths():
            try:
                st = os.stat(path)
                stamps.append((st.st_ino, st.st_mtime_ns, st.st_size))
            except OSError:
                stamps.append(None)
        return tuple(stamps)

    def load(self) -> ssl.SSLContext:
        """A new context from the files (raises ``OSError``/``ssl.SSLError`` if they do not
        load)."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=self.client_ca)
        context.load_cert_chain(self.cert, self.key)
        context.verify_mode = ssl.CERT_REQUIRED if self.client_ca else ssl.CERT_NONE
        # No session tickets: our callers (kube-scheduler, the API server) are Go clients
        # without a session cache, which never resume, and issuing OpenSSL's two tickets per
        # handshake was a third of a handshake's CPU (docs/benchmarks.md, issue 13).
        context.num_tickets = 0
        context.options |= ssl.OP_NO_TICKET
        return context

    def current(self) -> ssl.SSLContext | None:
        """The context for a new connection: reloaded when the files changed."""
        stamp = self.stamp()
        if stamp != self._stamp:
            self._stamp = stamp
            try:
                self._current = self.load()
            except (OSError, ssl.SSLError) as exc:
                logger.warning("TLS files %s do not load (%s); serving the previous "
                               "certificate", ", ".join(self.paths()), exc)
        return self._current

    def _on_client_hello(self, connection: Any, _server_name: str | None,
                         _listener: ssl.SSLContext) -> None:
        self.connections.begun += 1
        context = self.current()
        if context is not None and connection.context is not context:
            connection.context = context
