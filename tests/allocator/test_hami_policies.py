"""HAMi's node and card policies (allocator/ranking/policies/hami.py) against hami-scheduler
v2.10.0's formulas, worked by hand: the node score before the pod, the card score with the
container added, the orders they make, and the registry names."""

from __future__ import annotations

import pytest
from builders import node_state, request, share, whole

from allocator.ranking.cards import Card, CardState, NodeState
from allocator.ranking.fit import Placement, place
from allocator.ranking.policies import REGISTRY, PolicyContext, chooser, get_policy
from allocator.ranking.policies.hami import hami_score
from tessera.vocabulary import PodRequest

HAMI_NAMES = ["hami-binpack-binpack", "hami-binpack-spread", "hami-spread-binpack",
              "hami-spread-spread"]


def _capped(name: str, *cards: tuple[int, int, int], cap: int = 10,
            memory: int = 16000) -> NodeState:
    """A HAMi node: per card (holders, core %, MiB) used, every card at split count ``cap``."""
    return NodeState(name, tuple(
        CardState(Card(i, "T4", memory, cap), core, mem, False,
                  tuple((f"p{i}-{k}", "c") for k in range(holders)))
        for i, (holders, core, mem) in enumerate(cards)))


def _placed(policy: str, req: PodRequest, node: NodeState) -> Placement:
    placed = place(req, node, chooser(get_policy(policy), PolicyContext(req)), pod_uid="u")
    assert isinstance(placed, Placement)
    return placed


def _node_score(policy: str, req: PodRequest, node: NodeState) -> float:
    return get_policy(policy).score(node, _placed(policy, req, node).after, PolicyContext(req))


def test_the_node_score_is_hamis_formula_over_the_node_before_the_pod() -> None:
    # node_policy.go:106-129: 10 * (used/count + usedcores/totalcore + usedmem/totalmem).
    node = _capped("n", (2, 30, 4000), (0, 0, 0))
    want = 10 * (2 / 20 + 30 / 200 + 4000 / 32000)  # 3.75, exact in float32
    assert hami_score(node.cards) == want
    req = request(share(core=50, mem=8000))
    assert _node_score("hami-binpack-binpack", req, node) == want  # the pod is not in it
    assert _node_score("hami-spread-spread", req, node) == -want


def test_hamis_own_scheduler_test_case_gives_its_card_and_its_score() -> None:
    # pkg/scheduler/score_test.go:524-620 ("one node two device one pod one container use
    # one device,but having use 50%"): card policy spread, node policy binpack; the pod goes
    # to the idle card and the node scores 7.5 = 10 * (5/20 + 50/200 + 4000/16000).
    node = _capped("node1", (0, 0, 0), (5, 50, 4000), memory=8000)
    req = request(share(core=30, mem=1000))
    placed = _placed("hami-binpack-spread", req, node)
    assert placed.containers[0].card_indices == (0,)
    assert (placed.containers[0].core_percent, placed.containers[0].memory_mib) == (30, 1000)
    assert _node_score("hami-binpack-spread", req, node) == 7.5


def test_a_card_without_a_split_count_has_no_slot_term() -> None:
    node = node_state("n", (30, 4000), (0, 0), memory=16000)
    assert hami_score(node.cards) == pytest.approx(10 * (30 / 200 + 4000 / 32000))


@pytest.mark.parametrize(("node_policy", "best"), [("binpack", "busier"), ("spread", "idler")])
def test_binpack_takes_the_node_used_most_before_the_pod_and_spread_the_least(
        node_policy: str, best: str) -> None:
    # Two cards against four with the same usage (no split count: no slot term): the
    # fractions of the smaller node are twice as large, 10 * (50/200 + 8000/32000) = 5.0
    # against 2.5.
    busier = node_state("busier", (50, 8000), (0, 0), memory=16000)
    idler = node_state("idler", (50, 8000), (0, 0), (0, 0), (0, 0), memory=16000)
    req = request(share(core=10, mem=1000))
    scores = {n.name: _node_score(f"hami-{node_policy}-spread", req, n) for n in (busier, idler)}
    assert (abs(scores["busier"]), abs(scores["idler"])) == (5.0, 2.5)
    assert max(scores, key=scores.__getitem__) == best


@pytest.mark.parametrize(("card_policy", "card"), [("binpack", 0), ("spread", 3)])
def test_binpack_takes_the_card_scoring_highest_with_the_container_and_spread_the_lowest(
        card_policy: str, card: int) -> None:
    # gpu_policy.go:194-222 scores each card with the request added; device.go:727 walks the
    # sorted list from its end.
    node = node_state("n", (60, 0), (30, 0), (10, 0), count=4)
    req = request(share(core=10, mem=500))
    for node_policy in ("binpack", "spread"):
        placed = _placed(f"hami-{node_policy}-{card_policy}", req, node)
        assert placed.containers[0].card_indices == (card,)


@pytest.mark.parametrize(("card_policy", "card"), [("binpack", 0), ("spread", 1)])
def test_the_slots_a_card_has_used_of_its_split_count_count(card_policy: str, card: int) -> None:
    # The same cores and memory on both cards; card 0 holds two containers, card 1 one.
    node = _capped("n", (2, 20, 2000), (1, 20, 2000))
    req = request(share(core=10, mem=1000))
    assert _placed(f"hami-binpack-{card_policy}", req, node).containers[0].card_indices == (card,)


def test_equal_cards_go_to_the_lowest_index_hamis_choice_on_the_cards_numbered_in_reverse() -> None:
    # HAMi's stable sort keeps its card order among equal scores and walks it from the end
    # (the highest index); Tessera keeps the lowest: the same cards, renumbered.
    node = node_state("n", count=4)
    for name in HAMI_NAMES:
        assert _placed(name, request(share(core=10)), node).containers[0].card_indices == (0,)


def test_whole_cards_go_to_idle_cards_by_the_card_policy() -> None:
    node = node_state("n", (10, 0), (0, 0), (5, 0), (0, 0))
    for name in HAMI_NAMES:
        placed = _placed(name, request(whole(cards=2)), node)
        assert placed.containers[0].card_indices == (1, 3), name


def test_the_four_policies_and_the_two_aliases_are_registered() -> None:
    assert set(HAMI_NAMES) | {"hami-binpack", "hami-spread"} <= set(REGISTRY)
    node = _capped("n", (1, 40, 3000), (3, 70, 9000), (0, 0, 0))
    req = request(share(core=20, mem=2000), share("b", core=30, mem=1000))
    for alias, pair in (("hami-binpack", "hami-binpack-binpack"),
                        ("hami-spread", "hami-spread-spread")):
        assert (_placed(alias, req, node).containers == _placed(pair, req, node).containers)
        assert _node_score(alias, req, node) == _node_score(pair, req, node)


def test_cpu_only_pods_are_left_to_kube_scheduler() -> None:
    # HAMi's filter passes every node for a pod without its resources (scheduler.go:1080).
    node = node_state("n", count=2)
    for name in HAMI_NAMES:
        assert get_policy(name).score_cpu_only(node, 4000, 2000, PolicyContext(
            request(share(core=10))).workload) is None
