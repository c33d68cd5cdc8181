"""A card's share cap (HAMi's split count): read from the register annotation, and no share
goes on a card whose holders reached it, in the pure fit, the search, placement, filter's holds
and the bind. hami-scheduler refuses such a card (Project-HAMi/HAMi v2.10.0
``pkg/device/nvidia/device.go``, ``Fit``: ``dev.Count <= dev.Used``)."""

from __future__ import annotations

from typing import Any

import pytest
from alloc_harness import synced_allocator
from builders import VOCAB, make_gpu_pod, make_node, request, share, whole
from fake_kube import FakeKube

from allocator.errors import BindError
from allocator.hami.codec import HAMI, VOLCANO_VGPU, Flavor
from allocator.hami.described import registered_cards
from allocator.hami.register import RegisteredDevice, encode_register_json, encode_register_text
from allocator.picture.inventory import read_inventory
from allocator.ranking.cards import Card, CardState, NodeState, build_node_state, card_signature
from allocator.ranking.content_memo import content_key
from allocator.ranking.fit import Placement, Unfit, fits, place, unfit_reason
from allocator.ranking.policies import REGISTRY, PolicyContext, chooser
from tessera.agent_profiles import AgentProfile
from tessera.dialects import DialectConfig
from tessera.vocabulary import ContainerAllocation, PodRequest

UUIDS = [f"GPU-{i:08d}-aaaa-bbbb-cccc-000000000000" for i in range(4)]


def _register(count: int, split: int) -> tuple[RegisteredDevice, ...]:
    return tuple(RegisteredDevice(UUIDS[i], i, split, 16384, 100, "NVIDIA-Tesla T4")
                 for i in range(count))


def _hami_node(name: str, count: int, split: int, flavor: Flavor = HAMI,
               text: bool = False) -> dict[str, Any]:
    node = make_node(name, count=count)
    devices = _register(count, split)
    node["metadata"]["annotations"][flavor.register_key] = (
        encode_register_text(devices, flavor) if text else encode_register_json(devices))
    return node


def _capped(cap: int | None, *holders_per_card: int, core: int = 10,
            memory: int = 16000) -> NodeState:
    """A node whose card i has ``holders_per_card[i]`` shares of ``core`` % and 100 MiB."""
    cards = []
    for i, n in enumerate(holders_per_card):
        holders = tuple((f"pod{i}-{k}", "c") for k in range(n))
        cards.append(CardState(Card(i, "T4", memory, max_shares=cap), core * n, 100 * n, False,
                               holders))
    return NodeState("n", tuple(cards))


def _binpack(req: PodRequest):  # type: ignore[no-untyped-def]
    return chooser(REGISTRY["binpack"], PolicyContext(req))


# --------------------------------------------------------------------------- inventory


@pytest.mark.parametrize(("flavor", "text"), [(HAMI, False), (HAMI, True),
                                              (VOLCANO_VGPU, True)])
def test_a_register_annotation_with_count_2_caps_each_card_at_2_shares(
        flavor: Flavor, text: bool) -> None:
    inv = read_inventory(_hami_node("n1", 2, 2, flavor, text), VOCAB,
                         own_description=registered_cards)
    assert inv.source == "hami" and not inv.problem
    assert [c.max_shares for c in inv.cards] == [2, 2]


@pytest.mark.parametrize("node", [
    make_node("n1", count=2),
    make_node("n1", count=2, gfd=("Tesla-T4", 2, 16384)),
    make_node("n1", cards_annotation=[{"index": 0, "model": "T4", "memoryMiB": 16384}]),
], ids=["allocatable", "gfd", "annotation"])
def test_cards_described_otherwise_have_no_cap(node: dict[str, Any]) -> None:
    inv = read_inventory(node, VOCAB, own_description=registered_cards)
    assert inv.cards and all(c.max_shares is None for c in inv.cards)


# --------------------------------------------------------------------------- pure fit


def test_a_share_never_goes_on_a_card_whose_holders_reached_the_cap() -> None:
    req = request(share(core=10, mem=100))
    unfit = unfit_reason(req, _capped(2, 2, 2))
    assert unfit == Unfit("no card takes another share; 2 cards at 2 shares (HAMi split count)")
    assert not fits(req, _capped(2, 2, 2))
    # One holder less: it fits, on the card with room under the cap.
    placed = place(req, _capped(2, 2, 1), _binpack(req), pod_uid="u")
    assert isinstance(placed, Placement) and placed.containers[0].card_indices == (1,)
    # Without a cap the same usage takes it.
    assert unfit_reason(req, _capped(None, 2, 2)) is None


def test_a_reason_names_the_capped_cards_beside_the_room_of_the_others() -> None:
    node = NodeState("n", (*_capped(1, 1).cards,
                           CardState(Card(1, "T4", 16000, max_shares=1), 95, 0, False, ())))
    unfit = unfit_reason(request(share(core=20)), node)
    assert unfit is not None
    assert unfit.reason == ("no card with 20% core free (largest 5%); "
                            "1 card at 1 shares (HAMi split count)")
    assert "," not in unfit.reason and unfit.resolvable


