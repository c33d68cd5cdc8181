"""Preempt: when filter refused a GPU pod on every node for want of card room, evict the
fewest pods of lower priority that make room on one node, through the Eviction API.

The decision is the pure core's (:func:`allocator.preemption.choose_preemption`); this verb
gathers its inputs and acts on its answer:

- **Offers**: each refused node's :class:`~allocator.ranking.cards.NodeState` from the picture
  and the GPU pods bound there with their allocations (the picture's records), their
  ``spec.priority`` and ``status.startTime`` (read from one list of the node's pods: the
  picture keeps neither, and a preemption is rare enough to pay one list per refused node).
  A pod only held or still being bound is never a victim (its cards stay taken).
- **Budgets**: the policy/v1 PodDisruptionBudgets over the pods that may go
  (:mod:`allocator.preemption.pdb`), listed once per look, so the core prefers the node that
  violates fewest; the Eviction API enforces them as well: a 429 stops the preemption (the
  victims already evicted stay evicted, no pod is ever deleted instead), and the pod is tried
  again after the deadline.
- **Once per preemptor**: a preemption in flight is remembered (bounded, oldest dropped) until
  its deadline; the preemptor refused again meanwhile evicts nobody more.
- **The hold**: once the picture's watch has seen every victim go (:meth:`Preempt.released`,
  told each release), the preemptor's cards are held in its name
  (:meth:`ClusterState.hold <allocator.picture.state.ClusterState.hold>`) until its deadline,
  preferring the cards its victims freed: every other pod's filter sees them taken. Its own
  filter, when kube-scheduler retries it, releases the hold and places it afresh on them.
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
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Final, Protocol

from allocator.decisions import DecisionHooks, PodRef
from allocator.errors import ApiError, NotFound, TooManyRequests
from allocator.picture.nodes import NodeView
from allocator.picture.records import PodRecord, Stage
from allocator.preemption import (
    Budget,
    GpuPod,
    NodeOffer,
    NoPreemption,
    Preemption,
    PreemptionPolicy,
    Preemptor,
    choose_preemption,
    policy_of,
    priority_of,
    started_at,
)
from allocator.preemption.pdb import LabelledPod, budgets_over
from allocator.ranking.cards import NodeState
from allocator.ranking.fit import Chooser, place_and_keep
from tessera.vocabulary import Allocation, PodRequest

logger = logging.getLogger(__name__)

#: Preemptions remembered at most (the oldest forgotten first).
MAX_IN_FLIGHT: Final = 1024
#: Seconds a preemption is given to free its cards before the pod may preempt again.
DEADLINE_SECONDS: Final = 60.0
#: Seconds a pod no preemption helped is not looked at again (each look lists pods).
RETRY_SECONDS: Final = 10.0
#: Refused nodes with GPU pods up to which their pods are listed node by node (beyond, one
#: list of every GPU pod costs less).
PER_NODE_LISTS: Final = 8
#: Placing the held pod: a bind elsewhere on the node meanwhile means placing again.
HOLD_PLACEMENTS: Final = 3
#: Bound pod stages whose pods may be evicted (a hold or a running bind is not a pod's yet).
EVICTABLE: Final = frozenset({Stage.BOUND, Stage.CONFIRMED})


class PreemptApi(Protocol):
    """The part of :class:`~allocator.ports.KubeApi` preemption uses."""

    def list_pods_by_field(self, field_selector: str,
                           reduce: Callable[[dict[str, Any]], Any]) -> tuple[list[Any], str]: ...

    def list_pod_disruption_budgets(self) -> list[dict[str, Any]]: ...

    def list_pods(self, label_selector: str) -> tuple[list[dict[str, Any]], str]: ...

    def create_eviction(self, namespace: str, name: str) -> None: ...

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


@dataclass(frozen=True, slots=True)
class InFlight:
    """A preemption under way (or, with no node, a pod no preemption helped, until the next
    look)."""

    pod: PodRef
    request: PodRequest
    until: float
    node: str = ""
    cards: tuple[int, ...] = ()
    victims: tuple[str, ...] = ()
    #: Its cards were held once (its own filter releases the hold: never held again).
    held: bool = False


@dataclass(frozen=True, slots=True)
class Listed:
    """What preemption reads of a pod on a refused node."""

    pod: LabelledPod
    priority: int
    started_at: float | None


def _listed(pod: dict[str, Any]) -> Listed:
    meta = pod.get("metadata") or {}
    labels = meta.get("labels")
    labels = {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}
    return Listed(LabelledPod(str(meta.get("uid") or ""), str(meta.get("namespace") or ""),
                              str(meta.get("name") or ""), labels),
                  priority_of(pod), started_at(pod))


def freed_first(cards: tuple[int, ...]) -> Chooser:
    """A chooser that places on the ``cards`` the victims freed (any other card scores 0)."""
    wanted = frozenset(cards)

    def score(_before: NodeState, after: NodeState) -> float:
        return float(sum(c.core_used for c in after.cards if c.card.index in wanted))

    return score


class Preempt(DecisionHooks):
    """The preempting step of a refused filter (leader only: filter answers nothing else);
    as a decision hook, it forgets a preemption once its pod is bound.

    Lock order: the picture's lock, then this one; this one is never held while calling the
    picture or the API (:meth:`released` runs under the picture's lock)."""

    def __init__(self, state: Picture, api: PreemptApi, hooks: DecisionHooks,
                 clock: Callable[[], float], annotation: str, gpu_pods: str,
                 deadline_seconds: float = DEADLINE_SECONDS,
                 max_in_flight: int = MAX_IN_FLIGHT) -> None:
        self.state = state
        self.api = api
        self.hooks = hooks
        self.clock = clock
        self.annotation = annotation
        self.gpu_pods = gpu_pods  # the label selector of every GPU pod
        self.deadline_seconds = deadline_seconds
        self.max_in_flight = max_in_flight
        self.in_flight: OrderedDict[str, InFlight] = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, pod: Mapping[str, Any], request: PodRequest,
                 names: Sequence[str]) -> Preemption | NoPreemption | None:
        """Preempt for ``pod`` among the refused ``names``: the preemption acted on, why none
        helps, or None when the pod was looked at lately (a preemption in flight, or none
        helped). Never raises."""
        ref = PodRef.of(pod)
        now = self.clock()
        if not ref.uid or not self._claim(InFlight(ref, request, now + RETRY_SECONDS), now):
            return None
        preemptor = Preemptor(ref.uid, request, priority_of(pod), policy_of(pod))
        try:
            offers, listed = self._offers(preemptor, names)
            decision = choose_preemption(preemptor, offers, self._budgets(listed))
        except ApiError as exc:
            logger.warning("preemption for %s not tried: %s", ref.key, exc)
            return None
        if isinstance(decision, NoPreemption):
            logger.info("no preemption for %s: %s", ref.key, decision.reason)
            return decision
        self._act(ref, request, decision, now)
        return decision

    def _claim(self, entry: InFlight, now: float) -> bool:
        """Remember ``entry`` unless its pod was looked at lately (bounded, oldest first)."""
        with self._lock:
            for uid in [u for u, f in self.in_flight.items() if f.until <= now]:
                del self.in_flight[uid]
            if entry.pod.uid in self.in_flight:
                return False
            self._remember(entry)
            return True

    def _remember(self, entry: InFlight) -> None:
        self.in_flight[entry.pod.uid] = entry
        while len(self.in_flight) > self.max_in_flight:
            self.in_flight.popitem(last=False)

    def _budgets(self, listed: list[LabelledPod]) -> list[Budget]:
        """The budgets over the pods that may go (none to read when no pod may)."""
        if not listed:
            return []
        return budgets_over(self.api.list_pod_disruption_budgets(), listed)

    def _offers(self, preemptor: Preemptor, names: Sequence[str]
                ) -> tuple[list[NodeOffer], list[LabelledPod]]:
        """Each refused node's offer, and the pods on them that may go."""
        if preemptor.policy is PreemptionPolicy.NEVER:
            return [], []  # the core says why; no list of pods for it
        asked = set(names)
        states, records = self.state.node_states()
        by_node: dict[str, list[PodRecord]] = {}
        for record in records.values():
            if record.node in asked and record.stage in EVICTABLE:
                by_node.setdefault(record.node, []).append(record)
        read = self._read_pods(sorted(by_node))
        offers = []
        lower: list[LabelledPod] = []
        for name, node_state in states:
            if name not in asked:
                continue
            pods = tuple(GpuPod(r.uid, r.namespace, r.name, r.allocation,
                                read[r.uid].priority, read[r.uid].started_at)
                         for r in by_node.get(name, ()) if r.uid in read)
            lower += [read[p.uid].pod for p in pods if p.priority < preemptor.priority]
            offers.append(NodeOffer(node_state, pods))
        return offers, lower

    def _read_pods(self, nodes: list[str]) -> dict[str, Listed]:
        """Priority, start time and labels of the pods on ``nodes``: one list per node for a
        few nodes, else one list of every GPU pod (the picture's records all carry its label)."""
        if len(nodes) <= PER_NODE_LISTS:
            found: list[Listed] = []
            for name in nodes:
                found += self.api.list_pods_by_field(f"spec.nodeName={name}", _listed)[0]
        else:
            found = [_listed(pod) for pod in self.api.list_pods(self.gpu_pods)[0]]
        return {item.pod.uid: item for item in found}

    def _act(self, ref: PodRef, request: PodRequest, chosen: Preemption, now: float) -> None:
        until = now + self.deadline_seconds
        with self._lock:
            self._remember(InFlight(ref, request, until, chosen.node, chosen.cards,
                                    tuple(v.uid for v in chosen.victims)))
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

    # ------------------------------------------------------------------ the preemptVerb
    def offers(self, preemptor: Preemptor, names: Sequence[str]
               ) -> tuple[list[NodeOffer], list[Budget]]:
        """The named nodes' offers and the budgets over their pods that may go, as this path
        gives them to the core: the ``preemptVerb``'s inputs
        (:mod:`allocator.verbs.preempt_verb`). Raises :class:`ApiError`."""
        offers, listed = self._offers(preemptor, names)
        return offers, self._budgets(listed)

    def acting_for(self, uid: str) -> bool:
        """Whether a preemption that chose victims is in flight for the pod (before its
        deadline): the ``preemptVerb`` then answers no candidates."""
        now = self.clock()
        with self._lock:
            entry = self.in_flight.get(uid)
            return entry is not None and bool(entry.victims) and entry.until > now

    def remember_answer(self, entry: InFlight) -> bool:
        """Remember the victims the ``preemptVerb`` answered for a pod (kube-scheduler evicts
        them), so that this path evicts nobody for it until the deadline; False, remembering
        nothing, when this path chose victims for it meanwhile. The two paths never both
        evict for one pod."""
        now = self.clock()
        with self._lock:
            known = self.in_flight.get(entry.pod.uid)
            if known is not None and known.victims and known.until > now:
                return False
            self._remember(entry)
            return True

    # ------------------------------------------------------------------ the hold
    def released(self, node: str) -> None:
        """Room was released on ``node`` (the picture tells it, under its lock): hold the
        cards of each preemption there whose victims are all gone. Never raises."""
        if not self.in_flight:  # lock-free miss: the common case
            return
        now = self.clock()
        with self._lock:
            waiting = [f for f in self.in_flight.values()
                       if f.node == node and f.until > now and not f.held]
        for entry in waiting:
            if any(self.state.record(uid) is not None for uid in entry.victims):
                continue  # a victim still terminating: its cards are not free yet
            try:
                self._hold(entry)
            except Exception:  # the picture's watch must go on
                logger.exception("hold for %s on %s failed", entry.pod.key, node)

    def _hold(self, entry: InFlight) -> None:
        ref, state = entry.pod, self.state

        def keep(allocation: Allocation, version: int) -> bool:
            return state.hold(ref.uid, ref.namespace, ref.name, allocation, version, None,
                              until=entry.until, made_for=entry.request)

        if state.record(ref.uid) is not None:
            return  # held by its own filter, or bound, already
        placed = place_and_keep(entry.request, partial(self._node_now, entry.node),
                                freed_first(entry.cards), ref.uid, keep, HOLD_PLACEMENTS)
        if isinstance(placed, Allocation):
            with self._lock:
                if self.in_flight.get(ref.uid) is entry:
                    self.in_flight[ref.uid] = replace(entry, held=True)

    def _node_now(self, node: str) -> tuple[NodeState, int] | None:
        view = self.state.view(node)
        return None if view is None else (view.state, view.version)

    def allocated(self, pod: PodRef, node: str, cards: tuple[int, ...], policy: str) -> None:
        """A pod was bound: a preemption for it is over."""
        with self._lock:
            self.in_flight.pop(pod.uid, None)
