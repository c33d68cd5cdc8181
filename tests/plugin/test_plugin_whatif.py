"""``what-if``: today's pods replayed per policy, against placements worked out by hand."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest
from plugin_builders import MIB, gpu_node, gpu_pod, picture_of, scenario, shares, wholes

from allocator.hami.codec import HAMI
from allocator.hami.register import RegisteredDevice, encode_register_json
from allocator.ranking.cards import Card, empty_node
from allocator.ranking.fit import Unfit, place
from allocator.ranking.policies import REGISTRY, PolicyContext, chooser, get_policy
from kubectl_tessera import whatif
from kubectl_tessera.placing import ContentIds, ScoreMemo, place_best


def outcomes(policies: list[str], **kwargs: bool) -> whatif.WhatIf:
    return whatif.what_if(picture_of(*scenario()), policies, "binpack", **kwargs)


def test_now_is_the_cluster_as_it_is() -> None:
    now = outcomes([]).now
    assert (now.placed, now.pods, now.idle_cards, now.cards) == (4, 6, 0, 4)
    assert now.unplaced == ("default/e", "default/f")


def test_binpack_packs_the_halves_and_leaves_a_card_idle_where_spread_leaves_none() -> None:
    # binpack: a -> n1#0, b -> n1#0 (fullest card), c -> n1#1 (fullest node), d -> n2
    # whole; n2 keeps one idle card. spread: a -> n1, b -> n2, c -> n1#1, d -> n2#1.
    result = outcomes(["binpack", "spread"], include_pending=False)
    binpack, spread = result.outcomes
    assert (binpack.placed, binpack.idle_cards, binpack.shared_cards) == (4, 1, 2)
    assert (spread.placed, spread.idle_cards, spread.shared_cards) == (4, 0, 3)


def test_pending_pods_are_replayed_after_the_bound_ones() -> None:
    (binpack,) = outcomes(["binpack"]).outcomes
    # e wants two whole cards; binpack leaves one idle: it still does not fit.
    assert binpack.unplaced == ("default/e", "default/f")


def test_a_pending_pod_binpack_would_have_room_for() -> None:
    nodes = [gpu_node("n1"), gpu_node("n2")]
    pods = [gpu_pod("a", shares(50), node="n1", cards=[0], at=1.0),
            gpu_pod("b", shares(50), node="n2", cards=[0], at=2.0),
            gpu_pod("big", wholes(2))]
    result = whatif.what_if(picture_of(nodes, pods), ["binpack", "spread"], "binpack")
    binpack, spread = result.outcomes
    assert result.now.unplaced == ("default/big",)
    assert binpack.unplaced == () and binpack.idle_cards == 1
    assert spread.unplaced == ("default/big",)


def test_the_replay_keeps_pods_to_their_node_selector() -> None:
    nodes = [gpu_node("n1", labels={"pool": "a"}), gpu_node("n2", labels={"pool": "b"})]
    pods = [gpu_pod(f"p{i}", wholes(1), node="n2", cards=[i], at=float(i),
                    node_selector={"pool": "b"}) for i in range(2)]
    (binpack,) = whatif.what_if(picture_of(nodes, pods), ["binpack"], "binpack").outcomes
    assert binpack.placed == 2 and binpack.idle_nodes == 1
    pods.append(gpu_pod("p2", wholes(1), node_selector={"pool": "b"}))
    (binpack,) = whatif.what_if(picture_of(nodes, pods), ["binpack"], "binpack").outcomes
    assert binpack.unplaced == ("default/p2",)  # n1 is idle but not in its pool


@pytest.mark.parametrize("policy", sorted(REGISTRY))
def test_the_memoised_choice_is_the_plain_choice(policy: str) -> None:
    """place_best with the replay's memo by content chooses what the per-node path chooses."""
    rng = random.Random(7)
    cards = tuple(Card(i, "T4", MIB) for i in range(4))
    states = []
    for n in range(12):
        state = empty_node(f"n{n:02d}", cards)
        for k in range(rng.randrange(0, 6)):
            req = shares(rng.choice([10, 25, 50]), rng.choice([1000, 4000]))
            placed = place(req, state, chooser(get_policy("random"),
                                               PolicyContext(req, pod_key=f"{n}-{k}")))
            if not isinstance(placed, Unfit):
                state = placed.after
        states.append(state)
    ids = ContentIds()
    contents = [ids.of(s) for s in states]
    assert len(set(contents)) < len(states)  # some nodes alike, so the memo is exercised
    memo: ScoreMemo = {}
    for i, req in enumerate([shares(25), shares(50, 4000), wholes(1), wholes(2), shares(10)] * 2):
        ctx = PolicyContext(req, pod_key=f"pod-{i}")
        fast = place_best(req, get_policy(policy), ctx, states, "u", memo, contents)
        plain = place_best(req, get_policy(policy), ctx, states, "u")
        assert (fast and (fast.node, fast.containers)) == (plain and (plain.node,
                                                                      plain.containers))


