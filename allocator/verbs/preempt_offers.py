"""What a preemption decides over, and the one way both paths decide: filter's
(:class:`~allocator.verbs.preempt.Preempt`, :func:`decide`) and the ``preemptVerb``'s
(:mod:`allocator.verbs.preempt_verb`, :func:`weigh`).

Each node's offer comes from the picture alone (:func:`offers`): its
:class:`~allocator.ranking.cards.NodeState` and the GPU pods bound there with their
allocations, ``spec.priority`` and ``status.startTime`` (the picture's records keep both, from
each version of the pod the watch sees). A pod only held or still being bound is never a
victim (its cards stay taken). The priority is the pod's ``spec.priority`` as kube-scheduler
reads it (the Priority admission plugin resolved the class on create: a PriorityClass deleted
since, or a pod with a priority and no class, changes nothing here).

Cheapest first (docs/preemption.md, "Cost"):

1. **A look at the priorities** (filter's path): when no refused node has a pod of strictly
   lower priority than the preemptor (the picture keeps each node's lowest), the core's answer
   (:func:`~allocator.preemption.nobody_lower`) at once: no offer built, nothing read from
   the API. What most refused pods on a full cluster get.
2. **The decision without budgets**, over the offers.
3. **Budgets only when it has victims**: the PodDisruptionBudgets are listed, and when one is
   in the namespace of a pod that may go, the labels of those pods are read (one list per node
   for a few nodes, else one list of every GPU pod) and the decision is made again with them.
   A budget changes which pods go and on which node, never whether a node can make room (the
   core's pre-check takes every pod of lower priority off, budgets or not), so a decision
   without victims needs none. The budgets are not cached: ``disruptionsAllowed`` moves with
   each eviction, and a decision with victims comes once per preemption.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import Any, Final, Protocol, TypeVar

from allocator.picture.records import PodRecord
from allocator.preemption import (
    Budget,
    GpuPod,
    NodeOffer,
    NoPreemption,
    Preemption,
    PreemptionPolicy,
    Preemptor,
    choose_preemption,
    nobody_lower,
)
from allocator.preemption.pdb import LabelledPod, budgets_over
from allocator.ranking.cards import NodeState

#: Nodes up to which the pods' labels are listed node by node (beyond, one list of every GPU
#: pod costs less).
PER_NODE_LISTS: Final = 8

Decision = TypeVar("Decision")


class ListingApi(Protocol):
    def list_pods_by_field(self, field_selector: str,
                           reduce: Callable[[dict[str, Any]], Any]) -> tuple[list[Any], str]: ...

    def list_pod_disruption_budgets(self) -> list[dict[str, Any]]: ...

    def list_pods(self, label_selector: str) -> tuple[list[dict[str, Any]], str]: ...


class PictureReads(Protocol):
    """What the offers are read from (:class:`~allocator.picture.tables.PictureTables`)."""

    def below_on(self, names: Iterable[str], priority: int) -> bool: ...

    def evictable_on(self, names: Iterable[str]
                     ) -> tuple[list[tuple[str, NodeState]], list[PodRecord]]: ...


class Chosen(Protocol):
    """A preemption in flight (:class:`~allocator.verbs.preempt_ports.InFlight`)."""

    @property
    def victims(self) -> tuple[str, ...]: ...


def offers(picture: PictureReads, names: Sequence[str], in_flight: Iterable[Chosen] = ()
           ) -> list[NodeOffer]:
    """Each of the ``names`` nodes the picture knows, in that order, with the pods on it that
    may go (by UID: ties in importance fall the same way each time). The victims of the
    preemptions ``in_flight`` are nobody else's: their cards stay taken until the watch sees
    them go (an eviction the watch has not shown yet must not be chosen twice)."""
    states, records = picture.evictable_on(names)
    chosen = {uid for entry in in_flight for uid in entry.victims}
    on_node: dict[str, list[PodRecord]] = {}
    for record in records:
        if record.uid not in chosen:
            on_node.setdefault(record.node, []).append(record)
    return [NodeOffer(state, tuple(_gpu_pod(r) for r in sorted(on_node.get(name, ()),
                                                                key=_uid)))
            for name, state in states]


def _uid(record: PodRecord) -> str:
    return record.uid


def _gpu_pod(record: PodRecord) -> GpuPod:
    return GpuPod(record.uid, record.namespace, record.name, record.allocation,
                  record.priority or 0, record.started_at)


def decide(api: ListingApi, gpu_pods: str, picture: PictureReads, preemptor: Preemptor,
           names: Sequence[str], in_flight: Iterable[Chosen] = (),
           respected: Callable[[list[NodeOffer]], list[NodeOffer]] | None = None
           ) -> Preemption | NoPreemption:
    """Filter's path: where to preempt for ``preemptor`` among the refused ``names`` and whom,
    or why nobody (``gpu_pods``: the label selector of every GPU pod; ``in_flight``: the
    preemptions whose victims are spared, :func:`offers`; ``respected``: the offers as the
    reservations of preemptions in flight leave them,
    :meth:`~allocator.verbs.reservations.Reserving.respected`)."""
    if preemptor.policy is PreemptionPolicy.NEVER:
        return choose_preemption(preemptor, ())  # the core says why
    if not picture.below_on(names, preemptor.priority):
        return nobody_lower(names)
    found = offers(picture, names, in_flight)
    return weigh(api, gpu_pods, preemptor, respected(found) if respected else found,
                 partial(choose_preemption, preemptor), _has_victims)


def _has_victims(decision: Preemption | NoPreemption) -> bool:
    return not isinstance(decision, NoPreemption)


def weigh(api: ListingApi, gpu_pods: str, preemptor: Preemptor, found: list[NodeOffer],
          core: Callable[[Sequence[NodeOffer], Sequence[Budget]], Decision],
          has_victims: Callable[[Decision], bool]) -> Decision:
    """``core``'s answer over ``found``, weighed with the budgets when it has victims."""
    first = core(found, ())
    if not has_victims(first):
        return first
    weighed = budgets(api, gpu_pods, preemptor, found)
    return core(found, weighed) if weighed else first


