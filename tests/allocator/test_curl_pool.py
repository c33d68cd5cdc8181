"""allocator.kube.curl_pool: which configurations get the libcurl path, the TLS options it sets,
and its handles over real HTTP against a loopback server (answers, no answer, the bound on
idle handles). The adapter's requests over it: tests/allocator/test_kube_adapter.py; over TLS
with client certificates against the real API server: the e2e suite."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pycurl
import pytest
from kubernetes import client

from allocator.kube.curl_pool import CurlError, CurlPool

#: How long the loopback server takes to answer ``/slow``: far past the client's timeout.
SLOW_ANSWER_SECONDS = 10.0


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/slow":
            time.sleep(SLOW_ANSWER_SECONDS)
        elif self.path == "/wait":
            time.sleep(0.3)
        self._answer(200, f"GET {self.headers.get('X-Test')}".encode())

    def do_PATCH(self) -> None:
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n)
        self._answer(409, b"PATCH " + self.headers["Content-Type"].encode() + b" " + body)


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # the client that timed out has left: writing its answer fails, as expected


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    server = _QuietServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


def _cfg(**fields: Any) -> client.Configuration:
    cfg = client.Configuration()
    cfg.host = "https://127.0.0.1:6443"
    cfg.ssl_ca_cert = "/ca.crt"
    for name, value in fields.items():
        setattr(cfg, name, value)
    return cfg


@pytest.mark.parametrize("fields", [
    {"proxy": "http://proxy:3128"},
    {"tls_server_name": "kubernetes.default"},
    {"assert_hostname": "kubernetes"},
    {"retries": 5},
    {"socket_options": [(6, 1, 1)]},
    {"ssl_ca_cert": None},  # verified against the system's trust store
])
def test_a_configuration_asking_for_more_stays_on_urllib3(fields: dict[str, Any]) -> None:
    assert CurlPool.for_configuration(_cfg(**fields), 4) is None


def test_the_tls_options_are_the_kubeconfigs() -> None:
    pool = CurlPool.for_configuration(_cfg(cert_file="/tls.crt", key_file="/tls.key"), 4)
    assert pool is not None
    assert pool.tls == [(pycurl.CAINFO, "/ca.crt"), (pycurl.SSLCERT, "/tls.crt"),
                        (pycurl.SSLKEY, "/tls.key")]
    inline = CurlPool.for_configuration(
        _cfg(ssl_ca_cert=None, ca_cert_data="-----BEGIN CERT"), 4)
    assert inline is not None and inline.tls == [(pycurl.CAINFO_BLOB, b"-----BEGIN CERT")]
    unverified = CurlPool.for_configuration(_cfg(ssl_ca_cert=None, verify_ssl=False), 4)
    assert unverified is not None
    assert unverified.tls == [(pycurl.SSL_VERIFYPEER, 0), (pycurl.SSL_VERIFYHOST, 0)]


def test_a_request_gets_its_status_and_body_and_nothing_of_the_one_before(base: str) -> None:
    pool = CurlPool([], limit=2)
    status, body = pool.request("PATCH", base + "/p", b'{"a":null}',
                                ["Content-Type: application/merge-patch+json"], (1.0, 2.0))
    assert (status, body) == (409, b'PATCH application/merge-patch+json {"a":null}')
    # the same handle next: a GET, no body, no method or header of the PATCH left
    assert pool.request("GET", base + "/g", None, ["X-Test: 1"], (1.0, 2.0)) == (200, b"GET 1")
    assert pool.request("GET", base + "/g", None, [], (1.0, 2.0)) == (200, b"GET None")
    assert pool.idle() == 1


def test_no_answer_in_time_is_a_curl_error_and_the_handle_is_not_kept(base: str) -> None:
    pool = CurlPool([], limit=2)
    started = time.monotonic()
    with pytest.raises(CurlError, match=r"[Tt]imeout|timed out"):
        pool.request("GET", base + "/slow", None, [], (0.5, 0.5))
    # given up at the timeout (1 s), not when the answer came
    assert time.monotonic() - started < SLOW_ANSWER_SECONDS / 2
    assert pool.idle() == 0
    with pytest.raises(CurlError):
        pool.request("GET", "http://127.0.0.1:1/", None, [], (0.5, 0.5))


def test_a_burst_wider_than_the_limit_keeps_only_the_limit(base: str) -> None:
    pool = CurlPool([], limit=3)
    with ThreadPoolExecutor(6) as threads:
        answers = list(threads.map(
            lambda _i: pool.request("GET", base + "/wait", None, [], (1.0, 2.0)), range(6)))
    assert answers == [(200, b"GET None")] * 6
    assert pool.idle() == 3
