"""Preemption decided from the picture (allocator/verbs/preempt_offers.py): priority and start
time kept in the records from each version of the pod, a refusal with nobody of lower
priority answered with no API read, pods listed only for a budget's labels."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from alloc_harness import make_app
from builders import VOCAB, make_gpu_pod, make_node, request, share, whole
from fake_kube import FakeKube
from flask import Flask

from allocator.picture.records import PodRecord, PodRecords, Stage
from allocator.picture.state import ClusterState
from allocator.preemption import (
    NoPreemption,
    Preemptor,
    choose_preemption,
    nobody_lower,
)
from allocator.service.app import Runtime
from allocator.verbs import preempt_offers
from allocator.verbs.config import AllocatorConfig
from tessera.vocabulary import Allocation, ContainerAllocation

HALF = request(share(core=50, mem=8000))
WHOLE = request(whole())
STARTED = "2026-11-29T01:00:00Z"


def _bound(name: str, card: int, priority: int | None, start: str | None = None,
           rv: str = "1", node: str = "n1") -> dict[str, Any]:
    """A half-card pod bound on ``node``'s card ``card`` (priority None: no spec.priority)."""
    allocation = Allocation(node, (ContainerAllocation("main", (card,), 50, 8000),))
    pod = make_gpu_pod(name, HALF, uid=f"u-{name}", node=node, allocation=allocation,
                       phase="Running", rv=rv)
    if priority is not None:
        pod["spec"]["priority"] = priority
    if start is not None:
        pod["status"]["startTime"] = start
    return pod


def _state(*pods: dict[str, Any]) -> ClusterState:
    state = ClusterState(VOCAB)
    state.replace_nodes([make_node("n1", count=2), make_node("n2", count=2)])
    state.replace_pods(list(pods))
    state.mark_synced()
    return state


# ---------------------------------------------------------------- the picture's two scalars
def test_priority_and_start_time_follow_the_pods_later_versions() -> None:
    state = _state(_bound("a", 0, 5))  # bound, not started yet
    record = state.record("u-a")
    assert record is not None and (record.priority, record.started_at) == (5, None)
    view = state.view("n1")
    assert view is not None
    state.apply_pod(_bound("a", 0, 5, start=STARTED, rv="2"))  # the kubelet started it
    record = state.record("u-a")
    assert record is not None
    assert record.started_at == datetime.fromisoformat("2026-11-29T01:00:00+00:00").timestamp()
    assert state.view("n1") is view  # same cards: the node's state is not rebuilt
    [offer] = preempt_offers.offers(state, ["n1"])
    assert [(p.uid, p.priority, p.started_at) for p in offer.pods] == [
        ("u-a", 5, record.started_at)]


def test_a_version_seen_again_changes_nothing_in_the_picture() -> None:
    pod = _bound("a", 0, 5, start=STARTED)
    state = _state(pod)
    epoch = state.epoch()
    state.apply_pod(pod)
    assert state.epoch() == epoch  # the watch's hot path: one comparison, nothing written


def test_a_pod_without_priority_reads_as_priority_zero_as_kube_scheduler_reads_it() -> None:
    state = _state(_bound("a", 0, None))
    record = state.record("u-a")
    assert record is not None and record.priority == 0
    assert state.below_on(["n1"], 1) and not state.below_on(["n1"], 0)


def test_the_lowest_priority_of_a_node_follows_binds_deletions_and_holds() -> None:
    state = _state(_bound("a", 0, 5), _bound("b", 1, 3), _bound("c", 0, 1, node="n2"))
    assert state.below_on(["n1"], 4) and not state.below_on(["n1"], 3)
    state.remove_pod({"metadata": {"uid": "u-b"}})
    assert not state.below_on(["n1"], 5) and state.below_on(["n1"], 6)
    assert state.below_on(["n1", "n2"], 2)  # any refused node will do
    # A hold is nobody's victim: it never lowers a node's priority.
    view = state.view("n1")
    assert view is not None
    held = Allocation("n1", (ContainerAllocation("main", (1,), 50, 8000),))
    assert state.hold("u-h", "default", "h", held, view.version, None, until=1e12,
                      made_for=HALF)
    assert not state.below_on(["n1"], 5)


