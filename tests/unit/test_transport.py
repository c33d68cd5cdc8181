"""The webhook's serving pieces on their own (tessera/serving/gunicorn): the WSGI bridge,
handshake reports, certificate files.

The same pieces behind real gunicorn and real TLS: tests/serving/test_transport_tls.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from builders import write_tls_pair

from tessera.serving.gunicorn.bridge import INLINE, NeedsThread, WsgiBridge, wsgi_environ
from tessera.serving.gunicorn.handshakes import (
    CertificateFiles,
    HandshakeFailures,
    TlsConnections,
)
from tessera.serving.policy import BodyPolicy
from tessera.serving.tls import TlsFiles

Message = dict[str, Any]


def scope(method: str = "POST", path: str = "/mutate", headers: Iterable[tuple[bytes, bytes]] = (),
          **more: Any) -> dict[str, Any]:
    return {"type": "http", "method": method, "path": path, "query_string": b"a=1",
            "headers": list(headers), "http_version": "1.1", "scheme": "https",
            "server": ("127.0.0.1", 8443), "client": ("10.0.0.9", 40000), **more}


class Echo:
    """A WSGI app that records what it was given and answers with the body it read."""

    def __init__(self) -> None:
        self.environs: list[dict[str, Any]] = []

    def __call__(self, environ: dict[str, Any], start_response: Any) -> list[bytes]:
        self.environs.append(environ)
        body = environ["wsgi.input"].read()
        start_response("201 Created", [("Content-Type", "text/plain"), ("X-Len", str(len(body)))])
        return [b"got:", body]


def run(bridge: WsgiBridge, sc: dict[str, Any], messages: list[Message],
        stall: bool = False) -> list[Message]:
    """Drive one ASGI call; ``stall``: after ``messages``, receive() never returns."""
    sent: list[Message] = []

    async def main() -> None:
        queue = messages  # consumed: a test can see what was left unread

        async def receive() -> Message:
            if queue:
                return queue.pop(0)
            if stall:
                await asyncio.sleep(3600)
            return {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            sent.append(message)

        await bridge(sc, receive, send)

    asyncio.run(main())
    return sent


def body(sent: list[Message]) -> tuple[int, dict[str, str], bytes]:
    start, *rest = sent
    headers = {k.decode(): v.decode() for k, v in start["headers"]}
    return start["status"], headers, b"".join(m.get("body", b"") for m in rest)


def chunk(data: bytes, more: bool) -> Message:
    return {"type": "http.request", "body": data, "more_body": more}


def test_the_app_runs_once_on_the_whole_body_and_its_answer_is_sent() -> None:
    app = Echo()
    bridge = WsgiBridge(app, threads=2, body=BodyPolicy(100))
    sent = run(bridge, scope(headers=[(b"content-type", b"application/json"),
                                      (b"x-a", b"1"), (b"x-a", b"2")]),
               [chunk(b'{"a"', True), chunk(b":1}", False)])
    assert body(sent) == (201, {"content-type": "text/plain", "x-len": "7"}, b'got:{"a":1}')
    (environ,) = app.environs
    assert {k: environ[k] for k in ("REQUEST_METHOD", "PATH_INFO", "QUERY_STRING",
                                     "CONTENT_LENGTH", "CONTENT_TYPE", "HTTP_X_A",
                                     "REMOTE_ADDR", "wsgi.url_scheme")} == {
        "REQUEST_METHOD": "POST", "PATH_INFO": "/mutate", "QUERY_STRING": "a=1",
        "CONTENT_LENGTH": "7", "CONTENT_TYPE": "application/json", "HTTP_X_A": "1,2",
        "REMOTE_ADDR": "10.0.0.9", "wsgi.url_scheme": "https"}


TOO_LARGE = (413, {"content-type": "application/json", "content-length": "61",
                   "connection": "close"},
             b'{"code": 413, "message": "request body larger than 10 bytes"}')


def test_a_declared_body_over_the_cap_is_refused_unread_and_the_app_not_called() -> None:
    app = Echo()
    messages = [chunk(b"x" * 11, False)]
    sent = run(WsgiBridge(app, threads=1, body=BodyPolicy(10)),
               scope(headers=[(b"content-length", b"11")]), messages)
    assert body(sent) == TOO_LARGE
    assert messages == [chunk(b"x" * 11, False)]  # nothing received
    assert app.environs == []


def test_a_chunked_body_is_refused_as_soon_as_it_passes_the_cap() -> None:
    app = Echo()
    # The third chunk would be read if the bridge did not stop at the second.
    messages = [chunk(b"123456", True), chunk(b"789012", True), chunk(b"x", False)]
    sent = run(WsgiBridge(app, threads=1, body=BodyPolicy(10)), scope(), messages)
    assert body(sent) == TOO_LARGE
    assert messages == [chunk(b"x", False)]
    assert app.environs == []


def test_a_body_of_exactly_the_cap_reaches_the_app() -> None:
    app = Echo()
    sent = run(WsgiBridge(app, threads=1, body=BodyPolicy(10)), scope(),
               [chunk(b"12345", True), chunk(b"67890", False)])
    assert body(sent)[2] == b"got:1234567890"


def test_a_body_that_does_not_arrive_in_time_gets_408_and_holds_no_thread() -> None:
    app = Echo()
    sent = run(WsgiBridge(app, threads=1, body=BodyPolicy(10, 0.2)), scope(),
               [chunk(b"12", True)], stall=True)
    status, _, content = body(sent)
    assert status == 408 and "not received within 0.2 s" in json.loads(content)["message"]
    assert app.environs == []


def test_a_client_that_leaves_mid_body_gets_nothing_and_the_app_is_not_called() -> None:
    app = Echo()
    assert run(WsgiBridge(app, threads=1, body=BodyPolicy(10)), scope(), [chunk(b"1", True)]) == []
    assert app.environs == []


def test_an_app_that_raises_is_a_logged_500(caplog: pytest.LogCaptureFixture) -> None:
    def broken(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        raise RuntimeError("bug")

    sent = run(WsgiBridge(broken, threads=1, body=BodyPolicy(10)), scope(),
               [chunk(b"", False)])
    assert body(sent)[0] == 500
    assert "unexpected error serving POST /mutate" in caplog.text


def test_lifespan_startup_and_shutdown_complete() -> None:
    sent = run(WsgiBridge(Echo(), threads=1, body=BodyPolicy(1)), {"type": "lifespan"},
               [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}])
    assert [m["type"] for m in sent] == ["lifespan.startup.complete",
                                         "lifespan.shutdown.complete"]


def test_a_root_path_moves_into_script_name() -> None:
    environ = wsgi_environ(scope(path="/api/scheduler/filter", root_path="/api"), b"")
    assert (environ["SCRIPT_NAME"], environ["PATH_INFO"]) == ("/api", "/scheduler/filter")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_failed_handshakes_are_reported_at_most_once_per_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    failures = HandshakeFailures(interval=60, clock=clock)
    with caplog.at_level(logging.WARNING, logger="tessera.serving.gunicorn.handshakes"):
        for second in range(120):
            clock.now = float(second)
            failures.note(f"WRONG_VERSION_NUMBER #{second}")
    lines = [r.getMessage() for r in caplog.records]
    assert failures.total == 120
    assert lines == [
        "refused 1 TLS handshake(s) since the last report (at most one report per 60s); "
        "last: WRONG_VERSION_NUMBER #0",
        "refused 60 TLS handshake(s) since the last report (at most one report per 60s); "
        "last: WRONG_VERSION_NUMBER #60",
    ]


def handshake_in_memory(context: ssl.SSLContext) -> ssl.SSLObject:
    """A client (verifying nothing) after its handshake with a server using ``context``, with
    everything the server sent so far delivered to it."""
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.check_hostname = False
    client.verify_mode = ssl.CERT_NONE
    c_in, c_out, s_in, s_out = (ssl.MemoryBIO() for _ in range(4))
    cli = client.wrap_bio(c_in, c_out)
    srv = context.wrap_bio(s_in, s_out, server_side=True)
    for _ in range(10):
        for side in (cli, srv):
            with contextlib.suppress(ssl.SSLWantReadError):
                side.do_handshake()
        s_in.write(c_out.read())
        c_in.write(s_out.read())
    return cli


def served_pem(context: ssl.SSLContext) -> bytes:
    """The certificate a context serves, read back through an in-memory handshake."""
    der = handshake_in_memory(context).getpeercert(binary_form=True)
    assert der is not None
    return ssl.DER_cert_to_PEM_cert(der).encode()


def test_changed_files_are_served_from_the_next_handshake_and_bad_ones_keep_the_last(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    cert, key, first = write_tls_pair(tmp_path, "first")
    files = CertificateFiles(TlsFiles(str(cert), str(key)))
    listener = files(None, None)
    assert served_pem(listener).strip() == first.strip()
    *_, second = write_tls_pair(tmp_path, "second")
    assert served_pem(listener).strip() == second.strip()
    cert.write_text("not a certificate")
    with caplog.at_level(logging.WARNING, logger="tessera.serving.gunicorn.handshakes"):
        assert served_pem(listener).strip() == second.strip()
    assert "do not load" in caplog.text and "serving the previous certificate" in caplog.text


def test_a_garbage_handshake_is_counted(tmp_path: Path) -> None:
    cert, key, _ = write_tls_pair(tmp_path, "garbage")
    files = CertificateFiles(TlsFiles(str(cert), str(key)))
    listener = files(None, None)
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    server = listener.wrap_bio(incoming, outgoing, server_side=True)
    incoming.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    with pytest.raises(ssl.SSLError):
        server.do_handshake()
    assert files.failures.total == 1


class Inline:
    """A WSGI app that declares /fast inline; on /fast it needs a thread when told to."""

    inline_paths = ("/fast",)

    def __init__(self, needs_thread: bool) -> None:
        self.needs_thread = needs_thread
        self.calls: list[tuple[str, bool, bytes]] = []

    def __call__(self, environ: dict[str, Any], start_response: Any) -> list[bytes]:
        inline = bool(environ.get(INLINE))
        data = environ["wsgi.input"].read()
        self.calls.append((threading.current_thread().name, inline, data))
        if inline and self.needs_thread:
            raise NeedsThread
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"inline" if inline else b"thread", data]


def test_an_inline_path_runs_in_the_event_loop_and_others_in_a_request_thread() -> None:
    app = Inline(needs_thread=False)
    bridge = WsgiBridge(app, threads=1, body=BodyPolicy(100))
    assert body(run(bridge, scope(path="/fast"), [chunk(b"a", False)]))[2] == b"inlinea"
    assert body(run(bridge, scope(path="/slow"), [chunk(b"b", False)]))[2] == b"threadb"
    (fast_thread, _, _), (slow_thread, _, _) = app.calls
    assert fast_thread == threading.current_thread().name  # asyncio.run's loop thread
    assert slow_thread.startswith("request")


def test_an_inline_request_that_would_block_runs_again_in_a_thread_with_its_whole_body() -> None:
    app = Inline(needs_thread=True)
    sent = run(WsgiBridge(app, threads=1, body=BodyPolicy(100)), scope(path="/fast"),
               [chunk(b"12", True), chunk(b"34", False)])
    assert body(sent)[0] == 200 and body(sent)[2] == b"thread1234"
    assert [(inline, data) for _, inline, data in app.calls] == [(True, b"1234"),
                                                                (False, b"1234")]


def test_needs_thread_outside_the_event_loop_is_a_bug_answered_500(
        caplog: pytest.LogCaptureFixture) -> None:
    def confused(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        raise NeedsThread

    sent = run(WsgiBridge(confused, threads=1, body=BodyPolicy(10)), scope(), [chunk(b"", False)])
    assert body(sent)[0] == 500
    assert "unexpected error" in caplog.text


def test_each_client_hello_counts_as_a_tls_connection(tmp_path: Path) -> None:
    cert, key, _ = write_tls_pair(tmp_path, "hello")
    counted = TlsConnections()
    listener = CertificateFiles(TlsFiles(str(cert), str(key)), connections=counted)(None, None)
    served_pem(listener)
    served_pem(listener)
    assert counted.begun == 2


def issues_a_ticket(context: ssl.SSLContext) -> bool:
    """Whether a client gets a session ticket from a server with ``context`` (in memory)."""
    cli = handshake_in_memory(context)
    with contextlib.suppress(ssl.SSLWantReadError):
        cli.read()  # takes in what the server sent after the handshake (TLS 1.3 tickets)
    return cli.session is not None and cli.session.has_ticket


def test_no_session_tickets_are_issued(tmp_path: Path) -> None:
    cert, key, _ = write_tls_pair(tmp_path, "tickets")
    assert not issues_a_ticket(CertificateFiles(TlsFiles(str(cert), str(key)))(None, None))
    default = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    default.load_cert_chain(cert, key)
    assert issues_a_ticket(default)  # what OpenSSL does by default: the check can fail
