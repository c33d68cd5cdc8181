"""Body caps on the real servers (issue 9, item 5): ``tessera webhook`` on gunicorn and
``tessera allocator`` on granian, over TLS on loopback.

gunicorn decodes chunked transfer encoding itself and tells the app so
(``wsgi.input_terminated``); Werkzeug then wraps the input in a stream that silently stops at
the cap. A chunked review of 6 MiB whose first bytes are a valid review followed by spaces was
read as the valid review and admitted. Over the cap must be 413, chunked or not, and both
servers refuse it with the one body policy's answer (tessera/serving/policy.py).
"""

from __future__ import annotations

import json
import select
import socket
import ssl
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from test_webhook_gunicorn_tls import (
    HOST,
    Server,
    base_env,
    free_port,
    make_review,
    serving_pair,
    session,
    start,
    stop,
    write_pair,
)

from certs.builder import build_ca

MIB = 1024 * 1024
ALLOCATOR_CAP = MIB

#: A kubeconfig for an API server that is not there: the allocator serves its verbs (they
#: answer NotReady) while its sync retries in the background.
NOWHERE = """apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://127.0.0.1:9"}}]
users: [{name: none, user: {token: "x"}}]
contexts: [{name: none, context: {cluster: none, user: none}}]
current-context: none
"""


def chunks(head: bytes, total: int, size: int = 64 * 1024) -> Iterator[bytes]:
    """``head`` then spaces up to ``total`` bytes; a generator makes requests send it
    chunked (no Content-Length)."""
    yield head
    left = total - len(head)
    while left > 0:
        yield b" " * min(size, left)
        left -= size


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[dict[str, tuple[Server, requests.Session]]]:
    tls = tmp_path / "tls"
    tls.mkdir()
    ca = build_ca("tessera-test-ca")
    write_pair(tls, serving_pair(ca))
    (tls / "ca.crt").write_bytes(ca.cert_pem)
    (tmp_path / "kubeconfig").write_text(NOWHERE)
    common = ["--host", HOST, "--tls-cert", str(tls / "tls.crt"),
              "--tls-key", str(tls / "tls.key"), "--threads", "2"]
    commands = {
        "webhook": ["webhook", "--workers", "1"],
        # Client authentication is not under test here (tests/serving covers it).
        "allocator": ["allocator", "--kubeconfig", str(tmp_path / "kubeconfig"),
                      "--leader-election", "false", "--max-body-bytes", str(ALLOCATOR_CAP),
                      "--allow-unauthenticated"],
    }
    started: dict[str, tuple[Server, requests.Session]] = {}
    try:
        for name, args in commands.items():
            port = free_port()
            client = session(tls / "ca.crt")
            command = [sys.executable, "-m", "tessera.cli", *args, *common, "--port", str(port)]
            started[name] = (start(command, base_env(), port, tmp_path / f"{name}.log",
                                   client, "https"), client)
        yield started
    finally:
        for server, client in started.values():
            stop(server)
            client.close()


def _post(client: requests.Session, url: str, data: Any) -> requests.Response:
    return client.post(url, data=data, headers={"Content-Type": "application/json"},
                       timeout=60)


def post_reading_early(port: int, ca_file: Path, path: str, head: bytes, total: int,
                       chunked: bool = True) -> tuple[int, dict[str, Any]]:
    """POST ``head`` padded with spaces to ``total`` bytes, reading the reply *while*
    sending, as Go's HTTP client (kube-apiserver's, kube-scheduler's) does.

    A server that refuses a body before reading it all answers and then closes (gunicorn
    drains at most 64 KiB of an unread body before it keeps a connection alive: gunicorn
    27.0.1 ``http/parser.py`` ``_DRAIN_MAX_BYTES``); a client that only reads after sending
    everything (requests) sees the reset, not the answer. One thread, non-blocking.
    """
    body = head + b" " * (total - len(head))
    if chunked:
        framed = b"".join(f"{len(body[i:i + 65536]):x}\r\n".encode() + body[i:i + 65536]
                          + b"\r\n" for i in range(0, len(body), 65536)) + b"0\r\n\r\n"
        length = "Transfer-Encoding: chunked"
    else:
        framed, length = body, f"Content-Length: {len(body)}"
    request = (f"POST {path} HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json"
               f"\r\n{length}\r\n\r\n").encode() + framed
    context = ssl.create_default_context(cafile=str(ca_file))
    with socket.create_connection((HOST, port), timeout=30) as raw, \
            context.wrap_socket(raw, server_hostname=HOST) as tls:
        tls.setblocking(False)
        sent, received, sending = 0, b"", True
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            select.select([tls], [tls] if sending else [], [], 1.0)
            if sending:
                try:
                    sent += tls.send(request[sent:sent + 65536])
                    sending = sent < len(request)
                except (ssl.SSLWantWriteError, ssl.SSLWantReadError):
                    pass
                except OSError:  # the server answered and closed: stop sending
                    sending = False
            try:
                part = tls.recv(65536)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                continue
            except OSError:
                break
            if not part:
                break
            received += part
            header, _, rest = received.partition(b"\r\n\r\n")
            lengths = [int(line.split(b":")[1]) for line in header.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")]
            if lengths and len(rest) >= lengths[0]:
                break
    header, _, rest = received.partition(b"\r\n\r\n")
    assert header, "no reply"
    status = int(header.split(b" ")[1])
    return status, json.loads(rest)


def test_a_chunked_review_over_the_cap_is_413_and_one_under_it_is_admitted(
    servers: dict[str, tuple[Server, requests.Session]],
) -> None:
    server, client = servers["webhook"]
    review = json.dumps(make_review({"elasticgpu.io/gpu-core": "10"})).encode()
    ca_file = server.log.parent / "tls" / "ca.crt"

    status, answer = post_reading_early(server.port, ca_file, "/mutate", review, 6 * MIB)
    assert (status, answer) == (413, {"code": 413,
                                      "message": f"request body larger than {4 * MIB} bytes"})
    # With a Content-Length over the cap: refused before reading.
    status, _ = post_reading_early(server.port, ca_file, "/mutate", review, 5 * MIB,
                                   chunked=False)
    assert status == 413
    # A chunked body under the cap is read whole and admitted.
    under = _post(client, server.url("/mutate"), chunks(review, MIB))
    assert under.status_code == 200
    assert under.json()["response"]["allowed"] is True


def test_a_chunked_extender_body_over_the_cap_is_413(
    servers: dict[str, tuple[Server, requests.Session]],
) -> None:
    server, client = servers["allocator"]
    args = json.dumps({"Pod": {"metadata": {"name": "p"}}, "NodeNames": ["n1"]}).encode()
    ca_file = server.log.parent / "tls" / "ca.crt"

    status, answer = post_reading_early(server.port, ca_file, "/scheduler/filter", args,
                                        6 * ALLOCATOR_CAP)
    assert (status, answer) == (413, {"code": 413, "message": "request body larger than "
                                                              f"{ALLOCATOR_CAP} bytes"})
    status, _ = post_reading_early(server.port, ca_file, "/scheduler/filter", args,
                                   2 * ALLOCATOR_CAP, chunked=False)
    assert status == 413

    under = _post(client, server.url("/scheduler/filter"), chunks(args, ALLOCATOR_CAP // 2))
    assert under.status_code == 200
    assert "syncing" in under.json()["Error"]  # read whole, decoded, answered NotReady
