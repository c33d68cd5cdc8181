"""What a preemption decides over: each refused node's offer, read from the picture and the
API (:class:`~allocator.verbs.preempt.Preempt` gathers them; the pure core decides).

Each refused node's :class:`~allocator.ranking.cards.NodeState` from the picture and the GPU
pods bound there with their allocations (the picture's records), their ``spec.priority`` and
``status.startTime`` (read from one list of the node's pods: the picture keeps neither, and a
preemption is rare enough to pay one list per refused node). A pod only held or still being
bound is never a victim (its cards stay taken). The priority is the pod's ``spec.priority``
as kube-scheduler reads it (the Priority admission plugin resolved the class on create: a
PriorityClass deleted since, or a pod with a priority and no class, changes nothing here).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from allocator.picture.records import PodRecord, Stage
from allocator.preemption import (
    Budget,
    GpuPod,
    NodeOffer,
    PreemptionPolicy,
    Preemptor,
    priority_of,
    started_at,
)
from allocator.preemption.pdb import LabelledPod, budgets_over
from allocator.ranking.cards import NodeState

#: Refused nodes with GPU pods up to which their pods are listed node by node (beyond, one
#: list of every GPU pod costs less).
PER_NODE_LISTS: Final = 8
#: Bound pod stages whose pods may be evicted (a hold or a running bind is not a pod's yet).
EVICTABLE: Final = frozenset({Stage.BOUND, Stage.CONFIRMED})


class ListingApi(Protocol):
    def list_pods_by_field(self, field_selector: str,
                           reduce: Callable[[dict[str, Any]], Any]) -> tuple[list[Any], str]: ...

    def list_pod_disruption_budgets(self) -> list[dict[str, Any]]: ...

    def list_pods(self, label_selector: str) -> tuple[list[dict[str, Any]], str]: ...


@dataclass(frozen=True, slots=True)
class Listed:
    """What preemption reads of a pod on a refused node."""

    pod: LabelledPod
    priority: int
    started_at: float | None


def listed(pod: dict[str, Any]) -> Listed:
    meta = pod.get("metadata") or {}
    labels = meta.get("labels")
    labels = {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}
    return Listed(LabelledPod(str(meta.get("uid") or ""), str(meta.get("namespace") or ""),
                              str(meta.get("name") or ""), labels),
                  priority_of(pod), started_at(pod))


def budgets(api: ListingApi, pods: list[LabelledPod]) -> list[Budget]:
    """The budgets over the pods that may go (none to read when no pod may)."""
    if not pods:
        return []
    return budgets_over(api.list_pod_disruption_budgets(), pods)


def offers(api: ListingApi, gpu_pods: str, preemptor: Preemptor, names: Sequence[str],
           picture: tuple[list[tuple[str, NodeState]], dict[str, PodRecord]]
           ) -> tuple[list[NodeOffer], list[LabelledPod]]:
    """Each refused node's offer, and the pods on them that may go (``gpu_pods``: the label
    selector of every GPU pod; ``picture``: the picture's node states and records)."""
    if preemptor.policy is PreemptionPolicy.NEVER:
        return [], []  # the core says why; no list of pods for it
    asked = set(names)
    states, records = picture
    by_node: dict[str, list[PodRecord]] = {}
    for record in records.values():
        if record.node in asked and record.stage in EVICTABLE:
            by_node.setdefault(record.node, []).append(record)
    read = read_pods(api, gpu_pods, sorted(by_node))
    found = []
    lower: list[LabelledPod] = []
    for name, node_state in states:
        if name not in asked:
            continue
        pods = tuple(GpuPod(r.uid, r.namespace, r.name, r.allocation,
                            read[r.uid].priority, read[r.uid].started_at)
                     for r in by_node.get(name, ()) if r.uid in read)
        lower += [read[p.uid].pod for p in pods if p.priority < preemptor.priority]
        found.append(NodeOffer(node_state, pods))
    return found, lower


def read_pods(api: ListingApi, gpu_pods: str, nodes: list[str]) -> dict[str, Listed]:
    """Priority, start time and labels of the pods on ``nodes``: one list per node for a
    few nodes, else one list of every GPU pod (the picture's records all carry its label)."""
    if len(nodes) <= PER_NODE_LISTS:
        found: list[Listed] = []
        for name in nodes:
            found += api.list_pods_by_field(f"spec.nodeName={name}", listed)[0]
    else:
        found = [listed(pod) for pod in api.list_pods(gpu_pods)[0]]
    return {item.pod.uid: item for item in found}
