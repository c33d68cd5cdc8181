"""The cluster's GPU picture from listed Node and Pod objects (pure).

Read exactly as the allocator reads it, with its own functions, so that what the plugin says
is what the allocator would decide:

- a node's cards: :func:`allocator.picture.inventory.read_inventory` (annotation, GFD labels, or the
  even split of allocatable totals);
- what a pod holds: its canonical allocation record (the durable truth the allocator's cache
  is rebuilt from), counted only on a bound pod in a non-terminal phase, ignored when it names
  another pod's UID (the rules of ``ClusterState.apply_pod``); the cards' usage is
  :func:`allocator.ranking.cards.build_node_state` of those records, init containers reserved
  disjointly as the allocator reserves them;
- what a pod asks for: :func:`tessera.dialects.read_pod_request` (the canonical annotation,
  else the dialects).

Bad objects never stop the picture: an undecodable record or request is kept as a problem on
its pod, an unreadable inventory as a problem on its node.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from allocator.agents.port import NodeAgent
from allocator.picture.inventory import read_inventory
from allocator.picture.measured import (
    MeasuredConfig,
    Overlay,
    Sample,
    apply_overlay,
    booked_before,
    overlay,
)
from allocator.preemption import PreemptionPolicy, policy_of, priority_of, started_at
from allocator.ranking.cards import Card, NodeState, build_node_state
from tessera.dialects import DialectConfig, read_pod_request
from tessera.vocabulary import (
    Allocation,
    CodecError,
    ContainerAllocation,
    PodRequest,
    RequestError,
    decode_allocation,
)

#: A node's cards as its device plugin registers them, read for every node as the allocator's
#: agents read them (the node-agent port's default, allocator/agents/port.py).
_DESCRIBED = NodeAgent().describe

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})

#: (pod UID, the containers of its allocation record) as build_node_state takes them.
Record = tuple[str, tuple[ContainerAllocation, ...]]


@dataclass(frozen=True)
class GpuPod:
    """One pod that asks for GPUs or holds an allocation record."""

    namespace: str
    name: str
    uid: str
    #: spec.nodeName ("" while Pending).
    node: str
    phase: str
    #: metadata.creationTimestamp (RFC 3339, sorts as text).
    created: str
    request: PodRequest | None
    #: Why the request could not be read ("" when it could or there is none).
    request_problem: str
    #: The allocation record that counts (None: none, unbound, terminal, or ignored).
    allocation: Allocation | None
    #: Why a present record is not counted ("" otherwise).
    allocation_problem: str
    node_selector: Mapping[str, str] = field(default_factory=dict)
    #: "Kind/name" of the controller that would recreate the pod ("" for a bare pod).
    owner: str = ""
    #: kube-scheduler's last word when it found no node (the PodScheduled condition).
    scheduler_message: str = ""
    #: What preemption reads (allocator/preemption/pod_fields.py): spec.priority,
    #: spec.preemptionPolicy, status.startTime (Unix seconds), and the labels budgets select.
    priority: int = 0
    preemption_policy: PreemptionPolicy = PreemptionPolicy.PREEMPT_LOWER_PRIORITY
    started_at: float | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    #: Our ``<domain>/preemption`` annotation: a preemption the allocator made for it ("").
    preemption_note: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def pending(self) -> bool:
        return not self.node and self.phase not in TERMINAL_PHASES


@dataclass(frozen=True)
class GpuNode:
    """One node with GPU cards (or whose cards could not be read)."""

    name: str
    labels: Mapping[str, str]
    cards: tuple[Card, ...]
    #: "annotation" | "gfd" | "allocatable" | "none" (allocator.picture.inventory).
    source: str
    #: Why the inventory is incomplete ("" when it is fine).
    problem: str
    #: spec.unschedulable (cordoned): no new pod goes here.
    unschedulable: bool
    #: The allocation records counted on this node, sorted by pod UID.
    records: tuple[Record, ...]
    state: NodeState
    #: Over-commitment found while applying the records (allocator.ranking.cards.build_node_state).
    overcommitted: tuple[str, ...]
    #: Measured figures per card position, as the allocator applies them (:func:`measure`).
    measured: Overlay = ()

    def state_without(self, uids: Iterable[str]) -> NodeState:
        """The node as it would be if these pods released their cards."""
        gone = set(uids)
        state, _ = build_node_state(
            self.name, self.cards, [r for r in self.records if r[0] not in gone])
        return apply_overlay(state, self.measured)


@dataclass(frozen=True)
class Picture:
    nodes: tuple[GpuNode, ...]
    pods: tuple[GpuPod, ...]

    def node(self, name: str) -> GpuNode | None:
        return next((n for n in self.nodes if n.name == name), None)

    def pod(self, namespace: str, name: str) -> GpuPod | None:
        return next((p for p in self.pods if p.namespace == namespace and p.name == name),
                    None)

    def pod_by_uid(self, uid: str) -> GpuPod | None:
        return self._by_uid.get(uid)

    @cached_property
    def _by_uid(self) -> dict[str, GpuPod]:
        # Looked up per card holder by defrag-plan: a dict, not a scan of every pod.
        return {p.uid: p for p in self.pods}

    @property
    def holders(self) -> tuple[GpuPod, ...]:
        """Pods whose allocation records count, in the order they were allocated."""
        held = [p for p in self.pods if p.allocation is not None]
        return tuple(sorted(held, key=lambda p: (p.allocation.allocated_at if p.allocation
                                                 else 0.0, p.created, p.key)))

    @property
    def pending(self) -> tuple[GpuPod, ...]:
        """Pending GPU pods with a readable request, oldest first."""
        waiting = [p for p in self.pods if p.pending and p.request is not None]
        return tuple(sorted(waiting, key=lambda p: (p.created, p.key)))


def _str_map(value: object) -> dict[str, str]:
    if not isinstance(value, Mapping):
        return {}
    return {str(k): str(v) for k, v in value.items()}


def _owner(meta: Mapping[str, Any]) -> str:
    for ref in meta.get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller"):
            return f"{ref.get('kind', '')}/{ref.get('name', '')}"
    return ""


def _scheduler_message(pod: Mapping[str, Any]) -> str:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if (isinstance(condition, Mapping) and condition.get("type") == "PodScheduled"
                and condition.get("status") == "False"):
            return str(condition.get("message") or condition.get("reason") or "")
    return ""


def read_pod(pod: Mapping[str, Any], config: DialectConfig) -> GpuPod | None:
    """The pod as a :class:`GpuPod`, or None when it neither asks for nor holds GPUs."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    annotations = _str_map(meta.get("annotations"))
    uid = str(meta.get("uid") or "")
    node = str(spec.get("nodeName") or "")
    phase = str((pod.get("status") or {}).get("phase") or "")
    request: PodRequest | None = None
    request_problem = ""
    try:
        request = read_pod_request(pod, config)
    except RequestError as exc:
        request_problem = str(exc)
    text = annotations.get(config.vocabulary.allocation_annotation)
    if request is None and not request_problem and text is None:
        return None
    held = (None, "") if text is None else _held(text, uid, node, phase)
    allocation, allocation_problem = held
    return GpuPod(
        namespace=str(meta.get("namespace") or ""), name=str(meta.get("name") or ""),
        uid=uid, node=node, phase=phase, created=str(meta.get("creationTimestamp") or ""),
        request=request, request_problem=request_problem, allocation=allocation,
        allocation_problem=allocation_problem,
        node_selector=_str_map(spec.get("nodeSelector")), owner=_owner(meta),
        scheduler_message=_scheduler_message(pod),
        priority=priority_of(pod), preemption_policy=policy_of(pod),
        started_at=started_at(pod), labels=_str_map(meta.get("labels")),
        preemption_note=annotations.get(config.vocabulary.preemption_annotation, ""),
    )


