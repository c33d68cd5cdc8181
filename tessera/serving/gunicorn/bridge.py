"""The webhook's bridge from gunicorn's asyncio worker to a WSGI app: complete requests only.

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
:class:`WsgiBridge` sits between: it reads the WHOLE body in the loop, as the one body policy
says (:class:`~tessera.serving.policy.BodyPolicy`: 413 over the cap, 408 past the deadline),
and only then runs the app in one of ``threads`` threads. A request reaches a thread
complete, so no client can hold one by being slow. (a2wsgi and asgiref's adapters stream the
body to the app from inside the thread, which lets a slow body hold the thread again.)

A request to one of the app's ``inline_paths`` (an attribute the app may declare: requests
that only compute, such as the webhook's /mutate) runs in the event loop itself, without the
hop to a request thread and back, which costs more than such a request's own work. The app
sees ``environ[INLINE]`` and raises :class:`NeedsThread` when it would block after all; the
request is then run again in a request thread. Only a request complete in memory gets there.
"""

from __future__ import annotations

import asyncio
import io
import sys
from collections.abc import Awaitable, Callable, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final

from tessera.serving.policy import BodyPolicy, Headers, Refusal, WsgiApp, call_wsgi

#: Set (True) in the environ of a request run in the event loop (module doc).
INLINE: Final = "tessera.inline"

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class NeedsThread(Exception):
    """Raised by an app serving a request in the event loop (``environ[INLINE]``) that would
    block: the bridge runs the request again in a request thread."""


class WsgiBridge:
    """An ASGI app that runs a WSGI app on complete requests only (module doc).

    At most ``body.max_bytes`` + 1 bytes of a body are ever held: a declared length over the
    cap is refused unread, a body without one as soon as it grows past the cap (413), and one
    not complete within ``body.seconds`` gets 408, all in the services' JSON error shape.
    """

    def __init__(self, app: WsgiApp, *, threads: int, body: BodyPolicy) -> None:
        self.app = app
        #: paths whose requests run in the event loop (module doc)
        self.inline_paths: frozenset[str] = frozenset(getattr(app, "inline_paths", ()))
        self.body = body
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
        if self.body.declared_over_cap(_header(scope, b"content-length")):
            await _refuse(send, self.body.too_large())  # nothing read
            return
        body = await self._read_body(receive, send)
        if body is None:
            return
        if scope.get("path") in self.inline_paths:
            try:
                status, headers, content = call_wsgi(
                    self.app, {**wsgi_environ(scope, body), INLINE: True}, (NeedsThread,))
            except NeedsThread:
                status, headers, content = await self._in_thread(scope, body)
        else:
            status, headers, content = await self._in_thread(scope, body)
        await _respond(send, status, headers, content)

    async def _in_thread(self, scope: Scope, body: bytes) -> tuple[int, Headers, bytes]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.pool, call_wsgi, self.app,
                                          wsgi_environ(scope, body))

    async def _read_body(self, receive: Receive, send: Send) -> bytes | None:
        """The whole body, or None after an error answer (or a client that left)."""
        chunks: list[bytes] = []
        size = 0
        deadline = asyncio.get_running_loop().time() + self.body.seconds
        while True:
            try:
                # timeout_at, not wait_for: no task is made per message
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                await _refuse(send, self.body.too_slow())
                return None
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            chunks.append(chunk)
            size += len(chunk)
            if self.body.over_cap(size):
                await _refuse(send, self.body.too_large())
                return None
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


async def _refuse(send: Send, refusal: Refusal) -> None:
    body = refusal.body
    await _respond(send, refusal.status, [("Content-Type", "application/json"),
                                          ("Content-Length", str(len(body))),
                                          ("Connection", "close")], body)


async def _respond(send: Send, status: int, headers: Headers,
                   body: bytes) -> None:
    await send({
        "type": "http.response.start",
        "status": status,
        "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers],
    })
    await send({"type": "http.response.body", "body": body, "more_body": False})


def wsgi_environ(scope: Scope, body: bytes) -> dict[str, Any]:
    """PEP 3333 environ for a complete request (pure)."""
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
        "CONTENT_LENGTH": str(len(body)),
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
