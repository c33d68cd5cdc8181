"""Every policy's ordering of nodes and cards, normalisation, and the registry."""

from __future__ import annotations

import random

import pytest
from builders import node_state, request, share, whole

from allocator.ranking.cards import NodeState
from allocator.ranking.fit import Placement, place
from allocator.ranking.policies import (
    MAX_SCORE,
    REGISTRY,
    Policy,
    PolicyContext,
    chooser,
    get_policy,
    scaled,
)
from allocator.ranking.policies.base import SCALINGS
from tessera.vocabulary import PodRequest, RequestError

NODES = [
    node_state("empty", count=4),
    node_state("half", (50, 8000), (50, 8000), count=4),
    node_state("busy", (90, 14000), (80, 12000), (70, 10000), count=4),
]


def _scores(policy: str, req: PodRequest, nodes: list[NodeState],
            pod_key: str = "ns/p/u") -> dict[str, float]:
    ctx = PolicyContext(req, pod_key=pod_key, seed=7)
    pol = get_policy(policy)
    out = {}
    for n in nodes:
        placed = place(req, n, chooser(pol, ctx), pod_uid="u")
        assert isinstance(placed, Placement)
        out[n.name] = pol.score(n, placed.after, ctx)
    return out


@pytest.mark.parametrize(
    ("policy", "best", "worst"),
    [("binpack", "busy", "empty"), ("spread", "empty", "busy")],
)
def test_binpack_prefers_full_nodes_and_spread_prefers_empty_ones(
    policy: str, best: str, worst: str
) -> None:
    scores = _scores(policy, request(share(core=10, mem=500)), NODES)
    assert max(scores, key=scores.__getitem__) == best
    assert min(scores, key=scores.__getitem__) == worst


@pytest.mark.parametrize(
    ("policy", "expected_card"),
    [("binpack", 0), ("spread", 3)],
)
def test_card_choice_inside_a_node_follows_the_policy(policy: str, expected_card: int) -> None:
    node = node_state("n", (60, 0), (30, 0), (10, 0), count=4)
    req = request(share(core=20))
    placed = place(req, node, chooser(get_policy(policy), PolicyContext(req)), "u")
    assert isinstance(placed, Placement)
    assert placed.containers[0].card_indices == (expected_card,)


def test_random_is_reproducible_for_the_same_seed_and_pod_and_varies_across_pods() -> None:
    req = request(share(core=10))
    nodes = [node_state(f"n{i}", count=2) for i in range(20)]
    first = _scores("random", req, nodes, "ns/a/1")
    again = _scores("random", req, nodes, "ns/a/1")
    other = _scores("random", req, nodes, "ns/b/2")
    assert first == again
    assert first != other
    assert all(0.0 <= v < 1.0 for v in first.values())


def test_random_card_choice_is_seeded_by_pod_identity() -> None:
    node = node_state("n", (10, 0), (20, 0), (30, 0), (40, 0))
    req = request(share(core=10))
    chosen = set()
    for i in range(30):
        ctx = PolicyContext(req, pod_key=f"ns/p{i}/u{i}", seed=1)
        placed = place(req, node, chooser(get_policy("random"), ctx), "u")
        assert isinstance(placed, Placement)
        chosen.add(placed.containers[0].card_indices)
    assert len(chosen) > 1


@pytest.mark.parametrize(
    ("scaling", "raw", "expected"),
    [
        ("min-max", {"a": 0.2, "b": 0.7, "c": 0.45}, {"a": 0, "b": 10, "c": 5}),
        ("min-max", {"a": 0.2, "b": 0.7, "c": 0.69}, {"a": 0, "b": 10, "c": 10}),
        ("best-alone", {"a": 0.2, "b": 0.7, "c": 0.45}, {"a": 0, "b": 10, "c": 5}),
        ("best-alone", {"a": 0.2, "b": 0.7, "c": 0.69}, {"a": 0, "b": 10, "c": 9}),
        ("best-alone", {"a": 0.2, "b": 0.7, "c": 0.68}, {"a": 0, "b": 10, "c": 9}),
        ("best-alone", {"a": 0.2, "b": 0.7, "c": 0.7}, {"a": 0, "b": 10, "c": 10}),
        ("best-alone", {"a": 3.0, "b": 3.0}, {"a": 10, "b": 10}),
        ("best-alone", {}, {}),
        ("best-alone", {"only": -5.0}, {"only": 10}),
    ],
)
def test_scores_become_integers_from_0_to_10_and_best_alone_keeps_10_for_the_best(
    scaling: str, raw: dict[str, float], expected: dict[str, int]
) -> None:
    assert SCALINGS[scaling](raw) == expected


def test_the_allocators_scaling_is_the_benchmarks_best_alone() -> None:
    raw = {"a": 0.2, "b": 0.7, "c": 0.69, "d": 0.45}
    shipped = dict(zip(raw, scaled(list(raw.values())), strict=True))
    assert shipped == SCALINGS["best-alone"](raw) != SCALINGS["min-max"](raw)


def test_every_registered_policy_places_whole_cards_on_idle_cards_only() -> None:
    node = node_state("n", (10, 0), (0, 0), (5, 0), (0, 0))
    req = request(whole(cards=2))
    for name, pol in REGISTRY.items():
        placed = place(req, node, chooser(pol, PolicyContext(req, pod_key=name)), "u")
        assert isinstance(placed, Placement)
        assert placed.containers[0].card_indices == (1, 3), name


def test_an_unknown_policy_name_lists_the_known_ones() -> None:
    with pytest.raises(RequestError, match="known: binpack, fgd, fgd-cpu, fgd-ff, hami-binpack, "):
        get_policy("fgd-typo")


def test_every_registered_policy_is_a_policy_and_offers_only_the_hooks_it_declares() -> None:
    ctx = PolicyContext(request(share(core=10)), pod_key="ns/p/u")
    assert all(isinstance(policy, Policy) for policy in REGISTRY.values())
    ranking = {name for name, policy in REGISTRY.items() if policy.node_ranker(ctx)}
    biased = {name for name, policy in REGISTRY.items() if policy.name_bias()}
    per_pod = {name for name, policy in REGISTRY.items() if policy.per_pod}
    assert (ranking, biased, per_pod) == ({"random"}, {"fgd-ff", "fgd-cpu"}, {"random"})


def _scaled_one_by_one(raw: list[float | None], best_alone: bool) -> list[int]:
    """The scaling written out value by value (the list version it replaced): the oracle."""
    present = [v for v in raw if v is not None]
    if not present:
        return [0] * len(raw)
    low, high = min(present), max(present)
    if high - low <= 1e-9:
        return [0 if v is None else MAX_SCORE for v in raw]
    factor = MAX_SCORE / (high - low)
    out = [0 if v is None else int((v - low) * factor + 0.5) for v in raw]
    if best_alone:
        out = [MAX_SCORE if v is not None and v >= high - 1e-9 else min(o, MAX_SCORE - 1)
               for v, o in zip(raw, out, strict=True)]
    return out


@pytest.mark.parametrize("best_alone", [True, False])
def test_scaling_on_arrays_equals_the_value_by_value_scaling(best_alone: bool) -> None:
    rng = random.Random(3)
    for _ in range(3000):
        raw = [None if rng.random() < 0.2 else rng.choice(
                   [rng.random(), rng.randint(-3, 3) / 4, 1e-10 * rng.random(),
                    -1e6 * rng.random()])
               for _ in range(rng.randint(0, 12))]
        got = scaled(raw, best_alone=best_alone)
        assert got == _scaled_one_by_one(raw, best_alone), raw
        assert all(type(v) is int for v in got)
