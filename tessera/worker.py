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


class Worker(ASGIWorker):  # type: ignore[misc]  # gunicorn ships no types
    def _setup_event_loop(self) -> None:
        super()._setup_event_loop()
        self.connections: weakref.WeakSet[Any] = weakref.WeakSet()
        create_server = self.loop.create_server

        def tracking_create_server(factory: Callable[[], Any], *args: Any,
                                   **kwargs: Any) -> Any:
            def make() -> Any:
                protocol = factory()
                self.connections.add(protocol)
                return protocol

            return create_server(make, *args, **kwargs)

        # The worker builds its servers with loop.create_server(lambda: ASGIProtocol(self));
        # wrapping the factory is how we learn each connection without copying _serve().
        self.loop.create_server = tracking_create_server

    async def _shutdown(self) -> None:
        for server in self.servers:
            server.close()  # no new connections from here on (idempotent)
        for protocol in list(self.connections):
            # Waiting for the headers of its next (or first) request: nothing to answer.
            if protocol._awaiting_request and not protocol._finishing_calls:
                protocol._keepalive_timeout()  # what its keepalive timer would do, now
                # Nothing is owed to an idle peer: do not wait for its TLS close_notify
                # (asyncio's SSL shutdown waits for it, up to 30 s).
                protocol.transport.abort()
        await super()._shutdown()
