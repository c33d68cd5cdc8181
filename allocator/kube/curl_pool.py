"""Speed: the allocator's one-shot API requests (a Binding, a patch, an Event, a Lease, a
list page) through libcurl, on a pool of handles that each keep their connection alive.

Why: every bind writes one Binding, on kube-scheduler's path. Through urllib3 and
``http.client`` a request and its answer cost the allocator ~0.6 ms of CPU under the GIL
(the tenth pass's profile showed header parsing by the ``email`` package and URL parsing
among it); libcurl does the same in C with the GIL released (docs/benchmarks.md, issue 13's
eleventh pass). Watches are read through libcurl too, on handles of their own
(:mod:`allocator.kube.curl_watch`), with this pool's TLS settings.

Only what the kubeconfig's TLS settings say is done here: the API server's CA (file or
inline), a client certificate and key (files, as the official client writes them), or no
verification when the kubeconfig asks for none. A configuration that asks for more — a proxy,
a TLS server name or hostname check of its own, socket options, retries, or verification
against the system's trust store (no CA given) — gets no pool
(:meth:`CurlPool.for_configuration` is None) and its requests stay on urllib3.

Each request resets its handle and sets every option again (nothing of one request leaks
into the next); libcurl keeps the connection across resets. At most ``limit`` idle handles
are kept: a burst wider than that makes extra handles, closed when they come back.
"""

from __future__ import annotations

import io
import threading
from typing import Any, Final

import pycurl

#: What a request gets back: (HTTP status, body).
Answer = tuple[int, bytes]


class CurlError(Exception):
    """The request got no answer (connect, TLS, timeout, reset): libcurl's message."""


#: Configuration fields whose use this path does not mirror (module doc): any of them set,
#: and requests stay on urllib3.
_NOT_MIRRORED: Final = ("proxy", "assert_hostname", "tls_server_name", "socket_options",
                        "retries")


class CurlPool:
    """libcurl handles for one API server, kept alive between requests (module doc)."""

    def __init__(self, tls: list[tuple[int, Any]], limit: int) -> None:
        #: the TLS options every request sets (CA, client certificate, verification)
        self.tls = tls
        self._limit = limit
        self._idle: list[pycurl.Curl] = []
        self._lock = threading.Lock()

    @classmethod
    def for_configuration(cls, cfg: Any, limit: int) -> CurlPool | None:
        """A pool for the API server of ``cfg`` (a ``kubernetes.client.Configuration``), or
        None when ``cfg`` asks for what this path does not do (module doc)."""
        if any(getattr(cfg, f, None) for f in _NOT_MIRRORED):
            return None
        ca_data = getattr(cfg, "ca_cert_data", None)
        if (str(cfg.host).startswith("https:") and cfg.verify_ssl
                and not (cfg.ssl_ca_cert or ca_data)):
            # Verified against the system's trust store: where libcurl's build looks for one
            # is not necessarily where this system keeps it; urllib3 asks Python's ssl.
            return None
        tls: list[tuple[int, Any]] = []
        if not cfg.verify_ssl:
            tls += [(pycurl.SSL_VERIFYPEER, 0), (pycurl.SSL_VERIFYHOST, 0)]
        if cfg.ssl_ca_cert:
            tls.append((pycurl.CAINFO, str(cfg.ssl_ca_cert)))
        if ca_data:
            tls.append((pycurl.CAINFO_BLOB,
                        ca_data.encode() if isinstance(ca_data, str) else bytes(ca_data)))
        if cfg.cert_file:
            tls.append((pycurl.SSLCERT, str(cfg.cert_file)))
        if cfg.key_file:
            tls.append((pycurl.SSLKEY, str(cfg.key_file)))
        return cls(tls, limit)

    def request(self, method: str, url: str, body: bytes | None, headers: list[str],
                timeout: tuple[float, float]) -> Answer:
        """One request and its whole answer; :class:`CurlError` when none came."""
        handle = self._take()
        answer = io.BytesIO()
        try:
            handle.reset()
            handle.setopt(pycurl.URL, url)
            handle.setopt(pycurl.NOSIGNAL, 1)  # threads: no SIGALRM for timeouts
            handle.setopt(pycurl.HTTP_VERSION, pycurl.CURL_HTTP_VERSION_1_1)
            handle.setopt(pycurl.CONNECTTIMEOUT_MS, int(timeout[0] * 1000))
            handle.setopt(pycurl.TIMEOUT_MS, int((timeout[0] + timeout[1]) * 1000))
            for option, value in self.tls:
                handle.setopt(option, value)
            if body is not None:
                handle.setopt(pycurl.POSTFIELDS, body)
            if method != ("GET" if body is None else "POST"):
                handle.setopt(pycurl.CUSTOMREQUEST, method)
            # no "Expect: 100-continue" round trip before a large body
            handle.setopt(pycurl.HTTPHEADER, [*headers, "Expect:"])
            handle.setopt(pycurl.WRITEDATA, answer)
            handle.perform()
            status = int(handle.getinfo(pycurl.RESPONSE_CODE))
        except pycurl.error as exc:
            handle.close()  # its connection is in an unknown state
            raise CurlError(exc.args[1] if len(exc.args) > 1 else str(exc)) from None
        self._give_back(handle)
        return status, answer.getvalue()

    def _take(self) -> pycurl.Curl:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return pycurl.Curl()

    def _give_back(self, handle: pycurl.Curl) -> None:
        with self._lock:
            if len(self._idle) < self._limit:
                self._idle.append(handle)
                return
        handle.close()

    def idle(self) -> int:
        """Handles kept for the next requests (each with its connection)."""
        with self._lock:
            return len(self._idle)