def test_our_bind_marked_bound_carries_its_priority_before_the_watch_shows_it() -> None:
    state = _state()
    view = state.view("n1")
    assert view is not None
    allocation = Allocation("n1", (ContainerAllocation("main", (0,), 50, 8000),))
    assert state.reserve("u-x", "default", "x", allocation, view.version)
    assert not state.below_on(["n1"], 100)  # a bind still writing is not a victim
    state.mark_bound("u-x", 7)
    assert state.below_on(["n1"], 8) and not state.below_on(["n1"], 7)


@pytest.mark.parametrize("steps", [
    ["put a n1 2", "put b n1 1", "pop b"],
    ["put a n1 2", "put a n2 2"],  # a record moving node leaves its old node's lowest
    ["put a n1 2", "stage a inflight", "stage a bound"],
    ["put a n1 2", "put b n1 4", "put a n1 6", "pop b", "pop a"],
])
def test_each_nodes_lowest_is_the_minimum_over_its_records_that_may_go(
        steps: list[str]) -> None:
    records = PodRecords()
    for step in steps:
        verb, uid, *rest = step.split()
        if verb == "put":
            node, priority = rest
            records.put(PodRecord(uid, "ns", uid, node, Allocation(node, ()), Stage.CONFIRMED,
                                  int(priority)))
        elif verb == "stage":
            old = records.get(uid)
            assert old is not None
            records.restage(old, Stage(rest[0]))
        else:
            records.pop(uid)
        expected: dict[str, int] = {}
        for _, r in records.items():
            if r.stage in (Stage.BOUND, Stage.CONFIRMED) and r.priority is not None:
                expected[r.node] = min(expected.get(r.node, r.priority), r.priority)
        assert records.lowest == expected, step


