"""What operators see of preemption (issue 47 item 5): /metrics counts preemptions, victims
and the preemptions that did not end in the preemptor's bind; /status and the page list the
preemptions under way."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from alloc_harness import NOW
from fake_kube import FakeKube
from preempting_cluster import WHOLE, full_node, priority_pod

from allocator.decisions import PodRef, PreemptionEnd
from allocator.picture.records import PodRecord, Stage
from allocator.service.app import Runtime
from allocator.service.page import preemption_views, render
from allocator.service.preemptions import HELD, VICTIMS_GONE, WAITING, documents, state_of
from allocator.verbs.preempt import CHECK_SECONDS, DEADLINE_SECONDS
from allocator.verbs.preempt_ports import InFlight
from tessera.vocabulary import Allocation


def _evicted(fake: FakeKube) -> list[str]:
    return [name for call, name in fake.calls if call == "create_eviction"]


def _metric(rt: Runtime, name: str, **labels: str) -> float | None:
    return rt.metrics.registry.get_sample_value(name, labels)


def _preempt_big(fake: FakeKube, rt: Runtime) -> list[str]:
    fake.add_pod(priority_pod("big", WHOLE, 100))
    assert rt.allocator.filter(fake.get_pod("default", "big"), ["n1"]).nodes == []
    assert rt.preempt is not None
    rt.preempt.worker.drain()  # the evictions (the worker's thread in a service)
    evicted = _evicted(fake)
    assert len(evicted) == 2
    return evicted


def test_a_preemption_is_counted_listed_in_status_and_ends_bound() -> None:
    fake, app, rt = full_node()
    client = app.test_client()
    evicted = _preempt_big(fake, rt)
    assert _metric(rt, "tessera_allocator_preemptions_total") == 1
    assert _metric(rt, "tessera_allocator_preemption_victims_total") == 2
    assert _metric(rt, "tessera_allocator_preemptions_in_flight") == 1
    [doc] = client.get("/status").get_json()["preemptions"]
    assert (doc["namespace"], doc["name"], doc["uid"], doc["node"]) == (
        "default", "big", "u-big", "n1")
    assert len(doc["cards"]) == 1
    assert sorted(v["name"] for v in doc["victims"]) == sorted(evicted)
    assert doc["state"] == WAITING and not any(v["gone"] for v in doc["victims"])
    assert doc["secondsLeft"] == DEADLINE_SECONDS
    # The watch sees the victims go: the freed card is held for the preemptor.
    for name in evicted:
        rt.state.remove_pod({"metadata": {"uid": f"u-{name}"}})
    [doc] = client.get("/status").get_json()["preemptions"]
    assert doc["state"] == HELD and all(v["gone"] for v in doc["victims"])
    assert rt.allocator.filter(fake.get_pod("default", "big"), ["n1"]).nodes == ["n1"]
    rt.allocator.bind("default", "big", "u-big", "n1")
    assert client.get("/status").get_json()["preemptions"] == []
    text = client.get("/metrics").get_data(as_text=True)
    assert 'tessera_allocator_preemptions_ended_total{outcome="bound"} 1.0' in text
    assert 'tessera_allocator_preemptions_ended_total{outcome="deadline"} 0.0' in text
    assert "tessera_allocator_preemptions_in_flight 0.0" in text


def test_a_preemption_whose_deadline_passes_is_counted_as_not_bound() -> None:
    fake, _app, rt = full_node()
    _preempt_big(fake, rt)
    assert rt.preempt is not None
    # The worker's tick past the deadline ends it on time: over, without a bind.
    rt.preempt.tick(NOW + DEADLINE_SECONDS + 1)
    assert rt.preempt.snapshot() == ()
    assert _metric(rt, "tessera_allocator_preemptions_in_flight") == 0
    assert _metric(rt, "tessera_allocator_preemptions_ended_total", outcome="deadline") == 1
    assert _metric(rt, "tessera_allocator_preemptions_ended_total", outcome="bound") == 0


def test_a_preemptor_bound_on_another_node_is_not_counted_bound() -> None:
    fake, _app, rt = full_node()
    _preempt_big(fake, rt)
    assert rt.preempt is not None
    rt.preempt.allocated(PodRef("default", "big", "u-big"), "n2", (0,), "binpack")
    assert _metric(rt, "tessera_allocator_preemptions_ended_total",
                   outcome="bound_elsewhere") == 1


def test_a_preemptor_deleted_is_counted_deleted_once() -> None:
    fake, _app, rt = full_node()
    _preempt_big(fake, rt)
    assert rt.preempt is not None
    fake.delete_pod("default", "big")  # the watch of bound pods does not see it go
    rt.preempt.tick(NOW + CHECK_SECONDS)
    rt.preempt.pod_gone("u-big")  # nor is it counted again if the watch did
    assert rt.preempt.snapshot() == ()
    assert _metric(rt, "tessera_allocator_preemptions_ended_total", outcome="deleted") == 1
    assert _metric(rt, "tessera_allocator_preemptions_in_flight") == 0


def test_the_oldest_preemption_dropped_from_a_full_table_is_counted_forgotten() -> None:
    fake, _app, rt = full_node()
    assert rt.preempt is not None
    rt.preempt.max_in_flight = 1
    _preempt_big(fake, rt)
    fake.add_pod(priority_pod("peer", WHOLE, 1))  # looked at: remembered, big's entry dropped
    rt.allocator.filter(fake.get_pod("default", "peer"), ["n1"])
    assert _metric(rt, "tessera_allocator_preemptions_ended_total", outcome="forgotten") == 1


def test_a_pod_no_preemption_helps_starts_nothing_and_ends_nothing() -> None:
    fake, _app, rt = full_node()
    fake.add_pod(priority_pod("peer", WHOLE, 1))  # equal priority: nobody may go
    rt.allocator.filter(fake.get_pod("default", "peer"), ["n1"])
    assert rt.preempt is not None
    rt.preempt.allocated(PodRef("default", "peer", "u-peer"), "n1", (0,), "binpack")
    assert _metric(rt, "tessera_allocator_preemptions_total") == 0
    for outcome in PreemptionEnd:
        assert _metric(rt, "tessera_allocator_preemptions_ended_total",
                       outcome=outcome.value) == 0


def test_with_preemption_off_the_series_are_there_at_zero_and_status_lists_none() -> None:
    _fake, app, rt = full_node(preemption=False)
    client = app.test_client()
    assert client.get("/status").get_json()["preemptions"] == []
    assert _metric(rt, "tessera_allocator_preemptions_total") == 0
    assert _metric(rt, "tessera_allocator_preemptions_in_flight") == 0


def _entry(held: bool = False) -> InFlight:
    return InFlight(PodRef("ns", "big", "u-big"), WHOLE, NOW + 30, "n1", (1,), ("u-a", "u-b"),
                    held=held, victim_refs=(PodRef("ns", "a", "u-a"), PodRef("ns", "b", "u-b")))


def test_the_state_says_held_waiting_or_victims_gone() -> None:
    assert state_of(_entry(held=True), 1) == HELD
    assert state_of(_entry(), 1) == WAITING
    assert state_of(_entry(), 0) == VICTIMS_GONE


def _record(uid: str, name: str) -> PodRecord:
    return PodRecord(uid, "ns", name, "n1", Allocation("n1", ()), Stage.BOUND)


def test_each_victim_is_marked_gone_once_the_picture_no_longer_counts_it() -> None:
    [doc] = documents([_entry()], {"u-a": _record("u-a", "a")}.get, NOW)
    assert [(v["name"], v["gone"]) for v in doc["victims"]] == [("a", False), ("b", True)]
    assert doc["secondsLeft"] == 30 and doc["state"] == WAITING


def test_a_victim_the_entry_does_not_name_is_named_by_the_picture_while_there() -> None:
    entry = replace(_entry(), victim_refs=())  # e.g. restored from the pod's note: UIDs only
    [doc] = documents([entry], {"u-a": _record("u-a", "a")}.get, NOW)
    assert [(v["namespace"], v["name"], v["uid"]) for v in doc["victims"]] == [
        ("ns", "a", "u-a"), ("", "", "u-b")]


def test_the_page_lists_preemptions_in_flight_with_hostile_names_as_text() -> None:
    hostile = "<script>x</script>"
    status: dict[str, Any] = {"nodes": [], "preemptions": [
        {"namespace": "ns", "name": hostile, "node": "n1", "cards": [0, 1],
         "victims": [{"namespace": "ns", "name": "a", "gone": True},
                     {"namespace": "ns", "name": "b", "gone": False}, "junk"],
         "secondsLeft": 12, "state": "waiting-for-victims"}, 7]}
    [view] = preemption_views(status["preemptions"])
    assert view.victims == ("ns/a (gone)", "ns/b")
    assert view.cards == "cards #0, #1" and view.deadline == "in 12 s"
    html = render({**status, "identity": "x", "leader": True, "synced": True,
                   "defaultPolicy": "binpack", "pods": 0}, [], NOW)
    assert "ns/&lt;script&gt;x&lt;/script&gt;" in html and hostile not in html
    assert "waiting for victims to go" in html


def test_the_page_lists_at_most_a_hundred_preemptions_and_says_how_many_more() -> None:
    one = {"namespace": "ns", "name": "p", "node": "n1", "cards": [0], "victims": [],
           "secondsLeft": 5, "state": "held"}
    html = render({"nodes": [], "preemptions": [one] * 130, "identity": "x", "leader": True,
                   "synced": True, "defaultPolicy": "binpack", "pods": 0}, [], NOW)
    assert html.count('data-preemptor="ns/p"') == 100
    assert "and 30 more: see /status" in html
