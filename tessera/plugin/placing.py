"""Which node a policy would choose for a pod: the extender's prioritize, replayed (pure).

The same steps as ``Allocator.scores`` (allocator/core.py) and the openb replay
(bench/openb/replay.py): a node's raw score is the policy's ``score(before, after)`` of the
placement :func:`allocator.fit.place` makes with that policy's card chooser; a policy with a
``node_ranker`` (random) ranks feasible nodes without placing; the node with the highest
score wins. kube-scheduler breaks ties at random; here the first node in the caller's order
wins, so a replay is reproducible.

A score that depends on the node's cards alone may be memoised by node content
(:func:`allocator.state.content_key`), with a ``node_bias`` (fgd-ff's fixed first-fit order)
taken out and added back per node, as the extender's own memo does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from allocator.fit import NodeState, Placement, Unfit, fits, place
from allocator.policies import Policy, PolicyContext, chooser
from allocator.state import content_key
from tessera.vocabulary import PodRequest, encode_request

#: (request shape, node content) -> raw score without the node's bias (None: does not fit)
ScoreMemo = dict[tuple[str, Any], float | None]


def _bias(policy: Policy) -> Callable[[str], float] | None:
    # The extender reads these optional hooks the same way (allocator/core.py, scores()).
    bias: Callable[[str], float] | None = getattr(policy, "node_bias", None)
    return bias


def raw_scores(request: PodRequest, policy: Policy, ctx: PolicyContext,
               states: Sequence[NodeState], memo: ScoreMemo | None = None,
               ) -> list[float | None]:
    """The policy's raw score of every node (None where the pod does not fit)."""
    ranker: Callable[[PolicyContext], Callable[[str], float]] | None = getattr(
        policy, "node_ranker", None)
    if ranker is not None:
        rank = ranker(ctx)
        return [rank(s.name) if fits(request, s) else None for s in states]
    choose = chooser(policy, ctx)
    bias = _bias(policy)
    shareable = memo is not None and not policy.per_pod and not ctx.extra
    shape = encode_request(request) if shareable else ""
    out: list[float | None] = []
    for state in states:
        key = (shape, content_key(state))
        if shareable and memo is not None and key in memo:
            base = memo[key]
            out.append(None if base is None else base + (bias(state.name) if bias else 0.0))
            continue
        placed = place(request, state, choose)
        score = None if isinstance(placed, Unfit) else policy.score(state, placed.after, ctx)
        if shareable and memo is not None:
            memo[key] = None if score is None else score - (bias(state.name) if bias else 0.0)
        out.append(score)
    return out


def best(scores: Sequence[float | None]) -> int | None:
    """Index of the highest score, the first one among equals; None when nothing fits."""
    found: int | None = None
    for i, score in enumerate(scores):
        if score is None:
            continue
        current = scores[found] if found is not None else None
        if current is None or score > current + 1e-12:
            found = i
    return found


def place_best(request: PodRequest, policy: Policy, ctx: PolicyContext,
               states: Sequence[NodeState], pod_uid: str,
               memo: ScoreMemo | None = None) -> Placement | None:
    """Where the policy puts the pod among ``states``: node and cards (None: nowhere)."""
    chosen = best(raw_scores(request, policy, ctx, states, memo))
    if chosen is None:
        return None
    placed = place(request, states[chosen], chooser(policy, ctx), pod_uid=pod_uid)
    # raw_scores found it placeable on this node; place() on the same state agrees.
    assert not isinstance(placed, Unfit), "placement disagrees with its own fit check"
    return placed
