"""Where the webhook's server relies on gunicorn's private internals: one function each.

gunicorn 27.0.1's asyncio worker (``gunicorn/workers/gasgi.py``) and its connection protocol
(``gunicorn/asgi/protocol.py``) have no public way to learn each connection, to tell one
waiting for a request from one answering, or to close an idle one; :mod:`.worker` needs all
three. :data:`RELIES_ON` names, for each function here, the gunicorn code it was written
against and a fingerprint of that code as read; tests/serving/test_internals.py fails when
an installed gunicorn's code differs, so an upgrade is re-read before it is served.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from tessera.serving.policy import HANDSHAKE_SECONDS

#: our function -> (gunicorn's function or method it relies on, sha256 of its source as
#: read, first 16 hex digits), for tests/serving/test_internals.py.
RELIES_ON: Final[dict[str, tuple[tuple[str, str], ...]]] = {
    "track_connections": (
        # _setup_event_loop makes self.loop; _serve makes every listener with
        # self.loop.create_server(protocol factory, ..., ssl=context)
        ("gunicorn.workers.gasgi:ASGIWorker._setup_event_loop", "69dc22d0d827a76f"),
        ("gunicorn.workers.gasgi:ASGIWorker._serve", "986a7a4ab51cb4a7"),
    ),
    "awaiting_first_request": (
        ("gunicorn.asgi.protocol:ASGIProtocol._handle_connection", "9e8aa1729b5ad113"),
    ),
    "idle": (
        ("gunicorn.asgi.protocol:ASGIProtocol._handle_connection", "9e8aa1729b5ad113"),
        ("gunicorn.asgi.protocol:ASGIProtocol._finishing_call_done", "a3e7bb4fbc6a1fc3"),
    ),
    "close_idle": (
        ("gunicorn.asgi.protocol:ASGIProtocol._keepalive_timeout", "7d10f303b0016b88"),
    ),
    "Worker._shutdown": (
        ("gunicorn.workers.gasgi:ASGIWorker._shutdown", "9598f4e44fbadf84"),
    ),
}


def track_connections(worker: Any, opened: Callable[[Any], None]) -> None:
    """Call ``opened(protocol)`` for every connection ``worker``'s listeners accept from now
    on, and give TLS handshakes :data:`HANDSHAKE_SECONDS` (asyncio's default: 60 s). Call
    once ``worker.loop`` exists and before its listeners are made.

    The worker makes its listeners with ``loop.create_server(lambda: ASGIProtocol(self),
    ...)``: wrapping the factory is how each connection is learnt without copying
    ``_serve()``."""
    create_server = worker.loop.create_server

    def tracking_create_server(factory: Callable[[], Any], *args: Any, **kwargs: Any) -> Any:
        def make() -> Any:
            protocol = factory()
            opened(protocol)
            return protocol

        if kwargs.get("ssl") is not None:
            kwargs["ssl_handshake_timeout"] = HANDSHAKE_SECONDS
        return create_server(make, *args, **kwargs)

    worker.loop.create_server = tracking_create_server


def awaiting_first_request(protocol: Any) -> bool:
    """Whether a connection is still waiting for the headers of its first request."""
    return bool(protocol.req_count <= 1 and protocol._awaiting_request)


def idle(protocol: Any) -> bool:
    """Whether a connection is waiting for the headers of its next (or first) request, with
    no answer still being written: nothing is owed on it."""
    return bool(protocol._awaiting_request and not protocol._finishing_calls)


def close_idle(protocol: Any) -> None:
    """Close a connection as its keep-alive timer would, now, and without waiting for the
    peer's TLS close_notify (asyncio's SSL shutdown waits for it, up to 30 s): nothing is owed
    to an idle peer."""
    protocol._keepalive_timeout()
    protocol.transport.abort()
