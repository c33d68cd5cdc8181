"""Node CPU and memory as kube-scheduler counts them: allocatable minus the requests of the
non-terminal pods bound to the node (every pod, not only GPU pods).

Placement policies that weigh a node's free CPU (fgd and its kin) read it through
:attr:`allocator.ranking.policies.PolicyContext.node_facts`; this module keeps the numbers.

- :func:`pod_requests` is kube-scheduler's per-pod request (kubernetes v1.34
  ``staging/src/k8s.io/component-helpers/resource/helpers.go`` ``PodRequests``, called by the
  scheduler's ``NodeInfo`` with ``UseStatusResources`` since InPlacePodVerticalScaling is on by
  default): app containers summed, sidecars (init containers with ``restartPolicy: Always``)
  with them, the largest init container (plus the sidecars started before it) if larger;
  pod-level ``spec.resources.requests`` replace the containers' sum for CPU and memory; then
  ``spec.overhead``. While a resize is in flight the larger of spec and status counts.
- :class:`NodeResources` keeps, per pod, only ``(node, milli-CPU, memory bytes)`` — never the
  pod object — and per node the sums, so free CPU is one dictionary read. A bind of ours
  counts at once (:meth:`NodeResources.reserve`), so the picture is never behind for GPU pods;
  other pods count when the watch of bound pods delivers them.

Thread-safety: one lock for writes; the verbs read :attr:`NodeResources.free_cpu` without it.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final

from allocator.ranking.content_memo import UNKNOWN_FREE, NodeColumns, NodeNames
from allocator.ranking.policies import NodeFacts
from tessera.quantity import QuantityError, parse_quantity

logger = logging.getLogger(__name__)

#: The pods whose requests count on a node: bound, not terminated. kube-scheduler's own pod
#: informer drops terminated pods the same way (pkg/scheduler/scheduler.go,
#: ``NewInformerFactory``: ``status.phase!=Succeeded,status.phase!=Failed``). A pod leaving
#: this set (it terminates) reaches a watch with this selector as a DELETED event.
BOUND_ACTIVE_PODS: Final = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
TERMINAL_PHASES: Final = frozenset({"Succeeded", "Failed"})
#: Pods whose requests could not be read, kept for ``/status`` (bounded: anyone may create pods).
MAX_NOTED: Final = 256
_CPU, _MEMORY = "cpu", "memory"


class ResourceError(ValueError):
    """A pod or node whose CPU or memory cannot be read."""


@dataclass(frozen=True, slots=True)
class PodUsage:
    """One pod as the node picture keeps it (``problem`` set: skipped, and why)."""

    uid: str
    node: str
    cpu_milli: int
    memory_bytes: int
    problem: str = ""


# ---------------------------------------------------------------------- quantities (pure)
def _amount(raw: object, scale: int) -> int:
    """A quantity in units of 1/scale, rounded up as Go's ``MilliValue``/``Value`` do."""
    try:
        value: Decimal = parse_quantity(raw).value
    except QuantityError as exc:
        raise ResourceError(str(exc)) from exc
    if value < 0:
        raise ResourceError(f"{raw!r} is negative")
    return math.ceil(value * scale)


def _pair(resources: object, what: str) -> tuple[int, int]:
    """(milli-CPU, memory bytes) of a ResourceList (missing: 0)."""
    if resources is None:
        return 0, 0
    if not isinstance(resources, Mapping):
        raise ResourceError(f"{what} is not a resource list")
    cpu = resources.get(_CPU)
    memory = resources.get(_MEMORY)
    return (0 if cpu is None else _amount(cpu, 1000),
            0 if memory is None else _amount(memory, 1))


def _mapping(value: object, what: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ResourceError(f"{what} is not an object")
    return value


def _list(value: object, what: str) -> Sequence[Mapping[str, Any]]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value):
        raise ResourceError(f"{what} is not a list of objects")
    return value


def _requests(container: Mapping[str, Any]) -> tuple[int, int]:
    resources = _mapping(container.get("resources"), "container resources")
    return _pair(resources.get("requests"), "container requests")


