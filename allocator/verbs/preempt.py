"""Preempt: when filter refused a GPU pod on every node for want of card room, evict the
fewest pods of lower priority that make room on one node, through the Eviction API.

The decision is the pure core's (:func:`allocator.preemption.choose_preemption`); this verb
gathers its inputs and acts on its answer:

- **Offers**: each refused node's :class:`~allocator.ranking.cards.NodeState` from the picture
  and the GPU pods bound there with their allocations (the picture's records), their
  ``spec.priority`` and ``status.startTime`` (read from one list of the node's pods: the
  picture keeps neither, and a preemption is rare enough to pay one list per refused node).
  A pod only held or still being bound is never a victim (its cards stay taken).
- **Budgets**: none are given to the core yet; the Eviction API enforces the
  PodDisruptionBudgets instead: a 429 stops the preemption (the victims already evicted
  stay evicted, no pod is ever deleted instead), and the pod is tried again after the
  deadline.
- **Once per preemptor**: a preemption in flight is remembered (bounded, oldest dropped) until
  its deadline; the preemptor refused again meanwhile evicts nobody more.
- **Nomination**: the preemptor's ``status.nominatedNodeName`` is set (kube-scheduler counts a
  nominated pod's CPU and memory on that node for pods of lower priority) and our annotation
  names the node, the cards and the deadline; the Events ``Preempted`` go on each victim and
  on the preemptor (:meth:`~allocator.decisions.DecisionHooks.preempted`).

Off unless :attr:`~allocator.verbs.config.AllocatorConfig.preemption` is set (docs/preemption.md).
"""

from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from allocator.decisions import DecisionHooks, PodRef
from allocator.errors import ApiError, NotFound, TooManyRequests
from allocator.picture.records import PodRecord, Stage
from allocator.preemption import (
    GpuPod,
    NodeOffer,
    NoPreemption,
    Preemption,
    Preemptor,
    choose_preemption,
    policy_of,
    priority_of,
    started_at,
)
from allocator.ranking.cards import NodeState
from tessera.vocabulary import PodRequest

logger = logging.getLogger(__name__)

#: Preemptions remembered at most (the oldest forgotten first).
MAX_IN_FLIGHT: Final = 1024
#: Seconds a preemption is given to free its cards before the pod may preempt again.
DEADLINE_SECONDS: Final = 60.0
#: Bound pod stages whose pods may be evicted (a hold or a running bind is not a pod's yet).
EVICTABLE: Final = frozenset({Stage.BOUND, Stage.CONFIRMED})


class PreemptApi(Protocol):
    """The part of :class:`~allocator.ports.KubeApi` preemption uses."""

    def list_pods_by_field(self, field_selector: str,
                           reduce: Callable[[dict[str, Any]], Any]) -> tuple[list[Any], str]: ...

    def create_eviction(self, namespace: str, name: str) -> None: ...

    def patch_pod_status(self, namespace: str, name: str,
                         patch: dict[str, Any]) -> dict[str, Any]: ...

    def patch_pod(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]: ...


class PictureReads(Protocol):
    """The part of the picture preemption reads."""

    def node_states(self) -> tuple[list[tuple[str, NodeState]], dict[str, PodRecord]]: ...


@dataclass(frozen=True, slots=True)
class InFlight:
    node: str
    cards: tuple[int, ...]
    victims: tuple[str, ...]
    until: float


def _fields(pod: dict[str, Any]) -> tuple[str, int, float | None]:
    return (str((pod.get("metadata") or {}).get("uid") or ""), priority_of(pod),
            started_at(pod))


