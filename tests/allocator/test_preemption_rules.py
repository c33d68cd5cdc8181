"""Card-aware preemption, case by case: the rules of issue 47 and kube-scheduler's order."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from builders import request, share, whole

import allocator.preemption.victims as victims_module
from allocator.preemption import (
    FITS_ALREADY,
    NO_LOWER_PRIORITY,
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
from allocator.preemption.alike import by_importance, shape
from allocator.preemption.budgets import split_by_budget
from allocator.preemption.pod_fields import policy_of, priority_of, started_at
from allocator.preemption.release import with_back, without
from allocator.ranking.cards import Card, CardState, NodeState, apply_placement
from tessera.vocabulary import Allocation, ContainerAllocation, PodRequest

MEM = 16000


def on(card: int, core: int = 0, mem: int = 0) -> ContainerAllocation:
    """A container's allocation: a share of ``card`` (core %, MiB), or the whole card."""
    return ContainerAllocation("main", (card,), core_percent=core, memory_mib=mem)


def pod(uid: str, *containers: ContainerAllocation, priority: int = 0,
        started: float | None = 0.0) -> GpuPod:
    return GpuPod(uid, "ns", uid, Allocation("?", tuple(containers), pod_uid=uid),
                  priority=priority, started_at=started)


def node(name: str, cards: int, *pods: GpuPod, model: str = "T4",
         foreign: Sequence[int] = (), max_shares: int | None = None) -> NodeOffer:
    """A node of ``cards`` alike cards holding ``pods`` (their allocations applied)."""
    state = NodeState(name, tuple(
        CardState(Card(i, model, MEM, max_shares),
                  foreign_memory_mib=foreign[i] if i < len(foreign) else 0)
        for i in range(cards)))
    for p in pods:
        state = apply_placement(state, p.containers, p.uid)
    return NodeOffer(state, pods)


def preemptor(req: PodRequest, priority: int = 10,
              policy: PreemptionPolicy = PreemptionPolicy.PREEMPT_LOWER_PRIORITY) -> Preemptor:
    return Preemptor("me", req, priority, policy)


def uids(result: NodeVictims | NoPreemption | str) -> list[str]:
    assert isinstance(result, NodeVictims), result
    return [v.uid for v in result.victims]


def test_a_pod_whose_policy_is_never_preempts_nobody() -> None:
    n = node("n1", 1, pod("low", on(0, 60, 8000), priority=1))
    result = choose_preemption(preemptor(request(share(core=50)),
                                         policy=PreemptionPolicy.NEVER), [n])
    assert result == NoPreemption(POLICY_NEVER)


def test_pods_of_equal_or_higher_priority_are_never_victims() -> None:
    n = node("n1", 1, pod("same", on(0, 60), priority=10), pod("above", on(0, 30), priority=11))
    result = select_victims(preemptor(request(share(core=50)), priority=10), n)
    assert result == NO_LOWER_PRIORITY


def test_room_in_sum_but_on_no_card_takes_one_pod_off_one_card() -> None:
    # 40% free on each card (80% in sum): a 50% share fits on neither until one pod goes.
    n = node("n1", 2, pod("a", on(0, 60), priority=1), pod("b", on(1, 60), priority=2))
    result = choose_preemption(preemptor(request(share(core=50))), [n])
    assert uids(result) == ["a"]  # the less important of the two
    assert isinstance(result, NodeVictims) and result.cards == (0,)


def test_the_victims_are_only_those_the_placement_needs() -> None:
    # Card 0: three pods of 30%; the preemptor needs 40%: one 30% pod more is enough.
    n = node("n1", 1, pod("p3", on(0, 30), priority=3), pod("p2", on(0, 30), priority=2),
             pod("p1", on(0, 30), priority=1))
    assert uids(choose_preemption(preemptor(request(share(core=40))), [n])) == ["p1"]