def _aggregate(app: Sequence[Mapping[str, Any]], init: Sequence[Mapping[str, Any]],
               read: Any) -> list[int]:
    """``aggregateContainerResourcesByFn`` for (CPU, memory): app containers and sidecars
    summed; each other init container with the sidecars before it; the larger counts."""
    total = [0, 0]
    for container in app:
        for i, amount in enumerate(read(container)):
            total[i] += amount
    sidecars = [0, 0]
    init_peak = [0, 0]
    for container in init:
        amounts = read(container)
        if container.get("restartPolicy") == "Always":
            for i in (0, 1):
                total[i] += amounts[i]
                sidecars[i] += amounts[i]
            use = sidecars
        else:
            use = [amounts[0] + sidecars[0], amounts[1] + sidecars[1]]
        init_peak = [max(init_peak[0], use[0]), max(init_peak[1], use[1])]
    return [max(total[0], init_peak[0]), max(total[1], init_peak[1])]


def pod_requests(pod: Mapping[str, Any]) -> tuple[int, int]:
    """(milli-CPU, memory bytes) kube-scheduler counts for ``pod`` on its node (module doc).

    Raises :class:`ResourceError` for a pod whose requests cannot be read."""
    spec = _mapping(pod.get("spec"), "spec")
    status = _mapping(pod.get("status"), "status")
    app = _list(spec.get("containers"), "spec.containers")
    init = _list(spec.get("initContainers"), "spec.initContainers")
    totals = _aggregate(app, init, _requests)
    statuses = {s.get("name"): s for s in (
        *_list(status.get("containerStatuses"), "status.containerStatuses"),
        *_list(status.get("initContainerStatuses"), "status.initContainerStatuses"))}
    if statuses:
        totals = _with_status(app, init, statuses, totals, _resize_infeasible(status))
    pod_level = _mapping(spec.get("resources"), "spec.resources")
    requested = _mapping(pod_level.get("requests"), "spec.resources.requests")
    if _CPU in requested:
        totals[0] = _amount(requested[_CPU], 1000)
    if _MEMORY in requested:
        totals[1] = _amount(requested[_MEMORY], 1)
    overhead = _pair(spec.get("overhead"), "spec.overhead")
    return totals[0] + overhead[0], totals[1] + overhead[1]


def _with_status(app: Sequence[Mapping[str, Any]], init: Sequence[Mapping[str, Any]],
                 statuses: Mapping[Any, Mapping[str, Any]], spec_totals: list[int],
                 infeasible: bool) -> list[int]:
    """``AggregateContainerRequests`` with ``UseStatusResources``: the larger of what the spec
    asks, what the kubelet allocated and what it actuated (a resize in flight)."""

    def allocated(container: Mapping[str, Any]) -> tuple[int, int]:
        found = statuses.get(container.get("name"))
        if found is not None and found.get("allocatedResources") is not None:
            return _pair(found.get("allocatedResources"), "allocatedResources")
        return (0, 0) if infeasible else _requests(container)

    def actuated(container: Mapping[str, Any]) -> tuple[int, int]:
        found = statuses.get(container.get("name"))
        resources = _mapping(None if found is None else found.get("resources"), "resources")
        if resources.get("requests") is not None:
            return _pair(resources.get("requests"), "status resources")
        return allocated(container)

    candidates = [_aggregate(app, init, allocated), _aggregate(app, init, actuated)]
    if not infeasible:
        candidates.append(spec_totals)
    return [max(c[0] for c in candidates), max(c[1] for c in candidates)]


def _resize_infeasible(status: Mapping[str, Any]) -> bool:
    for condition in _list(status.get("conditions"), "status.conditions"):
        if condition.get("type") == "PodResizePending":
            return condition.get("reason") == "Infeasible"
    return False


def node_allocatable(node: Mapping[str, Any]) -> tuple[int, int] | None:
    """(milli-CPU, memory bytes) allocatable on ``node``; None when it reports no CPU (a node
    whose kubelet has not reported yet); :class:`ResourceError` if unreadable."""
    status = _mapping(node.get("status"), "status")
    allocatable = _mapping(status.get("allocatable"), "status.allocatable")
    if _CPU not in allocatable:
        return None
    return _pair(allocatable, "status.allocatable")


def pod_usage(pod: Mapping[str, Any]) -> PodUsage | None:
    """A pod reduced to what the node picture keeps; None when it counts on no node (no uid,
    not bound, terminated). Never raises: an unreadable pod comes back with ``problem``."""
    meta = pod.get("metadata")
    uid = meta.get("uid") if isinstance(meta, Mapping) else None
    spec = pod.get("spec")
    node = spec.get("nodeName") if isinstance(spec, Mapping) else None
    if not isinstance(uid, str) or not uid or not isinstance(node, str) or not node:
        return None
    status = pod.get("status")
    if isinstance(status, Mapping) and status.get("phase") in TERMINAL_PHASES:
        return None
    try:
        cpu, memory = pod_requests(pod)
    except (ResourceError, TypeError, ValueError, ArithmeticError) as exc:
        return PodUsage(uid, node, 0, 0, f"requests unreadable: {exc}")
    return PodUsage(uid, node, cpu, memory)


