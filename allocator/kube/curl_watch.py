"""Speed: watch streams read through libcurl, with the TLS settings of the request pool
(:mod:`allocator.kube.curl_pool`), handed over as lines.

Why: urllib3 reads a chunked watch stream one chunk (one event) at a time in Python — a
readline for the chunk's size, a read for its body, each on Python's ssl socket — several
Python calls under the GIL per event. libcurl undoes the chunking and TLS in C and hands
over what arrived in blocks, split into lines here. A node agent that locks nodes makes
every bind two Node events and more pod events (its lock and its own writes), so the cost per
event is much of what such an agent adds.

One transfer on its own handle and multi handle (never the pool's: a watch lives for
minutes), driven from the consuming thread: ``perform`` moves what arrived, ``select`` waits
for more (at most a second at a time; the stream's own end is the API server's
``timeoutSeconds``, libcurl's timeout only a guard past it).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

import pycurl

from allocator.kube.curl_pool import CurlError

#: How long one wait for more of the stream lasts before libcurl is asked again.
SELECT_SECONDS: Final = 1.0


class StreamRefused(Exception):
    """The API server answered the watch with ``status`` (not 2xx) and this ``body``."""

    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"HTTP {status}")
        self.status, self.body = status, body


def _handle(tls: list[tuple[int, Any]], url: str, headers: list[str],
            timeout: tuple[float, float], arrived: list[bytes]) -> pycurl.Curl:
    handle = pycurl.Curl()
    handle.setopt(pycurl.URL, url)
    handle.setopt(pycurl.NOSIGNAL, 1)
    handle.setopt(pycurl.HTTP_VERSION, pycurl.CURL_HTTP_VERSION_1_1)
    handle.setopt(pycurl.CONNECTTIMEOUT_MS, int(timeout[0] * 1000))
    handle.setopt(pycurl.TIMEOUT_MS, int((timeout[0] + timeout[1]) * 1000))
    for option, value in tls:
        handle.setopt(option, value)
    handle.setopt(pycurl.HTTPHEADER, headers)
    handle.setopt(pycurl.WRITEFUNCTION, arrived.append)
    return handle


def _perform(multi: pycurl.CurlMulti) -> None:
    while multi.perform()[0] == pycurl.E_CALL_MULTI_PERFORM:
        pass


def watch_lines(tls: list[tuple[int, Any]], url: str, headers: list[str],
                timeout: tuple[float, float]) -> Iterator[bytes]:
    """The non-empty lines of the watch at ``url`` as they arrive (one event each);
    :class:`StreamRefused` when it is answered with an error status, :class:`CurlError`
    when the transfer fails. Closing the iterator ends the transfer."""
    arrived: list[bytes] = []
    handle = _handle(tls, url, headers, timeout, arrived)
    multi = pycurl.CurlMulti()
    multi.add_handle(handle)
    status, pending, refused = 0, b"", bytearray()
    try:
        while True:
            _perform(multi)
            if arrived:
                status = status or int(handle.getinfo(pycurl.RESPONSE_CODE))
                data = b"".join(arrived)
                arrived.clear()
                if not 200 <= status < 300:
                    refused += data
                else:
                    *lines, pending = (pending + data).split(b"\n")
                    yield from (line for line in lines if line)
            _queued, done, failed = multi.info_read()
            if failed:
                raise CurlError(str(failed[0][2]))
            if done:
                break
            multi.select(SELECT_SECONDS)
        status = status or int(handle.getinfo(pycurl.RESPONSE_CODE))
        if not 200 <= status < 300:
            raise StreamRefused(status, bytes(refused))
        if pending:
            yield pending
    finally:
        multi.remove_handle(handle)
        handle.close()
        multi.close()
