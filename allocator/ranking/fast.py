"""The fast ranker: the ranking port answered once per distinct node content, in arrays.

Fit depends on a node's cards and usage only, and a score on those (plus, for a policy that
reads node CPU, where the node's free CPU lies among the policy's thresholds, and a per-name
bias): so the thousands of alike nodes of a big cluster cost one
:func:`~allocator.ranking.fit.unfit_reason` and one placement per content id, kept per request
shape and per node slot (:mod:`allocator.ranking.content_memo`). Filter-best first ranks every
node it knows (:mod:`allocator.ranking.every_node`). The answers are
:class:`allocator.ranking.plain.PlainRanker`'s (tests/allocator/test_rankers.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from itertools import compress
from typing import cast

import numpy as np
import numpy.typing as npt

from allocator.errors import event_safe
from allocator.ranking.cards import NodeState
from allocator.ranking.columns import UNKNOWN_CONTENT, AskedNodes, Ints, NodeColumns, Numbers
from allocator.ranking.content_memo import (
    FitVerdict,
    NodeContents,
    RawScore,
    bucket_value,
    cpu_keys,
    decode_cpu_key,
    request_shape,
)
from allocator.ranking.every_node import TriesAfterMisses, asked_among
from allocator.ranking.fit import Unfit, place, unfit_reason
from allocator.ranking.plain import PlainRanker
from allocator.ranking.policies import (
    MAX_SCORE,
    NodeFacts,
    Policy,
    PolicyContext,
    Workload,
    best_floor,
    chooser,
    scaled,
    scaled_numbers,
)
from allocator.ranking.port import UNKNOWN_NODE, Fit, NameList, Nodes
from tessera.vocabulary import PodRequest

#: The policy's name bias of the nodes at some positions among a ranking's nodes, in order.
NameBias = Callable[[Ints], Numbers]


@dataclass(frozen=True, slots=True)
class Ranking:
    """Raw policy scores of some nodes, as prioritize derives them: shared per content (or
    :data:`CpuKey`) with each node's name bias added, or one per node. Both the extender's
    0..10 scores and filter's best nodes come from it."""

    #: Each node's score shared by content (NaN: the pod does not fit), or None when
    #: :attr:`one_by_one` holds the scores.
    shared: Numbers | None
    #: The policy's name bias of nodes, added to the shared score (None: no bias), and the
    #: bound of its values (:attr:`allocator.ranking.policies.Policy.name_bias_bound`).
    biases: NameBias | None = None
    bias_bound: float = 0.0
    #: Scores computed node by node (random's rank, a per-pod policy).
    one_by_one: list[RawScore] | None = None
    #: Where each scored node is among the names the ranking is read with (None: every
    #: name, in order).
    at: Ints | None = None

    def raw(self, names: Sequence[str]) -> list[RawScore]:
        """The raw score of each of ``names`` (the nodes this ranking was made for)."""
        if self.shared is None:
            return list(self.one_by_one or [])
        return [None if v != v else v for v in self._totals(self.shared).tolist()]  # NaN: None

    def scaled(self, names: Sequence[str]) -> list[int]:
        """The extender's scores 0..10 (:func:`allocator.ranking.policies.scaled`)."""
        if self.shared is None:
            return scaled(self.raw(names))
        return cast(list[int], scaled_numbers(self._totals(self.shared)).tolist())

    def _totals(self, shared: Numbers) -> Numbers:
        if self.biases is None:
            return shared
        return shared + self.biases(np.arange(len(shared)))

    def best(self, names: Sequence[str]) -> list[str]:
        """The names whose score :meth:`scaled` makes the top one, in order (none when no
        node fits). Selected by array operations, no Python code per node."""
        shared = self.shared
        if shared is None:
            return self._best_one_by_one(names)
        high = float(np.fmax.reduce(shared)) if len(shared) else math.nan
        if high != high:
            return []  # no node fits (NaN everywhere)
        # A node's score is its shared one plus a bias in [0, bound): only nodes whose
        # shared score is within the bound of the highest can be among the best.
        positions = np.flatnonzero(shared >= best_floor(high - self.bias_bound))
        if self.biases is not None:
            values = shared[positions] + self.biases(positions)
            positions = positions[values >= best_floor(float(values.max()))]
        if self.at is not None:
            positions = self.at[positions]
        return [names[i] for i in positions.tolist()]

    def _best_one_by_one(self, names: Sequence[str]) -> list[str]:
        if self.at is not None:
            names = [names[i] for i in self.at.tolist()]
        raw = self.raw(names)
        if None in raw:
            return [n for n, s in zip(names, self.scaled(names), strict=True)
                    if s == MAX_SCORE]
        values = cast(list[float], raw)
        if not values:
            return []
        floor = best_floor(max(values))
        return list(compress(names, map(floor.__le__, values)))


