"""Hostile pods and nodes (issue 9, items 1 and 7): one bad object is logged, surfaced in
``/status`` and the metrics, and skipped; the list and the watch go on and readiness comes.

Anyone who can create a pod can give it ``spec.nodeName``, the GPU-pod label and an
allocation annotation without ever meeting the webhook (no GPU key, so no matchCondition
fires); anyone who can label or annotate a node writes its inventory.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from alloc_harness import make_app, synced_allocator
from builders import VOCAB, make_gpu_pod, make_node, request, whole
from fake_kube import FakeKube

import allocator.picture.records
from allocator.picture.inventory import read_inventory
from allocator.picture.state import ClusterState
from allocator.picture.watch import initial_sync, reflectors

BRACKETS = "[" * 3000
HOSTILE_RECORDS = {
    "brackets": BRACKETS,
    "at-400-digits": json.dumps({"v": 1, "node": "n1", "containers": [
        {"name": "main", "cards": [0]}]})[:-1] + ',"at":' + "9" * 400 + "}",
    "at-inf": '{"v":1,"node":"n1","at":1e999,"containers":[{"name":"main","cards":[0]}]}',
}


def forged_pod(name: str, record: str) -> dict[str, Any]:
    """A pod created straight onto a node with a GPU-pod label and a record of its own."""
    pod = make_gpu_pod(name, request(whole()), uid=f"u-{name}", node="n1",
                   extra_annotations={VOCAB.allocation_annotation: record})
    return pod


def _sync(fake: FakeKube, bound_pods: bool = False) -> tuple[ClusterState, Any, Any]:
    state = ClusterState(VOCAB)
    stop = threading.Event()
    nodes, pods = reflectors(fake, state, stop, lambda _s: None, bound_pods=bound_pods)
    done = threading.Thread(target=initial_sync,
                            args=(fake, state, nodes, pods, lambda _s: None, stop), daemon=True)
    done.start()
    done.join(10)
    if done.is_alive():  # a sync that never finishes fails the test instead of hanging it
        stop.set()
    return state, nodes, pods


def _bound(fake: FakeKube, name: str) -> None:
    fake.add_pod(make_gpu_pod(name, request(whole()), uid=f"u-{name}"))
    synced_allocator(fake).bind("default", name, f"u-{name}", "n1")


@pytest.mark.parametrize("record", list(HOSTILE_RECORDS.values()), ids=list(HOSTILE_RECORDS))
def test_a_forged_record_is_skipped_and_the_list_still_syncs(record: str,
                                                           bound_pods: bool) -> None:
    fake = FakeKube()
    fake.add_node(make_node("n1", count=2))
    _bound(fake, "good")
    fake.add_pod(forged_pod("forged", record))

    state, _nodes, _pods = _sync(fake, bound_pods)

    assert state.synced
    assert state.record("u-good") is not None  # the good pod's card still counts
    assert state.record("u-forged") is None
    assert "u-forged" in state.snapshot()["ignoredRecords"]
    view = state.view("n1")
    assert view is not None and view.state.idle_cards == 1


@pytest.mark.parametrize("record", list(HOSTILE_RECORDS.values()), ids=list(HOSTILE_RECORDS))
def test_a_forged_record_in_the_watch_is_skipped_and_later_events_still_apply(
    record: str, bound_pods: bool,
) -> None:
    fake = FakeKube()
    fake.add_node(make_node("n1", count=2))
    state, _nodes, pods = _sync(fake, bound_pods)
    fake.add_pod(forged_pod("forged", record))
    _bound(fake, "good")

    pods.step(0.5)

    assert state.record("u-good") is not None
    assert "u-forged" in state.snapshot()["ignoredRecords"]
    assert pods.resource_version == str(fake.rv)  # read past the bad event


def test_ignored_records_and_broken_nodes_are_metrics_and_status() -> None:
    fake = FakeKube()
    fake.add_node(make_node("n1", count=2))
    fake.add_node(make_node("huge", gfd=("T4", 1_000_000_000, 15360)))
    fake.add_pod(forged_pod("forged", BRACKETS))
    app, _rt = make_app(fake)
    client = app.test_client()
    text = client.get("/metrics").get_data(as_text=True)
    assert "tessera_allocator_ignored_pod_records 1.0" in text
    assert "tessera_allocator_nodes_with_problems 1.0" in text
    status = client.get("/status").get_json()
    assert "nested too deeply" in status["ignoredRecords"]["u-forged"]
    (huge,) = [n for n in status["nodes"] if n["name"] == "huge"]
    assert "1000000000 cards" in huge["problem"]


def test_a_bug_while_reading_one_pod_is_noted_and_never_stops_the_list(
    monkeypatch: pytest.MonkeyPatch, bound_pods: bool,
) -> None:
    fake = FakeKube()
    fake.add_node(make_node("n1", count=2))
    fake.add_pod(forged_pod("trips", '{"v":1}'))

    def broken(text: str) -> Any:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(allocator.picture.records, "allocation_of_text", broken)
    state, _nodes, _pods = _sync(fake, bound_pods)
    assert state.synced
    assert "ZeroDivisionError" in state.snapshot()["ignoredRecords"]["u-trips"]


# ------------------------------------------------------------------ node inventory (item 7)


@pytest.mark.parametrize(
    ("node", "fragment"),
    [
        (make_node(gfd=("T4", 1_000_000_000, 15360)), "1000000000 cards"),
        (make_node(gfd=("T4", 2, 10**12)), "MiB per card"),
        (make_node(count=10**9), "1000000000 cards"),
        (make_node(count=1, memory_mib=10**15), "MiB per card"),
        (make_node(cards_annotation=[{"index": i, "memoryMiB": 1}
                                     for i in range(1025)]), "1025 cards"),
        (make_node(cards_annotation=[{"index": 10**30, "memoryMiB": 1}]), "card index"),
        (make_node(cards_annotation=[{"index": 0, "memoryMiB": 10**9}]), "memoryMiB"),
    ],
    ids=["gfd-count", "gfd-memory", "allocatable-count", "allocatable-memory",
         "annotation-count", "annotation-index", "annotation-memory"],
)
def test_a_node_claiming_absurd_cards_is_a_reported_problem_not_an_allocation(
    node: dict[str, Any], fragment: str,
) -> None:
    from allocator.picture.inventory import MAX_CARD_MEMORY_MIB, MAX_NODE_CARDS

    inv = read_inventory(node, VOCAB)
    assert fragment in inv.problem
    assert len(inv.cards) <= MAX_NODE_CARDS
    assert all(c.memory_mib <= MAX_CARD_MEMORY_MIB for c in inv.cards)


def test_an_unreadable_cards_annotation_is_a_problem_and_the_next_source_is_used() -> None:
    node = make_node(count=2, memory_mib=16384)
    node["metadata"]["annotations"][VOCAB.node_cards_annotation] = BRACKETS
    inv = read_inventory(node, VOCAB)
    assert "nested too deeply" in inv.problem
    assert inv.source == "allocatable" and len(inv.cards) == 2


@pytest.mark.parametrize("label", ["²", "\u0663", "1" * 400])
def test_a_gfd_count_that_is_not_plain_digits_is_ignored(label: str) -> None:
    node = make_node(count=1, gfd=("T4", 1, 15360))
    node["metadata"]["labels"]["nvidia.com/gpu.count"] = label
    inv = read_inventory(node, VOCAB)  # raised ValueError for "²" (isdigit is Unicode)
    assert inv.source == "allocatable" and len(inv.cards) == 1


def test_hostile_nodes_in_the_list_and_the_watch_never_stop_the_node_reflector() -> None:
    fake = FakeKube()
    brackets = make_node("brackets", count=1)
    brackets["metadata"]["annotations"][VOCAB.node_cards_annotation] = BRACKETS
    fake.add_node(brackets)
    fake.add_node(make_node("huge", gfd=("T4", 1_000_000_000, 15360)))
    state, nodes, _pods = _sync(fake)
    assert state.synced
    # Each falls back to its allocatable (8 and 1 cards), its problem reported.
    assert len(state.cards("huge")) == 8 and len(state.cards("brackets")) == 1
    problems = {n["name"]: n["problem"] for n in state.snapshot()["nodes"]}
    assert "1000000000 cards" in problems["huge"]
    assert "nested too deeply" in problems["brackets"]

    worse = make_node("worse", count=10**20)
    fake.add_node(worse)
    fake.add_node(make_node("fine", count=2))
    nodes.step(0.5)
    assert len(state.cards("fine")) == 2
    assert state.cards("worse") == ()
