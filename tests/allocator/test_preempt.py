"""Preemption wired into filter (allocator/verbs/preempt.py): the fewest pods of lower priority
on one node are evicted through the Eviction API, once, and the preemptor is nominated."""

from __future__ import annotations

import json

import pytest
from alloc_harness import NOW, make_app
from builders import VOCAB, make_node
from fake_kube import FakeKube
from preempting_cluster import HALF, WHOLE, full_node, priority_pod

from allocator.errors import TooManyRequests
from allocator.service.app import Runtime
from allocator.verbs import preempt_offers
from allocator.verbs.config import AllocatorConfig
from allocator.verbs.preempt import DEADLINE_SECONDS


def _cards_of(rt: Runtime, names: list[str]) -> set[int]:
    found = set()
    for name in names:
        record = rt.state.record(f"u-{name}")
        assert record is not None
        found |= {i for c in record.allocation.containers for i in c.card_indices}
    return found


def _filter(rt: Runtime, fake: FakeKube, name: str, nodes: list[str]) -> list[str]:
    """Filter the pod, then run the preemption's queued work (the worker's thread in a
    service)."""
    out = rt.allocator.filter(fake.get_pod("default", name), nodes)
    assert rt.preempt is None or rt.preempt.worker.pending() <= 1
    if rt.preempt is not None:
        rt.preempt.worker.drain()
    return out.nodes


def _evicted(fake: FakeKube) -> list[str]:
    return [name for call, name in fake.calls if call == "create_eviction"]


def test_the_pods_of_one_card_are_evicted_for_a_whole_card_and_the_pod_is_nominated() -> None:
    fake, _app, rt = full_node()
    fake.add_pod(priority_pod("big", WHOLE, 100))
    out = _filter(rt, fake, "big", ["n1"])
    assert out == []
    evicted = _evicted(fake)
    assert len(evicted) == 2  # one card's two pods: the minimal set
    assert len(_cards_of(rt, evicted)) == 1
    big = fake.get_pod("default", "big")
    assert big["status"]["nominatedNodeName"] == "n1"
    note = json.loads(big["metadata"]["annotations"][VOCAB.preemption_annotation])
    assert note["node"] == "n1" and note["cards"] == sorted(_cards_of(rt, evicted))
    rt.recorder.process()
    preempted = [e for e in fake.api_events.values() if e["reason"] == "Preempted"]
    assert sorted(e["regarding"]["name"] for e in preempted) == sorted([*evicted, "big"])
    # Refused again while the victims terminate: nobody more is evicted.
    _filter(rt, fake, "big", ["n1"])
    assert _evicted(fake) == evicted
    # The watch sees them gone: the pod fits on their card and binds there.
    for name in evicted:
        rt.state.remove_pod({"metadata": {"uid": f"u-{name}"}})
    assert _filter(rt, fake, "big", ["n1"]) == ["n1"]
    rt.allocator.bind("default", "big", "u-big", "n1")
    record = rt.state.record("u-big")
    assert record is not None
    assert {i for c in record.allocation.containers for i in c.card_indices} == set(note["cards"])


def test_the_freed_card_is_held_for_the_preemptor_against_lower_priority_pods() -> None:
    fake, _app, rt = full_node()
    fake.add_pod(priority_pod("big", WHOLE, 100))
    _filter(rt, fake, "big", ["n1"])
    evicted = _evicted(fake)
    freed = _cards_of(rt, evicted)
    for name in evicted:
        rt.state.remove_pod({"metadata": {"uid": f"u-{name}"}})
    held = rt.state.record("u-big")
    assert held is not None and held.stage == "held"
    assert {i for c in held.allocation.containers for i in c.card_indices} == freed
    # A pod of lower priority finds the card taken, and preempts nobody (equal priority).
    fake.add_pod(priority_pod("small", WHOLE, 1))
    assert _filter(rt, fake, "small", ["n1"]) == []
    assert _evicted(fake) == evicted
    # The preemptor's own filter takes the card (its hold released, placed afresh on it).
    assert _filter(rt, fake, "big", ["n1"]) == ["n1"]
    rt.allocator.bind("default", "big", "u-big", "n1")
    bound = rt.state.record("u-big")
    assert bound is not None and bound.stage != "held"
    assert {i for c in bound.allocation.containers for i in c.card_indices} == freed


def test_a_hold_nobody_claims_ends_at_the_deadline() -> None:
    fake, _app, rt = full_node()
    fake.add_pod(priority_pod("big", WHOLE, 100))
    _filter(rt, fake, "big", ["n1"])
    for name in _evicted(fake):
        rt.state.remove_pod({"metadata": {"uid": f"u-{name}"}})
    assert rt.state.record("u-big") is not None
    rt.state.expire_holds(NOW + DEADLINE_SECONDS + 1)
    assert rt.state.record("u-big") is None


