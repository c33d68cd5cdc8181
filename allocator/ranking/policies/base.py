"""The placement policy contract (pure).

A policy scores one candidate: the node state **before** and **after** placing (part of) a
pod, with cluster-level context. Higher is better. The same score picks the node (prioritize)
and the cards inside a node (greedy, one container step at a time, see
:func:`allocator.ranking.fit.place`), so most policies are one function; a policy whose
cards follow another rule overrides :meth:`Policy.card_score`.

:class:`Policy` declares every hook the allocator may call, each with its default; a policy
overrides only what it offers. Adding one = one file with a subclass, and one line in
:data:`allocator.ranking.policies.REGISTRY`.

Policies keep no caches of their own: what they derive from the workload mix is kept by the
:class:`Workload` the caller builds (:meth:`Workload.derived`), and answers shared between
nodes are the allocator's (:mod:`allocator.ranking.content_memo`).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import ClassVar, TypeVar, cast

import numpy as np
import numpy.typing as npt

from allocator.ranking.cards import NodeState
from allocator.ranking.fit import Chooser
from tessera.vocabulary import PodRequest

#: Extender scores are integers 0..10 (MaxExtenderPriority in
#: kubernetes staging/src/k8s.io/kube-scheduler/extender/v1/types.go).
MAX_SCORE = 10

#: A number per node name (a rank, or a bias added to a score).
NodeRank = Callable[[str], float]

_T = TypeVar("_T")


@dataclass(frozen=True, eq=False)
class Workload:
    """The workload mix: typical requests and their weight (e.g. the popularity of each request
    shape among recent pods), and aligned with them the milli-CPU each asks for (empty:
    unknown).

    The caller builds one per picture of the workload and so owns what policies derive from
    it (:meth:`derived`): a digest of the mix and its memos live as long as the workload.
    """

    typical: tuple[tuple[PodRequest, float], ...] = ()
    cpu_milli: tuple[int, ...] = ()
    _derived: dict[object, object] = field(default_factory=dict, init=False, repr=False)

    def derived(self, build: Callable[[Workload], _T]) -> _T:
        """``build(self)``, computed once per workload (keyed by ``build``)."""
        found = self._derived.get(build)
        if found is None:
            found = self._derived.setdefault(build, build(self))
        return cast(_T, found)


#: No picture of the workload (no GPU pod seen yet): workload-aware policies score 0.
NO_WORKLOAD: Workload = Workload()


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """What a policy may know of a node besides its cards: kube-scheduler's part of it
    (allocatable minus the requests of the pods bound to it, :mod:`allocator.picture.resources`)."""

    #: Free milli-CPU before the placement.
    cpu_free_milli: int
    #: Free memory in bytes before the placement (None: unknown).
    memory_free_bytes: int | None = None


@dataclass(frozen=True)
class PolicyContext:
    """What a policy may know besides the node: the pod, its identity, cluster-level facts."""

    request: PodRequest
    #: Stable identity of the pod being placed ("namespace/name/uid"): seeds randomness.
    pod_key: str = ""
    #: Cluster-wide seed for reproducible randomness.
    seed: int = 0
    workload: Workload = NO_WORKLOAD
    #: Facts about nodes beyond their cards, by node name (a node missing: unknown). Empty
    #: when the caller has none (node tracking off). A score reads them only as
    #: :meth:`Policy.cpu_thresholds` declares, so that alike nodes still share answers.
    node_facts: Mapping[str, NodeFacts] = field(default_factory=dict)
    #: Milli-CPU the pod asks for (read together with ``node_facts``).
    pod_cpu_milli: int = 0


class Policy(ABC):
    """One placement policy: every hook the allocator calls, declared once with its default.

    Implementations are stateless and thread-safe.
    """

    #: Registry name, also the value of the pod's policy annotation.
    name: ClassVar[str]
    #: True when ``score`` depends on ``ctx.pod_key`` (e.g. random); such scores are never
    #: shared between nodes or pods. False lets the allocator share a score between nodes of
    #: equal content and keep it per request shape until the node changes.
    per_pod: ClassVar[bool] = False
    #: Every value of :meth:`name_bias` lies in ``[0, name_bias_bound)``: the best nodes are
    #: then among those whose shared score is within the bound of the highest, and only
    #: their biases need reading.
    name_bias_bound: ClassVar[float] = 0.0

    @abstractmethod
    def score(self, before: NodeState, after: NodeState, ctx: PolicyContext) -> float:
        """Higher is better. ``after`` is ``before`` with the candidate placement applied."""

    def card_score(self, before: NodeState, after: NodeState, ctx: PolicyContext) -> float:
        """Score of one step inside a node (one container's card taken, ``after`` is
        ``before`` with it): higher is better. For a policy that ranks nodes and cards by
        different rules (another scheduler's separate node and card policies).

        Default: :meth:`score`, one function for both."""
        return self.score(before, after, ctx)

    def node_ranker(self, ctx: PolicyContext) -> NodeRank | None:
        """Rank the nodes that fit by name alone, for this pod, instead of placing the pod on
        each of them in prioritize (cards are still chosen by :meth:`score` at bind).

        Default None: prioritize places the pod and scores the placement."""
        return None

    def name_bias(self) -> NodeRank | None:
        """The part of every score that depends on the node's name alone, in
        ``[0, name_bias_bound)``; the rest must depend on the node's content alone, so that
        it can be shared between alike nodes.

        Default None: no such part."""
        return None

    def cpu_thresholds(self, typical_cpu: Sequence[int], max_cpu: int) -> tuple[int, ...]:
        """The free-CPU values (milli-CPU) the score can tell apart, given the workload's
        typical CPU requests and the largest allocatable CPU of a node: the score (and
        :meth:`score_cpu_only`) depends on a node's free CPU before and after the placement
        only through ``free >= threshold`` for these, and on no other node fact. Callers
        share answers between nodes of equal content and equal position among them.

        Default (): the score does not read node facts at all."""
        return ()

    def score_cpu_only(self, node: NodeState, cpu_before: int, cpu_after: int,
                       workload: Workload) -> float | None:
        """Score of a pod that asks for no GPU and takes CPU on ``node`` (free milli-CPU
        ``cpu_before`` -> ``cpu_after``); higher is better. Served by the extender's
        ``prioritize-cpu-only`` verb, and by the benchmark.

        Default None: the policy cannot score such pods (every node is left equal)."""
        return None


def chooser(policy: Policy, ctx: PolicyContext) -> Chooser:
    """The card chooser :func:`allocator.ranking.fit.place` takes, from a policy and its context."""

    # Most policies keep the default card_score: call their score directly (one frame less
    # per card tried, in the placement's inner loop).
    step = policy.score if type(policy).card_score is Policy.card_score else policy.card_score

    def choose(before: NodeState, after: NodeState) -> float:
        return step(before, after, ctx)

    return choose


def scaled(raw: Sequence[float | None], *, best_alone: bool = True) -> list[int]:
    """Raw scores (None = not placeable) -> the extender's integers 0..10, position by
    position (:func:`scaled_numbers`)."""
    numbers = np.fromiter((math.nan if v is None else v for v in raw), dtype=np.float64,
                          count=len(raw))
    return cast(list[int], scaled_numbers(numbers, best_alone=best_alone).tolist())


def scaled_numbers(raw: npt.NDArray[np.float64], *, best_alone: bool = True
                   ) -> npt.NDArray[np.int64]:
    """Raw scores (NaN = not placeable) -> the extender's integers 0..10, position by
    position: min-max scaled across the candidates, halves rounded up, NaN -> 0, all equal
    -> all 10. With ``best_alone`` (shipped) only the best node(s) keep 10; every other node
    gets 9 at most.

    kube-scheduler adds these, times the extender's weight and times 10, to its own plugins'
    0..100 scores (LeastAllocated + BalancedAllocation differ by up to ~100 between nodes).
    Min-max alone gives 10 to every node within 5% of the best, and the scheduler's plugins
    then spread the pod over them, undoing a first-fit order; best-alone keeps 10 for the best
    node(s) only (fgd-ff and fgd-cpu have a unique best: their fixed node order), so with the
    shipped weight (10) the policy's choice leads every other node by 100 points. When every
    node scores the same, every node gets 10 and the scheduler's plugins decide. Measured in
    the openb deployed-mode replay (docs/benchmarks.md).
    """
    placeable = ~np.isnan(raw)
    if not placeable.any():
        return np.zeros(len(raw), dtype=np.int64)
    low, high = float(np.fmin.reduce(raw)), float(np.fmax.reduce(raw))
    if high - low <= _EQUAL:
        return np.where(placeable, MAX_SCORE, 0).astype(np.int64)
    factor = MAX_SCORE / (high - low)
    with np.errstate(invalid="ignore"):  # NaN positions are replaced by 0 below
        out = np.where(placeable, np.floor((raw - low) * factor + 0.5), 0.0).astype(np.int64)
    if best_alone:
        out = np.where(raw >= best_floor(high), MAX_SCORE, np.minimum(out, MAX_SCORE - 1))
    return out


#: Raw scores closer than this are equal (float rounding between alike nodes).
_EQUAL = 1e-9


def best_floor(high: float) -> float:
    """The lowest raw score that :func:`scaled` still gives the top score when ``high`` is
    the highest: the best node(s), float rounding aside."""
    return high - _EQUAL


def _by_name(raw: Mapping[str, float], best_alone: bool) -> dict[str, int]:
    return dict(zip(raw, scaled(list(raw.values()), best_alone=best_alone), strict=True))


#: The ways raw scores can become extender scores, by name (the openb deployed-mode replay
#: compares them; ``best-alone`` is the one shipped: :func:`scaled`'s default).
SCALINGS: dict[str, Callable[[Mapping[str, float]], dict[str, int]]] = {
    "min-max": partial(_by_name, best_alone=False),
    "best-alone": partial(_by_name, best_alone=True),
}


def mean_square_utilisation(node: NodeState) -> float:
    """Mean over cards of utilisation squared: grows with usage and with its concentration."""
    if not node.cards:
        return 0.0
    return sum(c.utilisation * c.utilisation for c in node.cards) / len(node.cards)
