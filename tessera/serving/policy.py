"""What both servers do the same way, whichever carries the service: the request body policy,
the JSON error shape, the deadlines, and running a WSGI app to completion.

Neither adapter imports the other (``.importlinter``, contract ``serving-adapters``); what
they share lives here, free of gunicorn and granian.

- :class:`BodyPolicy`: one cap and one deadline per service. A body whose declared length is
  over the cap is refused without being read; one without a declared length is read to one
  byte past the cap and refused there; both get the same 413 (:meth:`BodyPolicy.too_large`).
  A body not complete within the deadline gets 408 (:meth:`BodyPolicy.too_slow`).
- :func:`error_doc` (:func:`error_body` as bytes): the services' one JSON error shape,
  ``{"code": <status>, "message": <text>}``, for every answer a server gives on its own
  (408, 413, 503, a bug's 500) and for the webhook's own errors.
- :func:`call_wsgi`: a WSGI app's answer collected whole in the calling thread; an app that
  raises gets a logged 500, never a dropped connection.
"""

from __future__ import annotations

import http
import json
import logging
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

logger = logging.getLogger(__name__)

#: How long a client may take to complete its TLS handshake (the gunicorn side: rustls under
#: granian has a deadline of its own, the HTTP/1 header timeout below).
HANDSHAKE_SECONDS: Final = 10.0
#: How long a new connection may take to send the headers of its first request (later ones
#: are bounded by each server's keep-alive timer). The API server's webhook timeout is at
#: most 30 s and 10 s by default, kube-scheduler's extender timeout 5 s by default.
FIRST_REQUEST_SECONDS: Final = 10.0
#: How long a client may take to send a request body once its headers are in.
BODY_SECONDS: Final = 10.0
#: How long a thread may keep the GIL while another waits for it (CPython's default: 5 ms).
#: While the allocator's watches are busy (a big cluster's node heartbeats) every hand-over
#: made a request wait up to the interval (docs/benchmarks.md, issue 13's fourth pass).
GIL_SWITCH_SECONDS: Final = 0.001

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
Headers = list[tuple[str, str]]


def error_doc(status: int, message: str) -> dict[str, Any]:
    """The services' JSON error answer: ``{"code", "message"}``."""
    return {"code": status, "message": message}


def error_body(status: int, message: str) -> bytes:
    """:func:`error_doc` as JSON bytes."""
    return json.dumps(error_doc(status, message)).encode()


def status_line(status: int) -> str:
    """``"413 Request Entity Too Large"``: the WSGI status line of ``status``."""
    try:
        return f"{status} {http.HTTPStatus(status).phrase}"
    except ValueError:
        return f"{status} Unknown"


@dataclass(frozen=True)
class Refusal:
    """An answer a server gives on its own, before the app runs."""

    status: int
    message: str

    @property
    def body(self) -> bytes:
        return error_body(self.status, self.message)


@dataclass(frozen=True)
class BodyPolicy:
    """How much of a request body a service accepts, and how long it waits for it."""

    max_bytes: int
    seconds: float = BODY_SECONDS

    def declared_over_cap(self, declared: str | None) -> bool:
        """Whether a Content-Length header says more than the cap (then nothing is read).
        A length that is not a byte count is the app's to refuse (``tessera.wire``)."""
        return (declared is not None and declared.isascii() and declared.isdigit()
                and int(declared) > self.max_bytes)

    def read_limit(self, declared: int | None) -> int:
        """How many bytes to read: the declared length, else one past the cap (enough to
        know a body without a declared length is too large)."""
        return self.max_bytes + 1 if declared is None else declared

    def over_cap(self, size: int) -> bool:
        return size > self.max_bytes

    def too_large(self) -> Refusal:
        return Refusal(413, f"request body larger than {self.max_bytes} bytes")

    def too_slow(self) -> Refusal:
        return Refusal(408, f"request body not received within {self.seconds:g} s")


def hand_over_the_gil_often() -> None:
    """Set this process's GIL switch interval to :data:`GIL_SWITCH_SECONDS` (each server's
    worker calls it once it has started)."""
    sys.setswitchinterval(GIL_SWITCH_SECONDS)


def call_wsgi(app: WsgiApp, environ: dict[str, Any],
              passes: tuple[type[Exception], ...] = ()) -> tuple[int, Headers, bytes]:
    """Run the app to completion in this thread: (status, headers, body).

    An exception of a type in ``passes`` reaches the caller. An app that raises anything else
    gets a 500 and a logged traceback: a bug, never an answer to input (both apps turn every
    input problem into a 4xx themselves)."""
    started: list[Any] = []
    chunks: list[bytes] = []

    def start_response(status: str, headers: Headers,
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
    except passes:
        raise
    except Exception:
        logger.exception("unexpected error serving %s %s", environ.get("REQUEST_METHOD"),
                         environ.get("PATH_INFO"))
        return 500, [("Content-Type", "application/json")], error_body(500, "internal error")
    status, headers = started
    return int(status.split(" ", 1)[0]), list(headers), b"".join(chunks)
