"""``why POD``: every node's verdict on a GPU pod, in words (pure).

A Pending pod gets, per node, the allocator's own filter answer
(:func:`allocator.ranking.fit.unfit_reason`, the text kube-scheduler relays in its events), whether
evicting other pods could ever help (``Unfit.resolvable``, what the extender reports as
unresolvable), and for the nodes where it fits now, the policy's 0-10 score as prioritize
would give it (:func:`allocator.ranking.policies.scaled` over
:func:`kubectl_tessera.placing.raw_scores`).

A bound pod gets its cards from its allocation record, and the same ranking computed on
today's cards with the pod taken out: where the policy would put it if it arrived now. That is
an explanation, not a replay of its bind: the cluster may have changed since.

Scores use the context the extender gives policies (the pod's identity and the seed, no
workload mix), so they are the extender's.

Preemption (:mod:`kubectl_tessera.preempting`): a Pending pod that fits nowhere is told whom
the allocator would evict for it and why those, or why no preemption helps; a pod the
allocator preempted for is told where, for which cards, and whom. A Pending pod is judged
with the cards reserved for the preemptions in flight of equal or higher priority
(:mod:`kubectl_tessera.reserving`) out of its reach, as the allocator's filter judges it: a
node where only those cards would fit it is ``reserved``, and says for whom.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from allocator.preemption.reserved import blocked
from allocator.ranking.cards import NodeState
from allocator.ranking.fit import unfit_reason
from allocator.ranking.policies import PolicyContext, get_policy, scaled
from kubectl_tessera.picture import GpuNode, GpuPod, Picture, selector_excludes
from kubectl_tessera.placing import raw_scores
from kubectl_tessera.preempting import (
    PreemptionWord,
    deadline_passed,
    made_preemption,
    would_preempt,
)
from kubectl_tessera.preempting import render as render_preemption
from kubectl_tessera.reserving import Kept, Noted, in_flight, kept_from, words
from tessera.vocabulary import PodRequest


@dataclass(frozen=True)
class Verdict:
    node: str
    #: "fits", "no-room" (others' pods are in the way), "never" (no eviction helps),
    #: "reserved" (only cards reserved for a preemption in flight of equal or higher priority
    #: would fit it) or "excluded" (the scheduler does not consider the node for this pod).
    outcome: str
    #: The reason in words ("" when it fits).
    reason: str
    #: Prioritize's 0-10 score among the nodes that fit (None when it does not fit).
    score: int | None = None
    #: Idle cards and free core/memory, to read the reason against.
    idle_cards: int = 0
    free_core_percent: int = 0
    free_memory_mib: int = 0


@dataclass(frozen=True)
class CardShare:
    container: str
    cards: tuple[int, ...]
    #: "whole" or e.g. "25% core, 4096 MiB"
    share: str
    init: bool


@dataclass(frozen=True)
class Explanation:
    pod: str
    phase: str
    policy: str
    #: The pod's GPU request in words ("" when it cannot be read).
    request: str
    #: Why its request cannot be read ("" when it can).
    request_problem: str
    node: str
    cards: tuple[CardShare, ...]
    verdicts: tuple[Verdict, ...]
    scheduler_message: str
    summary: str
    #: A Pending pod that fits nowhere: whom the allocator would evict, or why nobody.
    preemption: PreemptionWord | None = None
    #: The preemption the allocator made for the pod (its annotation and Events).
    preemption_made: PreemptionWord | None = None


def describe_request(request: PodRequest) -> str:
    parts = []
    for c in request.containers:
        if c.cards:
            what = f"{c.cards} whole card{'s' if c.cards > 1 else ''}"
        else:
            bits = [f"{c.core_percent}% core"] if c.core_percent else []
            bits += [f"{c.memory_mib} MiB"] if c.memory_mib else []
            bits += [f"{c.memory_percent}% of a card's memory"] if c.memory_percent else []
            what = ", ".join(bits) + " of one card"
        parts.append(f"{'init ' if c.init else ''}{c.name}: {what}")
    if request.models:
        parts.append(f"models {' or '.join(request.models)}")
    if request.min_card_memory_mib:
        parts.append(f"cards of at least {request.min_card_memory_mib} MiB")
    if request.card_modes:  # HAMi's vgpu-mode
        parts.append(f"cards in mode {' or '.join(request.card_modes)}")
    if request.one_numa_node:  # HAMi's numa-bind
        parts.append("each container's cards on one NUMA node")
    return "; ".join(parts)


def _free(state: NodeState) -> tuple[int, int, int]:
    return (state.idle_cards, state.core_total - state.core_used,
            state.memory_total_mib - state.memory_used_mib
            - sum(c.foreign_memory_mib for c in state.cards))  # measured use of others


def verdicts(pod: GpuPod, request: PodRequest, nodes: Sequence[GpuNode],
             states: Sequence[NodeState], policy_name: str, seed: int = 0,
             ) -> tuple[Verdict, ...]:
    """One verdict per node, for ``request`` on these node states."""
    policy = get_policy(policy_name)
    ctx = PolicyContext(request, pod_key=f"{pod.namespace}/{pod.name}/{pod.uid}", seed=seed)
    open_states = [s for n, s in zip(nodes, states, strict=True) if not selector_excludes(pod, n)]
    scores = iter(scaled(raw_scores(request, policy, ctx, open_states)))
    out: list[Verdict] = []
    for node, state in zip(nodes, states, strict=True):
        free = _free(state)
        excluded = selector_excludes(pod, node)
        if excluded:
            out.append(Verdict(node.name, "excluded", excluded, None, *free))
            continue
        score = next(scores)
        unfit = unfit_reason(request, state)
        if unfit is None:
            out.append(Verdict(node.name, "fits", "", score, *free))
        else:
            out.append(Verdict(node.name, "no-room" if unfit.resolvable else "never",
                               unfit.reason, None, *free))
    return tuple(out)


def _shares(pod: GpuPod) -> tuple[CardShare, ...]:
    if pod.allocation is None:
        return ()
    out = []
    for c in pod.allocation.containers:
        if c.is_whole:
            share = "whole"
        else:
            bits = [f"{c.core_percent}% core"] if c.core_percent else []
            bits += [f"{c.memory_mib} MiB"] if c.memory_mib else []
            share = ", ".join(bits)
        out.append(CardShare(c.name, c.card_indices, share, c.init))
    return tuple(out)


def _summary(pod: GpuPod, found: Sequence[Verdict]) -> str:
    if pod.allocation is not None:
        return _bound_summary(pod, found)
    if not pod.pending:
        return f"pod is {pod.phase or 'not pending'} and holds no cards"
    return _pending_summary(found)


def _bound_summary(pod: GpuPod, found: Sequence[Verdict]) -> str:
    """A bound pod: whether today's cards would still put it where it is."""
    mine = next((v for v in found if v.node == pod.node), None)
    if mine is None:
        return (f"bound to {pod.node}, which is not among the nodes looked at "
                f"(outside -l, or without readable GPU cards)")
    if mine.outcome != "fits":
        return (f"bound to {pod.node}; arriving now it would not fit there: {mine.reason}")
    fitting = [v for v in found if v.outcome == "fits"]
    top = max(v.score or 0 for v in fitting)
    leaders = [v.node for v in fitting if v.score == top]
    if mine.score != top:
        return (f"bound to {pod.node} (score {mine.score}/10 today); today the policy would "
                f"prefer {', '.join(leaders)} ({top}/10): the cluster changed since its bind")
    others = len(leaders) - 1
    tie = f", tied with {others} other node{'s' if others != 1 else ''}" if others else ""
    return (f"bound to {pod.node}: the best node for its policy on today's cards "
            f"(score {mine.score}/10{tie})")


