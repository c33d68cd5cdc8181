"""The reference ranker: every question answered node by node, as the words say it.

Fit is :func:`~allocator.ranking.fit.unfit_reason` on each node; a score is the policy's
:meth:`~allocator.ranking.policies.Policy.score` of the pod placed on the node by
:func:`~allocator.ranking.fit.place`; the extender's 0..10 are those raw scores min-max scaled
(:func:`~allocator.ranking.policies.scaled`). :class:`allocator.ranking.fast.FastRanker` gives
the same answers faster; this one is what it is checked against.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence

from allocator.errors import event_safe
from allocator.ranking.cards import NodeState
from allocator.ranking.fit import Unfit, place, unfit_reason
from allocator.ranking.policies import (
    MAX_SCORE,
    NodeFacts,
    Policy,
    PolicyContext,
    Workload,
    chooser,
    scaled,
)
from allocator.ranking.port import UNKNOWN_NODE, Fit, NameList, Nodes
from tessera.vocabulary import PodRequest

#: Free milli-CPU of a node whose CPU is not known (above any policy threshold).
UNKNOWN_FREE_CPU = 1 << 62


class PlainRanker:
    """``states`` gives each named node's cards and usage (None: unknown); ``read`` reads
    unknown names from the API into the picture; ``facts`` is each node's free CPU."""

    def __init__(self, states: Callable[[Sequence[str]], list[NodeState | None]],
                 read: Callable[[Sequence[str]], None] = lambda names: None,
                 facts: Mapping[str, NodeFacts] | None = None) -> None:
        self._states, self._read, self._facts = states, read, facts or {}

    def fit(self, request: PodRequest, names: Sequence[str], *, explain_when_some_fit: bool,
            read_unknown: bool = True) -> Fit:
        states = self._known_states(names, read_unknown)
        why = why_not(request, names, states)
        fitting = [n for n in names if why[n] is None]
        if len(fitting) == len(names) or (fitting and not explain_when_some_fit):
            return Fit(NameList(fitting))
        return explained(fitting, {n: u for n, u in why.items() if u is not None})

    def _known_states(self, names: Sequence[str], read_unknown: bool) -> list[NodeState | None]:
        """Each node's state, after reading the unknown ones from the API (when asked to)."""
        states = self._states(names)
        if read_unknown and None in states:
            self._read([n for n, s in zip(names, states, strict=True) if s is None])
            states = self._states(names)
        return states

    def raw_scores(self, request: PodRequest, policy: Policy, ctx: PolicyContext,
                   names: Sequence[str]) -> list[float | None]:
        """The policy's score of the pod on each node (None: it does not fit there)."""
        rank = policy.node_ranker(ctx)
        raw: list[float | None] = []
        for name, state in zip(names, self._states(names), strict=True):
            if state is None or unfit_reason(request, state) is not None:
                raw.append(None)
            elif rank is not None:
                raw.append(rank(name))
            else:
                placed = place(request, state, chooser(policy, ctx))
                raw.append(None if isinstance(placed, Unfit)
                           else policy.score(state, placed.after, ctx))
        return raw

    def scores(self, request: PodRequest, policy: Policy, ctx: PolicyContext,
               names: Sequence[str]) -> list[int]:
        return scaled(self.raw_scores(request, policy, ctx, names))

    def best(self, request: PodRequest, policy: Policy, ctx: PolicyContext, nodes: Nodes
             ) -> list[str]:
        names = nodes.name_list()
        top = zip(names, self.scores(request, policy, ctx, names), strict=True)
        return [n for n, score in top if score == MAX_SCORE]

    def best_known(self, request: PodRequest, policy: Policy, names: Sequence[str],
                   context: Callable[[], PolicyContext], avoid: Collection[str] = ()
                   ) -> list[str] | None:
        return None  # no shortcut: fit and best answer

    def scores_cpu_only(self, policy: Policy, workload: Workload, pod_cpu_milli: int,
                        names: Sequence[str]) -> list[int]:
        raw: list[float | None] = []
        for name, state in zip(names, self._states(names), strict=True):
            facts = self._facts.get(name)
            free = UNKNOWN_FREE_CPU if facts is None else facts.cpu_free_milli
            raw.append(None if state is None else
                       policy.score_cpu_only(state, free, free - pod_cpu_milli, workload))
        return scaled(raw)



def why_not(request: PodRequest, names: Sequence[str], states: Sequence[NodeState | None]
            ) -> dict[str, Unfit | None]:
    """Why the request does not fit on each node (None: it fits; an unknown node: unknown)."""
    return {n: UNKNOWN_NODE if s is None else unfit_reason(request, s)
            for n, s in zip(names, states, strict=True)}


def explained(fitting: Sequence[str], reasons: Mapping[str, Unfit]) -> Fit:
    """The answer that says why each other node does not fit: resolvable reasons (preemption
    may help) apart from the rest, and whether any is resolvable on a known node."""
    return Fit(NameList(fitting), True,
               {n: event_safe(u.reason) for n, u in reasons.items() if u.resolvable},
               {n: event_safe(u.reason) for n, u in reasons.items() if not u.resolvable},
               any(u.resolvable and u is not UNKNOWN_NODE for u in reasons.values()))
