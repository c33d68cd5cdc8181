"""The webhook's TLS under gunicorn: renewed certificate files served to new connections, and
failed handshakes counted.

:class:`CertificateFiles` is gunicorn's ``ssl_context`` hook. The event loop has one
SSLContext for the listener, so rotated certificate files are picked up in its SNI callback,
which OpenSSL calls for every ClientHello (with or without SNI): when the files changed, a new
context is loaded and the connection switched to it (``SSLObject.context`` may be set there:
Python docs, ``SSLContext.sni_callback``). A kept-alive connection keeps its certificate.
Handshakes that fail (garbage, plain HTTP on the TLS port, a client certificate we do not
trust) are counted and reported in at most one log line per interval.
"""

from __future__ import annotations

import logging
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any, Final

from tessera.serving.tls import Stamp, TlsFiles

logger = logging.getLogger(__name__)

#: How often a run of failed TLS handshakes is reported (one line per interval at most).
HANDSHAKE_REPORT_SECONDS: Final = 60.0


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

    With a client CA, clients must present a certificate it signed (mutual TLS). A change to
    any file is seen at the next handshake; files that do not load (half-written) keep the
    last good context and log why, at most once per change."""

    def __init__(self, files: TlsFiles, failures: HandshakeFailures | None = None,
                 connections: TlsConnections = TLS_CONNECTIONS) -> None:
        self.files = files
        self.failures = failures or HandshakeFailures()
        self.connections = connections
        self._stamp: Stamp | None = None
        self._current: ssl.SSLContext | None = None

    def __call__(self, config: Any, default_factory: Any) -> ssl.SSLContext:
        """The listener's context (gunicorn calls ``ssl_context(config, default_factory)``;
        both are unused: the files given here are the one source)."""
        self._stamp = self.files.stamp()
        listener = self._current = self.files.load()
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

    def current(self) -> ssl.SSLContext | None:
        """The context for a new connection: reloaded when the files changed."""
        stamp = self.files.stamp()
        if stamp != self._stamp:
            self._stamp = stamp
            try:
                self._current = self.files.load()
            except (OSError, ssl.SSLError) as exc:
                logger.warning("TLS files %s do not load (%s); serving the previous "
                               "certificate", ", ".join(self.files.paths()), exc)
        return self._current

    def _on_client_hello(self, connection: Any, _server_name: str | None,
                         _listener: ssl.SSLContext) -> None:
        self.connections.begun += 1
        context = self.current()
        if context is not None and connection.context is not context:
            connection.context = context