class FastRanker:
    """The ranking port over the picture's node columns and content ids: ``views`` gives
    each named node's state, ``read`` reads unknown names into the picture (None: never),
    ``max_cpu`` the largest allocatable CPU of a node, ``node_resources`` whether node CPU is
    tracked at all.

    A pod that tells cards apart by UUID, sharing mode or NUMA node (:func:`names_cards`) is
    answered node by node, by the plain reference: none of these is part of what makes two
    nodes alike (every card has its own UUID, so no two nodes would be; modes and NUMA nodes
    are rarely asked), and only such a pod tells cards apart by them."""

    def __init__(self, columns: NodeColumns, contents: NodeContents,
                 views: Callable[[Sequence[str]], list[NodeState | None]],
                 max_cpu: Callable[[], int], *, node_resources: bool,
                 read: Callable[[Sequence[str]], None] | None = None) -> None:
        self.columns, self.contents, self._views = columns, contents, views
        self._max_cpu, self._node_resources, self._read = max_cpu, node_resources, read
        #: When filter-best tries ranking every known node first (:meth:`best_known`).
        self.every_node_tries = TriesAfterMisses()
        self._node_by_node = PlainRanker(views, read or (lambda names: None))

    # ------------------------------------------------------------------ fit
    def fit(self, request: PodRequest, names: Sequence[str], *, explain_when_some_fit: bool,
            read_unknown: bool = True) -> Fit:
        if names_cards(request):
            return self._node_by_node.fit(request, names, read_unknown=read_unknown,
                                          explain_when_some_fit=explain_when_some_fit)
        asked = self._asked(names, read_unknown)
        fits = self._fits(request, asked)
        if fits.all():  # the common case
            return Fit(asked)
        if not explain_when_some_fit and fits.any():
            # No reasons: kube-scheduler reads them only when no node is left (filter). Nor
            # whether a node lacked room: read only then (the requeue) too.
            return Fit(asked.where(fits))
        contents = asked.contents.tolist()
        verdicts = self._fit_verdicts(request, contents)
        ok = NameList()
        failed: dict[str, str] = {}
        unresolvable: dict[str, str] = {}
        for name, content in zip(names, contents, strict=True):
            verdict = verdicts[content]
            if verdict is None:
                ok.append(name)
            elif verdict.resolvable:
                failed[name] = verdict.reason
            else:
                unresolvable[name] = verdict.reason
        short = any(verdict is not None and verdict is not UNKNOWN_NODE and verdict.resolvable
                    for verdict in verdicts.values())
        return Fit(ok, True, failed, unresolvable, short)

    def _asked(self, names: Sequence[str], read_unknown: bool) -> AskedNodes:
        """Every named node as the columns see it; nodes the picture does not know are read
        by name first (:mod:`allocator.picture.nodelookup`)."""
        asked = self.columns.asked(names)
        if (read_unknown and self._read is not None
                and (asked.contents == UNKNOWN_CONTENT).any()):
            self._read(asked.unknown())
            asked = self.columns.asked(names)
        return asked

    def _fits(self, request: PodRequest, nodes: AskedNodes) -> npt.NDArray[np.bool_]:
        """Whether the pod fits each node: one :func:`unfit_reason` per content id, kept per
        content id and per node slot."""
        contents = self.contents
        shape = request_shape(request)
        numbers = contents.numbers(
            contents.fit_slots, shape, nodes, nodes.contents,
            contents.fit_verdicts.answers(shape), self._verdict_of(request),
            _fits_as_number)
        fits: npt.NDArray[np.bool_] = numbers == 1.0
        return fits

    def _fit_verdicts(self, request: PodRequest, contents: Iterable[int]
                      ) -> dict[int, FitVerdict]:
        """The verdict of every distinct content among ``contents``."""
        memo = self.contents.fit_verdicts.answers(request_shape(request))
        return self.contents.answers(contents, memo, self._verdict_of(request))

    def _verdict_of(self, request: PodRequest) -> Callable[[int], FitVerdict]:
        representative = self.contents.representative

        def verdict(content: int) -> FitVerdict:
            state = representative(content)
            if state is None:  # unknown, or an id retired since it was read
                return UNKNOWN_NODE
            return _readable(unfit_reason(request, state))

        return verdict

    # ------------------------------------------------------------------ scores
    def best(self, request: PodRequest, policy: Policy, ctx: PolicyContext, nodes: Nodes
             ) -> list[str]:
        if names_cards(request):
            return self._node_by_node.best(request, policy, ctx, nodes)
        asked = cast(AskedNodes, nodes)
        return self._ranking(request, policy, ctx, asked).best(asked.names)

    def scores(self, request: PodRequest, policy: Policy, ctx: PolicyContext,
               names: Sequence[str]) -> list[int]:
        if names_cards(request):
            return self._node_by_node.scores(request, policy, ctx, names)
        return self._ranking(request, policy, ctx, self.columns.asked(names)).scaled(names)

    def best_known(self, request: PodRequest, policy: Policy, names: Sequence[str],
                   context: Callable[[], PolicyContext], avoid: Collection[str] = ()
                   ) -> list[str] | None:
        """The policy's best among every node we know, narrowed to the asked names; None when
        that does not give the answer.

        The same answer as ranking the asked nodes only, whenever one of the best known
        nodes was asked: the asked nodes we know are among every node, so the highest score
        among them is the highest of all, and their best are exactly the best of all that
        were asked. Only a score shared per content (or CPU key) qualifies, being a node's
        own whatever the other nodes are (a policy that scores node by node, or scales the
        scores among the nodes asked, does not). An asked name the picture does not know is
        not read first (:mod:`allocator.picture.nodelookup`) when a known node answers.

        Why: a name's lookup is the largest part of a filter at thousands of nodes
        (docs/benchmarks.md, issue 13), while the best are a few nodes, found in the asked
        list by comparing strings. Skipped when fewer than half the fitting nodes were asked,
        where ranking all would cost more than it saves, and for a while after such a miss
        (:class:`~allocator.ranking.every_node.TriesAfterMisses`)."""
        if policy.per_pod or names_cards(request) or not self.every_node_tries.should_try():
            return None  # a skipped call costs no policy context
        ctx = context()
        if policy.node_ranker(ctx) is not None:
            return None
        every = self.columns.every_node()
        fits = self._fits(request, every)
        if avoid:  # every node's position is its slot - 1
            positions = self.columns.asked(list(avoid)).slots - 1
            fits[positions[(positions >= 0) & (positions < len(fits))]] = False
        fitting_count = int(np.count_nonzero(fits))
        nodes: list[str] = []
        if fitting_count and 2 * len(names) >= fitting_count:
            fitting = every.where(fits)
            best = self._ranking(request, policy, ctx, fitting).best(fitting.names)
            nodes = asked_among(best, names)
        if not nodes:
            self.every_node_tries.miss()
            return None
        self.every_node_tries.hit()
        return nodes

    def _ranking(self, request: PodRequest, policy: Policy, ctx: PolicyContext,
                 nodes: AskedNodes) -> Ranking:
        """The policy's raw scores of the pod on each of ``nodes``."""
        rank = policy.node_ranker(ctx)
        if rank is not None:
            # The policy ranks feasible nodes by name, without placing the pod on each (random:
            # a seeded hash of pod and node); feasibility is filter's, shared by content.
            fits = self._fits(request, nodes).tolist()
            return Ranking(None, one_by_one=[
                rank(name) if fit else None
                for name, fit in zip(nodes.name_list(), fits, strict=True)], at=nodes.at)
        if policy.per_pod:
            # The score depends on the pod's identity: placed and scored node by node, never
            # shared.
            return Ranking(None, one_by_one=[
                None if state is None else _placed_score(request, policy, ctx, state)
                for state in self._views(nodes.name_list())], at=nodes.at)
        # Every other score is a function of the node's content (and, for a policy that reads
        # node CPU, of where the node's free CPU lies among the policy's thresholds), plus,
        # for a policy with a name bias (fgd-ff's fixed first-fit order), that bias on top:
        # one placement per distinct content, the bias added per node.
        bias = policy.name_bias()
        thresholds = self._cpu_thresholds(policy, ctx.workload)
        shape = (policy.name, request_shape(request), ctx.workload, thresholds)

        def raw_score(state: NodeState, before: int = 0, after: int = 0) -> RawScore:
            scored = ctx if not thresholds else _at_buckets(ctx, state.name, thresholds,
                                                            before, after)
            score = _placed_score(request, policy, scored, state)
            if score is None or bias is None:
                return score
            return score - bias(state.name)

        return self._fan_out(nodes, shape, thresholds, ctx.pod_cpu_milli, raw_score, policy)

    def scores_cpu_only(self, policy: Policy, workload: Workload, pod_cpu_milli: int,
                        names: Sequence[str]) -> list[int]:
        thresholds = self._cpu_thresholds(policy, workload)
        bias = policy.name_bias()
        shape = ("cpu-only", policy.name, workload, thresholds)

        def raw_score(state: NodeState, before: int = 0, after: int = 0) -> RawScore:
            score = policy.score_cpu_only(state, bucket_value(thresholds, before),
                                          bucket_value(thresholds, after), workload)
            if score is None or bias is None:
                return score
            return score - bias(state.name)

        return self._fan_out(self.columns.asked(names), shape, thresholds,
                             pod_cpu_milli, raw_score, policy).scaled(names)

    def _cpu_thresholds(self, policy: Policy, workload: Workload) -> tuple[int, ...]:
        if not self._node_resources:
            return ()
        return tuple(policy.cpu_thresholds(workload.cpu_milli, self._max_cpu()))

    def _fan_out(self, nodes: AskedNodes, shape: tuple[object, ...],
                 thresholds: tuple[int, ...], pod_cpu: int,
                 raw_score: Callable[[NodeState, int, int], RawScore],
                 policy: Policy) -> Ranking:
        """Raw scores shared per distinct content (with ``thresholds``: per content and CPU
        buckets before and after ``pod_cpu``), memoised per ``shape``, with the policy's name
        bias to add back per node."""
        node_contents = self.contents
        representative = node_contents.representative
        keys = (cpu_keys(nodes.contents, nodes.free_cpu, thresholds, pod_cpu) if thresholds
                else nodes.contents)

        def answer(key: int) -> RawScore:
            content, before, after = (decode_cpu_key(key, thresholds) if thresholds
                                      else (key, 0, 0))
            state = representative(content)
            return None if state is None else raw_score(state, before, after)

        shared = node_contents.numbers(node_contents.score_slots, shape, nodes, keys,
                                       node_contents.raw_scores.answers(shape), answer,
                                       _score_as_number)
        bias = policy.name_bias()
        if bias is None:
            return Ranking(shared, at=nodes.at)
        return Ranking(shared, partial(self.columns.biases, policy.name, bias, nodes),
                       policy.name_bias_bound, at=nodes.at)