def test_the_more_important_pods_are_spared_first() -> None:
    n = node("n1", 1, pod("high", on(0, 50), priority=5), pod("low", on(0, 50), priority=1))
    assert uids(select_victims(preemptor(request(share(core=50))), n)) == ["low"]


def test_among_equal_priorities_the_younger_pod_goes() -> None:
    n = node("n1", 1, pod("old", on(0, 50), priority=1, started=100.0),
             pod("young", on(0, 50), priority=1, started=200.0))
    assert uids(select_victims(preemptor(request(share(core=50))), n)) == ["young"]


def test_a_pod_not_started_counts_as_started_now() -> None:
    n = node("n1", 1, pod("started", on(0, 50), priority=1, started=100.0),
             pod("pending", on(0, 50), priority=1, started=None))
    assert uids(select_victims(preemptor(request(share(core=50))), n)) == ["pending"]


def test_a_budget_protected_pod_is_spared_before_a_more_important_one() -> None:
    n = node("n1", 1, pod("guarded", on(0, 50), priority=2), pod("open", on(0, 50), priority=3))
    req = request(share(core=50))
    assert uids(select_victims(preemptor(req), n)) == ["guarded"]
    budget = Budget("ns/db", 0, frozenset({"guarded"}))
    result = select_victims(preemptor(req), n, [budget])
    assert uids(result) == ["open"]
    assert isinstance(result, NodeVictims) and result.pdb_violations == 0


def test_a_budget_violation_is_counted_when_no_other_pod_can_go() -> None:
    n = node("n1", 1, pod("guarded", on(0), priority=1))
    result = select_victims(preemptor(request(whole())), n,
                            [Budget("ns/db", 0, frozenset({"guarded"}))])
    assert uids(result) == ["guarded"]
    assert isinstance(result, NodeVictims) and result.pdb_violations == 1


@pytest.mark.parametrize(("allowed", "violating"), [
    (0, ["a", "b", "c"]), (1, ["b", "c"]), (2, ["c"]), (3, []),
])
def test_a_budget_lets_its_allowance_go_most_important_first(allowed: int,
                                                             violating: list[str]) -> None:
    pods = [pod(u, on(0, 10), priority=p) for u, p in (("a", 3), ("b", 2), ("c", 1))]
    bad, good = split_by_budget(pods, [Budget("ns/b", allowed, frozenset({"a", "b", "c"}))])
    assert [p.uid for p in bad] == violating
    assert [p.uid for p in good] == [u for u in "abc" if u not in violating]


def test_memory_used_outside_tessera_is_never_freed_by_preemption() -> None:
    n = node("n1", 1, pod("low", on(0, 10, 2000), priority=1), foreign=[MEM - 4000])
    result = select_victims(preemptor(request(share(core=10, mem=8000))), n)
    assert isinstance(result, str) and result.startswith("does not fit even with its 1")


def test_pods_on_cards_of_another_model_are_never_victims() -> None:
    t4 = node("n1", 1, pod("t4", on(0), priority=1), model="T4")
    result = select_victims(preemptor(request(whole(), models=("A100",))), t4)
    assert isinstance(result, str) and "no card of model A100" in result


def test_two_whole_cards_take_the_pods_off_two_cards_only() -> None:
    n = node("n1", 4, pod("a", on(0, 20), priority=1), pod("b", on(1, 20), priority=2),
             pod("c", on(2, 20), priority=3), pod("d", on(3, 20), priority=4))
    result = select_victims(preemptor(request(whole(cards=2))), n)
    assert uids(result) == ["b", "a"]  # most important first, as kube-scheduler lists them
    assert isinstance(result, NodeVictims) and result.cards == (0, 1)


def test_a_card_at_its_share_cap_frees_a_slot_by_one_eviction() -> None:
    n = node("n1", 1, pod("a", on(0, 10), priority=1), pod("b", on(0, 10), priority=2),
             max_shares=2)
    assert uids(select_victims(preemptor(request(share(core=10))), n)) == ["a"]