def _pending_summary(found: Sequence[Verdict]) -> str:
    """A pending pod: where it fits now, would fit later, or never."""
    fitting = [v.node for v in found if v.outcome == "fits"]
    if fitting:
        return (f"its GPU request fits now on {', '.join(fitting)}: kube-scheduler has not "
                f"retried yet, or another scheduler plugin refuses those nodes (see its message)")
    reserved = [v.node for v in found if v.outcome == "reserved"]
    if reserved:
        return (f"no node has room for it now; free cards on {', '.join(reserved)} would fit "
                f"it but are reserved for a preemption in flight of equal or higher priority "
                f"(until that pod binds or its deadline passes)")
    no_room = [v.node for v in found if v.outcome == "no-room"]
    if no_room:
        return (f"no node has room now; it would fit on {', '.join(no_room)} if other pods "
                f"released cards")
    if any(v.outcome == "never" for v in found):
        return "no node can ever hold it: no node has the cards it asks for"
    return "no GPU node is open to it"


def _would(picture: Picture, pod: GpuPod, found: Sequence[Verdict],
           states: Sequence[NodeState], pdbs: Sequence[Mapping[str, Any]],
           noted: Sequence[Noted] = (), kept: Mapping[str, Kept] | None = None,
           ) -> PreemptionWord | None:
    """Preemption's word on a Pending pod that fits on no node (None for any other):
    ``states`` as the pod finds them, ``kept`` the cards reserved against it there."""
    if (pod.request is None or not pod.pending or pod.allocation is not None
            or any(v.outcome == "fits" for v in found)):
        return None
    kept = kept or {}
    rooms = [(v.node, s) for v, s in zip(found, states, strict=True)
             if v.outcome == "no-room" or (v.outcome == "reserved" and _resolvable(
                 pod.request, blocked(s, kept[v.node].cards)))]
    return would_preempt(picture, pod, rooms, pdbs, noted)