# ---------------------------------------------------------------------- the picture
class NodeResources:
    """Allocatable and requested CPU and memory per node (module doc)."""

    def __init__(self, names: NodeNames | None = None, columns: NodeColumns | None = None
                 ) -> None:
        self._lock = threading.Lock()
        #: node names as the shared objects of the cluster picture (allocator.ranking.content_memo)
        self._names = names if names is not None else NodeNames()
        #: every node's free CPU at its slot, for the verbs (allocator.ranking.content_memo)
        self._columns = columns if columns is not None else NodeColumns()
        self._allocatable: dict[str, tuple[int, int]] = {}
        #: pod uid -> (node, milli-CPU, memory bytes): the compact record, nothing more
        self._pods: dict[str, tuple[str, int, int]] = {}
        self._used: dict[str, tuple[int, int]] = {}
        #: node -> free milli-CPU / memory bytes, read lock-free on the verbs' hot path
        self.free_cpu: dict[str, int] = {}
        self.free_memory: dict[str, int] = {}
        #: uids reserved by a bind of ours that no list or watch event has shown bound yet
        self._reserved: set[str] = set()
        self._epoch = 0
        self._touched: dict[str, int] = {}
        self._noted: dict[str, str] = {}
        #: amounts are shared between records instead of one copy each (node names: _names)
        self._interned: dict[object, Any] = {}
        self.max_cpu_milli = 0

    # ------------------------------------------------------------------ reads
    def facts(self, node: str) -> NodeFacts | None:
        cpu = self.free_cpu.get(node)
        if cpu is None:
            return None
        return NodeFacts(cpu, self.free_memory.get(node, UNKNOWN_FREE))

    def view(self) -> NodeFactsView:
        return NodeFactsView(self)

    def pod(self, uid: str) -> tuple[str, int, int] | None:
        return self._pods.get(uid)

    def counts(self) -> tuple[int, int]:
        """(nodes with known allocatable, pods counted)."""
        return len(self._allocatable), len(self._pods)

    def noted(self) -> dict[str, str]:
        with self._lock:
            return dict(self._noted)

    # ------------------------------------------------------------------ nodes
    def apply_node(self, name: str, node: Mapping[str, Any]) -> None:
        """A node object; an unreadable allocatable leaves the node without facts (noted)."""
        try:
            allocatable = node_allocatable(node)
        except (ResourceError, TypeError, ValueError, ArithmeticError) as exc:
            logger.warning("node %s: CPU/memory not tracked: %s", name, exc,
                           extra={"node": name})
            allocatable = None
        with self._lock:
            if allocatable is None:
                self._forget_node(name)
                return
            if self._allocatable.get(name) == allocatable:
                return
            self._allocatable[self._names.intern(name)] = allocatable
            self.max_cpu_milli = max(self.max_cpu_milli, allocatable[0])
            self._refresh(name)

    def remove_node(self, name: str) -> None:
        with self._lock:
            self._forget_node(name)

    def keep_nodes(self, names: set[str]) -> None:
        """After a node list: forget the allocatable of nodes that are gone."""
        with self._lock:
            for name in [n for n in self._allocatable if n not in names]:
                self._forget_node(name)

    def _forget_node(self, name: str) -> None:
        if self._allocatable.pop(name, None) is None:
            return
        self.free_cpu.pop(name, None)
        self.free_memory.pop(name, None)
        self._columns.set_free_cpu(name, UNKNOWN_FREE)
        self.max_cpu_milli = max((a[0] for a in self._allocatable.values()), default=0)

    # ------------------------------------------------------------------ pods
    def apply_pod(self, pod: Mapping[str, Any]) -> None:
        """An added/modified pod from the watch of bound pods."""
        usage = pod_usage(pod)
        if usage is None:
            self.remove_pod(pod)  # terminated (or not bound): counts nowhere
        else:
            self.apply_usage(usage)

    def apply_usage(self, usage: PodUsage) -> None:
        with self._lock:
            self._reserved.discard(usage.uid)
            if usage.problem:
                self._note(usage.uid, usage.problem)
                self._set(usage.uid, None)
                return
            self._noted.pop(usage.uid, None)
            self._set(usage.uid, (usage.node, usage.cpu_milli, usage.memory_bytes))

    def remove_pod(self, pod: Mapping[str, Any]) -> None:
        meta = pod.get("metadata")
        uid = meta.get("uid") if isinstance(meta, Mapping) else None
        if isinstance(uid, str) and uid:
            with self._lock:
                self._reserved.discard(uid)
                self._noted.pop(uid, None)
                self._set(uid, None)

    def replace_pods(self, usages: Iterable[PodUsage | None], since: int | None = None) -> None:
        """A fresh list (already reduced, :func:`pod_usage`): every pod it shows, and the
        release of every pod it does not — except records touched after ``since`` (the
        :meth:`epoch` taken before the list was requested: a bind of ours, or a watch event,
        newer than the list) and reservations of binds (their pods are bound, or the bind is
        rolled back, both of which we hear of)."""
        seen: set[str] = set()
        for usage in usages:
            if usage is None:
                continue
            seen.add(usage.uid)
            if since is None or self._touched.get(usage.uid, -1) < since:
                self.apply_usage(usage)
        with self._lock:
            for uid in [u for u in self._pods if u not in seen]:
                if uid in self._reserved or (since is not None
                                             and self._touched.get(uid, -1) >= since):
                    continue
                self._set(uid, None)
            for uid in [u for u in self._noted if u not in seen]:
                del self._noted[uid]

    def epoch(self) -> int:
        with self._lock:
            return self._epoch

    # ------------------------------------------------------------------ our binds
    def reserve(self, uid: str, node: str, cpu_milli: int, memory_bytes: int) -> None:
        """A bind of ours: the pod counts on ``node`` from now on."""
        with self._lock:
            if uid in self._pods and uid not in self._reserved:
                return  # the watch already showed it bound
            self._reserved.add(uid)
            self._set(uid, (node, cpu_milli, memory_bytes))

    def unreserve(self, uid: str) -> None:
        """The bind failed: release what :meth:`reserve` counted (never a watched pod)."""
        with self._lock:
            if uid in self._reserved:
                self._reserved.discard(uid)
                self._set(uid, None)

    # ------------------------------------------------------------------ internals (locked)
    def _intern(self, value: Any) -> Any:
        return self._interned.setdefault(value, value)

    def _set(self, uid: str, record: tuple[str, int, int] | None) -> None:
        self._touched[uid] = self._epoch
        self._epoch += 1
        old = self._pods.pop(uid, None)
        if record is None:
            self._touched.pop(uid, None)
        else:
            node, cpu, memory = record
            self._pods[uid] = (self._names.intern(node), self._intern(cpu),
                               self._intern(memory))
            self._add(node, cpu, memory)
        if old is not None:
            self._add(old[0], -old[1], -old[2])

    def _add(self, node: str, cpu: int, memory: int) -> None:
        used_cpu, used_memory = self._used.get(node, (0, 0))
        used = (used_cpu + cpu, used_memory + memory)
        if used == (0, 0):
            self._used.pop(node, None)
        else:
            self._used[self._names.intern(node)] = used
        self._refresh(node)

    def _refresh(self, node: str) -> None:
        allocatable = self._allocatable.get(node)
        if allocatable is None:
            return  # pods of an unknown node count once it is known
        used_cpu, used_memory = self._used.get(node, (0, 0))
        name = self._names.intern(node)
        self.free_cpu[name] = allocatable[0] - used_cpu
        self.free_memory[name] = allocatable[1] - used_memory
        self._columns.set_free_cpu(name, allocatable[0] - used_cpu)

    def _note(self, uid: str, why: str) -> None:
        if uid not in self._noted and len(self._noted) >= MAX_NOTED:
            self._noted.pop(next(iter(self._noted)))
        self._noted[uid] = why
        logger.warning("pod %s: not counted on its node: %s", uid, why, extra={"uid": uid})


class NodeFactsView(Mapping[str, NodeFacts]):
    """``PolicyContext.node_facts`` over the live picture: a node's facts, read when asked."""

    def __init__(self, resources: NodeResources) -> None:
        self._resources = resources

    def __getitem__(self, node: str) -> NodeFacts:
        facts = self._resources.facts(node)
        if facts is None:
            raise KeyError(node)
        return facts

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._resources.free_cpu))

    def __len__(self) -> int:
        return len(self._resources.free_cpu)
