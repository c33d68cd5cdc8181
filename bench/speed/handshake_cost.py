"""What a new mutual-TLS connection costs the allocator, against a request on a kept-alive one.

kube-scheduler's extender client keeps at most two idle connections to an extender (Go's
``http.Transport`` default ``MaxIdleConnsPerHost``; ``pkg/scheduler/extender.go``
``makeTransport`` leaves it unset), and binds run while the next pod is filtered, so it opens
a new connection whenever more of its calls overlap: the e2e run's
``tls_connections_per_pod``. This measures the price of each.

The allocator runs as shipped (``tessera allocator``: granian since issue 13's tenth pass,
gunicorn's asyncio worker and uvloop before; mutual TLS) against an API server address where
nothing listens, as bench/slow_clients.py starts it; the request is ``GET /healthz``.
``--requests`` of them one after another on one kept-alive connection, then as many on a new
connection each (a full handshake with a client certificate; Python's client, like
kube-scheduler's, does not resume sessions). CPU is the user + system time of the allocator's
process group (the server's main process and worker, as e2e_throughput counts it); the
handshake's price is the difference per request. Modes alternate ``--runs`` times; medians.

Usage: ``.venv/bin/python -m bench.speed.handshake_cost [--requests 500] [--runs 3]``
"""

from __future__ import annotations

import argparse
import http.client
import ssl
import statistics
import tempfile
from pathlib import Path
from typing import Any

from bench.slow_clients import HOST, Pki, free_port, services, start, stop
from bench.speed.common import group_cpu_seconds, print_table, write_results


def _kept_alive(port: int, context: ssl.SSLContext, requests: int) -> None:
    conn = http.client.HTTPSConnection(HOST, port, context=context, timeout=10)
    try:
        for _ in range(requests):
            conn.request("GET", "/healthz")
            response = conn.getresponse()
            response.read()
            if response.status != 200:
                raise SystemExit(f"/healthz answered {response.status}")
    finally:
        conn.close()


def _new_each(port: int, context: ssl.SSLContext, requests: int) -> None:
    for _ in range(requests):
        _kept_alive(port, context, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--stem", default="speed_handshake")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "pki").mkdir()
        pki = Pki(work / "pki")
        (service,) = [s for s in services(pki, work, free_port(), None)
                      if s.name == "allocator"]
        context = pki.client_context()
        process = start(service, service.port, context, work / "allocator.log")
        try:
            _kept_alive(service.port, context, 50)  # warm: imports, first request thread
            per_request: dict[str, list[float]] = {"kept_alive": [], "new_connection": []}
            for _ in range(args.runs):
                for mode, send in (("kept_alive", _kept_alive), ("new_connection", _new_each)):
                    before = group_cpu_seconds(process.pid)
                    send(service.port, context, args.requests)
                    used = group_cpu_seconds(process.pid) - before
                    per_request[mode].append(1000 * used / args.requests)
        finally:
            stop(process)
    rows: list[dict[str, Any]] = [
        {"mode": mode, "requests": args.requests, "runs": args.runs,
         "cpu_ms_per_request": round(statistics.median(values), 3),
         "runs_ms": [round(v, 3) for v in values]}
        for mode, values in per_request.items()]
    kept, new = (r["cpu_ms_per_request"] for r in rows)
    rows.append({"mode": "handshake (difference)", "requests": args.requests,
                 "runs": args.runs, "cpu_ms_per_request": round(new - kept, 3)})
    print_table(rows, ["mode", "requests", "runs", "cpu_ms_per_request", "runs_ms"])
    write_results(args.stem, rows, {"command": "bench.speed.handshake_cost",
                                    "requests": args.requests, "runs": args.runs})


if __name__ == "__main__":
    main()