def _resolvable(request: PodRequest, state: NodeState) -> bool:
    unfit = unfit_reason(request, state)
    return unfit is not None and unfit.resolvable


def _reserved(found: Sequence[Verdict], request: PodRequest, states: Sequence[NodeState],
              kept: Mapping[str, Kept], now: float | None) -> tuple[Verdict, ...]:
    """``found`` (judged with the cards ``kept`` from the pod) with each node where only
    those cards would fit it said ``reserved``, and for whom."""
    out = []
    for v, state in zip(found, states, strict=True):
        if (v.outcome in ("no-room", "never") and v.node in kept
                and unfit_reason(request, state) is None):
            v = replace(v, outcome="reserved", reason=words(kept[v.node], now))
        out.append(v)
    return tuple(out)


def explain(picture: Picture, pod: GpuPod, default_policy: str, seed: int = 0, *,
            pdbs: Sequence[Mapping[str, Any]] = (), events: Sequence[Mapping[str, Any]] = (),
            now: float | None = None) -> Explanation:
    """Why the pod is where it is (or nowhere). ``default_policy``: the allocator's;
    ``pdbs`` (policy/v1 budgets) and ``events`` (the pod's) for preemption's word; ``now``
    judges a preemption's deadline."""
    nodes = list(picture.nodes)
    policy = (pod.request.policy if pod.request and pod.request.policy else default_policy)
    get_policy(policy)  # an unknown name is the caller's error, reported as such
    found: tuple[Verdict, ...] = ()
    states: list[NodeState] = []
    noted = in_flight(picture, now) if pod.pending else ()
    kept = kept_from(pod, noted)
    if pod.request is not None:
        states = [n.state_without([pod.uid]) for n in nodes]
        found = verdicts(pod, pod.request, nodes, [
            blocked(s, kept[n.name].cards) if n.name in kept else s
            for n, s in zip(nodes, states, strict=True)], policy, seed)
        found = _reserved(found, pod.request, states, kept, now)
    made = made_preemption(pod, events, now)
    # The allocator makes no second preemption for a pod until the first one's deadline.
    would = (_would(picture, pod, found, states, pdbs, noted, kept)
             if made is None or deadline_passed(made, now) else None)
    if pod.request is None:
        summary = (f"its GPU request cannot be read: {pod.request_problem}"
                   if pod.request_problem else "it asks for no GPU")
        if pod.allocation is not None:
            summary = f"bound to {pod.node}; " + summary
    else:
        summary = _summary(pod, found)
    return Explanation(
        pod=pod.key, phase=pod.phase, policy=policy,
        request=describe_request(pod.request) if pod.request else "",
        request_problem=pod.request_problem, node=pod.node, cards=_shares(pod),
        verdicts=found, scheduler_message=pod.scheduler_message, summary=summary,
        preemption=would, preemption_made=made,
    )


def render(e: Explanation) -> str:
    lines = [f"pod {e.pod} ({e.phase or 'unknown phase'}), policy {e.policy}"]
    if e.request:
        lines.append(f"  asks for: {e.request}")
    if e.request_problem:
        lines.append(f"  request problem: {e.request_problem}")
    if e.cards:
        lines.append(f"  holds on {e.node}:")
        for c in e.cards:
            cards = ",".join(f"#{i}" for i in c.cards)
            lines.append(f"    {'init ' if c.init else ''}{c.container}: card {cards} ({c.share})")
    lines.append(f"  => {e.summary}")
    for word in (e.preemption_made, e.preemption):
        if word is not None:
            lines += render_preemption(word)
    if e.scheduler_message:
        lines.append(f"  kube-scheduler: {e.scheduler_message}")
    if e.verdicts:
        lines.append("")
        if e.cards:
            lines.append("  each node as it is without this pod, as if it arrived now:")
        lines.append(f"  {'node':<28}{'verdict':<10}{'score':>5}  {'idle':>4}  "
                     f"{'core free':>9}  {'memory free':>12}  reason")
        for v in e.verdicts:
            score = "-" if v.score is None else str(v.score)
            mark = "*" if v.node == e.node else " "
            lines.append(
                f" {mark}{v.node[:27]:<28}{v.outcome:<10}{score:>5}  {v.idle_cards:>4}  "
                f"{v.free_core_percent:>8}%  {v.free_memory_mib:>8} MiB  {v.reason}".rstrip())
    return "\n".join(lines) + "\n"
