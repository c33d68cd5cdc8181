"""The allocator's serving pieces on their own (tessera/serving/granian): complete bodies
within a deadline, the body readers, the TLS files watch and granian's settings. The real
server against real clients: tests/serving; renewed files: tests/deploy/test_cert_rotation.py.
"""

from __future__ import annotations

import io
import json
import logging
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from builders import write_tls_pair

from tessera.serving import ServingConfig
from tessera.serving.granian.bodies import BodyReaders, CompleteBodies, PendingRead
from tessera.serving.granian.server import (
    BODY_WAIT_THREADS,
    TlsFilesWatch,
    WithoutThreadAdvice,
    server_options,
)
from tessera.serving.policy import BodyPolicy
from tessera.serving.tls import TlsFiles


class Echo:
    """Answers with what it read: the body, CONTENT_LENGTH, and how many ran at once."""

    def __init__(self, hold: threading.Event | None = None) -> None:
        self.hold = hold
        self.running = 0
        self.most = 0
        self.lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Any) -> list[bytes]:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        if self.hold is not None:
            self.hold.wait(5)
        body = environ["wsgi.input"].read()
        with self.lock:
            self.running -= 1
        start_response("200 OK", [("Content-Type", "application/json")])
        return [json.dumps({"body": body.decode(), "length": environ.get("CONTENT_LENGTH")}
                           ).encode()]


class Stream:
    """granian's wsgi.input as far as reads go: ``data``, then the end, or a stall until
    ``release`` is set (then the end), or an error."""

    def __init__(self, data: bytes = b"", *, stall: bool = False,
                 error: Exception | None = None) -> None:
        self.data = io.BytesIO(data)
        self.stall = stall
        self.error = error
        self.release = threading.Event()
        self.reads = 0

    def read(self, size: int = -1) -> bytes:
        self.reads += 1
        if self.error is not None:
            raise self.error
        chunk = self.data.read(size)
        if not chunk and self.stall:
            self.release.wait(10)
        return chunk


def call(app: CompleteBodies, stream: Stream, length: str | None = None,
         method: str = "POST", protocol: str = "HTTP/1.1",
         path: str = "/x") -> tuple[str, dict[str, str], bytes]:
    environ: dict[str, Any] = {"REQUEST_METHOD": method, "PATH_INFO": path,
                               "SERVER_PROTOCOL": protocol, "wsgi.input": stream}
    if length is not None:
        environ["CONTENT_LENGTH"] = length
    started: list[Any] = []
    out = b"".join(app(environ, lambda status, headers: started.extend([status, headers])))
    return started[0], dict(started[1]), out


def bodies(app: Any = None, *, threads: int = 4, cap: int = 100, seconds: float = 5.0,
           readers: BodyReaders | None = None) -> CompleteBodies:
    return CompleteBodies(app or Echo(), threads=threads, body=BodyPolicy(cap, seconds),
                          readers=readers)


def test_a_complete_body_reaches_the_app_with_its_length() -> None:
    status, _, out = call(bodies(), Stream(b'{"a": 1}'), "8")
    assert status == "200 OK"
    assert json.loads(out) == {"body": '{"a": 1}', "length": "8"}


TOO_LARGE = {"code": 413, "message": "request body larger than 100 bytes"}


def test_a_body_without_a_length_is_read_whole_and_given_its_length() -> None:
    assert json.loads(call(bodies(), Stream(b"abc"))[2]) == {"body": "abc", "length": "3"}


def test_a_body_without_a_length_is_refused_one_byte_past_the_cap() -> None:
    stream = Stream(b"x" * 500)
    status, headers, out = call(bodies(cap=100), stream)
    assert (status, json.loads(out)) == ("413 Request Entity Too Large", TOO_LARGE)
    assert ("Connection", "close") in headers.items()
    assert stream.data.tell() == 101  # read no further than needed to know
    exactly = call(bodies(cap=100), Stream(b"x" * 100))
    assert json.loads(exactly[2])["length"] == "100"


def test_a_declared_length_over_the_cap_is_refused_unread() -> None:
    stream = Stream(b"x" * 500)
    status, _, out = call(bodies(cap=100), stream, "500")
    assert (status, json.loads(out)) == ("413 Request Entity Too Large", TOO_LARGE)
    assert stream.reads == 0