# ---------------------------------------------------------------- no API read when nobody is lower
def _full_node(priority: int = 1) -> tuple[FakeKube, Runtime]:
    fake = FakeKube()
    fake.add_node(make_node("n1", count=2))
    _app, rt = make_app(fake, core=AllocatorConfig(preemption=True))
    for i, name in enumerate("abcd"):
        pod = _bound(name, i // 2, priority, start=STARTED)
        fake.add_pod(pod)
        rt.state.apply_pod(fake.get_pod("default", name))
    assert rt.preempt is not None
    rt.preempt.worker.drain()  # the restore at the first tick lists the pending pods, once
    return fake, rt


def _preemptor(fake: FakeKube, name: str, priority: int) -> dict[str, Any]:
    pod = make_gpu_pod(name, WHOLE, uid=f"u-{name}")
    pod["spec"]["priority"] = priority
    fake.add_pod(pod)
    return fake.get_pod("default", name)


def _reads(fake: FakeKube, since: int) -> list[str]:
    return [call for call, _ in fake.calls[since:] if call.startswith(("list_", "get_"))]


@pytest.mark.parametrize("priority", [1, 0, -5])
def test_a_refusal_with_no_pod_of_lower_priority_reads_nothing_from_the_api(
        priority: int) -> None:
    fake, rt = _full_node(priority=1)
    pod = _preemptor(fake, "small", priority)
    before = len(fake.calls)
    assert rt.allocator.filter(pod, ["n1"]).nodes == []
    assert rt.preempt is not None
    rt.preempt.worker.drain()
    assert _reads(fake, before) == []
    assert not any(call == "create_eviction" for call, _ in fake.calls)


def test_the_look_at_priorities_answers_as_the_core_before_any_offer_is_built(
        monkeypatch: pytest.MonkeyPatch) -> None:
    fake, rt = _full_node(priority=1)
    preemptor = Preemptor("u-small", WHOLE, 1)
    core = choose_preemption(preemptor, preempt_offers.offers(rt.state, ["n1"]))

    def no_offers(*_args: object) -> object:
        raise AssertionError("offers built although nobody is of lower priority")

    monkeypatch.setattr(rt.state, "evictable_on", no_offers)
    answer = preempt_offers.decide(fake, VOCAB.gpu_pod_selector, rt.state, preemptor, ["n1"])
    assert isinstance(core, NoPreemption)
    assert answer == core == nobody_lower(["n1"])


def test_a_preemption_with_victims_and_no_budget_lists_no_pod() -> None:
    fake, rt = _full_node(priority=1)
    pod = _preemptor(fake, "big", 100)
    before = len(fake.calls)
    assert rt.allocator.filter(pod, ["n1"]).nodes == []
    assert _reads(fake, before) == ["list_pod_disruption_budgets"]
    assert rt.preempt is not None
    rt.preempt.worker.drain()
    assert len([c for c, _ in fake.calls if c == "create_eviction"]) == 2


def test_the_victims_are_those_the_core_chooses_with_start_times_from_the_picture() -> None:
    # Card 0's pods started long ago, card 1's just now: kube-scheduler's order keeps the
    # older pods (a whole card goes, the younger one, as read from the picture alone).
    fake = FakeKube()
    fake.add_node(make_node("n1", count=2))
    _app, rt = make_app(fake, core=AllocatorConfig(preemption=True))
    for i, name in enumerate("abcd"):
        fake.add_pod(_bound(name, i // 2, 1, start="2026-01-01T00:00:00Z" if i < 2 else STARTED))
        rt.state.apply_pod(fake.get_pod("default", name))
    decision = preempt_offers.decide(fake, VOCAB.gpu_pod_selector, rt.state,
                                     Preemptor("u-big", WHOLE, 100), ["n1"])
    assert not isinstance(decision, NoPreemption)
    assert sorted(v.name for v in decision.victims) == ["c", "d"]
    assert decision.cards == (1,)


# ---------------------------------------------------------------- the preemptVerb, the same way
def _verb(app: Flask, pod: dict[str, Any], proposed: list[str]) -> dict[str, Any]:
    body = {"Pod": pod, "NodeNameToMetaVictims": {"n1": {
        "Pods": [{"UID": f"u-{n}"} for n in proposed], "NumPDBViolations": 0}}}
    resp = app.test_client().post("/scheduler/preempt", json=body)
    assert resp.status_code == 200
    reply: dict[str, Any] = resp.get_json()
    return reply


@pytest.mark.parametrize(("proposed", "reads"), [
    # kube-scheduler's victims free a whole card already: its answer, nothing read.
    (["a", "b"], []),
    # One pod of a card: the other is added (a victim of ours), so the budgets are listed.
    (["a"], ["list_pod_disruption_budgets"]),
])
def test_the_verb_reads_the_budgets_only_when_it_adds_victims(
        proposed: list[str], reads: list[str]) -> None:
    fake = FakeKube()
    fake.add_node(make_node("n1", count=2))
    app, rt = make_app(fake, core=AllocatorConfig(preemption=True))
    for i, name in enumerate("abcd"):
        fake.add_pod(_bound(name, i // 2, 1, start=STARTED))
        rt.state.apply_pod(fake.get_pod("default", name))
    assert rt.preempt is not None
    rt.preempt.worker.drain()
    pod = _preemptor(fake, "big", 100)
    before = len(fake.calls)
    reply = _verb(app, pod, proposed)
    assert list(reply["NodeNameToMetaVictims"]) == ["n1"]
    uids = {p["UID"] for p in reply["NodeNameToMetaVictims"]["n1"]["Pods"]}
    theirs = {f"u-{n}" for n in proposed}
    assert uids > theirs if reads else uids == theirs  # victims added, or its answer as asked
    assert _reads(fake, before) == reads


def test_a_victim_evicted_but_not_yet_seen_gone_is_not_chosen_again() -> None:
    # The first preemption's victims are evicted; the picture has not seen them go (the
    # watch lags the API). A second preemptor takes the other card's pods, never the same.
    fake, rt = _full_node(priority=1)
    assert rt.preempt is not None
    first = _preemptor(fake, "big1", 100)
    rt.allocator.filter(first, ["n1"])
    rt.preempt.worker.drain()
    taken = [n for c, n in fake.calls if c == "create_eviction"]
    assert len(taken) == 2 and all(rt.state.record(f"u-{n}") is not None for n in taken)
    second = _preemptor(fake, "big2", 100)
    rt.allocator.filter(second, ["n1"])
    rt.preempt.worker.drain()
    again = [n for c, n in fake.calls if c == "create_eviction"][2:]
    assert sorted(again) == sorted(set("abcd") - set(taken))
