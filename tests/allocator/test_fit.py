"""Fitting and placement on one node: shares, whole cards, mixes, init containers, models."""

from __future__ import annotations

import pytest
from builders import cards, node_state, request, share, whole

from allocator.ranking.cards import Card, CardState, NodeState, build_node_state, empty_node
from allocator.ranking.fit import Placement, Unfit, fits, place, unfit_reason
from allocator.ranking.policies import REGISTRY, PolicyContext, chooser
from tessera.vocabulary import ContainerAllocation, PodRequest


def _binpack(req: PodRequest):  # type: ignore[no-untyped-def]
    return chooser(REGISTRY["binpack"], PolicyContext(req))


def _placed(req: PodRequest, node: NodeState) -> Placement:
    result = place(req, node, _binpack(req), pod_uid="u1")
    assert isinstance(result, Placement), result
    return result


@pytest.mark.parametrize(
    ("req", "node", "expected"),
    [
        (request(share(core=50, mem=1000)), node_state("n", (60, 0)), "50% core and 1000 MiB"),
        (request(share(mem=512)), node_state("n", (10, 15744), memory=16000),
         "no card with 512 MiB free (largest 256 MiB)"),
        (request(share(core=30)), node_state("n", (80, 0), (90, 0)),
         "no card with 30% core free (largest 20%)"),
        (request(whole(cards=2)), node_state("n", "whole", (10, 10), count=3),
         "needs 2 whole cards (1 free)"),
        (request(whole(cards=4)), node_state("n", count=2), "needs 4 whole cards (node has 2)"),
        (request(share(core=10), models=("A100",)), node_state("n", model="T4"),
         "no card of model A100 (node has T4)"),
        (request(share(core=10), min_mem=40000), node_state("n", memory=16000),
         "no card with at least 40000 MiB memory (largest 16000 MiB)"),
        (request(share(core=10)), node_state("n", "whole", "whole"),
         "all cards taken whole"),
        (request(share("a", core=60), share("b", core=60)), node_state("n", count=1),
         "2 GPU containers do not fit together"),
        (request(share(core=10)), NodeState("n", ()), "node has no GPU cards"),
        (request(share(mem=3000, shares=2)), node_state("n", (0, 14000), (0, 0)),
         "needs 3000 MiB on each of 2 cards (1 card with room)"),
        (request(share(mem=3000, shares=3)), node_state("n", count=2),
         "needs 3000 MiB on each of 3 cards (2 cards with room)"),
    ],
)
def test_a_pod_that_does_not_fit_gets_a_reason_its_owner_can_act_on(
    req: PodRequest, node: NodeState, expected: str
) -> None:
    unfit = unfit_reason(req, node)
    assert unfit is not None
    assert expected in unfit.reason
    assert not fits(req, node)
    assert isinstance(place(req, node, _binpack(req)), Unfit)


@pytest.mark.parametrize(
    ("req", "resolvable"),
    [
        (request(share(core=10), models=("A100",)), False),
        (request(share(core=10), min_mem=99999), False),
        (request(whole(cards=3)), True),
    ],
)
def test_model_and_size_mismatches_are_unresolvable_and_capacity_is_not(
    req: PodRequest, resolvable: bool
) -> None:
    unfit = unfit_reason(req, node_state("n", "whole", count=3))
    assert unfit is not None and unfit.resolvable is resolvable


@pytest.mark.parametrize(
    ("req", "node", "expected"),
    [
        # a share goes to the fullest card that still fits it (binpack)
        (request(share(core=20, mem=100)), node_state("n", (10, 100), (70, 100), (0, 0)),
         {"main": ((1,), 20, 100)}),
        # whole cards only go to idle cards
        (request(whole(cards=2)), node_state("n", (10, 10), (0, 0), (5, 5), (0, 0)),
         {"main": ((1, 3), 0, 0)}),
        # memory percent resolves to MiB of the chosen card, rounded up
        (request(share(core=10, pct=25)), node_state("n", (0, 0), memory=1001),
         {"main": ((0,), 10, 251)}),
        # a whole container and a share never share the card (which card: either)
        (request(whole("w"), share("s", core=50)), node_state("n", count=2), None),
    ],
)
def test_placement_puts_each_container_on_the_expected_cards(
    req: PodRequest, node: NodeState, expected: dict[str, tuple[tuple[int, ...], int, int]] | None
) -> None:
    placed = _placed(req, node)
    got = {c.name: (c.card_indices, c.core_percent, c.memory_mib) for c in placed.containers}
    if expected is not None:
        assert got == expected
    else:
        assert set(got["w"][0]).isdisjoint(got["s"][0])