class Preempt(DecisionHooks):
    """The preempting step of a refused filter (leader only: filter answers nothing else);
    as a decision hook, it forgets a preemption once its pod is bound."""

    def __init__(self, state: PictureReads, api: PreemptApi, hooks: DecisionHooks,
                 clock: Callable[[], float], annotation: str,
                 deadline_seconds: float = DEADLINE_SECONDS,
                 max_in_flight: int = MAX_IN_FLIGHT) -> None:
        self.state = state
        self.api = api
        self.hooks = hooks
        self.clock = clock
        self.annotation = annotation
        self.deadline_seconds = deadline_seconds
        self.max_in_flight = max_in_flight
        self.in_flight: OrderedDict[str, InFlight] = OrderedDict()
        # One preemption at a time: they are rare, and two at once could pick one victim.
        self._lock = threading.Lock()

    def __call__(self, pod: Mapping[str, Any], request: PodRequest,
                 names: Sequence[str]) -> Preemption | NoPreemption | None:
        """Preempt for ``pod`` among the refused ``names``: the preemption acted on, why none
        helps, or None when one is already in flight for it. Never raises."""
        with self._lock:
            return self._preempt(pod, request, names)

    def _preempt(self, pod: Mapping[str, Any], request: PodRequest,
                 names: Sequence[str]) -> Preemption | NoPreemption | None:
        ref = PodRef.of(pod)
        now = self.clock()
        self._forget_expired(now)
        if not ref.uid or ref.uid in self.in_flight:
            return None
        preemptor = Preemptor(ref.uid, request, priority_of(pod), policy_of(pod))
        try:
            decision = choose_preemption(preemptor, self._offers(names))
        except ApiError as exc:
            logger.warning("preemption for %s not tried: %s", ref.key, exc)
            return None
        if isinstance(decision, NoPreemption):
            logger.info("no preemption for %s: %s", ref.key, decision.reason)
            return decision
        self._act(ref, decision, now)
        return decision

    def _offers(self, names: Sequence[str]) -> list[NodeOffer]:
        asked = set(names)
        states, records = self.state.node_states()
        by_node: dict[str, list[PodRecord]] = {}
        for record in records.values():
            if record.node in asked and record.stage in EVICTABLE:
                by_node.setdefault(record.node, []).append(record)
        offers = []
        for name, node_state in states:
            if name not in asked:
                continue
            fields = {}
            if by_node.get(name):
                listed, _ = self.api.list_pods_by_field(f"spec.nodeName={name}", _fields)
                fields = {uid: (prio, start) for uid, prio, start in listed}
            pods = tuple(GpuPod(r.uid, r.namespace, r.name, r.allocation, *fields[r.uid])
                         for r in by_node.get(name, ()) if r.uid in fields)
            offers.append(NodeOffer(node_state, pods))
        return offers

    def _act(self, ref: PodRef, chosen: Preemption, now: float) -> None:
        until = now + self.deadline_seconds
        self.in_flight[ref.uid] = InFlight(chosen.node, chosen.cards,
                                           tuple(v.uid for v in chosen.victims), until)
        while len(self.in_flight) > self.max_in_flight:
            self.in_flight.popitem(last=False)
        evicted: list[PodRef] = []
        for victim in chosen.victims:
            try:
                self.api.create_eviction(victim.namespace, victim.name)
            except NotFound:
                pass  # gone already: its cards are free
            except TooManyRequests as exc:
                # A PodDisruptionBudget forbids it now: stop; never delete instead.
                logger.info("preemption for %s stopped: %s", ref.key, exc)
                break
            except ApiError as exc:
                logger.warning("eviction of %s for %s failed: %s", victim.key, ref.key, exc)
                break
            evicted.append(PodRef(victim.namespace, victim.name, victim.uid))
        if evicted:
            self.hooks.preempted(ref, tuple(evicted), chosen.node, chosen.cards)
        self._nominate(ref, chosen, until)

    def _nominate(self, ref: PodRef, chosen: Preemption, until: float) -> None:
        note = json.dumps({"node": chosen.node, "cards": list(chosen.cards),
                           "until": round(until, 3)}, separators=(",", ":"))
        try:
            self.api.patch_pod_status(ref.namespace, ref.name,
                                      {"status": {"nominatedNodeName": chosen.node}})
            self.api.patch_pod(ref.namespace, ref.name,
                               {"metadata": {"annotations": {self.annotation: note}}})
        except ApiError as exc:
            logger.warning("nomination of %s on %s failed: %s", ref.key, chosen.node, exc)

    def allocated(self, pod: PodRef, node: str, cards: tuple[int, ...], policy: str) -> None:
        """A pod was bound: a preemption for it is over."""
        with self._lock:
            self.in_flight.pop(pod.uid, None)

    def _forget_expired(self, now: float) -> None:
        for uid in [u for u, f in self.in_flight.items() if f.until <= now]:
            del self.in_flight[uid]
