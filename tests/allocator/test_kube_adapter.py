"""The real adapter (allocator.kube.client.KubeClient) over real HTTP against a tiny loopback
server: paths, content types, JSON null in merge patches, watch lines, and error wrapping."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from kubernetes import client

from allocator.errors import ApiError, Conflict, Gone, NotFound, TooManyRequests
from allocator.kube.client import AUTH_REUSE_SECONDS, KubeClient

SEEN: list[tuple[str, str, str, Any]] = []


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass

    def _reply(self, code: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> Any:
        n = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(n)) if n else None

    def do_GET(self) -> None:
        SEEN.append(("GET", self.path, "", None))
        if "watch=true" in self.path:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            for event in ({"type": "ADDED", "object": {"metadata": {"name": "n1",
                                                                      "resourceVersion": "5"}}},
                          {"type": "ERROR", "object": {"kind": "Status", "code": 410,
                                                       "message": "too old resource version"}}):
                self.wfile.write(json.dumps(event).encode() + b"\n")
            return
        if self.path.startswith("/api/v1/nodes"):
            self._reply(200, {"metadata": {"resourceVersion": "4"},
                              "items": [{"metadata": {"name": "n1"}}]})
        else:
            self._reply(404, {"kind": "Status", "code": 404, "message": 'pods "x" not found'})

    def do_PATCH(self) -> None:
        body = self._body()
        SEEN.append(("PATCH", self.path, self.headers["Content-Type"], body))
        self._reply(200, {"metadata": {"name": "p"}})

    def do_POST(self) -> None:
        body = self._body()
        SEEN.append(("POST", self.path, self.headers["Content-Type"], body))
        if "binding" in self.path and body["target"]["name"] == "taken":
            self._reply(409, {"kind": "Status", "code": 409, "message": "already assigned"})
        elif self.path.endswith("/guarded/eviction"):
            self._reply(429, {"kind": "Status", "code": 429,
                              "message": "Cannot evict pod as it would violate the pod's "
                                         "disruption budget."})
        else:
            self._reply(201, {"kind": "Status", "status": "Success"})


@pytest.fixture(scope="module", params=["libcurl", "urllib3"])
def kube(request: pytest.FixtureRequest) -> Iterator[KubeClient]:
    """The adapter over each of its transports for one-shot requests: libcurl (what a plain
    configuration gets) and urllib3 (what one with a proxy gets)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    cfg = client.Configuration()
    cfg.host = f"http://127.0.0.1:{server.server_port}"
    api_client = client.ApiClient(cfg)
    kube = KubeClient(api_client)
    assert kube.curl is not None
    if request.param == "urllib3":
        kube.curl = None
    yield kube
    api_client.close()
    server.shutdown()
    server.server_close()


def test_lists_return_plain_dicts_and_the_resource_version(kube: KubeClient) -> None:
    assert kube.list_nodes() == ([{"metadata": {"name": "n1"}}], "4")


def test_a_missing_pod_is_not_found_with_the_servers_message(kube: KubeClient) -> None:
    with pytest.raises(NotFound, match='pods "x" not found'):
        kube.get_pod("default", "x")


def test_patches_are_json_merge_patches_that_keep_nulls(kube: KubeClient) -> None:
    kube.patch_pod("default", "p", {"metadata": {"annotations": {"a": None, "b": "1"}}})
    method, path, content_type, body = SEEN[-1]
    assert (method, path) == ("PATCH", "/api/v1/namespaces/default/pods/p")
    assert content_type == "application/merge-patch+json"
    assert body == {"metadata": {"annotations": {"a": None, "b": "1"}}}


def test_binding_posts_the_binding_object_and_wraps_conflicts(kube: KubeClient) -> None:
    kube.bind_pod("default", "p", "u-1", "n1")
    method, path, _ct, body = SEEN[-1]
    assert (method, path) == ("POST", "/api/v1/namespaces/default/pods/p/binding")
    assert body == {"apiVersion": "v1", "kind": "Binding",
                    "metadata": {"name": "p", "namespace": "default", "uid": "u-1"},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}}
    with pytest.raises(Conflict):
        kube.bind_pod("default", "p", "u-1", "taken")


def test_a_binding_carries_the_annotations_the_api_server_copies_onto_the_pod(
    kube: KubeClient,
) -> None:
    kube.bind_pod("default", "p", "u-1", "n1", {"elasticgpu.io/gpu-allocation": "{}"})
    _method, _path, _ct, body = SEEN[-1]
    assert body["metadata"] == {"name": "p", "namespace": "default", "uid": "u-1",
                                "annotations": {"elasticgpu.io/gpu-allocation": "{}"}}