def test_no_preemption_when_the_pod_fits_somewhere_as_it_is() -> None:
    busy = node("busy", 1, pod("low", on(0), priority=1))
    free = node("free", 1)
    result = choose_preemption(preemptor(request(whole())), [busy, free])
    assert isinstance(result, NoPreemption) and "fits without preemption on 1 node" in result.reason
    assert result.nodes["free"] == FITS_ALREADY


def _two_nodes(a: Sequence[GpuPod], b: Sequence[GpuPod]) -> list[NodeOffer]:
    return [node("a", 1, *a), node("b", 1, *b)]


@pytest.mark.parametrize(("a", "b", "budgets", "chosen"), [
    # 1. fewest budget violations
    ([pod("a1", on(0), priority=1)], [pod("b1", on(0), priority=3)],
     [Budget("ns/x", 0, frozenset({"a1"}))], "b"),
    # 2. the lowest highest-victim priority
    ([pod("a1", on(0), priority=3)], [pod("b1", on(0), priority=2)], [], "b"),
    # 3. the smallest sum of priorities
    ([pod("a1", on(0, 50), priority=2), pod("a2", on(0, 50), priority=2)],
     [pod("b1", on(0, 50), priority=2), pod("b2", on(0, 50), priority=1)], [], "b"),
    # 4. the fewest victims: sums with 2^31 added to each priority tie only at the lowest
    # priority there is (-2^31 + 2^31 = 0 per victim)
    ([pod("a1", on(0, 50), priority=-2**31), pod("a2", on(0, 50), priority=-2**31)],
     [pod("b1", on(0), priority=-2**31)], [], "b"),
    # 5. the latest start of the highest-priority victims
    ([pod("a1", on(0), priority=1, started=10.0)],
     [pod("b1", on(0), priority=1, started=20.0)], [], "b"),
    # 6. the first node given
    ([pod("a1", on(0), priority=1, started=10.0)],
     [pod("b1", on(0), priority=1, started=10.0)], [], "a"),
])
def test_the_node_is_chosen_in_kube_schedulers_order(a: list[GpuPod], b: list[GpuPod],
                                                      budgets: list[Budget],
                                                      chosen: str) -> None:
    result = choose_preemption(preemptor(request(whole())), _two_nodes(a, b), budgets)
    assert isinstance(result, NodeVictims) and result.node == chosen


def test_no_preemption_says_why_for_each_node() -> None:
    nodes = [node("same", 1, pod("s", on(0), priority=10)),
             node("low", 1, pod("l", on(0), priority=1), foreign=[MEM])]
    result = choose_preemption(preemptor(request(share(core=10, mem=100))), nodes)
    assert isinstance(result, NoPreemption)
    assert result.nodes["same"] == NO_LOWER_PRIORITY
    assert result.nodes["low"].startswith("does not fit even with its 1 GPU pods")
    assert result.reason.startswith("0/2 nodes can take the pod by preemption: 1 ")


def test_taking_pods_off_and_putting_them_back_restores_every_card() -> None:
    pods = [pod("a", on(0), priority=1),
            pod("b", ContainerAllocation("x", (1,), 30, 4000),
                ContainerAllocation("y", (1,), 20, 1000)),
            pod("c", ContainerAllocation("x", (1,), 10, 500), ContainerAllocation("y", (2, 3)))]
    start = node("n1", 4, *pods).state
    bare = without(start, pods)
    assert all(c.idle and c.core_used == 0 and c.memory_used_mib == 0 and not c.whole
               for c in bare.cards)
    back = bare
    for p in pods:
        back = with_back(back, p, start)
    for before, after in zip(start.cards, back.cards, strict=True):
        assert (before.core_used, before.memory_used_mib, before.whole,
                sorted(before.holders)) == (after.core_used, after.memory_used_mib,
                                            after.whole, sorted(after.holders))


