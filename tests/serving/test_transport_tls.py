"""Both services as shipped (``tessera webhook`` on gunicorn, ``tessera allocator`` on granian:
real TLS, mutual TLS for the allocator) against hostile and impolite clients on loopback.

The slow clients are the benchmark's (bench/slow_clients.py), in smaller numbers: enough to
outnumber every request thread (webhook 2 workers x 4 threads, allocator 16 threads) with
each kind of slowness (a handshake, headers, a body). Bounds are generous (an answer within
5 s, a stop within 10 s): starved or stuck servers miss them by far, and the figures
themselves are the benchmark's.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import os
import select
import signal
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from bench.slow_clients import Pki, Pressure, Service, free_port, request, services, start, stop
from tessera.serving.policy import BODY_SECONDS, FIRST_REQUEST_SECONDS
from webhook.cli import KEEPALIVE_SECONDS

SERVICES = ["webhook", "allocator"]
#: More slow connections of each kind than a service has request threads (module doc).
SLOW = 60
ANSWER_S = 5.0
#: How long the API server's webhook client keeps an idle connection (Go's
#: http.DefaultTransport IdleConnTimeout, which client-go's transport takes).
API_SERVER_IDLE_SECONDS = 90
STOP_S = 10.0


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


@contextmanager
def served(name: str, pki: Pki, work: Path, *flags: str
           ) -> Iterator[tuple[Service, subprocess.Popen[bytes]]]:
    (service,) = [s for s in services(pki, work, free_port(), None) if s.name == name]
    service = dataclasses.replace(service, argv=[*service.argv, *flags])
    process = start(service, service.port, pki.client_context(), work / f"{name}.log")
    try:
        yield service, process
    finally:
        stop(process)


def log_lines(work: Path, name: str) -> list[str]:
    return (work / f"{name}.log").read_text(errors="replace").splitlines()


@pytest.mark.parametrize("name", SERVICES)
def test_slow_clients_do_not_starve_normal_requests(name: str, pki: Pki, tmp_path: Path) -> None:
    with served(name, pki, tmp_path) as (service, _):
        pressure = Pressure(service.port, pki.client_context(), SLOW, drip=2.0)
        pressure.start()
        try:
            pressure.wait_open(15)
            answers, open_during = [], []
            for _ in range(5):
                open_during.append(pressure.open_now)
                answers.append(request(service.port, pki.client_context(), "POST",
                                       service.path, service.body, ANSWER_S))
        finally:
            pressure.stop()
    assert [status for status, _ in answers] == [200] * 5, answers
    assert all(seconds < ANSWER_S for _, seconds in answers)
    # The attack was really on: slow connections were held open meanwhile (the server closes
    # each after its deadline and the client opens it again, so a few may be reconnecting).
    assert min(open_during) >= SLOW // 2, open_during


@pytest.mark.parametrize("name", SERVICES)
def test_a_client_that_never_finishes_its_first_headers_is_cut_off(
    name: str, pki: Pki, tmp_path: Path
) -> None:
    with served(name, pki, tmp_path) as (service, _):
        context = pki.client_context()
        with socket.create_connection(("127.0.0.1", service.port), timeout=10) as raw, \
                context.wrap_socket(raw, server_hostname="127.0.0.1") as slow:
            slow.settimeout(1)
            t0 = time.monotonic()
            closed_after = None
            for byte in b"POST /mutate HTTP/1.1\r\nHost: tessera\r\n" * 10:
                if time.monotonic() - t0 > 3 * FIRST_REQUEST_SECONDS:
                    break
                try:
                    slow.sendall(bytes([byte]))
                    if slow.recv(1) == b"":
                        closed_after = time.monotonic() - t0
                        break
                except TimeoutError:
                    continue  # nothing from the server yet: go on dripping
                except OSError:
                    closed_after = time.monotonic() - t0
                    break
    assert closed_after is not None, "the server kept a dripping connection open"
    assert FIRST_REQUEST_SECONDS - 1 <= closed_after <= 3 * FIRST_REQUEST_SECONDS


@pytest.mark.parametrize("name", SERVICES)
def test_garbage_connections_leave_json_lines_and_reports(
    name: str, pki: Pki, tmp_path: Path
) -> None:
    """The webhook reports refused handshakes in one line per worker per minute at most
    (``tessera.serving.gunicorn.handshakes.HandshakeFailures``). The allocator's TLS is
    granian's (rustls, no hook): granian logs each refused handshake at DEBUG, through the
    same JSON handler, in words that change between its patch releases (2.8.7: ``TCP
    handshake failed with error``; 2.8.9: ``TCP accept failed: TlsAcceptError``)."""
    flags = ["--log-level=DEBUG"] if name == "allocator" else []
    with served(name, pki, tmp_path, *flags) as (service, _):
        for i in range(30):
            with socket.create_connection(("127.0.0.1", service.port), timeout=5) as sock:
                sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" if i % 2 else os.urandom(64))
                sock.settimeout(5)
                try:
                    while sock.recv(4096):
                        pass
                except OSError:
                    pass  # a reset is a fine answer to garbage
        # and the service still answers
        assert request(service.port, pki.client_context(), "GET", "/healthz", None, 5)[0] == 200
    lines = log_lines(tmp_path, name)
    not_json = [line for line in lines if not _is_json(line)]
    assert not_json == []
    if name == "webhook":
        reports = [line for line in lines if "TLS handshake" in line]
        assert 1 <= len(reports) <= 2, reports
    else:
        refused = [line for line in lines if "_granian" in line
                   and ("TCP handshake failed" in line or "TCP accept failed" in line)]
        assert len(refused) >= 30, lines[-20:]


def _one_json_answer(tls: ssl.SSLSocket) -> bytes:
    """The bytes of one answer with a JSON object body (headers and body may come in separate
    reads), or what came before the connection ended."""
    data = b""
    while not data.rstrip().endswith(b"}"):
        chunk = tls.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def _is_json(line: str) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


@pytest.mark.parametrize("asked", [True, False], ids=["after-a-request", "before-any-request"])
@pytest.mark.parametrize("name", SERVICES)
def test_sigterm_stops_the_service_while_a_client_keeps_its_connection_open(
    name: str, asked: bool, pki: Pki, tmp_path: Path
) -> None:
    """The API server and kube-scheduler (Go's HTTP client) keep idle connections open, also
    ones they dialled but never used (a dial that lost the race to a connection freed
    meanwhile). Neither may hold a stopping service until it is killed."""
    with served(name, pki, tmp_path) as (service, process):
        context = pki.client_context()
        with socket.create_connection(("127.0.0.1", service.port)) as raw, \
                context.wrap_socket(raw, server_hostname="127.0.0.1") as kept:
            if asked:
                kept.sendall(b"GET /healthz HTTP/1.1\r\nHost: tessera\r\n\r\n")
                assert kept.recv(4096).startswith(b"HTTP/1.1 200")
            time.sleep(1)
            t0 = time.monotonic()
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=STOP_S)
            except subprocess.TimeoutExpired:
                pytest.fail(f"{name} still running {STOP_S:g} s after SIGTERM")
            stopped_after = time.monotonic() - t0
    assert process.returncode == 0
    # gunicorn's graceful_timeout is 10 s: a worker that waited for the idle connection
    # would be stopped by it, not by itself.
    assert stopped_after < STOP_S


def test_the_webhook_answers_on_a_connection_idle_past_the_old_keepalive(
    pki: Pki, tmp_path: Path
) -> None:
    """The API server reuses a webhook connection idle for up to 90 s; a request it writes
    on one the webhook is closing at that moment fails the admission with EOF
    (webhook/cli.py, KEEPALIVE_SECONDS). Idle longer than the 5 s the webhook kept before,
    the connection still answers."""
    assert KEEPALIVE_SECONDS > API_SERVER_IDLE_SECONDS
    with served("webhook", pki, tmp_path) as (service, _):
        kept = http.client.HTTPSConnection("127.0.0.1", service.port,
                                           context=pki.client_context(), timeout=5)
        try:
            kept.connect()
            sock = kept.sock
            answers = []
            for pause in (0.0, 6.0):
                time.sleep(pause)
                kept.request("POST", service.path, service.body,
                             {"Content-Type": "application/json"})
                response = kept.getresponse()
                answers.append((response.status, json.loads(response.read())["kind"]))
            assert kept.sock is sock  # the same connection all along
        finally:
            kept.close()
    assert answers == [(200, "AdmissionReview")] * 2


def test_two_services_on_one_host_create_no_shared_control_socket(
    pki: Pki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))  # gunicorn's default: $HOME/.gunicorn/gunicorn.ctl
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    with served("webhook", pki, tmp_path), served("allocator", pki, tmp_path):
        created = sorted(str(p.relative_to(home)) for p in home.rglob("*"))
    assert created == []
    for name in SERVICES:
        assert not [line for line in log_lines(tmp_path, name) if "Control socket" in line]


def test_the_allocator_refuses_a_client_without_a_certificate(pki: Pki, tmp_path: Path) -> None:
    with served("allocator", pki, tmp_path) as (service, _):
        anonymous = ssl.create_default_context(cafile=str(pki.ca))
        status, _ = request(service.port, anonymous, "POST", service.path, service.body, 5)
        assert status == 0  # no HTTP answer at all: the handshake (or first read) failed
        assert request(service.port, pki.client_context(), "POST", service.path, service.body,
                       5)[0] == 200


def test_the_allocator_offers_http2_and_keeps_http1_connections(pki: Pki, tmp_path: Path) -> None:
    """kube-scheduler's extender client takes HTTP/2 when offered (one connection for every
    call, no handshake per call); a client that asks for HTTP/1.1 keeps its connection."""
    with served("allocator", pki, tmp_path) as (service, _):
        context = pki.client_context()
        context.set_alpn_protocols(["h2", "http/1.1"])
        with socket.create_connection(("127.0.0.1", service.port), timeout=5) as raw, \
                context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            assert tls.selected_alpn_protocol() == "h2"
        kept = http.client.HTTPSConnection("127.0.0.1", service.port,
                                           context=pki.client_context(), timeout=5)
        try:
            kept.connect()
            sock = kept.sock
            for _ in range(3):
                kept.request("POST", service.path, service.body,
                             {"Content-Type": "application/json"})
                assert kept.getresponse().read()
            assert kept.sock is sock  # the same connection all along
        finally:
            kept.close()


@pytest.mark.parametrize("name", SERVICES)
def test_a_stalled_body_is_answered_408_and_holds_no_request_thread(
    name: str, pki: Pki, tmp_path: Path
) -> None:
    """More clients than request threads declare a body and stall after 10 bytes: each gets
    408 after BODY_SECONDS, and a normal request meanwhile is answered at once."""
    with served(name, pki, tmp_path) as (service, _):
        context = pki.client_context()
        head = (f"POST {service.path} HTTP/1.1\r\nHost: tessera\r\n"
                "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n").encode()
        stalled = []
        try:
            for _ in range(20):
                raw = socket.create_connection(("127.0.0.1", service.port), timeout=5)
                tls = context.wrap_socket(raw, server_hostname="127.0.0.1")
                tls.sendall(head + b"{" * 10)
                stalled.append(tls)
            t0 = time.monotonic()
            status, seconds = request(service.port, context, "POST", service.path,
                                      service.body, ANSWER_S)
            assert (status, seconds < ANSWER_S) == (200, True)
            answers, closed = [], []
            for tls in stalled:
                tls.settimeout(BODY_SECONDS + ANSWER_S)
                answers.append(_one_json_answer(tls))
            waited = time.monotonic() - t0
            # and then the server ends the connection: nothing lingers (all waited on at
            # once, ANSWER_S in all, not one after the other)
            ready, _, _ = select.select(stalled, [], [], ANSWER_S)
            for tls in stalled:
                tls.settimeout(0.1 if tls in ready else 0.0)
                try:
                    closed.append(tls.recv(4096) == b"")
                except (OSError, ssl.SSLError):
                    closed.append(True)
        finally:
            for tls in stalled:
                tls.close()
    assert all(a.startswith(b"HTTP/1.1 408") for a in answers), answers[:2]
    assert all(b'"code": 408' in a and b"request body not received" in a for a in answers)
    assert BODY_SECONDS - 1 <= waited <= BODY_SECONDS + ANSWER_S
    assert all(closed), closed
