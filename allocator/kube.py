"""The Kubernetes API adapter: the only module of the allocator that imports ``kubernetes``.

It uses the official client for what it is good at — loading a kubeconfig or the in-cluster
service account, TLS, bearer-token refresh, a pooled HTTP connection — and speaks JSON to the
API server directly, returning plain dicts exactly as the server sends them (no model
objects: the state reads the same shapes in tests and in production, and decoding a list of
5,000 nodes into pydantic models would be wasted work). Every ``ApiException`` and transport
error is wrapped once into :mod:`allocator.errors`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar
from urllib.parse import quote

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from kubernetes.watch.watch import iter_resp_lines

from allocator.errors import ApiError, Conflict, Gone, NotFound
from allocator.ports import Obj, WatchEvent

#: Timeout of one ordinary request (connect, read). Bind must answer within the extender's
#: httpTimeout (5 s by default), and a leader must finish a bind before its lease can expire.
REQUEST_TIMEOUT = (2.0, 4.0)
LIST_PAGE = 500
#: Connections the allocator holds open besides those of its request threads: the node and
#: pod watches, leader election, the pod resync, the Events thread, and slack.
BACKGROUND_CONNECTIONS = 9
LEASES = "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"
EVENTS = "/apis/events.k8s.io/v1/namespaces/{ns}/events"
_T = TypeVar("_T")


def _error(status: int, body: bytes | str | None, what: str) -> ApiError:
    message = ""
    if body:
        try:
            doc = json.loads(body)
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
    return ApiError(text, status)


class KubeClient:
    """:class:`allocator.ports.KubeApi` against a real API server."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self._api = api_client

    @classmethod
    def from_config(cls, kubeconfig: str | None = None, context: str | None = None, *,
                    request_threads: int = 16) -> KubeClient:
        """A kubeconfig file when given, else the in-cluster service account, else the
        default kubeconfig (``KUBECONFIG`` / ``~/.kube/config``). A ``context`` names one of
        the kubeconfig's contexts (and so always reads a kubeconfig).

        The connection pool holds one connection per request thread plus the background
        ones: the client's default (5 per CPU) is smaller than a burst of binds on a small
        machine, and urllib3 then opens extra connections and throws them away ("Connection
        pool is full"), a TLS handshake to the API server each."""
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
    def _send(self, method: str, path: str, query: list[tuple[str, Any]] | None = None,
              body: Any = None, content_type: str = "application/json",
              timeout: Any = REQUEST_TIMEOUT) -> Any:
        headers = {"Accept": "application/json", "Content-Type": content_type}
        what = f"{method} {path}"
        try:
            params = self._api.param_serialize(
                method, path, query_params=query or [], header_params=headers, body=body,
                auth_settings=["BearerToken"],
            )
            return self._api.call_api(*params, _request_timeout=timeout)
        except ApiException as exc:
            raise _error(int(exc.status or 0), exc.body, what) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise ApiError(f"{what}: {exc}") from exc

    def _json(self, method: str, path: str, **kwargs: Any) -> Obj:
        resp = self._send(method, path, **kwargs)
        what = f"{method} {path}"
        try:
            data = resp.read()
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise ApiError(f"{what}: {exc}") from exc
        if not 200 <= resp.status < 300:
            raise _error(resp.status, data, what)
        try:
            doc = json.loads(data)
        except ValueError as exc:
            raise ApiError(f"{what}: response is not JSON") from exc
        if not isinstance(doc, dict):
            raise ApiError(f"{what}: response is not a JSON object")
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
        resp = self._send("GET", path, query=q, timeout=(2.0, timeout_seconds + 30))
        raw = resp.response
        try:
            if not 200 <= resp.status < 300:
                raise _error(resp.status, raw.data, f"watch {path}")
            for line in iter_resp_lines(raw):  # type: ignore[no-untyped-call]
                try:
                    event = json.loads(line)
                except ValueError as exc:
                    raise ApiError(f"watch {path}: bad event line") from exc
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    # A Status object; 410 means the resourceVersion was compacted away.
                    raise _error(int(obj.get("code") or 0), json.dumps(obj), f"watch {path}")
                yield kind, obj
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise ApiError(f"watch {path}: stream dropped: {exc}") from exc
        finally:
            raw.release_conn()

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

    def patch_pod(self, namespace: str, name: str, patch: Obj) -> Obj:
        # JSON merge patch (RFC 7386): null deletes a key, which the rollback relies on.
        return self._json("PATCH", self._pod_path(namespace, name), body=patch,
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
        self._json("POST", self._pod_path(namespace, name) + "/binding", body=binding)

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