def test_a_pod_the_node_state_does_not_show_frees_nothing() -> None:
    start = node("n1", 1, pod("real", on(0, 50))).state
    ghost = pod("ghost", on(0, 50))
    assert without(start, [ghost]) == start


def test_the_work_is_two_fit_checks_a_node_plus_one_a_pod_never_a_subset_search(
        monkeypatch: pytest.MonkeyPatch) -> None:
    real = victims_module.fits
    calls: list[str] = []

    def counting(req: PodRequest, state: NodeState) -> bool:
        calls.append(state.name)
        return real(req, state)

    monkeypatch.setattr(victims_module, "fits", counting)
    # 50 nodes of 4 cards, two 50% shares on each card, priorities 0 or 1 in patterns: every
    # node is a candidate; nodes alike (same priorities on the same cards) are worked out once.
    helpful = [node(f"h{n}", 4, *[pod(f"h{n}-{c}-{k}", on(c, 50), priority=(n >> (2 * c + k)) & 1)
                                  for c in range(4) for k in range(2)]) for n in range(50)]
    # 50 nodes where only one card holds a lower-priority pod: ruled out by the pre-check.
    hopeless = [node(f"x{n}", 4, *[pod(f"x{n}-{c}", on(c), priority=1 if c == n % 4 else 10)
                                   for c in range(4)]) for n in range(50)]
    result = choose_preemption(preemptor(request(whole(cards=2))), helpful + hopeless)
    assert isinstance(result, NodeVictims) and len(result.victims) == 4
    per_node = {name: calls.count(name) for name in set(calls)}
    shapes = {shape(n, by_importance(n), (), request(whole(cards=2))) for n in helpful}
    assert 10 < len(shapes) < 50
    assert [per_node[n] for n in per_node if n.startswith("h")] == [2 + 8] * len(shapes)
    assert sum(per_node[n] for n in per_node if n.startswith("x")) == 4 * 2  # 4 shapes


def test_nodes_alike_but_for_names_and_start_times_are_worked_out_once_with_their_own_pods(
        monkeypatch: pytest.MonkeyPatch) -> None:
    real = victims_module.fits
    calls: list[str] = []
    monkeypatch.setattr(victims_module, "fits",
                        lambda req, state: calls.append(state.name) or real(req, state))
    nodes = [node(f"n{n}", 2, pod(f"n{n}-a", on(0, 60), priority=1, started=100.0 + n),
                  pod(f"n{n}-b", on(1, 60), priority=2, started=50.0)) for n in range(5)]
    found, _ = candidates_on(preemptor(request(share(core=50))), nodes)
    assert {name for name in calls} == {"n0"}
    assert [(c.node, uids(c)) for c in found] == [(f"n{n}", [f"n{n}-a"]) for n in range(5)]
    # Criterion 5 reads each node's own victims: the latest start wins.
    result = choose_preemption(preemptor(request(share(core=50))), nodes)
    assert isinstance(result, NodeVictims) and result.node == "n4"


def test_a_pod_is_put_back_only_where_the_node_state_showed_it() -> None:
    # The record says cards 0 and 1; the node state shows the pod on card 0 only.
    start = node("n1", 2, pod("p", on(0, 50))).state
    recorded = pod("p", ContainerAllocation("main", (0, 1), 50, 0))
    back = with_back(without(start, [recorded]), recorded, start)
    assert [(c.core_used, c.holders) for c in back.cards] == [(50, (("p", "main"),)), (0, ())]


@pytest.mark.parametrize(("spec", "priority"), [
    ({}, 0), ({"priority": 1000}, 1000), ({"priority": -5}, -5), ({"priority": "9"}, 0),
    ({"priority": True}, 0), ({"priority": 2**31}, 0), ({"priority": -(2**31)}, -(2**31)),
    ({"priority": 1.5}, 0),
])
def test_a_pods_priority_is_its_int32_spec_priority_or_0(spec: dict[str, object],
                                                         priority: int) -> None:
    assert priority_of({"spec": spec}) == priority


