"""The webhook's gunicorn worker: gunicorn's asyncio worker that stops promptly and bounds a
new connection's first request.

gunicorn 27.0.1's ``asgi`` worker (``workers/gasgi.py``) stops on SIGTERM by closing its
listeners and then waiting, up to ``graceful_timeout``, until every connection is gone. A
kept-alive connection with no request on it (the API server keeps its connections open) is
only closed by its keepalive timer, so the worker waits it out, and the arbiter kills the
worker when ``graceful_timeout`` ends. This worker closes the connections that are waiting
for a request as soon as it stops, without waiting for a TLS goodbye; requests in flight are
answered first (their connections close after the answer: ``asgi/protocol.py`` ends a
connection when ``worker.alive`` is false).

Every touch of gunicorn's private internals goes through :mod:`.internals`. Why this worker
and not gthread: :mod:`.bridge`.
"""

from __future__ import annotations

import weakref
from typing import Any

from gunicorn.workers.gasgi import ASGIWorker

from tessera.serving.gunicorn import internals
from tessera.serving.policy import FIRST_REQUEST_SECONDS


class Worker(ASGIWorker):  # type: ignore[misc]  # gunicorn ships no types
    def _setup_event_loop(self) -> None:
        super()._setup_event_loop()
        #: connection (gunicorn's protocol) -> loop time it was opened
        self.connections: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()
        internals.track_connections(self, self._opened)

    def _opened(self, protocol: Any) -> None:
        self.connections[protocol] = self.loop.time()

    def notify(self) -> None:
        """The worker's heartbeat (once a second, from the event loop): also close connections
        still waiting for the headers of their first request after FIRST_REQUEST_SECONDS.
        Later requests are bounded by gunicorn's keepalive timer; the first is not, so a
        client sending its headers a byte at a time would keep its connection for ever."""
        super().notify()
        now = self.loop.time()
        for protocol, opened in list(self.connections.items()):
            if (internals.awaiting_first_request(protocol)
                    and now - opened > FIRST_REQUEST_SECONDS):
                internals.close_idle(protocol)

    async def _shutdown(self) -> None:
        for server in self.servers:
            server.close()  # no new connections from here on (idempotent)
        for protocol in list(self.connections):
            if internals.idle(protocol):
                internals.close_idle(protocol)
        await super()._shutdown()
