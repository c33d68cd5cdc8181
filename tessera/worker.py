"""The gunicorn worker both services run: gunicorn's asyncio worker that stops promptly.

gunicorn 27.0.1's ``asgi`` worker (``workers/gasgi.py``) stops on SIGTERM by closing its
listeners and then waiting, up to ``graceful_timeout``, until every connection is gone. A
kept-alive connection with no request on it (the API server and kube-scheduler keep theirs
open) is only closed by its keepalive timer, so the worker waits it out, and the arbiter kills
the worker when ``graceful_timeout`` ends, before the allocator's exit hook has released its
Lease. This worker closes the connections that are waiting for a request as soon as it
stops, without waiting for a TLS goodbye; requests in flight are answered first (their
connections close after the answer: ``asgi/protocol.py`` ends a connection when
``worker.alive`` is false).

Why this worker and not gthread: :mod:`tessera.transport`.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from gunicorn.workers.gasgi import ASGIWorker

from tessera.transport import FIRST_REQUEST_SECONDS, HANDSHAKE_SECONDS


class Worker(ASGIWorker):  # type: ignore[misc]  # gunicorn ships no types
    def _setup_event_loop(self) -> None:
        super()._setup_event_loop()
        #: connection (gunicorn's protocol) -> loop time it was opened
        self.connections: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()
        create_server = self.loop.create_server

        def tracking_create_server(factory: Callable[[], Any], *args: Any,
                                   **kwargs: Any) -> Any:
            def make() -> Any:
                protocol = factory()
                self.connections[protocol] = self.loop.time()
                return protocol

            if kwargs.get("ssl") is not None:
                kwargs["ssl_handshake_timeout"] = HANDSHAKE_SECONDS  # asyncio's default: 60 s
            return create_server(make, *args, **kwargs)

        # The worker builds its servers with loop.create_server(lambda: ASGIProtocol(self));
        # wrapping the factory is how we learn each connection without copying _serve().
        self.loop.create_server = tracking_create_server

    def notify(self) -> None:
        """The worker's heartbeat (once a second, from the event loop): also close connections
        still waiting for the headers of their first request after FIRST_REQUEST_SECONDS.
        Later requests are bounded by gunicorn's keepalive timer; the first is not, so a
        client sending its headers a byte at a time would keep its connection for ever."""
        super().notify()
        now = self.loop.time()
        for protocol, opened in list(self.connections.items()):
            if (protocol.req_count <= 1 and protocol._awaiting_request
                    and now - opened > FIRST_REQUEST_SECONDS):
                self._close_idle(protocol)

    @staticmethod
    def _close_idle(protocol: Any) -> None:
        protocol._keepalive_timeout()  # what its keepalive timer would do, now
        # Nothing is owed to an idle peer: do not wait for its TLS close_notify (asyncio's SSL
        # shutdown waits for it, up to 30 s).
        protocol.transport.abort()

    async def _shutdown(self) -> None:
        for server in self.servers:
            server.close()  # no new connections from here on (idempotent)
        for protocol in list(self.connections):
            # Waiting for the headers of its next (or first) request: nothing to answer.
            if protocol._awaiting_request and not protocol._finishing_calls:
                self._close_idle(protocol)
        await super()._shutdown()
