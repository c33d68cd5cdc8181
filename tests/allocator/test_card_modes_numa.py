"""HAMi's ``nvidia.com/vgpu-mode`` and ``nvidia.com/numa-bind`` in the ranking
(allocator.ranking.search, fit, unfit): a pod takes only cards of the modes it allows, and a
multi-card container that binds one NUMA node gets all its cards from one.

HAMi v2.10.0: ``pkg/device/nvidia/device.go:493-503`` checkType (a card is taken when the
value contains its registered mode), ``:482-491`` assertNuma and ``:740-753`` in Fit (the
container's cards start over at each card of another NUMA node, over cards sorted with each
NUMA node's together, ``pkg/scheduler/policy/gpu_policy.go:100-112``)."""

from __future__ import annotations

import itertools
import random
from dataclasses import replace

import pytest
from builders import share, whole

from allocator.ranking.cards import Card, CardState, NodeState
from allocator.ranking.fit import Placement, Unfit, fits, place, unfit_reason
from allocator.ranking.policies import REGISTRY, PolicyContext, chooser
from tessera.vocabulary import ContainerRequest, PodRequest

T4 = "Tesla-T4"
POLICIES = sorted(REGISTRY)


def _node(modes: tuple[str, ...] = (), numas: tuple[int, ...] = (),
          busy: tuple[int, ...] = ()) -> NodeState:
    """16 GiB T4s, capped at 4 shares, in the given modes and NUMA nodes; ``busy`` cards
    taken whole by another pod."""
    count = max(len(modes), len(numas))
    modes = modes or ("hami-core",) * count
    numas = numas or (0,) * count
    cards = []
    for i in range(count):
        state = CardState(Card(i, T4, 16384, max_shares=4, uuid=f"GPU-{i}", mode=modes[i],
                               numa=numas[i]))
        cards.append(state.with_whole(("other", "c")) if i in busy else state)
    return NodeState("n", tuple(cards))


def _placed(req: PodRequest, node: NodeState, policy: str = "binpack") -> Placement:
    result = place(req, node, chooser(REGISTRY[policy], PolicyContext(req)), "u1")
    assert isinstance(result, Placement), result
    return result


MIXED = _node(modes=("hami-core", "mps", "hami-core", "mps"))


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize(("modes", "allowed"), [
    (("hami-core",), {0, 2}),  # a hami-core pod never lands on an mps card
    (("mps",), {1, 3}),  # an mps pod only on mps cards
    (("hami-core", "mps"), {0, 1, 2, 3}),
    ((), {0, 1, 2, 3}),  # no vgpu-mode: any card, as hami-scheduler
])
@pytest.mark.parametrize("container", [share(core=30, mem=2000), share(core=10, shares=2),
                                       whole(cards=2)])
def test_a_pod_gets_cards_of_the_modes_it_allows(policy: str, modes: tuple[str, ...],
                                                 allowed: set[int],
                                                 container: ContainerRequest) -> None:
    req = PodRequest((container,), card_modes=modes)
    taken = _placed(req, MIXED, policy).containers[0].card_indices
    assert set(taken) <= allowed and len(taken) == max(container.cards, container.shares)


def test_more_cards_than_the_allowed_mode_has_do_not_fit() -> None:
    req = PodRequest((whole(cards=3),), card_modes=("mps",))
    assert unfit_reason(req, MIXED) == Unfit("needs 3 whole cards (node has 2)",
                                             resolvable=False)


@pytest.mark.parametrize(("modes", "node_modes"), [
    (("mps",), "hami-core"),
    (("hami-core",), "mps"),
])
def test_no_card_of_an_allowed_mode_is_unresolvable_naming_vgpu_mode(
        modes: tuple[str, ...], node_modes: str) -> None:
    node = _node(modes=(node_modes,) * 2)
    req = PodRequest((share(core=10),), card_modes=modes)
    assert unfit_reason(req, node) == Unfit(
        f"no card allowed by pod annotation nvidia.com/vgpu-mode (node has {T4} in mode "
        f"{node_modes})", resolvable=False)
    assert not fits(req, node)


def test_vgpu_mode_is_named_with_the_other_card_choice() -> None:
    req = PodRequest((share(core=10),), card_modes=("mps",), use_uuids=("GPU-1",))
    reason = unfit_reason(req, _node(modes=("mps", "hami-core")))
    assert reason is not None and reason.reason.startswith(
        "no card allowed by pod annotation nvidia.com/use-gpuuuid and nvidia.com/vgpu-mode")


ALTERNATING = (0, 1, 0, 1)


def _numas(node: NodeState, indices: tuple[int, ...]) -> set[int]:
    return {node.cards[i].card.numa for i in indices}


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("container", [whole(cards=2), share(core=20, mem=1000, shares=2),
                                       share(core=20, pct=25, shares=2)])
def test_a_numa_bound_container_gets_its_cards_from_one_numa_node(
        policy: str, container: ContainerRequest) -> None:
    node = _node(numas=ALTERNATING)
    req = PodRequest((container,), one_numa_node=True)
    placed = _placed(req, node, policy).containers[0].card_indices
    assert len(placed) == 2 and len(_numas(node, placed)) == 1