@pytest.mark.parametrize(("method", "length"), [("GET", None), ("POST", "0")])
def test_no_body_means_no_read(method: str, length: str | None) -> None:
    stream = Stream(error=AssertionError("read"))
    assert call(bodies(), stream, length, method)[0] == "200 OK"
    assert stream.reads == 0


def test_a_stalled_body_gets_408_in_time_and_the_read_is_waited_out_after_the_answer() -> None:
    stream = Stream(b"{", stall=True)
    app = bodies(seconds=0.2)
    environ: dict[str, Any] = {"REQUEST_METHOD": "POST", "SERVER_PROTOCOL": "HTTP/1.1",
                               "CONTENT_LENGTH": "100", "wsgi.input": stream}
    started: list[Any] = []
    t0 = time.monotonic()
    answer = iter(app(environ, lambda status, headers: started.extend([status, headers])))
    assert 0.2 <= time.monotonic() - t0 < 2
    assert started[0] == "408 Request Timeout"
    assert ("Connection", "close") in started[1]
    first = next(answer)  # sent before the read ends (module doc: granian, iterators)
    assert json.loads(first) == {"code": 408,
                                 "message": "request body not received within 0.2 s"}
    stream.release.set()  # what granian's end of the request does to the reader
    assert list(answer) == []


def test_http2_answers_carry_no_connection_header() -> None:
    stream = Stream(b"{", stall=True)
    _, headers, _ = call(bodies(seconds=0.1), stream, "10", protocol="HTTP/2")
    stream.release.set()
    assert "Connection" not in headers


def test_when_every_reader_is_taken_a_body_is_refused_at_once() -> None:
    readers = BodyReaders(limit=1)
    stalled = Stream(b"", stall=True)
    held = readers.submit(lambda: stalled.read(10))
    assert held is not None
    t0 = time.monotonic()
    status, _, out = call(bodies(readers=readers), Stream(b"ok"), "2")
    assert time.monotonic() - t0 < 1
    assert status == "503 Service Unavailable"
    assert "too many request bodies" in json.loads(out)["message"]
    stalled.release.set()
    held.result(5)
    # the reader is free again: the next body is read
    assert call(bodies(readers=readers), Stream(b"ok"), "2")[0] == "200 OK"


def test_readers_are_reused_not_made_per_body() -> None:
    readers = BodyReaders(limit=8)
    for _ in range(20):
        future = readers.submit(lambda: b"x")
        assert future is not None and future.result(5) == b"x"
    assert readers._threads == 1


def test_a_pending_read_times_out_until_it_ends_then_answers_every_caller() -> None:
    pending = PendingRead()
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        pending.result(timeout=0.05)
    assert time.monotonic() - t0 >= 0.05
    ender = threading.Timer(0.05, pending.end, args=(b"body",))
    ender.start()
    assert pending.result(timeout=5) == b"body"  # woken by the end, not by the timeout
    assert pending.result(timeout=0) == b"body"  # and again, at once
    failed = PendingRead()
    failed.end(error=ConnectionResetError("gone"))
    for _ in range(2):
        with pytest.raises(ConnectionResetError, match="gone"):
            failed.result(timeout=0)


def test_a_body_that_cannot_be_read_gets_400() -> None:
    status, _, out = call(bodies(), Stream(error=ConnectionResetError("gone")), "5")
    assert status == "400 Bad Request"
    assert json.loads(out)["message"] == "request body could not be read"


def test_an_app_that_raises_gets_a_logged_500(caplog: pytest.LogCaptureFixture) -> None:
    def broken(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        raise RuntimeError("bug")

    with caplog.at_level(logging.ERROR):
        status, _, out = call(bodies(broken), Stream(b"{}"), "2")
    assert status == "500 Internal Server Error"
    assert json.loads(out) == {"code": 500, "message": "internal error"}
    assert "unexpected error serving" in caplog.text


def test_at_most_threads_requests_run_the_app_at_once() -> None:
    hold = threading.Event()
    echo = Echo(hold)
    app = bodies(echo, threads=2)
    callers = [threading.Thread(target=call, args=(app, Stream(b"a"), "1")) for _ in range(5)]
    for t in callers:
        t.start()
    deadline = time.monotonic() + 5
    while echo.running < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)  # time for a third to get in, were the slots not there
    hold.set()
    for t in callers:
        t.join(5)
    assert echo.most == 2