@pytest.mark.parametrize(
    "req",
    [
        request(share("a", core=60), share("b", core=60), share("c", core=30)),
        request(whole("w", cards=2), share("s", core=90, mem=15000)),
        request(share("init", core=80, init=True), share("main", core=80)),
        request(whole("init", init=True), whole("main", cards=2)),
        request(share("a", pct=50), share("b", pct=50), share("c", pct=50)),
    ],
)
def test_every_container_is_placed_and_no_card_is_over_committed(req: PodRequest) -> None:
    node = node_state("n", count=4)
    placed = _placed(req, node)
    assert {c.name for c in placed.containers} == {c.name for c in req.containers}
    rebuilt, problems = build_node_state("n", [c.card for c in node.cards],
                                         [("u1", placed.containers)])
    assert problems == ()
    assert rebuilt == placed.after
    for card in placed.after.cards:
        assert card.free_core >= 0 and card.free_memory_mib >= 0
        assert not (card.whole and len(card.holders) > 1)


def test_init_containers_are_reserved_disjointly_from_app_containers() -> None:
    req = request(share("init", core=80, init=True), share("main", core=80))
    placed = _placed(req, node_state("n", count=2))
    by_name = {c.name: c for c in placed.containers}
    assert by_name["init"].init and not by_name["main"].init
    assert by_name["init"].card_indices != by_name["main"].card_indices
    assert unfit_reason(req, node_state("n", count=1)) is not None


def test_mixed_card_sizes_put_the_big_share_on_the_big_card() -> None:
    node = empty_node("n", cards(16000, 80000, 16000))
    req = request(whole("w"), share("big", mem=40000), share("small", mem=8000))
    placed = _placed(req, node)
    by_name = {c.name: c.card_indices for c in placed.containers}
    assert by_name["big"] == (1,)
    assert by_name["w"] in {(0,), (2,)}


def test_exact_search_finds_a_packing_that_a_naive_greedy_misses() -> None:
    # Cards 16000 and 80000 MiB; whole card + a 40000 MiB share fit only if the whole card
    # takes the small one.
    node = empty_node("n", cards(80000, 16000))
    req = request(whole("w"), share("s", mem=40000))
    placed = _placed(req, node)
    assert {c.name: c.card_indices for c in placed.containers} == {"w": (1,), "s": (0,)}


@pytest.mark.parametrize(
    ("models", "expected_card"),
    [(("A100",), 1), (("t4", "V100"), 0), (("A100", "T4"), 0)],
)
def test_model_constraint_selects_cards_of_an_allowed_model(
    models: tuple[str, ...], expected_card: int
) -> None:
    node = NodeState("n", (CardState(Card(0, "T4", 16000)), CardState(Card(1, "A100", 40000))))
    placed = _placed(request(share(core=10), models=models), node)
    assert placed.containers[0].card_indices == (expected_card,)


def test_minimum_card_memory_skips_small_cards() -> None:
    node = empty_node("n", cards(8000, 32000))
    placed = _placed(request(whole(), min_mem=16000), node)
    assert placed.containers[0].card_indices == (1,)


def _a100_t4_node(*taken: int) -> NodeState:
    """Cards 0, 1: A100 80 GB; 2, 3: T4 16 GB; ``taken`` ones held whole by another pod."""
    models = (("A100", 81920), ("A100", 81920), ("T4", 16384), ("T4", 16384))
    return NodeState("n", tuple(
        CardState(Card(i, m, mem)).with_whole(("other", "c")) if i in taken
        else CardState(Card(i, m, mem)) for i, (m, mem) in enumerate(models)))


def test_a_multi_card_container_gets_cards_of_one_model() -> None:
    # One A100 and both T4s are free: the two cards can only be the T4s.
    placed = _placed(request(whole(cards=2)), _a100_t4_node(0))
    assert placed.containers[0].card_indices == (2, 3)


def test_without_two_free_cards_of_one_model_the_pod_waits_with_a_reason() -> None:
    node = _a100_t4_node(0, 2)
    reason = unfit_reason(request(whole(cards=2)), node)
    assert reason == Unfit("needs 2 whole cards of one model (1 A100 and 1 T4 free)")
    assert not fits(request(whole(cards=2)), node)
    three = unfit_reason(request(whole(cards=3)), _a100_t4_node())
    assert three == Unfit("needs 3 whole cards of one model (node has 2 A100 and 2 T4)",
                          resolvable=False)


