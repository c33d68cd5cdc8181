"""What one API request costs the allocator's CPU, by how long the answer takes.

The allocator's one-shot requests go through :class:`allocator.kube.curl_pool.CurlPool` on a
kept-alive TLS connection. This sends ``--requests`` merge patches of a HAMi lock's size, one
after another, to a local TLS server (a child process: its CPU is not counted) that answers
each with an 8 KiB JSON body after ``--delays`` milliseconds, and reports the calling thread's
CPU (``time.thread_time``) per request for each delay: the allocator's price of a write whose
answer the API server takes that long to give (a lock patch, a label patch, an Event).

Usage: ``.venv/bin/python -m bench.speed.request_wait_cost [--requests 300] [--delays 0 5 20 50]``
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pycurl

from allocator.kube.curl_pool import CurlPool
from certs.builder import build_ca, build_leaf

HOST = "127.0.0.1"
BODY = b'{"metadata":{"annotations":{"hami.io/mutex.lock":"2026-11-29T07:00:00Z,default,p"}}}'
#: The child: an HTTP/1.1 TLS server answering every PATCH after a delay (seconds, argv[1]).
SERVER = """
import http.server, ssl, sys, time
delay, cert, key = float(sys.argv[1]), sys.argv[2], sys.argv[3]
body = b'{"kind":"Node","x":"' + b"a" * 8192 + b'"}'
class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_PATCH(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        time.sleep(delay)
        head = (b"HTTP/1.1 200 OK\\r\\nContent-Type: application/json\\r\\n"
                b"Content-Length: %d\\r\\n\\r\\n")
        self.wfile.write(head % len(body) + body)
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(cert, key)
server.socket = context.wrap_socket(server.socket, server_side=True)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


def cpu_per_request(pool: CurlPool, url: str, requests: int) -> float:
    """The calling thread's CPU seconds per request (after a few to warm the connection)."""
    headers = ["Content-Type: application/merge-patch+json", "Accept: application/json"]
    for _ in range(5):
        pool.request("PATCH", url, BODY, headers, (2.0, 10.0))
    started = time.thread_time()
    for _ in range(requests):
        status, _body = pool.request("PATCH", url, BODY, headers, (2.0, 10.0))
        assert status == 200
    return (time.thread_time() - started) / requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--delays", type=float, nargs="+", default=[0.0, 5.0, 20.0, 50.0],
                        help="the server's answer time, milliseconds")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ca = build_ca("bench-request-wait-ca")
        leaf = build_leaf(ca, "api", ["localhost"], [HOST])
        paths = {name: Path(tmp, name) for name in ("ca.pem", "cert.pem", "key.pem")}
        for name, data in zip(paths, (ca.cert_pem, leaf.cert_pem, leaf.key_pem), strict=True):
            paths[name].write_bytes(data)
        print("delay_ms  cpu_us_per_request")
        for delay in args.delays:
            with subprocess.Popen(
                    [sys.executable, "-c", SERVER, str(delay / 1000), str(paths["cert.pem"]),
                     str(paths["key.pem"])], stdout=subprocess.PIPE, text=True) as server:
                try:
                    assert server.stdout is not None
                    port = int(server.stdout.readline())
                    pool = CurlPool([(pycurl.CAINFO, str(paths["ca.pem"]))], limit=1)
                    cost = cpu_per_request(pool, f"https://{HOST}:{port}/api/v1/nodes/n1",
                                           args.requests)
                finally:
                    server.terminate()
            print(f"{delay:8g}  {cost * 1e6:18.0f}")


if __name__ == "__main__":
    main()
