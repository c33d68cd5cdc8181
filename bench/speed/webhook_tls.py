"""Admission over TLS: the real ``tessera webhook`` (gunicorn gthread, shipped defaults of
2 workers x 4 threads) on loopback, driven by a Python HTTPS client with kept-alive
connections (the API server keeps its webhook connections open too).

- *steady*: a fixed request rate (paced sender threads), latency p50/p90/p99 per request;
- *saturation*: N closed-loop client threads as fast as the server answers, requests/s.

The client runs on the same 2 cores as the server, so saturation is a lower bound of what
the server alone could do. The body is a full AdmissionReview of the nano-gpu example pod,
which the webhook rewrites (the expensive path: dialect parsing, mutation, JSON Patch).

Usage: ``.venv/bin/python -m bench.speed.webhook_tls [--rates 50 200] [--seconds 10]``
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import yaml

from bench.speed.common import Client, client_context, print_table, summary, write_results
from certs.builder import build_ca, build_leaf

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pods" / "nano-gpu-share.yaml"
COLUMNS = ["mode", "target_per_s", "clients", "n", "achieved_per_s", "p50_ms", "p90_ms",
           "p99_ms", "mean_ms", "errors"]


def review_body() -> bytes:
    pod = yaml.safe_load(EXAMPLE.read_text())
    return json.dumps({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "default",
            "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller",
                         "groups": ["system:serviceaccounts", "system:authenticated"]},
            "object": pod,
            "oldObject": None,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }).encode()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_webhook(workdir: Path, port: int, extra: list[str]) -> subprocess.Popen[bytes]:
    ca = build_ca()
    leaf = build_leaf(ca, "tessera-webhook", ["localhost"], ["127.0.0.1"])
    (workdir / "ca.crt").write_bytes(ca.cert_pem)
    (workdir / "tls.crt").write_bytes(leaf.cert_pem)
    (workdir / "tls.key").write_bytes(leaf.key_pem)
    exe = Path(sys.executable).parent / "tessera"
    argv = [str(exe), "webhook", "--host=127.0.0.1", f"--port={port}",
            f"--tls-cert={workdir / 'tls.crt'}", f"--tls-key={workdir / 'tls.key'}",
            "--log-level=WARNING", *extra]
    env = {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy")}
    proc = subprocess.Popen(argv, stdout=(workdir / "webhook.log").open("wb"),
                            stderr=subprocess.STDOUT, env=env, start_new_session=True)
    ctx = client_context(workdir / "ca.crt")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"https://127.0.0.1:{port}/readyz", context=ctx,
                                        timeout=2) as resp:
                if resp.status == 200:
                    return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("webhook did not become ready; see " + str(workdir / "webhook.log"))


def _check(status: int, data: bytes) -> bool:
    if status != 200:
        return False
    doc: dict[str, Any] = json.loads(data)
    return bool(doc["response"]["allowed"]) and doc["response"].get("patchType") == "JSONPatch"


def steady(port: int, ctx: Any, body: bytes, rate: float, seconds: float,
           senders: int) -> dict[str, Any]:
    """``senders`` threads share the schedule t0 + i/rate; latency is from the send."""
    total = int(rate * seconds)
    lat: list[float] = []
    errors = 0
    lock = threading.Lock()
    t0 = time.perf_counter() + 0.2

    def work(k: int) -> None:
        nonlocal errors
        cli = Client(port, ctx)
        try:
            for i in range(k, total, senders):
                delay = t0 + i / rate - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                status, data, took = cli.post("/mutate", body)
                ok = _check(status, data)
                with lock:
                    lat.append(took * 1000)
                    errors += 0 if ok else 1
        finally:
            cli.close()

    threads = [threading.Thread(target=work, args=(k,)) for k in range(senders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return {"mode": "steady", "target_per_s": rate, "clients": senders, **summary(lat),
            "achieved_per_s": round(len(lat) / wall, 1), "errors": errors}


def saturate(port: int, ctx: Any, body: bytes, clients: int, seconds: float) -> dict[str, Any]:
    lat: list[float] = []
    errors = 0
    lock = threading.Lock()
    stop = time.perf_counter() + seconds

    def work() -> None:
        nonlocal errors
        cli = Client(port, ctx)
        mine: list[float] = []
        bad = 0
        try:
            while time.perf_counter() < stop:
                status, data, took = cli.post("/mutate", body)
                mine.append(took * 1000)
                bad += 0 if _check(status, data) else 1
        finally:
            cli.close()
        with lock:
            lat.extend(mine)
            errors += bad

    t0 = time.perf_counter()
    threads = [threading.Thread(target=work) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return {"mode": "saturation", "target_per_s": None, "clients": clients, **summary(lat),
            "achieved_per_s": round(len(lat) / wall, 1), "errors": errors}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", type=float, nargs="+", default=[50.0, 200.0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--senders", type=int, default=4, help="threads of the steady sender")
    parser.add_argument("--clients", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--webhook-args", default="", help="extra flags for tessera webhook")
    parser.add_argument("--stem", default="speed_webhook")
    args = parser.parse_args()
    body = review_body()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="tessera-bench-webhook-") as tmp:
        workdir = Path(tmp)
        port = free_port()
        proc = start_webhook(workdir, port, args.webhook_args.split())
        try:
            ctx = client_context(workdir / "ca.crt")
            saturate(port, ctx, body, 2, 1.0)  # warm-up: imports, first connections
            for rate in args.rates:
                rows.append(steady(port, ctx, body, rate, args.seconds, args.senders))
                print_table(rows[-1:], COLUMNS)
            for clients in args.clients:
                rows.append(saturate(port, ctx, body, clients, args.seconds))
                print_table(rows[-1:], COLUMNS)
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
    print()
    print_table(rows, COLUMNS)
    write_results(args.stem, rows, {
        "command": "python -m bench.speed.webhook_tls " + " ".join(sys.argv[1:]),
        "server": "tessera webhook (gunicorn gthread, 2 workers x 4 threads), TLS on loopback",
        "client": "Python http.client over TLS, kept-alive connections, same machine",
        "body": f"AdmissionReview of {EXAMPLE.name} ({len(body)} bytes), rewritten by the webhook",
    })


if __name__ == "__main__":
    main()
