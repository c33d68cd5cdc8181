"""Which node a policy would choose for a pod: the extender's prioritize, replayed (pure).

The same steps as ``Prioritize.scores`` (allocator/verbs/prioritize.py) and the openb replay
(bench/openb/replay.py): a node's raw score is the policy's ``score(before, after)`` of the
placement :func:`allocator.ranking.fit.place` makes with that policy's card chooser; a policy with a
``node_ranker`` (random) ranks feasible nodes without placing; the node with the highest
score wins. kube-scheduler breaks ties at random; here the first node in the caller's order
wins, so a replay is reproducible.

A score that depends on the node's cards alone may be memoised by node content
(:func:`allocator.ranking.content_memo.content_key`), with the policy's ``name_bias`` (fgd-ff's
fixed first-fit order) taken out and added back per node, as the extender's own memo does.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache, partial

from allocator.ranking.cards import NodeState
from allocator.ranking.content_memo import ContentKey, content_key
from allocator.ranking.fit import Chooser, Placement, Unfit, fits, place
from allocator.ranking.policies import NodeRank, Policy, PolicyContext, chooser, get_policy
from tessera.vocabulary import PodRequest, encode_request

#: (request shape, node content id) -> raw score without the node's bias (None: no fit)
ScoreMemo = dict[tuple[str, int], float | None]


class ContentIds:
    """Small integers for node contents (:func:`allocator.ranking.content_memo.content_key`): equal
    ids,
    equal cards and usage. A replay keeps one id per node, renewed when the node changes, so
    that a memo lookup hashes an int instead of every card."""

    def __init__(self) -> None:
        self._ids: dict[ContentKey, int] = {}

    def of(self, state: NodeState) -> int:
        return self._ids.setdefault(content_key(state), len(self._ids))


def _bias(policy: Policy) -> NodeRank | None:
    # The extender adds the same part per node (allocator/verbs/prioritize.py, Prioritize.scores).
    if policy.name_bias() is None:
        return None
    return partial(_node_bias, policy.name)


@lru_cache(maxsize=1 << 16)
def _node_bias(policy: str, node: str) -> float:
    """A node's fixed bias (fgd-ff: a digest of its name), kept: a replay asks for it once
    per node and pod."""
    bias = get_policy(policy).name_bias()
    return 0.0 if bias is None else bias(node)


def raw_scores(request: PodRequest, policy: Policy, ctx: PolicyContext,
               states: Sequence[NodeState], memo: ScoreMemo | None = None,
               contents: Sequence[int] | None = None) -> list[float | None]:
    """The policy's raw score of every node (None where the pod does not fit).

    With a ``memo`` and the nodes' ``contents`` (:class:`ContentIds`), a score that depends
    on the cards alone is computed once per distinct content and request shape (but for a
    pod that tells cards apart by what a content leaves out: UUID, mode, NUMA node).
    """
    if request.tells_cards_apart:
        memo, contents = None, None
    rank = policy.node_ranker(ctx)
    if rank is not None:
        return _ranked_scores(request, rank, states, memo, contents)
    shareable = (memo is not None and contents is not None and not policy.per_pod
                 and not ctx.node_facts)
    if not shareable or memo is None or contents is None:
        choose = chooser(policy, ctx)
        return [_placed_score(request, policy, ctx, state, choose) for state in states]
    return _content_scores(request, policy, ctx, states, memo, contents)


def _ranked_scores(request: PodRequest, rank: NodeRank, states: Sequence[NodeState],
                   memo: ScoreMemo | None, contents: Sequence[int] | None
                   ) -> list[float | None]:
    """A ranking policy's scores: its rank of every node the pod fits on."""
    if memo is None or contents is None:
        return [rank(s.name) if fits(request, s) else None for s in states]
    # Whether the pod fits is the content's alone: once per distinct content.
    shape = "fits:" + encode_request(request)
    out: list[float | None] = []
    for state, cid in zip(states, contents, strict=True):
        fit_key = (shape, cid)
        if fit_key not in memo:
            memo[fit_key] = 0.0 if fits(request, state) else None
        out.append(None if memo[fit_key] is None else rank(state.name))
    return out


def _placed_score(request: PodRequest, policy: Policy, ctx: PolicyContext,
                  state: NodeState, choose: Chooser) -> float | None:
    placed = place(request, state, choose)
    return None if isinstance(placed, Unfit) else policy.score(state, placed.after, ctx)


def _content_scores(request: PodRequest, policy: Policy, ctx: PolicyContext,
                    states: Sequence[NodeState], memo: ScoreMemo,
                    contents: Sequence[int]) -> list[float | None]:
    """Scores that depend on a node's cards alone (plus its fixed bias): placed once per
    distinct content and request shape."""
    choose = chooser(policy, ctx)
    bias = _bias(policy)
    shape = encode_request(request)
    out: list[float | None] = []
    for state, cid in zip(states, contents, strict=True):
        key = (shape, cid)
        node_bias = bias(state.name) if bias else 0.0
        if key in memo:
            base = memo[key]
            out.append(None if base is None else base + node_bias)
            continue
        score = _placed_score(request, policy, ctx, state, choose)
        memo[key] = None if score is None else score - node_bias
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


def _best_by_content(request: PodRequest, policy: Policy, ctx: PolicyContext,
                     states: Sequence[NodeState], memo: ScoreMemo,
                     contents: Sequence[int]) -> int | None:
    """:func:`best` of :func:`raw_scores` when the score is the content's (plus a node's
    fixed bias): one placement per distinct content, then one pass over the nodes."""
    firsts: dict[int, int] = {}
    for pos, cid in enumerate(contents):
        firsts.setdefault(cid, pos)
    reps = [states[p] for p in firsts.values()]
    scores = raw_scores(request, policy, ctx, reps, memo, list(firsts))
    bias = _bias(policy)
    if bias is None:
        by_content = dict(zip(firsts, scores, strict=True))
        present = [v for v in by_content.values() if v is not None]
        if not present:
            return None
        top = max(present)
        # best() keeps the first node among equals (within 1e-12 of the first maximum met).
        leaders = {c for c, v in by_content.items() if v is not None and v >= top - 1e-12}
        return next(pos for pos, cid in enumerate(contents) if cid in leaders)
    base = {cid: None if v is None else v - bias(rep.name)
            for cid, rep, v in zip(firsts, reps, scores, strict=True)}
    return best([None if (b := base[cid]) is None else b + bias(state.name)
                 for state, cid in zip(states, contents, strict=True)])


def place_best(request: PodRequest, policy: Policy, ctx: PolicyContext,
               states: Sequence[NodeState], pod_uid: str, memo: ScoreMemo | None = None,
               contents: Sequence[int] | None = None) -> Placement | None:
    """Where the policy puts the pod among ``states``: node and cards (None: nowhere)."""
    if (memo is not None and contents is not None and not policy.per_pod
            and not ctx.node_facts and policy.node_ranker(ctx) is None
            and not request.tells_cards_apart):
        chosen = _best_by_content(request, policy, ctx, states, memo, contents)
    else:
        chosen = best(raw_scores(request, policy, ctx, states, memo, contents))
    if chosen is None:
        return None
    placed = place(request, states[chosen], chooser(policy, ctx), pod_uid=pod_uid)
    # raw_scores found it placeable on this node; place() on the same state agrees.
    assert not isinstance(placed, Unfit), "placement disagrees with its own fit check"
    return placed