def test_a_pod_that_opts_out_may_mix_models() -> None:
    mixed = PodRequest((whole(cards=2),), mixed_models=True)
    placed = _placed(mixed, _a100_t4_node(0, 2))
    assert placed.containers[0].card_indices == (1, 3)


def test_one_model_per_container_not_per_pod() -> None:
    # Two one-card containers may land on different models; the two-card one may not.
    req = request(whole("a", cards=2), whole("b"), whole("c"))
    placed = _placed(req, _a100_t4_node())
    by_name = {c.name: c.card_indices for c in placed.containers}
    assert by_name["a"] in ((0, 1), (2, 3))
    assert len({*by_name["a"], *by_name["b"], *by_name["c"]}) == 4


def test_build_node_state_reports_conflicting_records_instead_of_hiding_them() -> None:
    allocations = [
        ("a", (ContainerAllocation("c", (0,)),)),
        ("b", (ContainerAllocation("c", (0,), core_percent=10),)),
        ("c", (ContainerAllocation("c", (7,), core_percent=10),)),
    ]
    state, problems = build_node_state("n", cards(1000), allocations)
    assert len(problems) == 2
    assert state.cards[0].free_core < 0
    assert not fits(request(share(core=1)), state)


def test_a_share_of_core_only_leaves_memory_for_others() -> None:
    node = node_state("n", (0, 0))
    after = _placed(request(share("a", core=60)), node).after
    assert after.cards[0].free_memory_mib == 16000
    assert fits(request(share("b", mem=16000)), after)
    assert not fits(request(share("b", core=41)), after)


def test_a_share_on_several_cards_takes_that_many_distinct_cards() -> None:
    node = node_state("n", (0, 0), (0, 0), (0, 0))
    placed = _placed(request(share(core=30, mem=3000, shares=2)), node)
    (only,) = placed.containers
    assert len(set(only.card_indices)) == 2
    assert (only.core_percent, only.memory_mib) == (30, 3000)
    used = [c for c in placed.after.cards if not c.idle]
    assert sorted(c.card.index for c in used) == list(only.card_indices)
    assert all(c.free_memory_mib == 13000 and c.free_core == 70 for c in used)


@pytest.mark.parametrize("policy", sorted(REGISTRY))
def test_a_share_on_several_cards_keeps_the_rest_of_the_pod_placeable(policy: str) -> None:
    # Only card 2 takes the 9000 MiB share: every policy must put the two 3000 MiB shares on
    # cards 0 and 1, however it likes card 2.
    node = node_state("n", (0, 13000), (0, 13000), (0, 7000))
    req = request(share("two", mem=3000, shares=2), share("big", mem=9000))
    placed = place(req, node, chooser(REGISTRY[policy], PolicyContext(req)), pod_uid="u1")
    assert isinstance(placed, Placement), placed
    by_name = {c.name: c.card_indices for c in placed.containers}
    assert by_name == {"two": (0, 1), "big": (2,)}


def test_a_share_on_more_cards_than_have_room_does_not_fit() -> None:
    node = node_state("n", (0, 14000), (0, 0))
    assert not fits(request(share(mem=3000, shares=2)), node)
    assert fits(request(share(mem=3000, shares=1)), node)


def test_a_memory_percent_on_several_cards_takes_cards_of_one_memory_size() -> None:
    # The record keeps one MiB figure per container: 25 % must be the same MiB on each card.
    node = build_node_state("n", (Card(0, "T4", 16000), Card(1, "T4", 24000),
                                  Card(2, "T4", 16000)), ())[0]
    placed = _placed(request(share(pct=25, shares=2)), node)
    (only,) = placed.containers
    assert (only.card_indices, only.memory_mib) == ((0, 2), 4000)
    mixed = build_node_state("n", (Card(0, "T4", 16000), Card(1, "T4", 24000)), ())[0]
    assert not fits(request(share(pct=25, shares=2)), mixed)
    assert unfit_reason(request(share(pct=25, shares=2)), mixed) == Unfit(
        "needs 25% of its memory on each of 2 cards (1 card of one memory size with room)")
    assert fits(request(share(mem=4000, shares=2)), mixed)
