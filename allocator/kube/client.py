"""The Kubernetes API adapter: the only module of the allocator that imports ``kubernetes``.

It uses the official client for what it is good at — loading a kubeconfig or the in-cluster
service account, TLS settings, bearer-token refresh, the pooled (kept-alive) HTTP connections
its ``rest_client`` builds from them — and speaks JSON to the API server directly, returning
plain dicts exactly as the server sends them (no model objects: the state reads the same
shapes in tests and in production, and decoding a list of 5,000 nodes into pydantic models
would be wasted work). Watches go straight to that connection pool; one-shot requests (a
Binding, a patch, an Event, a Lease, a list page) go through libcurl with the same TLS
material and headers (:mod:`allocator.kube.curl_pool`), unless the configuration asks for what
that path does not do. Neither takes the client's generic request path
(``param_serialize``, ``sanitize_for_serialization``, ``call_api``), which walks every body
and parameter in Python (measured in docs/benchmarks.md, issue 13). Every transport error
and error status is wrapped once into :mod:`allocator.errors`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar
from urllib.parse import quote, urlencode

import orjson
import urllib3
from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException

from allocator.errors import ApiError, Conflict, Gone, NotFound, TooManyRequests
from allocator.kube.curl_pool import CurlError, CurlPool
from allocator.kube.curl_watch import StreamRefused, watch_lines
from allocator.ports import Obj, WatchEvent

#: Timeout of one ordinary request (connect, read). Bind must answer within the extender's
#: httpTimeout (5 s by default), and a leader must finish a bind before its lease can expire.
REQUEST_TIMEOUT = (2.0, 4.0)
LIST_PAGE = 500
#: Connections the allocator holds open besides those of its request threads: the node and
#: pod watches, leader election, the requeue after releases, the Events thread, and slack.
BACKGROUND_CONNECTIONS = 9
#: How long the auth headers are reused before the client's refresh hook runs again. The
#: hook of a kubeconfig re-applies the whole configuration (its ``host`` setter scans the
#: environment for proxies) on every call; tokens are rotated minutes before they expire.
AUTH_REUSE_SECONDS = 1.0
LEASES = "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"
EVENTS = "/apis/events.k8s.io/v1/namespaces/{ns}/events"
_T = TypeVar("_T")


def _error(status: int, body: bytes | str | None, what: str) -> ApiError:
    message = ""
    if body:
        try:
            doc = orjson.loads(body)
            message = doc.get("message", "") if isinstance(doc, dict) else ""
        except ValueError:
            message = body.decode(errors="replace") if isinstance(body, bytes) else body
    text = f"{what}: HTTP {status}" + (f": {message}" if message else "")
    if status == 404:
        return NotFound(text, status)
    if status == 409:
        return Conflict(text, status)
    if status == 410:
        return Gone(text, status)
    if status == 429:
        return TooManyRequests(text, status)
    return ApiError(text, status)


def _lines(resp: urllib3.BaseHTTPResponse) -> Iterator[bytes]:
    """The non-empty lines of a streamed watch response, as they arrive (one event each)."""
    pending = b""
    for chunk in resp.stream(amt=None, decode_content=False):
        *lines, pending = (pending + chunk).split(b"\n")
        yield from (line for line in lines if line)
    if pending:
        yield pending


class KubeClient:
    """:class:`allocator.ports.KubeApi` against a real API server."""

    def __init__(self, api_client: client.ApiClient,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._api = api_client
        self._clock = clock
        self._auth: tuple[float, dict[str, str]] = (float("-inf"), {})
        cfg = api_client.configuration
        #: requests and watches through libcurl (allocator/kube/curl_pool.py,
        #: allocator/kube/curl_watch.py), unless the configuration asks for what that path
        #: does not do
        self.curl = CurlPool.for_configuration(
            cfg, cfg.connection_pool_maxsize or BACKGROUND_CONNECTIONS)

    @classmethod
    def from_config(cls, kubeconfig: str | None = None, context: str | None = None, *,
                    request_threads: int = 16) -> KubeClient:
        """A kubeconfig file when given, else the in-cluster service account, else the
        default kubeconfig (``KUBECONFIG`` / ``~/.kube/config``). A ``context`` names one of
        the kubeconfig's contexts (and so always reads a kubeconfig).

        The connection pools (urllib3's, and libcurl's handles) keep one connection per
        request thread plus the background ones: the client's default (5 per CPU) is smaller
        than a burst of binds on a small machine, and a pool then opens extra connections and
        throws them away (urllib3: "Connection pool is full"), a TLS handshake to the API
        server each."""
        cfg = client.Configuration()
        try:
            if kubeconfig or context:
                config.load_kube_config(config_file=kubeconfig, context=context,  # type: ignore[no-untyped-call]
                                        client_configuration=cfg)
            else:
                try:
                    config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
                except ConfigException:
                    config.load_kube_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        except (ConfigException, OSError) as exc:
            raise ApiError(f"cannot load Kubernetes client configuration: {exc}") from exc
        cfg.connection_pool_maxsize = request_threads + BACKGROUND_CONNECTIONS
        return cls(client.ApiClient(cfg))

    # ------------------------------------------------------------------ transport
    def _auth_headers(self) -> dict[str, str]:
        """The auth header, whose token the client refreshes itself (in-cluster token file,
        exec plugins) in ``auth_settings``; asked again after :data:`AUTH_REUSE_SECONDS`."""
        now = self._clock()
        since, headers = self._auth
        if now - since < AUTH_REUSE_SECONDS:
            return headers
        headers = {setting["key"]: setting["value"]
                   for setting in self._api.configuration.auth_settings().values()
                   if setting["in"] == "header" and setting["value"]}
        self._auth = (now, headers)
        return headers

    def _headers(self, content_type: str | None) -> dict[str, str]:
        """The client's default headers (User-Agent), JSON, and the auth header."""
        headers = {**self._api.default_headers, "Accept": "application/json",
                   **self._auth_headers()}
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    def _url(self, path: str, query: list[tuple[str, Any]] | None) -> str:
        host: str = self._api.configuration.host
        return host + path + ("?" + urlencode(query) if query else "")

    def _send(self, method: str, path: str, query: list[tuple[str, Any]] | None,
              payload: bytes | None, headers: dict[str, str],
              timeout: tuple[float, float]) -> urllib3.BaseHTTPResponse:
        """Send one request on urllib3's pooled connections; the response is not read yet."""
        try:
            return self._api.rest_client.pool_manager.request(
                method, self._url(path, query), body=payload, headers=headers,
                timeout=urllib3.Timeout(connect=timeout[0], read=timeout[1]),
                preload_content=False)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise ApiError(f"{method} {path}: {exc}") from exc

    def _call(self, method: str, path: str, query: list[tuple[str, Any]] | None = None,
              body: Any = None, content_type: str = "application/json",
              timeout: tuple[float, float] = REQUEST_TIMEOUT) -> bytes:
        """One request; its response body, undecoded (an :class:`ApiError` unless 2xx)."""
        what = f"{method} {path}"
        payload = None if body is None else orjson.dumps(body)
        headers = self._headers(content_type if payload is not None else None)
        if self.curl is not None:
            try:
                status, data = self.curl.request(
                    method, self._url(path, query), payload,
                    [f"{k}: {v}" for k, v in headers.items()], timeout)
            except CurlError as exc:
                raise ApiError(f"{what}: {exc}") from exc
        else:
            resp = self._send(method, path, query, payload, headers, timeout)
            try:
                data = resp.read()  # all of it: the connection goes back to the pool
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                raise ApiError(f"{what}: {exc}") from exc
            status = resp.status
        if not 200 <= status < 300:
            raise _error(status, data, what)
        return data

    def _json(self, method: str, path: str, query: list[tuple[str, Any]] | None = None,
              body: Any = None, content_type: str = "application/json",
              timeout: tuple[float, float] = REQUEST_TIMEOUT) -> Obj:
        """One request; its response, a JSON object."""
        data = self._call(method, path, query, body, content_type, timeout)
        try:
            doc = orjson.loads(data)
        except ValueError as exc:
            raise ApiError(f"{method} {path}: response is not JSON") from exc
        if not isinstance(doc, dict):
            raise ApiError(f"{method} {path}: response is not a JSON object")
        return doc

    def _list(self, path: str, query: list[tuple[str, Any]]) -> tuple[list[Obj], str]:
        return self._list_reduced(path, query, lambda item: item)

    def _list_reduced(self, path: str, query: list[tuple[str, Any]],
                      reduce: Callable[[Obj], _T]) -> tuple[list[_T], str]:
        items: list[_T] = []
        rv = ""
        token = ""
        while True:
            q = [*query, ("limit", LIST_PAGE)] + ([("continue", token)] if token else [])
            doc = self._json("GET", path, query=q, timeout=(2.0, 60.0))
            meta = doc.get("metadata") or {}
            rv = rv or meta.get("resourceVersion", "")
            items.extend(map(reduce, doc.get("items") or []))
            token = meta.get("continue") or ""
            if not token:
                return items, rv

    def _watch(self, path: str, query: list[tuple[str, Any]], resource_version: str,
               timeout_seconds: int) -> Iterator[WatchEvent]:
        q = [*query, ("watch", "true"), ("resourceVersion", resource_version),
             ("timeoutSeconds", timeout_seconds), ("allowWatchBookmarks", "true")]
        for line in self._lines(path, q, (2.0, timeout_seconds + 30)):
            try:
                event = orjson.loads(line)
            except ValueError as exc:
                raise ApiError(f"watch {path}: bad event line") from exc
            kind = event.get("type") if isinstance(event, dict) else None
            obj = event.get("object") or {} if isinstance(event, dict) else None
            if not isinstance(kind, str) or not isinstance(obj, dict):
                raise ApiError(f"watch {path}: bad event line")
            if kind == "ERROR":
                # A Status object; 410 means the resourceVersion was compacted away.
                raise _error(int(obj.get("code") or 0), orjson.dumps(obj), f"watch {path}")
            yield kind, obj

    def _lines(self, path: str, query: list[tuple[str, Any]],
               timeout: tuple[float, float]) -> Iterator[bytes]:
        """The lines of a streamed response (a watch), through libcurl when the requests
        go there (:mod:`allocator.kube.curl_watch`), else urllib3."""
        headers = self._headers(None)
        if self.curl is not None:
            try:
                yield from watch_lines(self.curl.tls, self._url(path, query),
                                       [f"{k}: {v}" for k, v in headers.items()], timeout)
            except StreamRefused as exc:
                raise _error(exc.status, exc.body, f"watch {path}") from None
            except CurlError as exc:
                raise ApiError(f"watch {path}: stream dropped: {exc}") from exc
            return
        resp = self._send("GET", path, query, None, headers, timeout)
        try:
            if not 200 <= resp.status < 300:
                raise _error(resp.status, resp.read(), f"watch {path}")
            yield from _lines(resp)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise ApiError(f"watch {path}: stream dropped: {exc}") from exc
        finally:
            resp.release_conn()

    # ------------------------------------------------------------------ KubeApi
    def list_nodes(self) -> tuple[list[Obj], str]:
        return self._list("/api/v1/nodes", [])

    def watch_nodes(self, resource_version: str, timeout_seconds: int) -> Iterator[WatchEvent]:
        return self._watch("/api/v1/nodes", [], resource_version, timeout_seconds)

    def get_node(self, name: str) -> Obj | None:
        # A GET without resourceVersion is served from etcd, never from the watch cache.
        try:
            return self._json("GET", "/api/v1/nodes/" + quote(name, safe=""))
        except NotFound:
            return None

    def patch_node(self, name: str, patch: Obj) -> None:
        # JSON merge patch; a metadata.resourceVersion in it is a precondition (409 when the
        # node changed), which a node agent's lock around bind's write relies on (the
        # guard of allocator/agents/port.py).
        self._call("PATCH", "/api/v1/nodes/" + quote(name, safe=""), body=patch,
                          content_type="application/merge-patch+json")

    def list_pods(self, label_selector: str) -> tuple[list[Obj], str]:
        return self._list("/api/v1/pods", [("labelSelector", label_selector)])

    def watch_pods(self, label_selector: str, resource_version: str,
                   timeout_seconds: int) -> Iterator[WatchEvent]:
        return self._watch("/api/v1/pods", [("labelSelector", label_selector)],
                           resource_version, timeout_seconds)

    def list_pods_by_field(self, field_selector: str,
                           reduce: Callable[[Obj], _T]) -> tuple[list[_T], str]:
        return self._list_reduced("/api/v1/pods", [("fieldSelector", field_selector)], reduce)

    def watch_pods_by_field(self, field_selector: str, resource_version: str,
                            timeout_seconds: int) -> Iterator[WatchEvent]:
        return self._watch("/api/v1/pods", [("fieldSelector", field_selector)],
                           resource_version, timeout_seconds)

    @staticmethod
    def _pod_path(namespace: str, name: str) -> str:
        return f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}"

    def get_pod(self, namespace: str, name: str) -> Obj:
        return self._json("GET", self._pod_path(namespace, name))

    def patch_pod(self, namespace: str, name: str, patch: Obj) -> None:
        # JSON merge patch (RFC 7386): null deletes a key, which the rollback relies on.
        self._call("PATCH", self._pod_path(namespace, name), body=patch,
                          content_type="application/merge-patch+json")

    def bind_pod(self, namespace: str, name: str, uid: str, node: str,
                 annotations: Mapping[str, str] | None = None) -> None:
        # The same object kube-scheduler's DefaultBinder posts
        # (pkg/scheduler/framework/plugins/defaultbinder/default_binder.go); the UID makes
        # the API server refuse a pod recreated under the same name. Annotations are copied
        # onto the pod with spec.nodeName in one update (pkg/registry/core/pod/storage/
        # storage.go, BindingREST.setPodNodeAndMetadata).
        meta: Obj = {"name": name, "namespace": namespace, "uid": uid}
        if annotations:
            meta["annotations"] = dict(annotations)
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": meta,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        self._call("POST", self._pod_path(namespace, name) + "/binding", body=binding)

    def patch_pod_status(self, namespace: str, name: str, patch: Obj) -> Obj:
        return self._json("PATCH", self._pod_path(namespace, name) + "/status", body=patch,
                          content_type="application/merge-patch+json")

    def list_pod_disruption_budgets(self) -> list[Obj]:
        return self._list("/apis/policy/v1/poddisruptionbudgets", [])[0]

    def list_pod_events(self, namespace: str, uid: str) -> list[Obj]:
        # core/v1 shows the events.k8s.io Events too; involvedObject.uid is a field the API
        # server selects by (kubectl tessera why reads the Preempted ones).
        return self._list(f"/api/v1/namespaces/{quote(namespace, safe='')}/events",
                          [("fieldSelector", f"involvedObject.uid={uid}")])[0]

    def create_eviction(self, namespace: str, name: str) -> None:
        # policy/v1 Eviction: the API server checks the PodDisruptionBudgets (429 when one
        # forbids it) and deletes the pod gracefully.
        eviction = {"apiVersion": "policy/v1", "kind": "Eviction",
                    "metadata": {"name": name, "namespace": namespace}}
        self._json("POST", self._pod_path(namespace, name) + "/eviction", body=eviction)

    def get_lease(self, namespace: str, name: str) -> Obj | None:
        try:
            return self._json("GET", LEASES.format(ns=quote(namespace, safe="")) + "/"
                              + quote(name, safe=""))
        except NotFound:
            return None

    def create_lease(self, namespace: str, lease: Obj) -> Obj:
        return self._json("POST", LEASES.format(ns=quote(namespace, safe="")), body=lease)

    def replace_lease(self, namespace: str, name: str, lease: Obj) -> Obj:
        return self._json("PUT", LEASES.format(ns=quote(namespace, safe="")) + "/"
                          + quote(name, safe=""), body=lease)

    def create_event(self, namespace: str, event: Obj) -> Obj:
        return self._json("POST", EVENTS.format(ns=quote(namespace, safe="")), body=event)

    def patch_event(self, namespace: str, name: str, patch: Obj) -> Obj:
        return self._json("PATCH", EVENTS.format(ns=quote(namespace, safe="")) + "/"
                          + quote(name, safe=""), body=patch,
                          content_type="application/merge-patch+json")
