"""An exhaustive oracle for card-aware preemption on small nodes, and generators of such nodes.

The oracle tries every subset of a node's lower-priority GPU pods (up to 8 pods: 256 subsets)
and rebuilds the node from its empty cards each time (never through
:mod:`allocator.preemption.release`), so it checks the core's own card bookkeeping too.

The generators place pods one by one with :func:`allocator.ranking.fit.place` on empty cards,
so every allocation is one the allocator could have made; cards may carry memory used by
processes Tessera did not place and HAMi's share cap.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from itertools import combinations

from hypothesis import strategies as st

from allocator.preemption import Budget, GpuPod, NodeOffer, PreemptionPolicy, Preemptor
from allocator.preemption.budgets import split_by_budget
from allocator.preemption.victims import potential_victims
from allocator.ranking.cards import Card, CardState, NodeState, apply_placement
from allocator.ranking.fit import Placement, fits, place
from allocator.ranking.search import eligible
from tessera.vocabulary import Allocation, ContainerRequest, PodRequest

MODELS = ("A100", "T4")


def rebuilt(node: NodeOffer, gone: Sequence[GpuPod]) -> NodeState:
    """The node from its bare cards (foreign memory kept) with every pod but ``gone``."""
    bare = NodeState(node.name, tuple(
        CardState(c.card, foreign_memory_mib=c.foreign_memory_mib, busy_percent=c.busy_percent)
        for c in node.state.cards))
    left = {p.uid for p in gone}
    for pod in node.pods:
        if pod.uid not in left:
            bare = apply_placement(bare, pod.containers, pod.uid)
    return bare


def lower(preemptor: Preemptor, node: NodeOffer) -> list[GpuPod]:
    return [p for p in node.pods if p.priority < preemptor.priority]


def feasible_sets(preemptor: Preemptor, node: NodeOffer) -> list[tuple[GpuPod, ...]]:
    """Every non-empty set of lower-priority pods whose removal makes the preemptor fit."""
    pods = lower(preemptor, node)
    return [combo for size in range(1, len(pods) + 1) for combo in combinations(pods, size)
            if fits(preemptor.request, rebuilt(node, combo))]


def fits_without(preemptor: Preemptor, node: NodeOffer, gone: Sequence[GpuPod]) -> bool:
    return fits(preemptor.request, rebuilt(node, gone))


def violating_on(preemptor: Preemptor, node: NodeOffer, budgets: Sequence[Budget]
                 ) -> set[str]:
    """The UIDs kube-scheduler's walk marks budget-violating on this node."""
    violating, _ = split_by_budget(potential_victims(preemptor, node), budgets)
    return {p.uid for p in violating}


# ----------------------------------------------------------------------------- generators


@st.composite
def pod_requests(draw: st.DrawFn, preemptor: bool = False) -> PodRequest:
    count = draw(st.sampled_from((1, 1, 1, 2)))
    items = []
    # The preemptor asks big (whole cards half the time), the others small: nodes fill up
    # and preemption has something to choose.
    whole_odds, cores, mems = ((2, (0, 30, 50, 70), (0, 6000, 12000)) if preemptor
                               else (5, (0, 10, 20, 30, 50), (0, 1000, 2000, 6000)))
    for i in range(count):
        if draw(st.integers(0, whole_odds - 1)) == 0:
            items.append(ContainerRequest(f"c{i}", cards=draw(st.integers(1, 2))))
            continue
        core = draw(st.sampled_from(cores))
        mem = draw(st.sampled_from(mems))
        items.append(ContainerRequest(f"c{i}", core_percent=core or (0 if mem else 20),
                                      memory_mib=mem))
    models = tuple(draw(st.lists(st.sampled_from(MODELS), max_size=1))) if preemptor else ()
    return PodRequest(tuple(items), models=models)


def _spread(before: NodeState, after: NodeState) -> float:
    return -max(c.utilisation for c in after.cards)


def _first(before: NodeState, after: NodeState) -> float:
    return 0.0