@pytest.mark.parametrize(("spec", "policy"), [
    ({}, PreemptionPolicy.PREEMPT_LOWER_PRIORITY),
    ({"preemptionPolicy": "PreemptLowerPriority"}, PreemptionPolicy.PREEMPT_LOWER_PRIORITY),
    ({"preemptionPolicy": "Never"}, PreemptionPolicy.NEVER),
    ({"preemptionPolicy": "never"}, PreemptionPolicy.NEVER),
    ({"preemptionPolicy": 3}, PreemptionPolicy.NEVER),
])
def test_a_policy_it_cannot_read_evicts_nobody(spec: dict[str, object],
                                               policy: PreemptionPolicy) -> None:
    assert policy_of({"spec": spec}) is policy


@pytest.mark.parametrize(("status", "start"), [
    ({"startTime": "2026-11-28T10:00:00Z"}, 1795860000.0),
    ({"startTime": "2026-11-28T10:00:00+01:00"}, 1795856400.0),
    ({}, None), ({"startTime": None}, None), ({"startTime": "yesterday"}, None),
    ({"startTime": "2026-11-28T10:00:00"}, None), ({"startTime": "9" * 100}, None),
])
def test_a_start_time_is_read_as_the_api_server_writes_it(status: dict[str, object],
                                                          start: float | None) -> None:
    assert started_at({"status": status}) == start


def test_a_pod_that_is_not_shaped_like_one_reads_as_harmless() -> None:
    odd = {"spec": "x", "status": ["y"]}
    assert (priority_of(odd), policy_of(odd), started_at(odd)) == (
        0, PreemptionPolicy.PREEMPT_LOWER_PRIORITY, None)


def _hami_node(name: str, modes: Sequence[str], numas: Sequence[int], *pods: GpuPod
               ) -> NodeOffer:
    """A node of HAMi's cards (UUID, mode, NUMA node) holding ``pods``."""
    state = NodeState(name, tuple(
        CardState(Card(i, "T4", MEM, uuid=f"GPU-{name}-{i}", mode=modes[i], numa=numas[i]))
        for i in range(len(modes))))
    for p in pods:
        state = apply_placement(state, p.containers, p.uid)
    return NodeOffer(state, pods)


@pytest.mark.parametrize(("req", "victims"), [
    # Only card 1 of n1 may be used (its UUID; its mode): its pod goes, never card 0's.
    (PodRequest((whole(),), use_uuids=("GPU-n1-1",)), {"n1": ["n1-b"]}),
    (PodRequest((whole(),), card_modes=("mps",)), {"n1": ["n1-b"], "n0": ["n0-a"]}),
    # Two cards of one NUMA node: n0's pair is cards 0 and 1, n1's too (0, 0 / 1, 1).
    (PodRequest((whole(cards=2),), one_numa_node=True), {"n0": ["n0-a", "n0-b"],
                                                         "n1": ["n1-a", "n1-b"]}),
])
def test_nodes_alike_but_for_what_the_preemptor_chooses_cards_by_are_worked_out_apart(
        req: PodRequest, victims: dict[str, list[str]]) -> None:
    # n0 and n1 alike to the card signature (two T4s, a low pod on each card); they differ
    # in UUIDs, modes (n0: mps, hami-core; n1: hami-core, mps) and NUMA layout.
    nodes = [_hami_node("n0", ("mps", "hami-core"), (0, 0),
                        pod("n0-a", on(0), priority=1), pod("n0-b", on(1), priority=2)),
             _hami_node("n1", ("hami-core", "mps"), (0, 0),
                        pod("n1-a", on(0), priority=1), pod("n1-b", on(1), priority=2)),
             _hami_node("n2", ("hami-core", "hami-core"), (0, 1),
                        pod("n2-a", on(0), priority=1), pod("n2-b", on(1), priority=2))]
    found, _why = candidates_on(preemptor(req), nodes)
    assert {v.node: sorted(p.uid for p in v.victims) for v in found} == victims
