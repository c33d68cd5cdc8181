"""The Kubernetes API as the allocator needs it: a small Protocol (no ``kubernetes`` import).

:class:`allocator.kube.client.KubeClient` implements it against a real API server; tests implement
it in memory. Objects are plain JSON-shaped dicts as the API server sends them. Errors are
:mod:`allocator.errors` exceptions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol, TypeVar

Obj = dict[str, Any]
#: (type, object): type is ADDED, MODIFIED, DELETED or BOOKMARK.
WatchEvent = tuple[str, Obj]
_T = TypeVar("_T")


class KubeApi(Protocol):
    def list_nodes(self) -> tuple[list[Obj], str]:
        """Every node and the list's resourceVersion."""
        ...

    def watch_nodes(self, resource_version: str, timeout_seconds: int) -> Iterator[WatchEvent]:
        """Node events after ``resource_version``; raises :class:`Gone` when too old."""
        ...

    def get_node(self, name: str) -> Obj | None:
        """The node as etcd has it now (a consistent read), None when there is none."""
        ...

    def list_pods(self, label_selector: str) -> tuple[list[Obj], str]:
        ...

    def watch_pods(self, label_selector: str, resource_version: str,
                   timeout_seconds: int) -> Iterator[WatchEvent]:
        ...

    def list_pods_by_field(self, field_selector: str,
                           reduce: Callable[[Obj], _T]) -> tuple[list[_T], str]:
        """Every pod the field selector matches, each passed through ``reduce`` as its page
        arrives (the full objects of a big cluster are never all held at once)."""
        ...

    def watch_pods_by_field(self, field_selector: str, resource_version: str,
                            timeout_seconds: int) -> Iterator[WatchEvent]:
        ...

    def patch_node(self, name: str, patch: Obj) -> None:
        """JSON merge patch; ``metadata.resourceVersion`` in it is a precondition (Conflict).
        The patched node is not returned (a node agent's lock patches one per bind, and
        nobody reads it back)."""
        ...

    def get_pod(self, namespace: str, name: str) -> Obj:
        ...

    def patch_pod(self, namespace: str, name: str, patch: Obj) -> None:
        """JSON merge patch (RFC 7386) of the pod (the patched pod is not returned)."""
        ...

    def patch_pod_status(self, namespace: str, name: str, patch: Obj) -> Obj:
        """JSON merge patch of the pods/status subresource (``status.nominatedNodeName``)."""
        ...

    def list_pod_disruption_budgets(self) -> list[Obj]:
        """Every policy/v1 PodDisruptionBudget (preemption counts them)."""
        ...

    def create_eviction(self, namespace: str, name: str) -> None:
        """Create the policy/v1 Eviction subresource: :class:`TooManyRequests` when a
        PodDisruptionBudget forbids it now, :class:`NotFound` when the pod is gone."""
        ...

    def bind_pod(self, namespace: str, name: str, uid: str, node: str,
                 annotations: Mapping[str, str] | None = None) -> None:
        """Create the pods/binding subresource (with the pod UID as precondition). The API
        server copies ``annotations`` onto the pod in the same update that sets
        ``spec.nodeName``."""
        ...

    def get_lease(self, namespace: str, name: str) -> Obj | None:
        ...

    def create_event(self, namespace: str, event: Obj) -> Obj:
        """Create an ``events.k8s.io/v1`` Event."""
        ...

    def patch_event(self, namespace: str, name: str, patch: Obj) -> Obj:
        """JSON merge patch of an Event (its series); :class:`NotFound` once it expired."""
        ...

    def create_lease(self, namespace: str, lease: Obj) -> Obj:
        ...

    def replace_lease(self, namespace: str, name: str, lease: Obj) -> Obj:
        """PUT with the lease's resourceVersion: :class:`Conflict` when someone else won."""
        ...