def _held(text: str, uid: str, node: str, phase: str) -> tuple[Allocation | None, str]:
    """The cards a pod's allocation record says it holds, or why it holds none."""
    try:
        decoded = decode_allocation(text)
    except CodecError as exc:
        return None, str(exc)
    if decoded.pod_uid and decoded.pod_uid != uid:
        return None, f"allocation belongs to pod {decoded.pod_uid}"
    if not node:
        return None, "record on an unbound pod (a bind that never finished)"
    return (None if phase in TERMINAL_PHASES else decoded), ""


def build_picture(nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]],
                  config: DialectConfig) -> Picture:
    """Nodes with GPU cards (or an inventory problem) and GPU pods, as the allocator sees them."""
    gpu_pods = [p for p in (read_pod(pod, config) for pod in pods) if p is not None]
    by_node: dict[str, list[Record]] = {}
    for p in gpu_pods:
        if p.allocation is not None:
            by_node.setdefault(p.node, []).append((p.uid, p.allocation.containers))
    out: list[GpuNode] = []
    for node in nodes:
        meta = node.get("metadata") or {}
        name = str(meta.get("name") or "")
        inventory = read_inventory(node, config.vocabulary, own_description=_DESCRIBED)
        if not name or (not inventory.cards and not inventory.problem
                        and name not in by_node):
            continue
        records = tuple(sorted(by_node.get(name, []), key=lambda r: r[0]))
        state, problems = build_node_state(name, inventory.cards, records)
        out.append(GpuNode(
            name=name, labels=_str_map(meta.get("labels")), cards=inventory.cards,
            source=inventory.source, problem=inventory.problem,
            unschedulable=bool((node.get("spec") or {}).get("unschedulable")),
            records=records, state=state, overcommitted=problems,
        ))
    return Picture(tuple(sorted(out, key=lambda n: n.name)),
                   tuple(sorted(gpu_pods, key=lambda p: p.key)))


