"""The real server: ``tessera webhook`` (gunicorn, our asyncio worker) over TLS on loopback.

Rotation: the service loads the certificate files again at the first handshake after they
changed (tessera/serving/gunicorn/handshakes.py). So after the files are replaced, a NEW
connection must be served the NEW certificate, without a restart.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from certs.builder import CertificateAuthority, KeyPair, build_ca, build_leaf

HOST = "127.0.0.1"
SERVER_NAME = "tessera-webhook.tessera-system.svc"
START_DEADLINE_S = 60.0  # a deadline for the server to come up, not a performance assertion


def free_port() -> int:
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def write_pair(directory: Path, leaf: KeyPair) -> None:
    """Replace the files atomically, as a Secret volume update or cert-manager would."""
    for name, data in (("tls.crt", leaf.cert_pem), ("tls.key", leaf.key_pem)):
        tmp = directory / f".{name}.tmp"
        tmp.write_bytes(data)
        os.replace(tmp, directory / name)


def serving_pair(ca: CertificateAuthority) -> KeyPair:
    return build_leaf(ca, "tessera-webhook", [SERVER_NAME], [HOST])


def make_review(limits: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "default",
            "operation": "CREATE",
            "object": {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "p", "namespace": "default"},
                "spec": {"containers": [{"name": "main", "image": "busybox",
                                         "resources": {"limits": limits}}]},
            },
        },
    }


def session(ca_file: Path | None = None) -> requests.Session:
    s = requests.Session()
    s.trust_env = False  # no proxies for loopback
    if ca_file is not None:
        s.verify = str(ca_file)
    return s


def peer_certificate(port: int, ca_pem: bytes) -> bytes:
    """DER of the certificate a brand-new TLS connection is served (verified against ca_pem)."""
    context = ssl.create_default_context(cadata=ca_pem.decode())
    with socket.create_connection((HOST, port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname=SERVER_NAME) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    port: int
    log: Path

    def url(self, path: str, scheme: str = "https") -> str:
        return f"{scheme}://{HOST}:{self.port}{path}"

    def logs(self) -> str:
        return self.log.read_text(errors="replace")


def start(command: list[str], env: dict[str, str], port: int, log: Path,
          ready: requests.Session, scheme: str) -> Server:
    with log.open("wb") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    server = Server(process, port, log)
    deadline = time.monotonic() + START_DEADLINE_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"webhook exited with {process.returncode}:\n{server.logs()}")
        try:
            if ready.get(server.url("/healthz", scheme), timeout=2).status_code == 200:
                return server
        except (requests.ConnectionError, requests.Timeout):
            # not listening yet, or listening before its worker has booted (on a busy
            # machine longer than the probe's timeout); bounded by the deadline
            time.sleep(0.2)
    stop(server)
    pytest.fail(f"webhook did not come up within {START_DEADLINE_S}s:\n{server.logs()}")


def stop(server: Server) -> None:
    if server.process.poll() is None:
        server.process.terminate()
        try:
            server.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait()


@contextmanager
def served_webhook(directory: Path, *options: str, env: Mapping[str, str] | None = None
                   ) -> Iterator[tuple[Server, requests.Session]]:
    """``tessera webhook`` on loopback over TLS (a new CA's serving pair in ``directory``),
    one worker of two threads, with ``options`` and ``env`` added; stopped after."""
    ca = build_ca("tessera-test-ca")
    write_pair(directory, serving_pair(ca))
    (directory / "ca.crt").write_bytes(ca.cert_pem)
    port = free_port()
    command = [
        sys.executable, "-m", "tessera.cli", "webhook", "--host", HOST, "--port", str(port),
        "--tls-cert", str(directory / "tls.crt"), "--tls-key", str(directory / "tls.key"),
        "--workers", "1", "--threads", "2", *options,
    ]
    with session(directory / "ca.crt") as client:
        server = start(command, base_env() | dict(env or {}), port,
                       directory / "webhook.log", client, "https")
        try:
            yield server, client
        finally:
            stop(server)


def base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TESSERA_")}
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    return env


@pytest.fixture
def tls_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "tls"
    directory.mkdir()
    return directory


@pytest.fixture
def first_ca(tls_dir: Path) -> Iterator[CertificateAuthority]:
    ca = build_ca("tessera-test-ca-1")
    write_pair(tls_dir, serving_pair(ca))
    (tls_dir / "ca-1.crt").write_bytes(ca.cert_pem)
    yield ca


def test_the_real_server_admits_over_tls_and_serves_a_rotated_cert_to_new_connections(
    tls_dir: Path, first_ca: CertificateAuthority, tmp_path: Path
) -> None:
    port = free_port()
    command = [
        sys.executable, "-m", "tessera.cli", "webhook",
        "--host", HOST, "--port", str(port),
        "--tls-cert", str(tls_dir / "tls.crt"), "--tls-key", str(tls_dir / "tls.key"),
        "--workers", "1", "--threads", "2",
    ]
    with session(tls_dir / "ca-1.crt") as first:
        server = start(command, base_env(), port, tmp_path / "webhook.log", first, "https")
        try:
            before = (tls_dir / "tls.crt").read_bytes()
            response = first.post(server.url("/mutate"),
                                  json=make_review({"elasticgpu.io/gpu-core": "200"}), timeout=10)
            assert response.status_code == 200
            answer = response.json()["response"]
            assert answer["allowed"] is True
            patch = json.loads(base64.b64decode(answer["patch"]))
            assert {"op": "add", "path": "/spec/containers/0/resources/requests",
                    "value": {"elasticgpu.io/gpu-core": "200"}} in patch
            served_first = peer_certificate(port, first_ca.cert_pem)
            assert ssl.DER_cert_to_PEM_cert(served_first).encode().strip() == before.strip()

            # Rotate: a new CA and a new serving cert, files replaced in place.
            second_ca = build_ca("tessera-test-ca-2")
            second = serving_pair(second_ca)
            write_pair(tls_dir, second)
            (tls_dir / "ca-2.crt").write_bytes(second_ca.cert_pem)

            served_second = peer_certificate(port, second_ca.cert_pem)
            assert ssl.DER_cert_to_PEM_cert(served_second).encode().strip() == (
                second.cert_pem.strip()
            )
            with session(tls_dir / "ca-2.crt") as rotated:
                again = rotated.post(server.url("/mutate"),
                                     json=make_review({"aliyun.com/gpu-mem": "1"}), timeout=10)
            assert again.status_code == 200
            assert again.json()["response"]["allowed"] is True
            # A client that still trusts only the old CA must now fail on a new connection.
            stale = session(tls_dir / "ca-1.crt")
            with stale, pytest.raises(requests.exceptions.SSLError):
                stale.get(server.url("/healthz"), timeout=10)
        finally:
            stop(server)
    assert server.process.returncode is not None


def test_the_bare_gunicorn_target_reads_its_configuration_from_the_environment(
    tmp_path: Path,
) -> None:
    port = free_port()
    env = base_env()
    env["TESSERA_SCHEDULER_NAME"] = "tessera-scheduler"
    command = [
        sys.executable, "-m", "gunicorn", "--bind", f"{HOST}:{port}",
        "--worker-class", "gthread", "--workers", "1", "webhook.app:create_app()",
    ]
    with session() as plain:
        server = start(command, env, port, tmp_path / "gunicorn.log", plain, "http")
        try:
            response = plain.post(server.url("/mutate", "http"),
                                  json=make_review({"elasticgpu.io/gpu": "0.5"}), timeout=10)
        finally:
            stop(server)
    patch = json.loads(base64.b64decode(response.json()["response"]["patch"]))
    assert {"op": "add", "path": "/spec/schedulerName", "value": "tessera-scheduler"} in patch


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ([], "TLS is required"),
        (["--tls-cert", "/nonexistent.crt", "--tls-key", "/nonexistent.key"], "does not exist"),
        (["--insecure-http", "--port", "99999"], "TESSERA_WEBHOOK_PORT"),
        (["--insecure-http", "--dialects", "elastic,kueue"], "kueue"),
    ],
)
def test_the_cli_refuses_bad_configuration_before_starting(
    args: list[str], fragment: str, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tessera.cli import main

    for name in list(os.environ):
        if name.startswith("TESSERA_"):
            monkeypatch.delenv(name)
    assert main(["webhook", *args]) == 2
    assert fragment in capsys.readouterr().err
