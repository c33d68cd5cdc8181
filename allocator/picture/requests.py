"""A pod's CPU and memory requests, and a node's allocatable, as kube-scheduler counts them
(pure).

:func:`pod_requests` is kube-scheduler's per-pod request (kubernetes v1.34
``staging/src/k8s.io/component-helpers/resource/helpers.go`` ``PodRequests``, called by the
scheduler's ``NodeInfo`` with ``UseStatusResources`` since InPlacePodVerticalScaling is on by
default): app containers summed, sidecars (init containers with ``restartPolicy: Always``)
with them, the largest init container (plus the sidecars started before it) if larger;
pod-level ``spec.resources.requests`` replace the containers' sum for CPU and memory; then
``spec.overhead``. While a resize is in flight the larger of spec and status counts.
:class:`allocator.picture.resources.NodeResources` keeps the sums per node.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final

from tessera.quantity import QuantityError, parse_quantity

#: The pods whose requests count on a node: bound, not terminated. kube-scheduler's own pod
#: informer drops terminated pods the same way (pkg/scheduler/scheduler.go,
#: ``NewInformerFactory``: ``status.phase!=Succeeded,status.phase!=Failed``). A pod leaving
#: this set (it terminates) reaches a watch with this selector as a DELETED event.
BOUND_ACTIVE_PODS: Final = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
TERMINAL_PHASES: Final = frozenset({"Succeeded", "Failed"})
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
