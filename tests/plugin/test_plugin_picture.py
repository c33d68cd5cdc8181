"""The picture and ``inspect``: cards and holders read as the allocator reads them."""

from __future__ import annotations

import pytest
from plugin_builders import (
    VOCAB,
    garbled_cards_annotation,
    gpu_node,
    gpu_pod,
    picture_of,
    scenario,
    shares,
    wholes,
)

from kubectl_tessera import inspection, report
from kubectl_tessera.picture import parse_selector, selector_matches
from tessera.vocabulary import Allocation, ContainerAllocation, ContainerRequest, PodRequest


def test_card_usage_comes_from_the_bound_pods_records() -> None:
    pic = picture_of(*scenario())
    usage = {n.name: [(c.core_used, c.memory_used_mib, c.whole) for c in n.state.cards]
             for n in pic.nodes}
    assert usage == {"n1": [(50, 1000, False), (50, 1000, False)],
                     "n2": [(50, 1000, False), (100, 16384, True)]}
    assert [p.name for p in pic.holders] == ["a", "b", "c", "d"]
    assert [p.name for p in pic.pending] == ["e", "f"]


@pytest.mark.parametrize(("pod", "problem"), [
    (gpu_pod("x", shares(10), node="n1", allocation_text="{not json"), "not JSON"),
    (gpu_pod("x", shares(10), node="n1",
             allocation_text='{"v":1,"node":"n1","podUID":"someone-else","containers":'
                             '[{"name":"main","cards":[0],"corePercent":10}]}'),
     "belongs to pod someone-else"),
    (gpu_pod("x", shares(10),
             allocation_text='{"v":1,"node":"n1","podUID":"uid-x","containers":'
                             '[{"name":"main","cards":[0],"corePercent":10}]}'),
     "unbound pod"),
])
def test_a_record_that_does_not_count_is_reported_not_applied(pod: dict[str, object],
                                                              problem: str) -> None:
    pic = picture_of([gpu_node("n1")], [pod])
    assert pic.nodes[0].state.core_used == 0
    assert problem in pic.pods[0].allocation_problem
    assert any(problem in line for line in inspection.notes(pic, list(pic.nodes)))


def test_a_succeeded_pod_holds_no_card() -> None:
    pic = picture_of([gpu_node("n1")],
                     [gpu_pod("done", wholes(1), node="n1", cards=[0], phase="Succeeded")])
    assert pic.nodes[0].state.idle_cards == 2


def test_an_unreadable_card_annotation_falls_back_to_totals_and_says_so() -> None:
    pic = picture_of([gpu_node("n1", annotations=garbled_cards_annotation())], [])
    node = pic.nodes[0]
    assert node.source == "allocatable" and len(node.cards) == 2
    assert "ignored" in node.problem
    assert f"node n1: {node.problem}" in inspection.notes(pic, [node])


def test_nodes_without_gpus_are_left_out() -> None:
    plain = {"metadata": {"name": "cpu-only"}, "status": {"allocatable": {"cpu": "8"}}}
    assert [n.name for n in picture_of([plain, gpu_node("n1")], []).nodes] == ["n1"]


def test_the_table_shows_each_card_with_its_holders_and_the_wide_form_its_free_room() -> None:
    pic = picture_of(*scenario())
    text = inspection.render(pic, list(pic.nodes))
    assert "default/d [main] whole card" in text
    assert "default/a [main] 50% core, 1000 MiB" in text
    wide = inspection.render(pic, list(pic.nodes), wide=True)
    assert "core free" in wide and "15384 MiB" in wide
    coloured = inspection.render(pic, list(pic.nodes), colour=True)
    assert "\033[31m" in coloured and "\033[33m" in coloured  # a full and a shared card


def test_the_document_lists_every_card_and_what_each_pod_holds() -> None:
    pic = picture_of(*scenario())
    doc = inspection.document(pic, inspection.select_nodes(pic, "n2"))
    (node,) = doc["nodes"]
    assert node["name"] == "n2" and node["coreUsed"] == 150 and node["idleCards"] == 0
    assert node["cards"][1]["whole"] is True
    assert node["cards"][1]["pods"] == [{"namespace": "default", "name": "d",
                                         "containers": ["main"], "whole": True,
                                         "corePercent": 100, "memoryMiB": 16384}]
    assert inspection.select_nodes(pic, "nope") == []


@pytest.mark.parametrize(("selector", "labels", "matches"), [
    ("pool=a", {"pool": "a"}, True),
    ("pool=a", {"pool": "b"}, False),
    ("pool!=a,gpu", {"pool": "b", "gpu": ""}, True),
    ("!gpu", {"gpu": "yes"}, False),
    ("pool==a", {"pool": "a"}, True),
])
def test_node_label_selectors(selector: str, labels: dict[str, str], matches: bool) -> None:
    assert selector_matches(parse_selector(selector), labels) is matches


def test_a_selector_with_an_empty_key_is_refused() -> None:
    with pytest.raises(ValueError, match="empty key"):
        parse_selector("=a")


def test_a_card_s_use_is_the_same_in_every_table_and_counts_init_containers_as_reserved(
) -> None:
    # An init container of 10% beside an app container of 25% on card 0: the allocator
    # reserves both (allocator/ranking/fit.py), so the card has 35% in use wherever it is shown.
    request = PodRequest((ContainerRequest("warmup", core_percent=10, memory_mib=100, init=True),
                          ContainerRequest("main", core_percent=25, memory_mib=1000)))
    node, pod = gpu_node("n1"), gpu_pod("p", request, node="n1", cards=(0,))
    pic = picture_of([node], [pod])
    from_picture = inspection.card_usage(pic, pic.nodes)["n1"][0]
    from_objects = report.card_usage([node], [pod], VOCAB)["n1"][0]
    assert (from_picture.core_used, from_picture.memory_used) == (35, 1100)
    assert (from_objects.core_used, from_objects.memory_used) == (35, 1100)
    assert pic.nodes[0].state.cards[0].core_used == 35
    assert report.render_table({"n1": [from_objects]}) == report.render_table(
        {"n1": [from_picture]})


def test_a_device_plugin_s_register_describes_the_node_as_the_allocator_reads_it() -> None:
    from allocator.hami.codec import HAMI
    from allocator.hami.register import RegisteredDevice, encode_register_json
    register = encode_register_json([RegisteredDevice(f"GPU-{i}", i, 4, 24000, 100, "NVIDIA-L4")
                                     for i in range(3)])
    pic = picture_of([gpu_node("n1", annotations={HAMI.register_key: register})], [])
    node = pic.nodes[0]
    assert node.source == "hami" and [c.memory_mib for c in node.cards] == [24000] * 3



def test_a_share_on_each_of_two_cards_is_held_on_each_card() -> None:
    """HAMi's gpu: 2 + gpumem: 3000: the record lists both cards, and every table shows the
    share on each."""
    alloc = Allocation("n1", (ContainerAllocation("main", (1, 3), 20, 3000),))
    held = report.holdings("ns/p", alloc)
    assert sorted(held) == [1, 3]
    assert all((h.core_percent, h.memory_mib, h.whole) == (20, 3000, False)
               for h in held.values())