@st.composite
def node_offers(draw: st.DrawFn, name: str, max_cards: int = 4, max_pods: int = 8,
                min_cards: int = 1) -> NodeOffer:
    cards = []
    for i in range(draw(st.integers(min_cards, max_cards))):
        card = Card(i, draw(st.sampled_from(MODELS)), draw(st.sampled_from((8192, 16384))),
                    max_shares=draw(st.sampled_from((None, None, None, 2, 3))))
        cards.append(CardState(card, foreign_memory_mib=draw(st.sampled_from((0, 0, 0, 2048)))))
    state = NodeState(name, tuple(cards))
    chooser = draw(st.sampled_from((_spread, _first)))
    pods: list[GpuPod] = []
    for k in range(draw(st.integers(max_pods // 2, max_pods))):
        uid = f"{name}-p{k}"
        placed = place(draw(pod_requests()), state, chooser, pod_uid=uid)
        if not isinstance(placed, Placement):
            continue
        state = placed.after
        pods.append(GpuPod(uid, "ns", uid, Allocation(name, placed.containers, pod_uid=uid),
                           priority=draw(st.integers(0, 4)),
                           started_at=draw(st.sampled_from((None, 0.0, 1.0, 2.0, 3.0)))))
    return NodeOffer(state, tuple(pods))


@st.composite
def preemptors(draw: st.DrawFn) -> Preemptor:
    return Preemptor("preemptor", draw(pod_requests(preemptor=True)),
                     priority=draw(st.integers(2, 5)),
                     policy=draw(st.sampled_from((PreemptionPolicy.PREEMPT_LOWER_PRIORITY,) * 9
                                                 + (PreemptionPolicy.NEVER,))))


@st.composite
def clusters(draw: st.DrawFn, max_nodes: int = 3) -> list[NodeOffer]:
    return [draw(node_offers(f"n{i}")) for i in range(draw(st.integers(1, max_nodes)))]


@st.composite
def budgets_for(draw: st.DrawFn, nodes: Sequence[NodeOffer]) -> list[Budget]:
    uids = sorted(p.uid for n in nodes for p in n.pods)
    if not uids:
        return []
    # Mostly exhausted budgets over several pods: the walk then has violating pods to spare.
    return [Budget(f"ns/pdb{i}", draw(st.sampled_from((0, 0, 1, 2))),
                   frozenset(draw(st.lists(st.sampled_from(uids), min_size=1,
                                           max_size=len(uids)))))
            for i in range(draw(st.integers(0, 2)))]


def never_preempts(preemptor: Preemptor) -> Preemptor:
    return replace(preemptor, policy=PreemptionPolicy.NEVER)


# ------------------------------------------------- kube-scheduler's choice, by enumeration


def walk_order(preemptor: Preemptor, node: NodeOffer, budgets: Sequence[Budget]
               ) -> tuple[list[GpuPod], set[str]]:
    """The pods kube-scheduler's reprieve walk may put back, in its order (budget-violating
    ones first, each group most important first, ties in the node's order), and the UIDs of
    the violating ones; worked out here without the core's helpers."""
    usable = {c.card.index for c in node.state.cards if eligible(preemptor.request, c.card)}
    pods = sorted((p for p in node.pods if p.priority < preemptor.priority
                   and usable & {i for c in p.containers for i in c.card_indices}),
                  key=lambda p: (-p.priority, p.start))
    allowed = {b.name: b.disruptions_allowed for b in budgets}
    violating: set[str] = set()
    for pod in pods:
        for budget in budgets:
            if pod.uid in budget.pods:
                allowed[budget.name] -= 1
                if allowed[budget.name] < 0:
                    violating.add(pod.uid)
    return ([p for p in pods if p.uid in violating]
            + [p for p in pods if p.uid not in violating]), violating


def reprieved_victims(preemptor: Preemptor, node: NodeOffer, budgets: Sequence[Budget] = ()
                      ) -> tuple[tuple[GpuPod, ...], int] | None:
    """kube-scheduler's victims on one node found by trying every subset: of all the sets of
    pods that may stay while the preemptor fits, the one its walk keeps is the greatest in
    the walk's order read as a binary number (the first pod kept whenever any such set keeps
    it, then the second, ...). None when no set makes room. With the number of the victims
    a budget forbids evicting."""
    order, violating = walk_order(preemptor, node, budgets)
    best: tuple[int, ...] | None = None
    for mask in range(1 << len(order)):
        kept = tuple(1 if mask >> (len(order) - 1 - i) & 1 else 0 for i in range(len(order)))
        gone = [p for p, k in zip(order, kept, strict=True) if not k]
        if (best is None or kept > best) and fits_without(preemptor, node, gone):
            best = kept
    if best is None:
        return None
    victims = tuple(p for p, k in zip(order, best, strict=True) if not k)
    return victims, sum(1 for v in victims if v.uid in violating)


def oracle_key(victims: Sequence[GpuPod], violations: int) -> tuple[int, int, int, int, float]:
    """kube-scheduler's five criteria of pickOneNodeForPreemption, smaller better (kubernetes
    v1.34.4 pkg/scheduler/framework/preemption/preemption.go:592-678)."""
    top = max(v.priority for v in victims)
    return (violations, top, sum(v.priority + 2**31 for v in victims), len(victims),
            -min(v.start for v in victims if v.priority == top))


def oracle_choice(preemptor: Preemptor, nodes: Sequence[NodeOffer],
                  budgets: Sequence[Budget] = ()) -> tuple[str, tuple[GpuPod, ...]] | None:
    """The node and victims kube-scheduler's rules give, every node's victims found by
    enumeration, the first node among equals; None when no preemption is due (the pod fits
    somewhere as it is, may not preempt, or no node has room to make)."""
    equals = oracle_choices(preemptor, nodes, budgets)
    return equals[0] if equals else None


def oracle_choices(preemptor: Preemptor, nodes: Sequence[NodeOffer],
                   budgets: Sequence[Budget] = ()) -> list[tuple[str, tuple[GpuPod, ...]]]:
    """Every node (with its victims) equal best by kube-scheduler's five criteria, in the
    nodes' order: kube-scheduler takes the first of its candidates, whose order comes from a
    parallel dry run (``pickOneNodeForPreemption``), so any of them may be its choice."""
    if preemptor.policy is PreemptionPolicy.NEVER or any(
            fits(preemptor.request, n.state) for n in nodes):
        return []
    keyed = []
    for node in nodes:
        if (found := reprieved_victims(preemptor, node, budgets)) is None or not found[0]:
            continue
        keyed.append((oracle_key(*found), node.name, found[0]))
    best = min((key for key, _, _ in keyed), default=None)
    return [(name, victims) for key, name, victims in keyed if key == best]


def fewest_victims(preemptor: Preemptor, node: NodeOffer) -> int | None:
    """The size of the smallest set of lower-priority pods whose going makes room."""
    sets = feasible_sets(preemptor, node)
    return min((len(s) for s in sets), default=None)