def test_a_watch_yields_events_and_turns_a_410_error_event_into_gone(kube: KubeClient) -> None:
    events = kube.watch_nodes("4", 5)
    assert next(events) == ("ADDED", {"metadata": {"name": "n1", "resourceVersion": "5"}})
    with pytest.raises(Gone, match="too old resource version"):
        next(events)
    assert "resourceVersion=4" in SEEN[-1][1] and "allowWatchBookmarks=true" in SEEN[-1][1]


def test_an_unreachable_api_server_is_an_api_error() -> None:
    cfg = client.Configuration()
    cfg.host = "http://127.0.0.1:1"
    api_client = client.ApiClient(cfg)
    with pytest.raises(ApiError, match="GET /api/v1/namespaces/a/pods/b"):
        KubeClient(api_client).get_pod("a", "b")
    api_client.close()


class _SlowHandler(BaseHTTPRequestHandler):
    """Answers every GET after a pause, so that a burst of requests is in flight at once;
    notes the client's address of each (one per connection)."""

    protocol_version = "HTTP/1.1"  # kept-alive connections, as the API server's
    connections: ClassVar[set[tuple[str, int]]] = set()

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        _SlowHandler.connections.add(self.client_address)
        time.sleep(0.3)
        data = json.dumps({"metadata": {"name": "p"}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def test_a_burst_as_wide_as_the_request_threads_reuses_pooled_connections(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _SlowHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{server.server_port}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    }))
    threads = 16  # the allocator's default request threads (allocator/service/config.py)
    for transport in ("libcurl", "urllib3"):
        _SlowHandler.connections.clear()
        kube = KubeClient.from_config(str(kubeconfig), request_threads=threads)
        assert kube.curl is not None
        if transport == "urllib3":
            kube.curl = None
        with caplog.at_level(logging.WARNING, logger="urllib3"):
            for _ in range(2):  # the second burst finds every connection in the pool
                with ThreadPoolExecutor(threads) as pool:
                    pods = list(pool.map(kube.get_pod, ["ns"] * threads,
                                         [f"p{i}" for i in range(threads)]))
                assert len(pods) == threads
        # every connection of the first burst served the second: none was opened again
        assert len(_SlowHandler.connections) == threads, transport
    server.shutdown()
    server.server_close()
    assert [r.getMessage() for r in caplog.records if "pool is full" in r.getMessage()] == []


class _AuthHandler(BaseHTTPRequestHandler):
    seen: ClassVar[list[str | None]] = []

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        _AuthHandler.seen.append(self.headers.get("Authorization"))
        data = b'{"metadata": {"name": "p"}}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def test_the_auth_header_is_the_clients_own_and_asked_again_only_after_a_while() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _AuthHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    tokens = iter(["Bearer one", "Bearer two"])
    cfg = client.Configuration()
    cfg.host = f"http://127.0.0.1:{server.server_port}"
    cfg.api_key = {"BearerToken": "unused"}
    cfg.refresh_api_key_hook = lambda c: c.api_key.update(BearerToken=next(tokens))
    now = [100.0]
    kube = KubeClient(client.ApiClient(cfg), clock=lambda: now[0])
    try:
        kube.get_pod("ns", "p")
        now[0] += AUTH_REUSE_SECONDS / 2
        kube.get_pod("ns", "p")  # the same header: the hook is not run again
        now[0] += AUTH_REUSE_SECONDS
        kube.get_pod("ns", "p")  # stale: the hook runs and its new token is sent
    finally:
        server.shutdown()
        server.server_close()
    assert _AuthHandler.seen == ["Bearer one", "Bearer one", "Bearer two"]


def test_an_eviction_posts_the_policy_v1_object_and_a_budget_refusal_is_too_many_requests(
    kube: KubeClient,
) -> None:
    kube.create_eviction("default", "p")
    method, path, _ct, body = SEEN[-1]
    assert (method, path) == ("POST", "/api/v1/namespaces/default/pods/p/eviction")
    assert body == {"apiVersion": "policy/v1", "kind": "Eviction",
                    "metadata": {"name": "p", "namespace": "default"}}
    with pytest.raises(TooManyRequests, match="disruption budget"):
        kube.create_eviction("default", "guarded")


def test_the_nomination_is_a_merge_patch_of_the_status_subresource(kube: KubeClient) -> None:
    kube.patch_pod_status("default", "p", {"status": {"nominatedNodeName": "n1"}})
    method, path, content_type, body = SEEN[-1]
    assert (method, path) == ("PATCH", "/api/v1/namespaces/default/pods/p/status")
    assert content_type == "application/merge-patch+json"
    assert body == {"status": {"nominatedNodeName": "n1"}}
