"""Topology for multi-card pods: HAMi's pair scores (``hami.io/node-nvidia-score``) read through
the node agent, and a container asking 2+ whole cards given the best-connected cards among
those the placement policy leaves equal (docs/hami.md, "Topology")."""

from __future__ import annotations

import json
from typing import Any

import pytest
from alloc_harness import synced_allocator
from builders import VOCAB, make_node, request, whole
from fake_kube import FakeKube

from allocator.agents.profiles import AgentSetup, agent_for
from allocator.hami.codec import HAMI, HamiFormatError
from allocator.hami.register import RegisteredDevice, encode_register_json
from allocator.hami.topology import SCORE_KEY, parse_scores
from allocator.picture.inventory import read_inventory
from allocator.ranking.cards import Card, CardState, NodeState
from allocator.ranking.content_memo import content_key
from allocator.ranking.fit import Placement, place
from allocator.ranking.policies import REGISTRY, PolicyContext, chooser
from tessera.agent_profiles import AgentProfile
from tessera.dialects import DialectConfig
from tessera.vocabulary import PodRequest

UUIDS = [f"GPU-{i:08d}-aaaa-bbbb-cccc-000000000000" for i in range(4)]
HAMI_PROFILE = DialectConfig(agent_profile=AgentProfile.HAMI)
NVLINK, PCIE = 200, 20


def _score_text(pairs: dict[tuple[int, int], int], count: int = 4) -> str:
    """HAMi's annotation: every card scored against every other (PCIe unless in ``pairs``)."""
    out = []
    for i in range(count):
        score = {UUIDS[j]: pairs.get((min(i, j), max(i, j)), PCIE)
                 for j in range(count) if j != i}
        out.append({"uuid": UUIDS[i], "score": score})
    return json.dumps(out)


def _hami_node(name: str, pairs: dict[tuple[int, int], int] | None,
               score_text: str | None = None) -> dict[str, Any]:
    node = make_node(name, count=4)
    annotations = node["metadata"]["annotations"]
    annotations[HAMI.register_key] = encode_register_json([
        RegisteredDevice(UUIDS[i], i, 4, 16384, 100, "NVIDIA-Tesla T4") for i in range(4)])
    if pairs is not None:
        annotations[SCORE_KEY] = _score_text(pairs)
    if score_text is not None:
        annotations[SCORE_KEY] = score_text
    return node


def _hami_inventory(node: dict[str, Any]):  # type: ignore[no-untyped-def]
    agent = agent_for(AgentSetup(HAMI_PROFILE, FakeKube(), lambda: 0.0))
    return read_inventory(node, VOCAB, agent, agent.describe)


def _linked(pairs: dict[tuple[int, int], int], count: int = 4) -> NodeState:
    cards = []
    for i in range(count):
        links = tuple((j, pairs.get((min(i, j), max(i, j)), PCIE))
                      for j in range(count) if j != i)
        cards.append(CardState(Card(i, "T4", 16384, links=links)))
    return NodeState("n", tuple(cards))


def _cards(placed: object) -> tuple[int, ...]:
    assert isinstance(placed, Placement)
    return placed.containers[0].card_indices


def _place(policy: str, node: NodeState, req: PodRequest) -> tuple[int, ...]:
    return _cards(place(req, node, chooser(REGISTRY[policy], PolicyContext(req))))


# --------------------------------------------------------------------------- the annotation
def test_parse_reads_hamis_format_with_the_lower_score_of_a_pair() -> None:
    text = json.dumps([{"uuid": "a", "score": {"b": 200, "c": 10}},
                       {"uuid": "b", "score": {"a": 100}}, {"uuid": "c"}])
    scores = parse_scores(text)
    assert scores[("a", "b")] == scores[("b", "a")] == 100
    assert scores[("c", "a")] == 10


@pytest.mark.parametrize("text", [
    "", "not json", "{}", "[1]", '[{"uuid": 3}]', '[{"uuid": ""}]',
    '[{"uuid": "a", "score": []}]', '[{"uuid": "a", "score": {"b": "200"}}]',
    '[{"uuid": "a", "score": {"b": true}}]', '[{"uuid": "a", "score": {"b": -1}}]',
    '[{"uuid": "a", "score": {"b": 1e400}}]', '[{"uuid": "a", "score": {"b": 99999999999}}]',
    "[" * 100_000, '[{"uuid": "a"}]' + " " * 300_000,
    json.dumps([{"uuid": f"u{i}"} for i in range(2000)]),
])
def test_parse_refuses_hostile_text(text: str) -> None:
    with pytest.raises(HamiFormatError):
        parse_scores(text)