def test_the_hold_ends_when_the_watch_sees_the_preemptor_deleted() -> None:
    fake, _app, rt = full_node()
    fake.add_pod(priority_pod("big", WHOLE, 100))
    _filter(rt, fake, "big", ["n1"])
    for name in _evicted(fake):
        rt.state.remove_pod({"metadata": {"uid": f"u-{name}"}})
    assert rt.state.record("u-big") is not None
    rt.state.remove_pod(fake.get_pod("default", "big"))
    assert rt.state.record("u-big") is None
    assert rt.state.holds() == 0


def test_preemption_policy_never_evicts_nobody() -> None:
    fake, _app, rt = full_node()
    fake.add_pod(priority_pod("big", WHOLE, 100, preemptionPolicy="Never"))
    assert _filter(rt, fake, "big", ["n1"]) == []
    assert _evicted(fake) == []
    assert "nominatedNodeName" not in fake.get_pod("default", "big")["status"]


def test_with_preemption_off_nobody_is_evicted() -> None:
    fake, _app, rt = full_node(preemption=False)
    fake.add_pod(priority_pod("big", WHOLE, 100))
    assert _filter(rt, fake, "big", ["n1"]) == []
    assert _evicted(fake) == []


def test_pods_of_equal_priority_are_never_evicted() -> None:
    fake, _app, rt = full_node()
    fake.add_pod(priority_pod("peer", WHOLE, 1))
    _filter(rt, fake, "peer", ["n1"])
    assert _evicted(fake) == []


def test_a_budget_refusal_stops_the_preemption_and_deletes_nobody() -> None:
    fake, _app, rt = full_node()
    fake.fail("create_eviction", TooManyRequests("Cannot evict pod: disruption budget", 429))
    fake.add_pod(priority_pod("big", WHOLE, 100))
    _filter(rt, fake, "big", ["n1"])
    assert len(_evicted(fake)) == 1  # the first was refused; the second never asked
    assert len(fake.pods) == 5  # every pod still there
    assert not any(call == "delete_pod" for call, _ in fake.calls)


def test_the_node_whose_pods_no_budget_protects_is_chosen() -> None:
    fake = FakeKube()
    for node in ("n1", "n2"):
        fake.add_node(make_node(node, count=1))
    _app, rt = make_app(fake, core=AllocatorConfig(preemption=True))
    for name, node in (("a", "n1"), ("b", "n1"), ("c", "n2"), ("d", "n2")):
        pod = priority_pod(name, HALF, 1)
        pod["metadata"]["labels"]["app"] = "guarded" if node == "n1" else "free"
        fake.add_pod(pod)
        rt.allocator.bind("default", name, f"u-{name}", node)
        rt.state.apply_pod(fake.get_pod("default", name))
    fake.budgets.append({"metadata": {"name": "guard", "namespace": "default"},
                         "spec": {"selector": {"matchLabels": {"app": "guarded"}}},
                         "status": {"disruptionsAllowed": 0}})
    fake.add_pod(priority_pod("big", WHOLE, 100))
    _filter(rt, fake, "big", ["n1", "n2"])
    assert sorted(_evicted(fake)) == ["c", "d"]  # without the budget n1, given first, would be
    assert fake.get_pod("default", "big")["status"]["nominatedNodeName"] == "n2"


@pytest.mark.parametrize("budget_namespace", ["default", "elsewhere", None])
def test_pods_are_listed_only_for_a_budget_in_their_namespace_in_one_list_past_a_few_nodes(
        monkeypatch: pytest.MonkeyPatch, budget_namespace: str | None) -> None:
    monkeypatch.setattr(preempt_offers, "PER_NODE_LISTS", 0)
    fake, _app, rt = full_node()
    if budget_namespace is not None:
        fake.budgets.append({"metadata": {"name": "b", "namespace": budget_namespace},
                             "spec": {"selector": {"matchLabels": {"app": "x"}}},
                             "status": {"disruptionsAllowed": 1}})
    fake.add_pod(priority_pod("big", WHOLE, 100))
    assert rt.preempt is not None
    rt.preempt.worker.drain()  # the restore at the first tick lists the pending pods, once
    before = len(fake.calls)
    rt.allocator.filter(fake.get_pod("default", "big"), ["n1"])
    calls = [call for call, _ in fake.calls[before:] if call.startswith("list_")]
    # Victims found: the budgets are listed; the labels only where a budget may select them.
    assert calls == ["list_pod_disruption_budgets",
                     *(["list_pods"] if budget_namespace == "default" else [])]
    rt.preempt.worker.drain()
    assert len(_evicted(fake)) == 2