def test_slow_paths_run_in_slots_of_their_own() -> None:
    """The allocator's binds (which wait on the API server) fill their slots; filter still
    runs at once, and binds beyond their slots wait for them."""
    hold = threading.Event()
    running: Counter[str] = Counter()
    most: Counter[str] = Counter()
    lock = threading.Lock()

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        path = environ["PATH_INFO"]
        with lock:
            running[path] += 1
            most[path] = max(most[path], running[path])
        if path == "/bind":
            hold.wait(5)
        with lock:
            running[path] -= 1
        start_response("200 OK", [])
        return [b"{}"]

    serving = CompleteBodies(app, threads=2, body=BodyPolicy(100),
                             slow_paths=frozenset({"/bind"}))
    binds = [threading.Thread(target=call, args=(serving, Stream(b"b"), "1"),
                              kwargs={"path": "/bind"}) for _ in range(3)]
    for t in binds:
        t.start()
    deadline = time.monotonic() + 5
    while running["/bind"] < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)  # time for the third bind to get in, were there more slots
    assert call(serving, Stream(b"f"), "1", path="/filter")[0] == "200 OK"
    assert not hold.is_set() and most == {"/bind": 2, "/filter": 1}
    hold.set()
    for t in binds:
        t.join(5)
    assert not any(t.is_alive() for t in binds) and running["/bind"] == 0


def test_the_watch_fires_once_files_changed_and_load_and_the_worker_is_old_enough(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    cert, key, _ = write_tls_pair(tmp_path, "first")
    now = [0.0]
    watch = TlsFilesWatch(TlsFiles(str(cert), str(key)), lambda: None, not_before=6.0,
                          clock=lambda: now[0])
    assert not watch.check()  # unchanged
    cert.write_text("half-written")
    with caplog.at_level(logging.WARNING, logger="tessera.serving.granian.server"):
        assert not watch.check()
        assert not watch.check()
    assert caplog.text.count("do not load") == 1  # once per change
    write_tls_pair(tmp_path, "second")
    assert not watch.check()  # loads, but the worker is too young
    now[0] = 6.0
    assert watch.check()


def test_the_watch_calls_back_and_stops(tmp_path: Path) -> None:
    cert, key, _ = write_tls_pair(tmp_path, "first")
    called = threading.Event()
    watch = TlsFilesWatch(TlsFiles(str(cert), str(key)), called.set)
    runner = threading.Thread(target=watch.run, args=(threading.Event(), 0.05))
    runner.start()
    write_tls_pair(tmp_path, "second")
    assert called.wait(5)
    runner.join(5)
    assert not runner.is_alive()


def test_server_options_mutual_tls_and_threads_for_waiting_bodies(tmp_path: Path) -> None:
    serving = ServingConfig(host="127.0.0.1", port=9443, tls_cert=str(tmp_path / "c"),
                            tls_key=str(tmp_path / "k"), tls_client_ca=str(tmp_path / "ca"))
    options = server_options(serving, threads=16)
    assert options["ssl_client_verify"] and options["ssl_ca"] == tmp_path / "ca"
    assert options["blocking_threads"] == 16 + BODY_WAIT_THREADS
    assert options["workers"] == 1 and options["respawn_failed_workers"]
    assert options["http"] == "auto" and options["ssl_protocol_min"] == "tls1.2"
    plain = server_options(ServingConfig(tls_client_ca=str(tmp_path / "ca")), threads=4)
    assert plain["ssl_cert"] is None and not plain["ssl_client_verify"]


def test_granian_thread_advice_is_dropped_other_lines_kept() -> None:
    advice = logging.LogRecord("_granian", logging.WARNING, "", 0,
                               "Configuration allows spawning up to 144 Python threads", (),
                               None)
    other = logging.LogRecord("_granian", logging.WARNING, "", 0, "Respawning worker-1", (),
                              None)
    assert not WithoutThreadAdvice().filter(advice)
    assert WithoutThreadAdvice().filter(other)