def test_as_is_keeps_each_pods_own_policy() -> None:
    nodes = [gpu_node("n1"), gpu_node("n2")]
    half = shares(50)
    spread = type(half)(half.containers, policy="spread")
    pods = [gpu_pod("a", spread, node="n1", cards=[0], at=1.0),
            gpu_pod("b", spread, node="n2", cards=[0], at=2.0)]
    as_is, binpack = whatif.what_if(picture_of(nodes, pods), [whatif.AS_IS, "binpack"],
                                    "binpack").outcomes
    assert (as_is.policy, as_is.idle_cards) == ("as-is", 2)  # spread: one half per node
    assert binpack.idle_cards == 3  # binpack: both halves on one card


def _hami_node(name: str, count: int, split: int) -> dict[str, Any]:
    """A node as HAMi's device plugin registers it: ``count`` T4 cards at split count
    ``split``."""
    node = gpu_node(name, count=count)
    node["metadata"]["annotations"][HAMI.register_key] = encode_register_json([
        RegisteredDevice(f"GPU-{name}-{i}", i, split, MIB, 100, "NVIDIA-T4")
        for i in range(count)])
    return node


def test_hamis_binpack_ranks_nodes_by_their_use_before_the_pod_where_binpack_looks_after() -> None:
    # n0: two cards at split count 3; n1: one card at split count 2. hami-binpack: p0 goes
    # to n0 (both idle score 0: the first node), card 0; then n0 scores 10 * (1/6 + 50/200 +
    # 8000/32768) = 6.6 against n1's 0, and p1 and p2 join p0 on card 0, the card scoring
    # highest with them: two cards stay idle. binpack puts p0 on n1, the node it fills most.
    nodes = [_hami_node("n0", 2, 3), _hami_node("n1", 1, 2)]
    pods = [gpu_pod(f"p{k}", req, created=f"2026-01-01T00:00:0{k}Z")
            for k, req in enumerate([shares(50, 8000), shares(10, 1000), shares(10, 4000)])]
    hami, binpack = whatif.what_if(picture_of(nodes, pods), ["hami-binpack", "binpack"],
                                   "binpack").outcomes
    assert (hami.placed, hami.idle_cards, hami.idle_nodes, hami.shared_cards) == (3, 2, 1, 1)
    assert (binpack.placed, binpack.idle_cards, binpack.shared_cards) == (3, 1, 2)


@pytest.mark.parametrize("policy", ["binpack", "spread", "random"])
def test_a_pod_choosing_modes_or_numa_nodes_is_placed_node_by_node(policy: str) -> None:
    # n0 and n1 alike to the memo (four idle T4s) but for their cards' modes and NUMA nodes.
    n0 = empty_node("n0", tuple(Card(i, "T4", MIB, mode="hami-core", numa=i) for i in range(4)))
    n1 = empty_node("n1", tuple(Card(i, "T4", MIB, mode="mps", numa=i // 2) for i in range(4)))
    states = [n0, n1]
    ids = ContentIds()
    contents = [ids.of(s) for s in states]
    assert contents[0] == contents[1]
    memo: ScoreMemo = {}
    for req in (replace(shares(25), card_modes=("mps",)),
                replace(wholes(2), one_numa_node=True)):
        ctx = PolicyContext(req, pod_key="p")
        placed = place_best(req, get_policy(policy), ctx, states, "u", memo, contents)
        assert placed is not None and placed.node == "n1"
