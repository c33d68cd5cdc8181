"""The floor extender's answers (bench/speed/floor_extender.py), called as a WSGI app: what
e2e_throughput's ``floor`` modes put in the allocator's place must still answer
kube-scheduler's calls in the extender protocol's shapes, bind through the given writer, and
report an API error in the bind's ``Error``."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import orjson

from bench.speed.floor_extender import make_app

Bind = Callable[[str, str, str, str], None]


def call(bind: Bind, path: str, body: Any = None,
         tls: Callable[[], int] | None = None) -> tuple[str, bytes]:
    raw = b"" if body is None else orjson.dumps(body)
    environ = {"PATH_INFO": path, "CONTENT_LENGTH": str(len(raw)),
               "wsgi.input": io.BytesIO(raw)}
    started: list[str] = []
    out = b"".join(make_app(bind, tls)(environ, lambda status, headers: started.append(status)))
    return started[0], out


def no_bind(*_: str) -> None:
    raise AssertionError("no bind expected")


def test_filter_passes_the_first_node_only() -> None:
    status, out = call(no_bind, "/scheduler/filter", {"Pod": {}, "NodeNames": ["b", "a", "c"]})
    assert status == "200 OK"
    assert orjson.loads(out) == {"NodeNames": ["b"], "FailedNodes": {}, "Error": ""}
    assert orjson.loads(call(no_bind, "/scheduler/filter", {"NodeNames": None})[1])[
        "NodeNames"] == []


def test_prioritize_scores_every_node_zero() -> None:
    for verb in ("/scheduler/prioritize", "/scheduler/prioritize-cpu-only"):
        out = call(no_bind, verb, {"NodeNames": ["a", "b"]})[1]
        assert orjson.loads(out) == [{"Host": "a", "Score": 0}, {"Host": "b", "Score": 0}]


def test_bind_writes_through_the_writer_and_returns_its_error() -> None:
    bound: list[tuple[str, ...]] = []
    args = {"PodName": "p", "PodNamespace": "ns", "PodUID": "u", "Node": "n1"}
    out = call(lambda *a: bound.append(a), "/scheduler/bind", args)[1]
    assert (bound, orjson.loads(out)) == ([("ns", "p", "u", "n1")], {"Error": ""})

    def refused(*_: str) -> None:
        raise RuntimeError("POST binding: HTTP 409: already bound")

    out = call(refused, "/scheduler/bind", args)[1]
    assert orjson.loads(out) == {"Error": "POST binding: HTTP 409: already bound"}


def test_metrics_counts_tls_connections_only_when_the_server_does() -> None:
    assert call(no_bind, "/metrics", tls=lambda: 7)[1] == (
        b"tessera_allocator_tls_connections_total 7\n")
    assert call(no_bind, "/metrics")[1] == b""
    assert call(no_bind, "/readyz") == ("200 OK", b"ok")
