"""The placement policy interface (pure).

A policy scores one candidate: the node state **before** and **after** placing (part of) a
pod, with cluster-level context. Higher is better. The same score picks the node (prioritize)
and the cards inside a node (greedy, one container step at a time, see
:func:`allocator.fit.place`), so a policy is one function.

Adding a policy = one file defining a class with ``name``, ``per_pod`` and ``score``, and one
line in :data:`allocator.policies.REGISTRY`. A fragmentation-aware policy (FGD) reads the
workload mix from ``ctx.workload`` and compares the expected fragmentation of ``before`` and
``after``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from allocator.fit import Chooser, NodeState
from tessera.vocabulary import PodRequest

#: Extender scores are integers 0..10 (MaxExtenderPriority in
#: kubernetes staging/src/k8s.io/kube-scheduler/extender/v1/types.go).
MAX_SCORE = 10


@dataclass(frozen=True)
class PolicyContext:
    """What a policy may know besides the node: the pod, its identity, cluster-level facts."""

    request: PodRequest
    #: Stable identity of the pod being placed ("namespace/name/uid"): seeds randomness.
    pod_key: str = ""
    #: Cluster-wide seed for reproducible randomness.
    seed: int = 0
    #: The workload mix: (typical request, its weight) pairs, e.g. the popularity of each
    #: request shape among recent pods. Empty when the caller has no such picture.
    workload: tuple[tuple[PodRequest, float], ...] = ()
    #: Anything else a policy needs from its caller (the benchmark passes cluster totals).
    extra: Mapping[str, object] = field(default_factory=dict)


class Policy(Protocol):
    """One placement policy. Implementations are stateless and thread-safe."""

    #: Registry name, also the value of the pod's policy annotation.
    name: str
    #: True when ``score`` depends on ``ctx.pod_key`` (e.g. random); such scores are never
    #: memoised across pods. False lets the allocator cache a node's score per request
    #: shape until the node changes.
    per_pod: bool

    def score(self, before: NodeState, after: NodeState, ctx: PolicyContext) -> float:
        """Higher is better. ``after`` is ``before`` with the candidate placement applied."""
        ...


def chooser(policy: Policy, ctx: PolicyContext) -> Chooser:
    """The card chooser :func:`allocator.fit.place` takes, from a policy and its context."""

    def choose(before: NodeState, after: NodeState) -> float:
        return policy.score(before, after, ctx)

    return choose


def normalise(raw: Mapping[str, float]) -> dict[str, int]:
    """Raw scores -> integers 0..10, min-max scaled across the candidate nodes.

    Min-max keeps the policy decisive even when raw differences are tiny (binpack between two
    nearly empty nodes); when every node scores the same, every node gets 10, which leaves the
    scheduler's other plugins to decide.
    """
    if not raw:
        return {}
    low, high = min(raw.values()), max(raw.values())
    if high - low <= 1e-12:
        return dict.fromkeys(raw, MAX_SCORE)
    span = high - low
    return {name: round((value - low) / span * MAX_SCORE) for name, value in raw.items()}


def mean_square_utilisation(node: NodeState) -> float:
    """Mean over cards of utilisation squared: grows with usage and with its concentration."""
    if not node.cards:
        return 0.0
    return sum(c.utilisation * c.utilisation for c in node.cards) / len(node.cards)
