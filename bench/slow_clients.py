"""Slow clients against both services: do normal requests still get answered?

For each service (the real ``tessera webhook`` and ``tessera allocator``, started as their
shipped command lines with TLS on loopback; the allocator with mutual TLS), this opens
``--slow`` slow connections, a third of each kind:

- *hello*: a TCP connection that sends the first bytes of a real TLS ClientHello, then one
  more byte every ``--drip`` seconds (the handshake never completes);
- *headers*: a completed TLS handshake (with a client certificate where one is required),
  then an HTTP request line and headers, one byte every ``--drip`` seconds;
- *body*: the same, but all of the headers at once (declaring a 1,000-byte body), then the
  body one byte every ``--drip`` seconds.

A slow connection the server closes is opened again (an attacker would), so the pressure
stays on for the whole run. Once the slow connections are open, ``--requests`` normal
requests are sent one after another, each on a NEW connection (handshake included, the worst
case for the server), and each is timed; "served" means HTTP 200 within ``--within`` seconds.

The allocator runs against an API server address where nothing listens: its watches retry
in the background and its verbs answer ``Error`` (not synced), which is all the transport
needs; the normal request is a ``filter`` call with a small ExtenderArgs body. The webhook's
normal request is a real AdmissionReview.

Usage: ``.venv/bin/python -m bench.slow_clients [--slow 200] [--requests 20] [--runs 3]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import os
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from certs.builder import build_ca, build_leaf

HOST = "127.0.0.1"
START_DEADLINE_S = 60.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def client_hello() -> bytes:
    """The bytes of a real TLS ClientHello, made by this interpreter's OpenSSL."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname="tessera")
    with contextlib.suppress(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


@dataclass
class Pki:
    directory: Path
    ca: Path = field(init=False)
    cert: Path = field(init=False)
    key: Path = field(init=False)
    client_cert: Path = field(init=False)
    client_key: Path = field(init=False)

    def __post_init__(self) -> None:
        ca = build_ca("bench-slow-clients-ca")
        leaf = build_leaf(ca, "tessera", ["localhost"], [HOST])
        client = build_leaf(ca, "kube-scheduler", server=False, client=True)
        d = self.directory
        self.ca, self.cert, self.key = d / "ca.crt", d / "tls.crt", d / "tls.key"
        self.client_cert, self.client_key = d / "client.crt", d / "client.key"
        for path, data in ((self.ca, ca.cert_pem), (self.cert, leaf.cert_pem),
                           (self.key, leaf.key_pem), (self.client_cert, client.cert_pem),
                           (self.client_key, client.key_pem)):
            path.write_bytes(data)

    def client_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca))
        context.load_cert_chain(str(self.client_cert), str(self.client_key))
        return context


@dataclass(frozen=True)
class Service:
    name: str
    port: int
    argv: list[str]
    path: str
    body: bytes


def webhook_review() -> bytes:
    return json.dumps({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "default", "operation": "CREATE",
            "object": {"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"name": "p", "namespace": "default"},
                       "spec": {"containers": [{"name": "main", "image": "busybox",
                                                "resources": {"limits": {
                                                    "elasticgpu.io/gpu-core": "50"}}}]}},
        },
    }).encode()


def filter_args() -> bytes:
    pod = {"metadata": {"name": "p", "namespace": "default", "uid": "u"},
           "spec": {"containers": [{"name": "main"}]}}
    return json.dumps({"Pod": pod, "Nodes": None, "NodeNames": ["n1"]}).encode()


def services(pki: Pki, work: Path, port: int, threads: int | None) -> list[Service]:
    tessera = [sys.executable, "-m", "tessera.cli"]
    tls = [f"--tls-cert={pki.cert}", f"--tls-key={pki.key}"]
    more = [f"--threads={threads}"] if threads else []
    kubeconfig = work / "nowhere.kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"https://{HOST}:{free_port()}",
                                               "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    }))
    return [
        Service("webhook", port, [*tessera, "webhook", f"--host={HOST}", f"--port={port}", *tls,
                            *more], "/mutate", webhook_review()),
        Service("allocator", port, [*tessera, "allocator", f"--host={HOST}", f"--port={port}", *tls,
                              f"--tls-client-ca={pki.ca}", f"--kubeconfig={kubeconfig}",
                              "--leader-election=false", *more],
                "/scheduler/filter", filter_args()),
    ]


def request(port: int, context: ssl.SSLContext, method: str, path: str, body: bytes | None,
            timeout: float) -> tuple[int, float]:
    """(status, seconds) of one request on a new connection; status 0 on a failure."""
    t0 = time.perf_counter()
    conn = http.client.HTTPSConnection(HOST, port, context=context, timeout=timeout)
    try:
        conn.request(method, path, body, {"Content-Type": "application/json"})
        response = conn.getresponse()
        response.read()
        return response.status, time.perf_counter() - t0
    except (OSError, http.client.HTTPException):
        return 0, time.perf_counter() - t0
    finally:
        conn.close()


def start(service: Service, port: int, context: ssl.SSLContext, log: Path) -> subprocess.Popen[
        bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TESSERA_")}
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    with log.open("wb") as out:
        process = subprocess.Popen(service.argv, env=env, stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    deadline = time.monotonic() + START_DEADLINE_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"{service.name} exited:\n{log.read_text()[-3000:]}")
        if request(port, context, "GET", "/healthz", None, 2)[0] == 200:
            return process
        time.sleep(0.2)
    process.kill()
    raise SystemExit(f"{service.name} did not come up:\n{log.read_text()[-3000:]}")


def stop(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, 15)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, 9)
        process.wait()


