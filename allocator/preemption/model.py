"""What preemption decides over and what it answers: plain frozen values (pure).

Priorities are ``spec.priority`` (int32; the Priority admission plugin resolves a class to it).
Start times are ``status.startTime`` in Unix seconds; a pod without one (bound or reserved but
not started) counts as started *now*, later than any recorded time, as kube-scheduler reads it
(kubernetes v1.34.4 ``pkg/scheduler/util/utils.go:49-55``, ``GetPodStartTime``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from allocator.ranking.cards import NodeState
from tessera.vocabulary import Allocation, ContainerAllocation, PodRequest


class PreemptionPolicy(StrEnum):
    """``spec.preemptionPolicy`` (k8s.io/api core/v1 ``PreemptionPolicy``): the default lets
    the pod preempt pods of lower priority; ``Never`` makes it wait for room instead."""

    PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority"
    NEVER = "Never"


@dataclass(frozen=True, slots=True)
class Preemptor:
    """The pod that does not fit anywhere and may take room from pods of lower priority."""

    uid: str
    request: PodRequest
    priority: int = 0
    policy: PreemptionPolicy = PreemptionPolicy.PREEMPT_LOWER_PRIORITY


@dataclass(frozen=True, slots=True)
class GpuPod:
    """A GPU pod bound (or reserved) on a node, with the cards it holds there.

    ``allocation`` says which cards and how much of each; the node state's holders name the
    pod by ``uid`` (the allocation record's own ``pod_uid`` may be empty)."""

    uid: str
    namespace: str
    name: str
    allocation: Allocation
    priority: int = 0
    #: ``status.startTime`` (Unix seconds); None: not started, read as now.
    started_at: float | None = None

    @property
    def start(self) -> float:
        """The start time as kube-scheduler compares it: now (+inf) when not started."""
        return math.inf if self.started_at is None else self.started_at

    @property
    def containers(self) -> tuple[ContainerAllocation, ...]:
        return self.allocation.containers

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def importance(pod: GpuPod) -> tuple[int, float]:
    """Sort key, most important first: higher priority, then the older pod (kubernetes
    v1.34.4 ``pkg/scheduler/util/utils.go:86-93``, ``MoreImportantPod``). Equal keys keep
    their input order (Python's sort is stable; kube-scheduler's ``sort.Slice`` is not)."""
    return (-pod.priority, pod.start)


@dataclass(frozen=True, slots=True)
class Budget:
    """A PodDisruptionBudget as preemption needs it: how many more pods it lets go
    (``status.disruptionsAllowed``) and the UIDs of the pods its selector matches in its
    namespace, less those already in its ``status.disruptedPods`` (the API server counted
    them; kubernetes v1.34.4
    ``pkg/scheduler/framework/plugins/defaultpreemption/default_preemption.go:409-413``).
    A budget with an empty selector matches nothing there (line 405): give it no pods."""

    name: str
    disruptions_allowed: int
    pods: frozenset[str] = field(default_factory=frozenset)


@dataclass(frozen=True, slots=True)
class NodeOffer:
    """One node as the ranking sees it (cards, what is taken on them, holds included) and the
    GPU pods whose allocations are on it."""

    state: NodeState
    pods: tuple[GpuPod, ...] = ()

    @property
    def name(self) -> str:
        return self.state.name


@dataclass(frozen=True, slots=True)
class NodeVictims:
    """The victims chosen on one node (most important first, as kube-scheduler lists them),
    how many of them a budget forbids, and where the preemptor goes once they are gone."""

    node: str
    victims: tuple[GpuPod, ...]
    pdb_violations: int
    containers: tuple[ContainerAllocation, ...]

    @property
    def cards(self) -> tuple[int, ...]:
        """The card indices the preemptor will get."""
        return tuple(sorted({i for c in self.containers for i in c.card_indices}))

    @property
    def highest_priority(self) -> int:
        return self.victims[0].priority

    @property
    def priority_sum(self) -> int:
        """Sum of the victims' priorities, each raised by 2^31 so none is negative (kubernetes
        v1.34.4 ``pkg/scheduler/framework/preemption/preemption.go:613-624``)."""
        return sum(v.priority + (1 << 31) for v in self.victims)

    @property
    def earliest_start_of_highest(self) -> float:
        """The earliest start among the victims of the highest priority (kubernetes v1.34.4
        ``pkg/scheduler/util/utils.go:57-81``, ``GetEarliestPodStartTime``)."""
        top = self.highest_priority
        return min(v.start for v in self.victims if v.priority == top)


#: A chosen preemption is the chosen node's victims.
Preemption = NodeVictims


@dataclass(frozen=True, slots=True)
class NoPreemption:
    """No preemption helps the pod: why, in words fit for an Event, and why not on each node
    that was looked at (a node left out was not looked at)."""

    reason: str
    nodes: Mapping[str, str] = field(default_factory=dict)