def budgets(api: ListingApi, gpu_pods: str, preemptor: Preemptor,
            found: Sequence[NodeOffer]) -> list[Budget]:
    """The budgets over the pods of lower priority on the ``found`` nodes; their labels read
    only where a budget is in their namespace."""
    pdbs = api.list_pod_disruption_budgets()
    spaces = {_namespace(pdb) for pdb in pdbs}
    lower = [(offer.name, pod) for offer in found for pod in offer.pods
             if pod.priority < preemptor.priority and pod.namespace in spaces]
    if not lower:
        return []
    labels = read_labels(api, gpu_pods, sorted({name for name, _ in lower}))
    return budgets_over(pdbs, [LabelledPod(p.uid, p.namespace, p.name, labels.get(p.uid, {}))
                               for _, p in lower])


def _namespace(pdb: Mapping[str, Any]) -> str | None:
    meta = pdb.get("metadata")
    found = meta.get("namespace") if isinstance(meta, Mapping) else None
    return found if isinstance(found, str) else None


def labels_of(pod: Mapping[str, Any]) -> tuple[str, dict[str, str]]:
    """(UID, labels) of a listed pod; a malformed part reads as no labels."""
    meta = pod.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    labels = meta.get("labels")
    return (str(meta.get("uid") or ""),
            {str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {})


def read_labels(api: ListingApi, gpu_pods: str, nodes: list[str]
                ) -> dict[str, dict[str, str]]:
    """The labels of the pods on ``nodes`` by UID: one list per node for a few nodes, else
    one list of every GPU pod (the picture's records all carry its label)."""
    if len(nodes) <= PER_NODE_LISTS:
        found: list[tuple[str, dict[str, str]]] = []
        for name in nodes:
            found += api.list_pods_by_field(f"spec.nodeName={name}", labels_of)[0]
    else:
        found = [labels_of(pod) for pod in api.list_pods(gpu_pods)[0]]
    return dict(found)