def test_a_whole_card_claim_on_an_empty_capped_card_is_fine() -> None:
    req = request(whole(cards=2))
    node = _capped(1, 0, 0)
    placed = place(req, node, _binpack(req), pod_uid="u")
    assert isinstance(placed, Placement)
    assert placed.containers[0].card_indices == (0, 1)


def test_each_container_of_a_pod_is_one_holder() -> None:
    # Two containers of one pod on cards capped at 1: one card each, never both on one card.
    req = request(share("a", core=10), share("b", core=10))
    placed = place(req, _capped(1, 0, 0), _binpack(req), pod_uid="u")
    assert isinstance(placed, Placement)
    assert sorted(c.card_indices for c in placed.containers) == [(0,), (1,)]
    assert unfit_reason(req, _capped(1, 0)) == Unfit(
        "the pod's 2 GPU containers do not fit together on its cards")
    # An init container counts too: Tessera reserves its room apart from the app's.
    with_init = request(share("prep", core=10, init=True), share("main", core=10))
    assert not fits(with_init, _capped(1, 0))
    assert fits(with_init, _capped(2, 0))


def test_the_search_counts_the_shares_it_places() -> None:
    # Three shares of one pod; cap 2 on two cards: the search must put 2 + 1, never 3 on one.
    req = request(share("a", core=10), share("b", core=10), share("c", core=10))
    assert fits(req, _capped(2, 0, 0))
    assert fits(req, _capped(2, 0, 1))
    assert not fits(req, _capped(2, 1, 1))
    placed = place(req, _capped(2, 0, 0), _binpack(req), pod_uid="u")
    assert isinstance(placed, Placement)
    per_card = [sum(1 for c in placed.containers if c.card_indices == (i,)) for i in (0, 1)]
    assert sorted(per_card) == [1, 2]


def test_signatures_tell_apart_a_cap_and_its_holders_and_nothing_more() -> None:
    # Same usage, different holders left under a cap: different content.
    one = CardState(Card(0, "T4", 16000, max_shares=3), 20, 200, False, (("a", "c"),))
    two = CardState(Card(0, "T4", 16000, max_shares=3), 20, 200, False,
                    (("a", "c"), ("b", "c")))
    assert card_signature(one) != card_signature(two)
    # Same shares left (cap 3 with 1 holder, cap 4 with 2): apart, as HAMi's policies score
    # the slots used of the cap (allocator/ranking/policies/hami.py).
    other = CardState(Card(0, "T4", 16000, max_shares=4), 20, 200, False,
                      (("a", "c"), ("b", "c")))
    assert card_signature(one) != card_signature(other)
    # Without a cap the number of holders stays out of the content, as before.
    free_one = CardState(Card(0, "T4", 16000), 20, 200, False, (("a", "c"),))
    free_two = CardState(Card(0, "T4", 16000), 20, 200, False, (("a", "c"), ("b", "c")))
    assert content_key(NodeState("x", (free_one,))) == content_key(NodeState("y", (free_two,)))
    assert card_signature(free_one)[-1] is None


def test_recorded_shares_beyond_the_cap_are_a_problem_not_lost() -> None:
    card = Card(0, "T4", 16000, max_shares=1)
    state, problems = build_node_state("n", [card], [
        ("a", [ContainerAllocation("c", (0,), 10, 100)]),
        ("b", [ContainerAllocation("c", (0,), 10, 100)])])
    assert len(state.cards[0].holders) == 2 and state.cards[0].shares_full
    assert problems == ("card 0 over its 1 shares by b",)


# --------------------------------------------------------------------------- holds and bind


def _hami_cluster(split: int, pods: int) -> tuple[FakeKube, list[dict[str, Any]]]:
    fake = FakeKube()
    fake.add_node(_hami_node("n1", 1, split))
    made = []
    for i in range(pods):
        pod = make_gpu_pod(f"p{i}", request(share(core=10, mem=1024)), uid=f"u{i}")
        fake.add_pod(pod)
        made.append(pod)
    return fake, made


def test_filter_holds_count_as_holders() -> None:
    fake, pods = _hami_cluster(split=2, pods=3)
    alloc = synced_allocator(fake, dialects=DialectConfig(agent_profile=AgentProfile.HAMI),
                             hold_seconds=30)
    assert alloc.filter(pods[0], ["n1"]).nodes == ["n1"]
    assert alloc.filter(pods[1], ["n1"]).nodes == ["n1"]
    third = alloc.filter(pods[2], ["n1"])
    assert third.nodes == []
    assert third.failed == {"n1": "no card takes another share; 1 card at 2 shares "
                                  "(HAMi split count)"}


def test_the_bind_refuses_a_card_at_its_split_count() -> None:
    fake, _ = _hami_cluster(split=2, pods=3)
    alloc = synced_allocator(fake, dialects=DialectConfig(agent_profile=AgentProfile.HAMI))
    for i in range(2):
        assert alloc.bind("default", f"p{i}", f"u{i}", "n1").outcome == "bound"
        alloc.state.apply_pod(fake.pods[("default", f"p{i}")])
        fake.nodes["n1"]["metadata"]["annotations"].pop(HAMI.lock_key)  # the plugin's release
    with pytest.raises(BindError, match="HAMi split count"):
        alloc.bind("default", "p2", "u2", "n1")
    assert alloc.state.record("u2") is None