def names_cards(request: PodRequest) -> bool:
    """Whether the pod tells cards apart by their UUID, sharing mode or NUMA node
    (:attr:`~tessera.vocabulary.PodRequest.tells_cards_apart`)."""
    return request.tells_cards_apart


def _readable(unfit: Unfit | None) -> FitVerdict:
    """A fit verdict as filter keeps it: None, or the :class:`Unfit` with an
    :func:`event_safe` reason (once per distinct node content, not per node)."""
    if unfit is None:
        return None
    return Unfit(event_safe(unfit.reason), unfit.resolvable)


def _at_buckets(ctx: PolicyContext, node: str, thresholds: Sequence[int], before: int,
                after: int) -> PolicyContext:
    """``ctx`` for a representative node: its free CPU a value inside bucket ``before``, the
    pod's CPU what brings it to a value inside bucket ``after``."""
    cpu_before = bucket_value(thresholds, before)
    cpu_after = bucket_value(thresholds, after)
    return replace(ctx, node_facts={node: NodeFacts(cpu_before)},
                   pod_cpu_milli=cpu_before - cpu_after)


def _fits_as_number(verdict: FitVerdict) -> float:
    return 1.0 if verdict is None else 0.0


def _score_as_number(score: RawScore) -> float:
    return math.nan if score is None else score


def _placed_score(request: PodRequest, policy: Policy, ctx: PolicyContext,
                  state: NodeState) -> RawScore:
    """The policy's score of the pod placed on ``state`` by the policy (None: no fit)."""
    placed = place(request, state, chooser(policy, ctx))
    return None if isinstance(placed, Unfit) else policy.score(state, placed.after, ctx)
