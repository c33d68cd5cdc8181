"""An in-memory API server for the allocator's adapter Protocol (allocator.ports.KubeApi).

Pods and nodes are JSON dicts; every change bumps a resourceVersion and is recorded as a watch
event. Faults are injected per method: ``fake.fail("bind_pod", ApiError(...))`` makes the
next call raise.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from allocator.errors import ApiError, Conflict, Gone, NotFound

Obj = dict[str, Any]
T = TypeVar("T")
#: The only field selector the allocator sends (allocator.picture.requests.BOUND_ACTIVE_PODS).
BOUND_ACTIVE = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"


def bound_active(pod: Obj) -> bool:
    return bool((pod.get("spec") or {}).get("nodeName")) and (
        (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"))


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


class FakeKube:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.rv = 100
        self.nodes: dict[str, Obj] = {}
        self.pods: dict[tuple[str, str], Obj] = {}
        self.leases: dict[tuple[str, str], Obj] = {}
        #: policy/v1 PodDisruptionBudgets, as listed (a test sets their status itself)
        self.budgets: list[Obj] = []
        #: Kubernetes Events (events.k8s.io/v1) by (namespace, name); not the watch log.
        self.api_events: dict[tuple[str, str], Obj] = {}
        self.events: list[tuple[int, str, str, Obj]] = []  # (rv, "nodes"|"pods", type, obj)
        self.calls: list[tuple[str, str]] = []
        self.patches: list[tuple[str, Obj]] = []  # (pod name, merge patch body)
        self.bindings: list[tuple[str, str, dict[str, str]]] = []  # (pod, node, annotations)
        self.faults: dict[str, list[BaseException]] = {}
        #: watch streams raise Gone when asked to resume from at or below this version
        self.compacted_below = 0
        #: a watch raises this after yielding N events (dropped stream), once
        self.drop_after: tuple[int, BaseException] | None = None

    # ------------------------------------------------------------------ test helpers
    def fail(self, method: str, exc: BaseException, times: int = 1) -> None:
        self.faults.setdefault(method, []).extend([exc] * times)

    def _fault(self, method: str) -> None:
        queue = self.faults.get(method)
        if queue:
            raise queue.pop(0)

    def _bump(self, kind: str, type_: str, obj: Obj) -> None:
        self.rv += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
        self.events.append((self.rv, kind, type_, copy.deepcopy(obj)))

    def add_node(self, node: Obj) -> None:
        with self.lock:
            node = copy.deepcopy(node)
            self.nodes[node["metadata"]["name"]] = node
            self._bump("nodes", "ADDED", node)

    def add_pod(self, pod: Obj) -> None:
        with self.lock:
            pod = copy.deepcopy(pod)
            m = pod["metadata"]
            self.pods[(m["namespace"], m["name"])] = pod
            self._bump("pods", "ADDED", pod)

    def set_phase(self, namespace: str, name: str, phase: str) -> None:
        with self.lock:
            pod = self.pods[(namespace, name)]
            pod["status"]["phase"] = phase
            self._bump("pods", "MODIFIED", pod)

    def delete_pod(self, namespace: str, name: str) -> None:
        with self.lock:
            pod = self.pods.pop((namespace, name))
            self._bump("pods", "DELETED", pod)

    def _selected(self, pod: Obj, selector: str) -> bool:
        key, _, value = selector.partition("=")
        return bool((pod["metadata"].get("labels") or {}).get(key) == value)

    # ------------------------------------------------------------------ KubeApi
    def list_nodes(self) -> tuple[list[Obj], str]:
        self.calls.append(("list_nodes", ""))
        self._fault("list_nodes")
        with self.lock:
            return [copy.deepcopy(n) for n in self.nodes.values()], str(self.rv)

    def list_pods(self, label_selector: str) -> tuple[list[Obj], str]:
        self.calls.append(("list_pods", label_selector))
        self._fault("list_pods")
        with self.lock:
            return ([copy.deepcopy(p) for p in self.pods.values()
                     if self._selected(p, label_selector)], str(self.rv))

    def _watch(self, kind: str, rv: str,
               matches: Callable[[Obj], bool] | None = None) -> Iterator[tuple[str, Obj]]:
        """The events after ``rv``. With ``matches``, as the API server sends them to a watch
        with a selector: ADDED when an object starts to match, MODIFIED while it matches,
        DELETED when it stops matching or is deleted, nothing for a change to an object that
        matched neither before nor after."""
        self.calls.append((f"watch_{kind}", rv))
        self._fault(f"watch_{kind}")
        if int(rv) < self.compacted_below:
            raise Gone("too old resource version", 410)
        with self.lock:
            history = [e for e in self.events if e[1] == kind]
        matched: dict[tuple[str, str], bool] = {}
        events: list[tuple[str, Obj]] = []
        for n, _kind, type_, obj in history:
            meta = obj["metadata"]
            key = (meta.get("namespace", ""), meta.get("name", ""))
            was = matched.get(key, False)
            now = matches is None or (type_ != "DELETED" and matches(obj))
            matched[key] = now
            if n <= int(rv):
                continue
            if matches is None:
                events.append((type_, obj))
            elif now:
                events.append(("MODIFIED" if was else "ADDED", obj))
            elif was:
                events.append(("DELETED", obj))
        for n, (type_, obj) in enumerate(events):
            if self.drop_after is not None and n == self.drop_after[0]:
                exc = self.drop_after[1]
                self.drop_after = None
                raise exc
            yield type_, copy.deepcopy(obj)
        # the stream then ends, as a server-side timeout would end it

    def list_pods_by_field(self, field_selector: str,
                           reduce: Callable[[Obj], T]) -> tuple[list[T], str]:
        on_node = field_selector.removeprefix("spec.nodeName=")
        assert field_selector == BOUND_ACTIVE or on_node != field_selector, field_selector
        self.calls.append(("list_pods_by_field", field_selector))
        self._fault("list_pods_by_field")
        with self.lock:
            pods = [copy.deepcopy(p) for p in self.pods.values()
                    if (bound_active(p) if field_selector == BOUND_ACTIVE
                        else (p["spec"].get("nodeName") or "") == on_node)]
            rv = str(self.rv)
        return [reduce(p) for p in pods], rv

    def watch_pods_by_field(self, field_selector: str, resource_version: str,
                            timeout_seconds: int) -> Iterator[Any]:
        assert field_selector == BOUND_ACTIVE, field_selector
        return self._watch("pods", resource_version, bound_active)

    def watch_nodes(self, resource_version: str, timeout_seconds: int) -> Iterator[Any]:
        return self._watch("nodes", resource_version)

    def watch_pods(self, label_selector: str, resource_version: str,
                   timeout_seconds: int) -> Iterator[Any]:
        return self._watch("pods", resource_version,
                           lambda pod: self._selected(pod, label_selector))

    def get_node(self, name: str) -> Obj | None:
        self.calls.append(("get_node", name))
        self._fault("get_node")
        with self.lock:
            node = self.nodes.get(name)
            return None if node is None else copy.deepcopy(node)

    def patch_node(self, name: str, patch: Obj) -> Obj:
        """Merge patch; a metadata.resourceVersion in it must match (else 409)."""
        self.calls.append(("patch_node", name))
        self._fault("patch_node")
        with self.lock:
            node = self.nodes.get(name)
            if node is None:
                raise NotFound(f"node {name} not found", 404)
            patch = copy.deepcopy(patch)
            version = (patch.get("metadata") or {}).pop("resourceVersion", None)
            if version is not None and version != node["metadata"].get("resourceVersion"):
                raise Conflict("the object has been modified", 409)
            merged = merge_patch(node, patch)
            self.nodes[name] = merged
            self._bump("nodes", "MODIFIED", merged)
            return copy.deepcopy(merged)

    def get_pod(self, namespace: str, name: str) -> Obj:
        self.calls.append(("get_pod", name))
        self._fault("get_pod")
        with self.lock:
            pod = self.pods.get((namespace, name))
            if pod is None:
                raise NotFound(f"pod {namespace}/{name} not found", 404)
            return copy.deepcopy(pod)

    def patch_pod(self, namespace: str, name: str, patch: Obj) -> Obj:
        self.calls.append(("patch_pod", name))
        self.patches.append((name, copy.deepcopy(patch)))
        self._fault("patch_pod")
        with self.lock:
            pod = self.pods.get((namespace, name))
            if pod is None:
                raise NotFound(f"pod {namespace}/{name} not found", 404)
            uid = (patch.get("metadata") or {}).get("uid")
            if uid and uid != pod["metadata"]["uid"]:
                raise Conflict("Precondition failed: UID in precondition", 409)
            merged = merge_patch(pod, patch)
            self.pods[(namespace, name)] = merged
            self._bump("pods", "MODIFIED", merged)
            return copy.deepcopy(merged)

    def patch_pod_status(self, namespace: str, name: str, patch: Obj) -> Obj:
        self.calls.append(("patch_pod_status", name))
        self._fault("patch_pod_status")
        with self.lock:
            pod = self.pods.get((namespace, name))
            if pod is None:
                raise NotFound(f"pod {namespace}/{name} not found", 404)
            merged = merge_patch(pod, {"status": patch.get("status") or {}})
            self.pods[(namespace, name)] = merged
            self._bump("pods", "MODIFIED", merged)
            return copy.deepcopy(merged)

    def list_pod_disruption_budgets(self) -> list[Obj]:
        self.calls.append(("list_pod_disruption_budgets", ""))
        self._fault("list_pod_disruption_budgets")
        with self.lock:
            return copy.deepcopy(self.budgets)

    def create_eviction(self, namespace: str, name: str) -> None:
        """As policy/v1 Eviction with no budget in the way: the pod is deleted (a fault
        queued for ``create_eviction`` stands for a budget's 429)."""
        self.calls.append(("create_eviction", name))
        self._fault("create_eviction")
        with self.lock:
            pod = self.pods.pop((namespace, name), None)
            if pod is None:
                raise NotFound(f"pod {namespace}/{name} not found", 404)
            self._bump("pods", "DELETED", pod)

    def bind_pod(self, namespace: str, name: str, uid: str, node: str,
                 annotations: Mapping[str, str] | None = None) -> None:
        """As pods/binding: spec.nodeName and the annotations in one update."""
        self.calls.append(("bind_pod", name))
        self.bindings.append((name, node, dict(annotations or {})))
        self._fault("bind_pod")
        with self.lock:
            pod = self.pods.get((namespace, name))
            if pod is None:
                raise NotFound(f"pod {namespace}/{name} not found", 404)
            if uid and pod["metadata"]["uid"] != uid:
                raise Conflict("Precondition failed: UID", 409)
            if pod["spec"].get("nodeName"):
                raise Conflict(f"pod {name} is already assigned to node "
                               f"{pod['spec']['nodeName']}", 409)
            pod["spec"]["nodeName"] = node
            pod["metadata"].setdefault("annotations", {}).update(annotations or {})
            self._bump("pods", "MODIFIED", pod)

    def get_lease(self, namespace: str, name: str) -> Obj | None:
        self._fault("get_lease")
        with self.lock:
            lease = self.leases.get((namespace, name))
            return copy.deepcopy(lease) if lease else None

    def create_lease(self, namespace: str, lease: Obj) -> Obj:
        self._fault("create_lease")
        with self.lock:
            key = (namespace, lease["metadata"]["name"])
            if key in self.leases:
                raise Conflict("already exists", 409)
            lease = copy.deepcopy(lease)
            self.rv += 1
            lease["metadata"]["resourceVersion"] = str(self.rv)
            self.leases[key] = lease
            return copy.deepcopy(lease)

    def replace_lease(self, namespace: str, name: str, lease: Obj) -> Obj:
        self._fault("replace_lease")
        with self.lock:
            current = self.leases.get((namespace, name))
            if current is None:
                raise NotFound("lease not found", 404)
            if lease["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
                raise Conflict("the object has been modified", 409)
            lease = copy.deepcopy(lease)
            self.rv += 1
            lease["metadata"]["resourceVersion"] = str(self.rv)
            self.leases[(namespace, name)] = lease
            return copy.deepcopy(lease)

    def create_event(self, namespace: str, event: Obj) -> Obj:
        self.calls.append(("create_event", event["metadata"]["name"]))
        self._fault("create_event")
        with self.lock:
            key = (namespace, event["metadata"]["name"])
            if key in self.api_events:
                raise Conflict("already exists", 409)
            self.api_events[key] = copy.deepcopy(event)
            return copy.deepcopy(event)

    def patch_event(self, namespace: str, name: str, patch: Obj) -> Obj:
        self.calls.append(("patch_event", name))
        self._fault("patch_event")
        with self.lock:
            current = self.api_events.get((namespace, name))
            if current is None:
                raise NotFound("event not found", 404)
            self.api_events[(namespace, name)] = merge_patch(current, patch)
            return copy.deepcopy(self.api_events[(namespace, name)])


def raise_(exc: BaseException) -> None:
    raise exc


__all__ = ["ApiError", "FakeKube", "merge_patch"]
