"""The least a binding extender can do per pod: the floor under ``e2e_throughput``'s ratio.

It answers kube-scheduler's calls as the allocator's URL paths expect them, with no cluster
picture, no watches, no decisions and no Events:

- ``filter``: the first of the node names it was sent (one node, as the allocator's
  filter-best answer usually is, so kube-scheduler skips its own scoring);
- ``bind``: one Binding through the allocator's own API client
  (:meth:`allocator.kube.client.KubeClient.bind_pod`, the shipped request path), with one
  annotation;
- ``prioritize`` and ``prioritize-cpu-only``: 0 for every node; ``/healthz``, ``/readyz``:
  ``ok``;
- ``/metrics``: the TLS connections begun (``tessera_allocator_tls_connections_total``) when
  served by gunicorn, which counts them (granian does not).

``--server granian`` (the default) serves it exactly as ``tessera allocator`` serves the
allocator (:func:`tessera.granian_server.serve`: granian's WSGI interface, HTTP/1.1 and HTTP/2,
rustls, mutual TLS, 16 request threads, complete bodies). ``--server gunicorn`` serves it as
the webhook is served and the allocator was until issue 13's tenth pass
(:func:`tessera.serving.serve`: gunicorn's asyncio worker on uvloop, the WSGI bridge, Python's
``ssl``), which counts the TLS connections it begins. ``e2e_throughput``'s modes ``floor`` and
``floor-gunicorn`` run it in place of the allocator (docs/benchmarks.md, issue 13), and
``extender_http --floor`` times its filter and prioritize after the allocator's
(:func:`serve_in_allocators_place`).

Usage (as e2e_throughput starts it): ``python -m bench.speed.floor_extender --port P
--tls-cert F --tls-key F --tls-client-ca F --kubeconfig F [--server granian|gunicorn]``
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import orjson

from allocator.kube.client import KubeClient
from allocator.service.config import DEFAULT_MAX_BODY_BYTES, LISTENER
from tessera import granian_server, serving, transport
from tessera.transport import WsgiApp

if TYPE_CHECKING:
    from devcluster.cluster import DevCluster

#: Request threads (the allocator's default ``--threads``).
THREADS = LISTENER.threads
#: The one annotation each Binding carries (a bind of the allocator writes a few).
ANNOTATION = "tessera.bench/floor"


def filter_reply(body: bytes) -> bytes:
    """ExtenderFilterResult with the first node name sent (none if none was)."""
    names = (orjson.loads(body) or {}).get("NodeNames") or []
    return orjson.dumps({"NodeNames": names[:1], "FailedNodes": {}, "Error": ""})


def prioritize_reply(body: bytes) -> bytes:
    """HostPriorityList: 0 for every node sent."""
    names = (orjson.loads(body) or {}).get("NodeNames") or []
    return orjson.dumps([{"Host": name, "Score": 0} for name in names])


def make_app(bind: Callable[[str, str, str, str], None],
             tls_connections: Callable[[], int] | None) -> WsgiApp:
    """The floor's WSGI app; ``bind(namespace, name, uid, node)`` writes the Binding."""

    def bind_reply(body: bytes) -> bytes:
        args = orjson.loads(body)
        try:
            bind(args["PodNamespace"], args["PodName"], args["PodUID"], args["Node"])
        except Exception as exc:  # a floor, not a product: the error goes back to the caller
            return orjson.dumps({"Error": str(exc)})
        return b'{"Error":""}'

    def metrics() -> bytes:
        if tls_connections is None:
            return b""
        return f"tessera_allocator_tls_connections_total {tls_connections()}\n".encode()

    verbs: dict[str, Callable[[bytes], bytes]] = {
        "/scheduler/filter": filter_reply,
        "/scheduler/bind": bind_reply,
        "/scheduler/prioritize": prioritize_reply,
        "/scheduler/prioritize-cpu-only": prioritize_reply,
    }

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        verb = verbs.get(path)
        if verb is not None:
            out, kind = verb(body), "application/json"
        elif path == "/metrics":
            out, kind = metrics(), "text/plain; version=0.0.4"
        else:
            out, kind = b"ok", "text/plain"
        start_response("200 OK", [("Content-Type", kind), ("Content-Length", str(len(out)))])
        return [out]

    return app


def _kube_bind(kubeconfig: str) -> Callable[[str, str, str, str], None]:
    kube = KubeClient.from_config(kubeconfig, request_threads=THREADS)

    def bind(namespace: str, name: str, uid: str, node: str) -> None:
        kube.bind_pod(namespace, name, uid, node, {ANNOTATION: "0"})

    return bind


def _config(args: argparse.Namespace) -> serving.ServingConfig:
    return serving.ServingConfig(host=args.host, port=args.port, tls_cert=args.tls_cert,
                                 tls_key=args.tls_key, tls_client_ca=args.tls_client_ca,
                                 threads=THREADS, log_level="WARNING")


def serve_granian(args: argparse.Namespace) -> None:
    def factory() -> WsgiApp:  # in granian's worker, after fork (as the allocator's)
        return make_app(_kube_bind(args.kubeconfig), None)

    granian_server.serve(factory, _config(args), threads=THREADS,
                         max_body_bytes=DEFAULT_MAX_BODY_BYTES, proc_name="tessera-floor")


def serve_gunicorn(args: argparse.Namespace) -> None:
    def factory() -> WsgiApp:  # in gunicorn's worker, after fork
        return make_app(_kube_bind(args.kubeconfig), lambda: transport.TLS_CONNECTIONS.begun)

    serving.serve(factory, serving.gunicorn_options(_config(args), proc_name="tessera-floor",
                                                    workers=1, keepalive=30),
                  threads=THREADS, max_body_bytes=DEFAULT_MAX_BODY_BYTES)


def serve_in_allocators_place(dev: DevCluster, server: str = "granian") -> int:
    """The floor extender on the dev cluster's allocator port, with the allocator's TLS files
    and identity (the allocator is stopped first); its process id once it serves."""
    services = dev.services
    assert services is not None
    files = services.allocator_files
    services.replace_allocator([
        sys.executable, "-m", "bench.speed.floor_extender", f"--port={services.allocator_port}",
        f"--tls-cert={files['tls_cert']}", f"--tls-key={files['tls_key']}",
        f"--tls-client-ca={files['tls_client_ca']}", f"--kubeconfig={files['kubeconfig']}",
        f"--server={server}"])
    pid = services.allocator.pid if services.allocator is not None else None
    assert pid is not None
    return int(pid)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    for flag in ("--tls-cert", "--tls-key", "--tls-client-ca", "--kubeconfig"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--server", choices=["granian", "gunicorn"], default="granian")
    args = parser.parse_args(argv)
    (serve_gunicorn if args.server == "gunicorn" else serve_granian)(args)


if __name__ == "__main__":
    main()
