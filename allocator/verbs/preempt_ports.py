"""What preemption (:mod:`allocator.verbs.preempt`) uses of the API, the picture and the
requeue: the narrow ports it is given; and what it remembers of a preemption in flight."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from allocator.decisions import PodRef
from allocator.picture.nodes import NodeView
from allocator.picture.records import PodRecord
from allocator.verbs.preempt_note import ALLOCATOR, Evictor
from allocator.verbs.preempt_offers import ListingApi, PictureReads
from tessera.vocabulary import Allocation, PodRequest


class PreemptApi(ListingApi, Protocol):
    """The part of :class:`~allocator.ports.KubeApi` preemption uses."""

    def create_eviction(self, namespace: str, name: str) -> None: ...

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]: ...

    def patch_pod_status(self, namespace: str, name: str,
                         patch: dict[str, Any]) -> dict[str, Any]: ...

    def patch_pod(self, namespace: str, name: str, patch: dict[str, Any]) -> None: ...


class Picture(PictureReads, Protocol):
    """The part of the picture (:class:`~allocator.picture.state.ClusterState`) preemption
    reads and holds in."""

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

    def forget(self, uid: str) -> None: ...


@dataclass(frozen=True, slots=True)
class InFlight:
    """A preemption under way (or, with no node, a pod no preemption helped, until the next
    look)."""

    pod: PodRef
    request: PodRequest
    #: The deadline, on the allocator's clock (the wall clock: the note carries it).
    until: float
    node: str = ""
    cards: tuple[int, ...] = ()
    victims: tuple[str, ...] = ()
    #: Its cards were held once (its own filter releases the hold: never held again).
    held: bool = False
    #: The preemptor's ``spec.priority``.
    priority: int = 0
    #: The victims by name (``victims`` has their UIDs): what /status and the page show; empty
    #: for a preemption restored from its note (the note carries UIDs only).
    victim_refs: tuple[PodRef, ...] = ()
    #: Who evicts the victims: the allocator's worker, or kube-scheduler (the ``preemptVerb``
    #: answered them; this process never evicts them).
    evictor: Evictor = ALLOCATOR
