"""What preemption (:mod:`allocator.verbs.preempt`) uses of the API, the picture and the
requeue: the narrow ports it is given."""

from __future__ import annotations

from typing import Any, Protocol

from allocator.decisions import PodRef
from allocator.picture.nodes import NodeView
from allocator.picture.records import PodRecord
from allocator.ranking.cards import NodeState
from allocator.verbs.preempt_offers import ListingApi
from tessera.vocabulary import Allocation


class PreemptApi(ListingApi, Protocol):
    """The part of :class:`~allocator.ports.KubeApi` preemption uses."""

    def create_eviction(self, namespace: str, name: str) -> None: ...

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]: ...

    def patch_pod_status(self, namespace: str, name: str,
                         patch: dict[str, Any]) -> dict[str, Any]: ...

    def patch_pod(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]: ...


class Picture(Protocol):
    """The part of the picture (:class:`~allocator.picture.state.ClusterState`) preemption
    reads and holds in."""

    def node_states(self) -> tuple[list[tuple[str, NodeState]], dict[str, PodRecord]]: ...

    def record(self, uid: str) -> PodRecord | None: ...

    def view(self, node: str) -> NodeView | None: ...

    def hold(self, uid: str, namespace: str, name: str, allocation: Allocation,
             expected_version: int, requests: tuple[int, int] | None, *, until: float,
             made_for: object) -> bool: ...

    def release_hold(self, uid: str, *, tell: bool = True) -> str | None: ...


class HeldRoom(Protocol):
    """The requeue's side of a preemption's hold (:class:`~allocator.verbs.requeue.
    RequeueOnRelease`)."""

    def held_for(self, pod: PodRef, node: str, priority: int) -> None: ...