def test_the_hami_agent_gives_cards_their_links() -> None:
    inv = _hami_inventory(_hami_node("n", {(0, 1): NVLINK, (2, 3): NVLINK}))
    assert not inv.problem
    assert inv.cards[0].link_to(1) == NVLINK and inv.cards[0].link_to(2) == PCIE
    assert inv.cards[3].links == ((0, PCIE), (1, PCIE), (2, NVLINK))


def test_a_bad_score_is_left_out_with_a_reason_and_the_cards_stay() -> None:
    inv = _hami_inventory(_hami_node("n", None, score_text="[{oops"))
    assert len(inv.cards) == 4 and all(not c.links for c in inv.cards)
    assert SCORE_KEY in inv.problem and "ignored" in inv.problem


def test_other_agents_do_not_read_the_scores() -> None:
    node = _hami_node("n", {(0, 1): NVLINK})
    agent = agent_for(AgentSetup(DialectConfig(), FakeKube(), lambda: 0.0))
    inv = read_inventory(node, VOCAB, agent, agent.describe)
    assert len(inv.cards) == 4 and all(not c.links for c in inv.cards)


def test_a_bad_score_shows_on_status_and_the_node_still_places() -> None:
    fake = FakeKube()
    fake.add_node(_hami_node("bad", None, score_text='[{"uuid": 1}]'))
    alloc = synced_allocator(fake, dialects=HAMI_PROFILE)
    rows = {n["name"]: n for n in alloc.state.snapshot()["nodes"]}
    assert SCORE_KEY in rows["bad"]["problem"]
    assert len(rows["bad"]["cards"]) == 4


# --------------------------------------------------------------------------- the choice
@pytest.mark.parametrize("policy", ["binpack", "spread", "hami-binpack", "hami-spread"])
def test_two_cards_go_to_an_nvlinked_pair(policy: str) -> None:
    for pairs in ({(0, 1): NVLINK, (2, 3): NVLINK}, {(1, 2): NVLINK}, {(0, 3): NVLINK}):
        chosen = _place(policy, _linked(pairs), request(whole(cards=2)))
        assert chosen in pairs, (policy, pairs, chosen)


def test_after_one_pair_is_taken_the_next_pod_gets_the_other() -> None:
    node = _linked({(1, 2): NVLINK, (0, 3): NVLINK})
    req = request(whole(cards=2))
    first = place(req, node, chooser(REGISTRY["binpack"], PolicyContext(req)))
    assert isinstance(first, Placement)
    assert _cards(first) == (0, 3)  # both pairs NVLinked: the lowest card first
    assert _place("binpack", first.after, req) == (1, 2)


def test_without_links_the_lowest_cards_win_as_before() -> None:
    node = NodeState("n", tuple(CardState(Card(i, "T4", 16384)) for i in range(4)))
    assert _place("binpack", node, request(whole(cards=2))) == (0, 1)


def test_the_policy_wins_over_topology_when_scores_differ() -> None:
    """A chooser that prefers the high cards is followed against the NVLinked low pair."""
    node = _linked({(0, 1): NVLINK})

    def high_cards(before: NodeState, after: NodeState) -> float:
        return sum(c.card.index for c in after.cards if c.whole)

    placed = place(request(whole(cards=2)), node, high_cards)
    assert _cards(placed) == (2, 3)


def test_a_policy_tie_on_some_cards_only_breaks_among_those() -> None:
    """The chooser prefers cards 2 and 3 over 0 and 1; among 2 and 3 it is even; the links
    (0, 2) NVLinked and (2, 3) PCIe do not take the pod off the policy's cards."""
    node = _linked({(0, 2): NVLINK, (1, 3): NVLINK})

    def high_pair(before: NodeState, after: NodeState) -> float:
        return sum(1 for c in after.cards if c.whole and c.card.index >= 2)

    assert _cards(place(request(whole(cards=2)), node, high_pair)) == (2, 3)


def test_nodes_of_other_topology_are_not_alike() -> None:
    a = _linked({(0, 1): NVLINK})
    b = _linked({(2, 3): NVLINK})
    plain = NodeState("p", tuple(CardState(Card(i, "T4", 16384)) for i in range(4)))
    assert content_key(a) != content_key(b) != content_key(plain)
    assert content_key(a) == content_key(NodeState("other", a.cards))