def measure(picture: Picture, sample: Sample, config: MeasuredConfig) -> Picture:
    """The picture with Prometheus's figures on the cards, as the allocator puts them there
    (:meth:`allocator.picture.state.ClusterState.apply_sample`)."""
    allocated: dict[str, list[tuple[float, tuple[ContainerAllocation, ...]]]] = {}
    for pod in picture.holders:
        if pod.allocation is not None:
            allocated.setdefault(pod.node, []).append(
                (pod.allocation.allocated_at, pod.allocation.containers))
    nodes = []
    for node in picture.nodes:
        seen = booked_before(allocated.get(node.name, ()), node.cards,
                             sample.at - config.settle_seconds)
        figures = overlay(node.cards, seen, sample.nodes.get(node.name), config)
        nodes.append(replace(node, measured=figures,
                             state=apply_overlay(node.state, figures)))
    return Picture(tuple(nodes), picture.pods)


def selector_excludes(pod: GpuPod, node: GpuNode) -> str:
    """Why kube-scheduler would not consider the node for the pod ("" when it would).

    Only ``spec.nodeSelector`` and cordoning are read; affinity, taints and CPU are the
    scheduler's other plugins and are left to its own message.
    """
    missing = [f"{k}={v}" for k, v in sorted(pod.node_selector.items())
               if node.labels.get(k) != v]
    if missing:
        return f"nodeSelector {', '.join(missing)} does not match"
    if node.unschedulable:
        return "node is cordoned (unschedulable)"
    return ""


def parse_selector(text: str) -> list[tuple[str, str, str]]:
    """An equality-based label selector (``a=b,c!=d,e,!f``) as (key, op, value) triples."""
    out: list[tuple[str, str, str]] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if "!=" in part:
            key, value = part.split("!=", 1)
            out.append((key.strip(), "!=", value.strip()))
        elif "=" in part:
            key, value = part.split("==", 1) if "==" in part else part.split("=", 1)
            out.append((key.strip(), "=", value.strip()))
        elif part.startswith("!"):
            out.append((part[1:].strip(), "!", ""))
        else:
            out.append((part, "exists", ""))
    if any(not key for key, _, _ in out):
        raise ValueError(f"label selector {text!r} has an empty key")
    return out


def selector_matches(selector: Sequence[tuple[str, str, str]],
                     labels: Mapping[str, str]) -> bool:
    for key, op, value in selector:
        if op == "=" and labels.get(key) != value:
            return False
        if op == "!=" and labels.get(key) == value:
            return False
        if op == "exists" and key not in labels:
            return False
        if op == "!" and key in labels:
            return False
    return True