@dataclass
class Pressure:
    """The slow connections, driven by an asyncio loop in a thread of their own."""

    port: int
    context: ssl.SSLContext
    count: int
    drip: float
    opened: dict[str, int] = field(
        default_factory=lambda: {"hello": 0, "headers": 0, "body": 0})
    reopened: int = 0
    open_now: int = 0
    stopping: bool = False
    loop: asyncio.AbstractEventLoop | None = None
    thread: threading.Thread | None = None

    async def _slow(self, kind: str, hello: bytes) -> None:
        head = b"POST /mutate HTTP/1.1\r\nHost: tessera\r\nContent-Type: application/json\r\n"
        first = True
        while not self.stopping:
            opened: asyncio.StreamWriter | None = None
            try:
                if kind == "hello":
                    _, writer = await asyncio.wait_for(
                        asyncio.open_connection(HOST, self.port), 10)
                    payload, sent = hello, 8
                else:
                    _, writer = await asyncio.wait_for(asyncio.open_connection(
                        HOST, self.port, ssl=self.context, server_hostname="localhost"), 10)
                    if kind == "headers":
                        payload, sent = head * 100, 1
                    else:
                        whole = head + b"Content-Length: 1000\r\n\r\n"
                        payload, sent = whole + b"{" * 1000, len(whole) + 1
                opened = writer
                writer.write(payload[:sent])
                await writer.drain()
                self.opened[kind] += 1
                self.reopened += 0 if first else 1
                first = False
                self.open_now += 1
                try:
                    while not self.stopping and sent < len(payload):
                        await asyncio.sleep(self.drip)
                        writer.write(payload[sent:sent + 1])
                        await writer.drain()
                        sent += 1
                finally:
                    self.open_now -= 1
            except (TimeoutError, OSError, ssl.SSLError):
                await asyncio.sleep(0.5)
            finally:
                if opened is not None:
                    opened.transport.abort()  # at once: no TLS goodbye to wait for

    async def _main(self) -> None:
        hello = client_hello()
        kinds = [("hello", "headers", "body")[i % 3] for i in range(self.count)]
        tasks = [asyncio.create_task(self._slow(k, hello)) for k in kinds]
        while not self.stopping:
            await asyncio.sleep(0.1)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.sleep(0.1)  # let the aborted transports finish closing

    def start(self) -> None:
        def run() -> None:
            self.loop = asyncio.new_event_loop()
            self.loop.run_until_complete(self._main())
            self.loop.close()

        self.thread = threading.Thread(target=run, name="slow-clients", daemon=True)
        self.thread.start()

    def wait_open(self, deadline_s: float) -> float:
        t0 = time.monotonic()
        while time.monotonic() - t0 < deadline_s and self.open_now < self.count:
            time.sleep(0.1)
        return time.monotonic() - t0

    def stop(self) -> None:
        self.stopping = True
        if self.thread is not None:
            self.thread.join(timeout=30)


def measure(service: Service, args: argparse.Namespace, pki: Pki, work: Path) -> dict[str, Any]:
    port = service.port
    context = pki.client_context()
    process = start(service, port, context, work / f"{service.name}.log")
    try:
        pressure = Pressure(port, context, args.slow, args.drip)
        if args.slow:
            pressure.start()
            waited = pressure.wait_open(args.open_deadline)
        else:
            waited = 0.0
        times: list[float] = []
        statuses: list[int] = []
        for _ in range(args.requests):
            status, seconds = request(port, context, "POST", service.path, service.body,
                                      args.timeout)
            statuses.append(status)
            times.append(seconds)
            time.sleep(args.gap)
        open_at_end = pressure.open_now
        pressure.stop()
    finally:
        stop(process)
    served = sum(1 for s, t in zip(statuses, times, strict=True) if s == 200 and t <= args.within)
    return {
        "service": service.name,
        "slow": args.slow,
        "slow_open": open_at_end,
        "opened_hello": pressure.opened["hello"],
        "opened_headers": pressure.opened["headers"],
        "opened_body": pressure.opened["body"],
        "reopened": pressure.reopened,
        "open_wait_s": round(waited, 1),
        "requests": args.requests,
        "served_within": served,
        "median_ms": round(statistics.median(times) * 1000, 1),
        "max_ms": round(max(times) * 1000, 1),
        "failed": sum(1 for s in statuses if s != 200),
    }


COLUMNS = ["service", "slow", "slow_open", "opened_hello", "opened_headers", "opened_body",
           "reopened", "requests", "served_within", "median_ms", "max_ms", "failed"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--service", choices=["webhook", "allocator"], action="append")
    parser.add_argument("--slow", type=int, default=200, help="slow connections (default 200)")
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--within", type=float, default=1.0, help="seconds that count as served")
    parser.add_argument("--drip", type=float, default=2.0, help="seconds between slow bytes")
    parser.add_argument("--gap", type=float, default=0.2, help="seconds between normal requests")
    parser.add_argument("--timeout", type=float, default=10.0, help="client timeout per request")
    parser.add_argument("--open-deadline", type=float, default=15.0,
                        help="seconds to wait for the slow connections to be open")
    parser.add_argument("--threads", type=int, default=None, help="override --threads")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--json", type=Path, help="append the rows to this JSON-lines file")
    args = parser.parse_args(argv)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="tessera-slow-") as tmp:
        work = Path(tmp)
        pki = Pki(work)
        for run in range(args.runs):
            for service in services(pki, work, free_port(), args.threads):
                if args.service and service.name not in args.service:
                    continue
                row = {"run": run + 1, **measure(service, args, pki, work)}
                rows.append(row)
                print("  ".join(f"{c}={row[c]}" for c in ["run", *COLUMNS]), flush=True)
    if args.json is not None:
        with args.json.open("a") as fh:
            for row in rows:
                fh.write(json.dumps({**row, "load": os.getloadavg()[0]}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