def test_each_container_binds_its_own_numa_node() -> None:
    node = _node(numas=ALTERNATING)
    req = PodRequest((whole("a", cards=2), whole("b", cards=2)), one_numa_node=True)
    a, b = _placed(req, node).containers
    assert len(_numas(node, a.card_indices)) == 1 and len(_numas(node, b.card_indices)) == 1
    assert _numas(node, a.card_indices) != _numas(node, b.card_indices)


def test_identical_cards_on_another_numa_node_are_tried_too() -> None:
    # Cards 0 and 1 are alike to placement but for their NUMA node: the first card tried
    # (0, NUMA 0) leaves no second card on its node; card 1 does.
    node = _node(numas=(0, 1, 1))
    req = PodRequest((whole(cards=2),), one_numa_node=True)
    for policy in POLICIES:
        assert _placed(req, node, policy).containers[0].card_indices == (1, 2)


def test_a_one_card_container_is_not_bound() -> None:
    req = PodRequest((whole(cards=1), share("s", core=10)), one_numa_node=True)
    assert fits(req, _node(numas=(0, 1)))


def test_free_cards_on_two_numa_nodes_are_short_and_eviction_may_help() -> None:
    node = _node(numas=ALTERNATING, busy=(0, 3))  # free: card 1 (NUMA 1), card 2 (NUMA 0)
    req = PodRequest((whole(cards=2),), one_numa_node=True)
    assert unfit_reason(req, node) == Unfit(
        "needs 2 whole cards on one NUMA node (pod annotation nvidia.com/numa-bind; node has "
        "2 on NUMA 0 and 2 on NUMA 1)", resolvable=True)
    assert not fits(req, node)
    assert fits(replace(req, one_numa_node=False), node)


def test_no_numa_node_with_enough_cards_is_unresolvable() -> None:
    node = _node(numas=(0, 1, 2))
    req = PodRequest((share(core=10, shares=2),), one_numa_node=True)
    reason = unfit_reason(req, node)
    assert reason is not None and not reason.resolvable
    assert "on each of 2 cards on one NUMA node (pod annotation nvidia.com/numa-bind" in (
        reason.reason)


def test_numa_bind_and_a_mode_apply_together() -> None:
    node = _node(modes=("mps", "hami-core", "mps", "mps"), numas=ALTERNATING)
    req = PodRequest((whole(cards=2),), card_modes=("mps",), one_numa_node=True)
    assert _placed(req, node).containers[0].card_indices == (0, 2)
    assert not fits(replace(req, card_modes=("hami-core",)), node)


def _one_numa_set_exists(req: PodRequest, node: NodeState) -> bool:
    """Brute force for one container: some NUMA node has enough cards it fits on."""
    (c,) = req.containers
    need = max(c.cards, c.shares)
    for numa in {cs.card.numa for cs in node.cards}:
        cards = [cs for cs in node.cards if cs.card.numa == numa]
        if c.cards:
            room = [cs for cs in cards if cs.idle]
        else:
            room = [cs for cs in cards if not cs.whole and cs.free_core >= c.core_percent
                    and cs.free_memory_mib >= c.memory_mib]
        if len(room) >= need:
            return True
    return False


@pytest.mark.parametrize("seed", range(30))
def test_a_numa_bound_container_fits_exactly_when_one_numa_node_has_room(seed: int) -> None:
    rng = random.Random(seed)
    count = rng.randint(2, 8)
    numas = tuple(rng.randint(0, 2) for _ in range(count))
    node = _node(numas=numas, busy=tuple(i for i in range(count) if rng.random() < 0.3))
    for _ in range(rng.randint(0, 6)):  # some shares taken on the cards not busy
        pos = rng.randrange(count)
        cs = node.cards[pos]
        if not cs.whole:
            node = node.replace_card(pos, cs.with_share(rng.choice([30, 60]), 6000, ("o", "c")))
    for container in (whole(cards=rng.randint(2, 4)),
                      share(core=rng.choice([10, 50]), mem=rng.choice([1000, 9000]),
                            shares=rng.randint(2, 3))):
        req = PodRequest((container,), one_numa_node=True)
        assert fits(req, node) == _one_numa_set_exists(req, node), (seed, container)
        if fits(req, node):
            for policy in ("binpack", "spread", "fgd"):
                placed = _placed(req, node, policy).containers[0].card_indices
                assert len(_numas(node, placed)) == 1


def test_every_pairing_of_modes_follows_hamis_containment() -> None:
    # checkType: strings.Contains(value, card mode); the value's modes are the request's.
    for allowed in itertools.chain.from_iterable(
            itertools.combinations(("hami-core", "mps"), k) for k in (1, 2)):
        req = PodRequest((share(core=10),), card_modes=allowed)
        for mode in ("hami-core", "mps"):
            node = _node(modes=(mode,))
            assert fits(req, node) == (mode in allowed)
