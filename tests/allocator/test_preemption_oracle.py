"""Card-aware preemption against an exhaustive oracle on small nodes (up to 4 cards, 8 pods).

Generated clusters (hypothesis, derandomized: the same examples on every run) of 1-3 nodes;
for each, every subset of every node's lower-priority pods is tried
(tests/preemption_oracle.py). The properties:

- a preemption is chosen exactly when the oracle finds one (and the pod fits nowhere as it is,
  and its policy is not Never);
- the victims make the pod fit, are all of strictly lower priority, none can be spared, and
  each holds a card the preemptor is placed on;
- without budgets, the chosen highest victim priority is the least any victim set on any node
  allows (kube-scheduler's second criterion, at its optimum);
- with budgets, the choice violates none exactly when some node has a victim set that avoids
  the pods its budgets protect (kube-scheduler's first criterion, at its optimum);
- the node chosen is the one kube-scheduler's successive filtering picks among the nodes' own
  selections;
- on 1-2 nodes of 2-4 cards (600 cases), the node and the victims are exactly those
  kube-scheduler's rules give with every node's victims found by enumeration
  (``oracle_choice``): not the fewest victims but the set its reprieve walk keeps, the
  greatest in the walk's order of all the sets that leave room (one case shows the two differ,
  as they do in kube-scheduler).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st
from preemption_oracle import (
    budgets_for,
    clusters,
    feasible_sets,
    fewest_victims,
    fits_without,
    lower,
    node_offers,
    oracle_choice,
    preemptors,
    rebuilt,
    reprieved_victims,
    violating_on,
)

from allocator.preemption import (
    POLICY_NEVER,
    Budget,
    GpuPod,
    NodeOffer,
    NodeVictims,
    NoPreemption,
    PreemptionPolicy,
    Preemptor,
    candidates_on,
    choose_preemption,
    select_victims,
)
from allocator.ranking.cards import Card, CardState, NodeState, apply_placement
from allocator.ranking.fit import fits
from tessera.vocabulary import Allocation, ContainerAllocation, ContainerRequest, PodRequest

ORACLE = settings(max_examples=200, deadline=None, derandomize=True)


@st.composite
def cases(draw: st.DrawFn, with_budgets: bool) -> tuple[Preemptor, list[NodeOffer],
                                                         list[Budget]]:
    nodes = draw(clusters())
    budgets = draw(budgets_for(nodes)) if with_budgets else []
    return draw(preemptors()), nodes, budgets


def _fits_somewhere_already(preemptor: Preemptor, nodes: Sequence[NodeOffer]) -> bool:
    return any(fits(preemptor.request, n.state) for n in nodes)


def _check_victims(preemptor: Preemptor, node: NodeOffer, chosen: NodeVictims) -> None:
    victims = chosen.victims
    assert victims, "a preemption without victims"
    assert all(v.priority < preemptor.priority for v in victims), victims
    assert fits_without(preemptor, node, victims)
    for v in victims:
        spared = [w for w in victims if w is not v]
        assert not fits_without(preemptor, node, spared), f"{v.uid} was not needed"
    cards = set(chosen.cards)
    for v in victims:
        assert cards & {i for c in v.containers for i in c.card_indices}, (v.uid, cards)
    # The placement is real: put on the node without the victims, it over-commits nothing.
    after = apply_placement(rebuilt(node, victims), chosen.containers, preemptor.uid)
    for card in after.cards:
        assert card.free_core >= 0 and card.free_memory_mib >= 0, card
        assert card.card.max_shares is None or len(card.holders) <= card.card.max_shares


@ORACLE
@given(cases(with_budgets=True))
def test_a_preemption_is_chosen_exactly_when_the_oracle_finds_one_and_its_victims_are_minimal(
        case: tuple[Preemptor, list[NodeOffer], list[Budget]]) -> None:
    preemptor, nodes, budgets = case
    result = choose_preemption(preemptor, nodes, budgets)
    possible = any(feasible_sets(preemptor, n) for n in nodes)
    if preemptor.policy is PreemptionPolicy.NEVER:
        assert isinstance(result, NoPreemption) and result.reason == POLICY_NEVER
        return
    if _fits_somewhere_already(preemptor, nodes):
        assert isinstance(result, NoPreemption), result
        return
    assert isinstance(result, NodeVictims) == possible, result
    if isinstance(result, NodeVictims):
        _check_victims(preemptor, _named(nodes, result.node), result)


@ORACLE
@given(cases(with_budgets=False))
def test_without_budgets_the_highest_victim_priority_is_the_least_any_node_allows(
        case: tuple[Preemptor, list[NodeOffer], list[Budget]]) -> None:
    preemptor, nodes, _ = case
    preemptor = Preemptor(preemptor.uid, preemptor.request, preemptor.priority)
    if _fits_somewhere_already(preemptor, nodes):
        return
    result = choose_preemption(preemptor, nodes)
    least = min((max(v.priority for v in s) for n in nodes for s in feasible_sets(preemptor, n)),
                default=None)
    if least is None:
        assert isinstance(result, NoPreemption)
        return
    assert isinstance(result, NodeVictims)
    assert result.highest_priority == least


@ORACLE
@given(cases(with_budgets=True))
def test_no_budget_is_violated_when_some_node_has_victims_that_spare_every_protected_pod(
        case: tuple[Preemptor, list[NodeOffer], list[Budget]]) -> None:
    preemptor, nodes, budgets = case
    preemptor = Preemptor(preemptor.uid, preemptor.request, preemptor.priority)
    if _fits_somewhere_already(preemptor, nodes):
        return
    result = choose_preemption(preemptor, nodes, budgets)
    if not isinstance(result, NodeVictims):
        return
    clean = any(not {v.uid for v in s} & violating_on(preemptor, n, budgets)
                for n in nodes for s in feasible_sets(preemptor, n))
    assert (result.pdb_violations == 0) == clean, result


def _successive_filter(found: Sequence[NodeVictims]) -> str:
    """kube-scheduler's pickOneNodeForPreemption written its own way: keep the best-scoring
    candidates of each score function in turn (kubernetes v1.34.4
    pkg/scheduler/framework/preemption/preemption.go:592-678)."""
    def earliest_top(c: NodeVictims) -> float:
        top = max(v.priority for v in c.victims)
        return min(v.start for v in c.victims if v.priority == top)

    scores: list[Callable[[NodeVictims], float]] = [
        lambda c: -c.pdb_violations,
        lambda c: -max(v.priority for v in c.victims),
        lambda c: -sum(v.priority + 2**31 for v in c.victims),
        lambda c: -len(c.victims),
        earliest_top,
    ]
    left = list(found)
    for score in scores:
        best = max(score(c) for c in left)
        left = [c for c in left if score(c) == best]
        if len(left) == 1:
            break
    return left[0].node


@ORACLE
@given(cases(with_budgets=True))
def test_the_node_chosen_is_the_one_kube_schedulers_order_picks(
        case: tuple[Preemptor, list[NodeOffer], list[Budget]]) -> None:
    preemptor, nodes, budgets = case
    preemptor = Preemptor(preemptor.uid, preemptor.request, preemptor.priority)
    if _fits_somewhere_already(preemptor, nodes):
        return
    found, _ = candidates_on(preemptor, nodes, budgets)
    result = choose_preemption(preemptor, nodes, budgets)
    if not found:
        assert isinstance(result, NoPreemption)
        return
    assert isinstance(result, NodeVictims)
    assert result.node == _successive_filter(found)
    for candidate in found:  # every node's own selection is sound too
        _check_victims(preemptor, _named(nodes, candidate.node), candidate)
        assert {v.uid for v in candidate.victims} <= {p.uid for p in lower(preemptor,
                                                       _named(nodes, candidate.node))}


def _named(nodes: Sequence[NodeOffer], name: str) -> NodeOffer:
    return next(n for n in nodes if n.name == name)


def _renamed(node: NodeOffer, name: str, foreign: int = 0) -> NodeOffer:
    """``node`` under another name, its pods under other UIDs (their allocations and the
    node state's holders too); ``foreign`` MiB more used outside Tessera on its first card
    (the same pods, cards that differ)."""
    new = {p.uid: f"{name}-{p.uid}" for p in node.pods}
    cards = tuple(replace(c, holders=tuple((new.get(u, u), n) for u, n in c.holders),
                          foreign_memory_mib=c.foreign_memory_mib + (foreign if i == 0 else 0))
                  for i, c in enumerate(node.state.cards))
    pods = tuple(replace(p, uid=new[p.uid], name=new[p.uid],
                         allocation=replace(p.allocation, node=name, pod_uid=new[p.uid]))
                 for p in node.pods)
    return NodeOffer(NodeState(name, cards), pods)


@ORACLE
@given(cases(with_budgets=False))
def test_nodes_alike_but_for_names_get_the_answer_each_would_get_alone_and_others_their_own(
        case: tuple[Preemptor, list[NodeOffer], list[Budget]]) -> None:
    preemptor, nodes, _ = case
    fleet = (nodes + [_renamed(n, f"copy{i}") for i, n in enumerate(nodes)]
             + [_renamed(n, f"busier{i}", foreign=6000) for i, n in enumerate(nodes)])
    found, why = candidates_on(preemptor, fleet)
    alone = [select_victims(preemptor, n) for n in fleet]
    assert {c.node: c for c in found} == {n.name: r for n, r in zip(fleet, alone, strict=True)
                                          if isinstance(r, NodeVictims)}
    assert why == {n.name: r for n, r in zip(fleet, alone, strict=True) if isinstance(r, str)}


# ---------------------------------------------- the exact choice, against every subset

#: More cases than above: each is cheap (1-2 nodes), and the exact answer is asked.
SEEDED = settings(max_examples=600, deadline=None, derandomize=True)


@st.composite
def small_cases(draw: st.DrawFn, with_budgets: bool) -> tuple[Preemptor, list[NodeOffer],
                                                               list[Budget]]:
    """1-2 nodes of 2-4 cards, 4-8 pods each of random shares and priorities 0-4."""
    nodes = [draw(node_offers(f"n{i}", min_cards=2)) for i in range(draw(st.integers(1, 2)))]
    budgets = draw(budgets_for(nodes)) if with_budgets else []
    return draw(preemptors()), nodes, budgets


@SEEDED
@given(small_cases(with_budgets=True))
def test_the_node_and_victims_are_exactly_what_kube_schedulers_rules_give_over_every_subset(
        case: tuple[Preemptor, list[NodeOffer], list[Budget]]) -> None:
    """Each node's victims by enumeration (the set its reprieve walk keeps, budget-violating
    pods put back first), the node by its five criteria: the core's answer is that one, the
    victims most important first, and none of them can be spared."""
    preemptor, nodes, budgets = case
    result = choose_preemption(preemptor, nodes, budgets)
    expected = oracle_choice(preemptor, nodes, budgets)
    if expected is None:
        assert isinstance(result, NoPreemption), result
        return
    node, victims = expected
    assert isinstance(result, NodeVictims), (result, node, victims)
    assert result.node == node
    assert {v.uid for v in result.victims} == {v.uid for v in victims}
    assert [(-v.priority, v.start) for v in result.victims] == sorted(
        (-v.priority, v.start) for v in victims)
    _check_victims(preemptor, _named(nodes, node), result)


@SEEDED
@given(small_cases(with_budgets=False))
def test_one_node_alone_gets_the_victims_its_walk_keeps_and_never_more_than_every_lower_pod(
        case: tuple[Preemptor, list[NodeOffer], list[Budget]]) -> None:
    preemptor, nodes, _ = case
    preemptor = Preemptor(preemptor.uid, preemptor.request, preemptor.priority)
    for node in nodes:
        alone = select_victims(preemptor, node)
        found = None if fits(preemptor.request, node.state) else reprieved_victims(preemptor,
                                                                                  node)
        if found is None:
            assert isinstance(alone, str), alone
            continue
        assert isinstance(alone, NodeVictims)
        assert {v.uid for v in alone.victims} == {v.uid for v in found[0]}
        fewest = fewest_victims(preemptor, node)
        assert fewest is not None and fewest <= len(alone.victims) <= len(lower(preemptor, node))


def test_kube_schedulers_rule_keeps_the_older_pod_even_when_fewer_younger_victims_would_do(
) -> None:
    """Not the fewest victims: the walk puts the most important pods back first, so one old
    pod stays and two younger ones go (kube-scheduler's SelectVictimsOnNode does the same)."""
    card = Card(0, "T4", 16384)
    node = NodeState("n0", (CardState(card),))
    pods = []
    for uid, core, start in (("old", 60, 0.0), ("young1", 20, 5.0), ("young2", 20, 6.0)):
        containers = (ContainerAllocation("c", (0,), core_percent=core, memory_mib=1000),)
        node = apply_placement(node, containers, uid)
        pods.append(GpuPod(uid, "ns", uid, Allocation("n0", containers, pod_uid=uid), 1, start))
    preemptor = Preemptor("p", PodRequest((ContainerRequest("c", core_percent=40,
                                                            memory_mib=1000),)), 5)
    offer = NodeOffer(node, tuple(pods))
    result = choose_preemption(preemptor, [offer])
    assert isinstance(result, NodeVictims)
    assert [v.uid for v in result.victims] == ["young1", "young2"]
    assert fewest_victims(preemptor, offer) == 1
    assert oracle_choice(preemptor, [offer]) == ("n0", tuple(pods[1:]))
