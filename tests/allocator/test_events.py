"""Events: what the allocator tells about a pod, when, how often, and that a verb never waits
for it or fails because of it."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from alloc_harness import NOW, make_app, synced_allocator
from builders import make_gpu_pod, make_node, request, share, whole
from fake_kube import FakeKube

from allocator.decisions import DecisionHooks, Fanout, PodRef, refusal_summary
from allocator.errors import ApiError, BindError
from allocator.kube import events
from allocator.kube.events import Correlator, EventSpec, Held, Limits, Write
from allocator.kube.recorder import TICK_SECONDS, EventRecorder
from allocator.ranking.policies import DEFAULT_POLICY
from tessera.vocabulary import Allocation, ContainerAllocation

POD = PodRef("team-a", "trainer", "uid-1")


class Told(DecisionHooks):
    """A listener that keeps what it was told."""

    def __init__(self) -> None:
        self.said: list[tuple[Any, ...]] = []

    def allocated(self, pod: PodRef, node: str, cards: tuple[int, ...], policy: str) -> None:
        self.said.append(("allocated", pod, node, cards, policy))

    def bind_failed(self, pod: PodRef, node: str, message: str) -> None:
        self.said.append(("bind_failed", pod, node, message))

    def refused(self, pod: PodRef, reasons: Any) -> None:
        self.said.append(("refused", pod, dict(reasons)))

    def fits(self, pod: PodRef) -> None:
        self.said.append(("fits", pod))


# ---------------------------------------------------------------------- what they say
@pytest.mark.parametrize(
    ("spec", "type_", "reason", "note"),
    [
        (events.allocated(POD, "gpu-a", (0, 1), "binpack"), "Normal", "Allocated",
         "allocated cards 0,1 of node gpu-a (policy binpack)"),
        (events.allocated(POD, "gpu-a", (3,), "spread"), "Normal", "Allocated",
         "allocated card 3 of node gpu-a (policy spread)"),
        (events.bind_failed(POD, "gpu-b", "node gpu-b: not enough memory"), "Warning",
         "FailedAllocation", "binding to node gpu-b failed: node gpu-b: not enough memory"),
        (events.refused(POD, refusal_summary({"a": "full", "b": "full", "c": "wrong model"})),
         "Warning", "NoGPUFit",
         "0/3 nodes can take the GPU request: 2 nodes: full; 1 node: wrong model"),
    ],
)
def test_each_decision_reads_as_a_sentence_on_the_pod(
    spec: EventSpec, type_: str, reason: str, note: str
) -> None:
    assert (spec.type, spec.reason, spec.note) == (type_, reason, note)
    event = events.event_object(Write(True, spec, "trainer.1", NOW), "allocator-0")
    assert event["apiVersion"] == "events.k8s.io/v1"
    assert event["metadata"] == {"name": "trainer.1", "namespace": "team-a"}
    assert event["regarding"] == {"apiVersion": "v1", "kind": "Pod", "namespace": "team-a",
                                  "name": "trainer", "uid": "uid-1"}
    assert event["reportingController"] == "tessera-allocator"
    assert event["eventTime"] == "2023-11-14T22:13:20.000000Z"
    assert "series" not in event


def test_long_notes_are_cut_to_the_api_limit_without_splitting_a_character() -> None:
    spec = events.refused(POD, "é" * 2000)
    note = events.event_object(Write(True, spec, "x", NOW), "i")["note"]
    assert len(note.encode()) <= events.NOTE_LIMIT and note.endswith("...")
    assert note[:-3] == "é" * len(note[:-3])


def test_refusal_reasons_are_counted_most_frequent_first() -> None:
    reasons = {f"n{i}": "full" for i in range(5)} | {"m": "model T4 not allowed",
                                                      "k": "cordoned"}
    assert refusal_summary(reasons) == ("0/7 nodes can take the GPU request: 5 nodes: full; "
                                        "1 node: cordoned; 1 node: model T4 not allowed")


# ---------------------------------------------------------------------- how often
def test_a_repeat_becomes_a_series_patched_at_once_then_at_most_every_flush() -> None:
    c = Correlator(Limits(series_flush_seconds=30, finish_seconds=360))
    spec = events.refused(POD, "0/1 nodes can take the GPU request: 1 node: full")
    first = c.observe(spec, 100.0)
    assert isinstance(first, Write) and first.create and first.count == 1
    second = c.observe(spec, 101.0)
    assert isinstance(second, Write) and not second.create
    assert (second.name, second.count, second.last) == (first.name, 2, 101.0)
    assert c.observe(spec, 102.0) is Held.COUNTED
    assert c.observe(spec, 110.0) is Held.COUNTED
    assert c.due(120.0) == []  # 19 s after the last write: not yet
    [flushed] = c.due(131.0)
    assert (flushed.count, flushed.last) == (4, 110.0)
    assert c.due(140.0) == []  # nothing new


def test_a_finished_series_gets_its_final_count_and_is_forgotten() -> None:
    c = Correlator(Limits(series_flush_seconds=30, finish_seconds=360))
    spec = events.refused(POD, "full")
    c.observe(spec, 0.0)
    c.observe(spec, 1.0)
    c.observe(spec, 2.0)
    [final] = c.due(400.0)
    assert final.count == 3 and not final.create
    assert c.tracked() == 0
    again = c.observe(spec, 401.0)
    assert isinstance(again, Write) and again.create and again.name != final.name


def test_different_notes_are_different_events() -> None:
    c = Correlator()
    a = c.observe(events.refused(POD, "full"), 0.0)
    b = c.observe(events.refused(POD, "wrong model"), 0.0)
    assert isinstance(a, Write) and isinstance(b, Write) and a.create and b.create
    assert a.name != b.name


def test_a_pod_gets_at_most_its_burst_of_new_events_then_one_per_refill() -> None:
    c = Correlator(Limits(pod_burst=3, pod_refill_seconds=300, burst=1000))
    made = [c.observe(events.refused(POD, f"reason {i}"), 0.0) for i in range(5)]
    assert [isinstance(w, Write) for w in made] == [True, True, True, False, False]
    assert made[3] is Held.DROPPED
    assert c.observe(events.refused(POD, "later"), 100.0) is Held.DROPPED
    assert isinstance(c.observe(events.refused(POD, "much later"), 301.0), Write)
    other = PodRef("team-a", "other", "uid-2")
    assert isinstance(c.observe(events.refused(other, "reason 0"), 0.0), Write)


def test_the_overall_rate_drops_creates_and_defers_series_updates() -> None:
    c = Correlator(Limits(burst=2, per_second=1.0))
    spec = events.refused(POD, "full")
    assert isinstance(c.observe(spec, 0.0), Write)
    assert isinstance(c.observe(events.refused(PodRef("n", "b", "u-b"), "x"), 0.0), Write)
    assert c.observe(events.refused(PodRef("n", "c", "u-c"), "x"), 0.0) is Held.DROPPED
    assert c.observe(spec, 0.1) is Held.COUNTED  # its first repeat, but no token left
    [later] = c.due(31.0)
    assert later.count == 2


def test_tracking_is_bounded() -> None:
    c = Correlator(Limits(max_tracked=10, burst=10_000, per_second=10_000))
    for i in range(50):
        c.observe(events.refused(PodRef("ns", f"p{i}", f"u{i}"), "full"), float(i))
    assert c.tracked() == 10


# ---------------------------------------------------------------------- the recorder
def _recorder(fake: FakeKube, **limits: Any) -> tuple[EventRecorder, list[str], list[float]]:
    outcomes: list[str] = []
    now = [NOW]
    rec = EventRecorder(fake, "replica-1", correlator=Correlator(Limits(**limits)),
                        clock=lambda: now[0], on_outcome=outcomes.append)
    return rec, outcomes, now


def test_the_recorder_creates_then_patches_the_series_of_one_event() -> None:
    fake = FakeKube()
    rec, outcomes, now = _recorder(fake)
    for _ in range(3):
        rec.refused(POD, {"n1": "full"})
    rec.process()
    [(key, event)] = fake.api_events.items()
    assert key[0] == "team-a"
    assert event["reason"] == "NoGPUFit" and event["series"]["count"] == 2
    assert event["reportingInstance"] == "tessera-allocator-replica-1"
    now[0] += 31
    rec.process()
    assert fake.api_events[key]["series"]["count"] == 3
    assert outcomes == ["created", "updated", "updated"]


def test_a_series_whose_event_expired_is_created_again_with_its_count() -> None:
    fake = FakeKube()
    rec, outcomes, _now = _recorder(fake)
    rec.refused(POD, {"n1": "full"})
    rec.process()
    fake.api_events.clear()  # the API server's event TTL passed
    rec.refused(POD, {"n1": "full"})
    rec.process()
    [event] = fake.api_events.values()
    assert event["series"]["count"] == 2
    assert outcomes == ["created", "updated"]


def test_a_refused_write_is_counted_and_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeKube()
    fake.fail("create_event", ApiError("POST events: HTTP 403: forbidden", 403))
    rec, outcomes, _now = _recorder(fake)
    rec.allocated(POD, "n1", (0,), "binpack")
    rec.process()
    assert outcomes == ["failed"]
    assert any("not recorded" in r.getMessage() and r.levelno == logging.WARNING
               for r in caplog.records)


def test_a_full_queue_drops_instead_of_blocking_the_verb() -> None:
    fake = FakeKube()
    outcomes: list[str] = []
    rec = EventRecorder(fake, "r", on_outcome=outcomes.append, queue_size=2)
    for i in range(5):
        rec.refused(PodRef("ns", f"p{i}", f"u{i}"), {"n": "full"})
    assert outcomes == ["dropped"] * 3
    rec.process()
    assert len(fake.api_events) == 2


def test_a_listener_that_raises_cannot_fail_the_others(caplog: pytest.LogCaptureFixture) -> None:
    class Broken(DecisionHooks):
        def allocated(self, pod: PodRef, node: str, cards: tuple[int, ...],
                      policy: str) -> None:
            raise RuntimeError("bug")

    told = Told()
    Fanout([Broken(), told]).allocated(POD, "n1", (0,), "binpack")
    assert told.said == [("allocated", POD, "n1", (0,), "binpack")]
    assert any("decision hook allocated of Broken failed" in r.getMessage()
               for r in caplog.records)


# ---------------------------------------------------------------------- the core's hooks
def _cluster() -> FakeKube:
    fake = FakeKube()
    fake.add_node(make_node("n1", count=2, memory_mib=16384))
    return fake


def test_the_core_tells_of_an_allocation_with_node_cards_and_policy() -> None:
    fake = _cluster()
    fake.add_pod(make_gpu_pod("p", request(whole(cards=2)), uid="u-1"))
    told = Told()
    alloc = synced_allocator(fake, hooks=told)
    alloc.bind("default", "p", "u-1", "n1")
    assert told.said == [("allocated", PodRef("default", "p", "u-1"), "n1", (0, 1),
                          DEFAULT_POLICY)]
    alloc.bind("default", "p", "u-1", "n1")  # an idempotent repeat tells nothing new
    assert len(told.said) == 1


def test_the_core_tells_of_a_failed_bind_with_the_message_the_scheduler_gets() -> None:
    fake = _cluster()
    fake.add_pod(make_gpu_pod("p", request(share(core=30, mem=2048)), uid="u-1"))
    fake.fail("bind_pod", ApiError("POST binding: HTTP 500: etcd timeout", 500))
    told = Told()
    alloc = synced_allocator(fake, hooks=told)
    with pytest.raises(BindError) as caught:
        alloc.bind("default", "p", "u-1", "n1")
    assert told.said == [("bind_failed", PodRef("default", "p", "u-1"), "n1", str(caught.value))]


@pytest.mark.parametrize(
    ("req", "fits"),
    [(request(share(core=30, mem=2048)), True), (request(whole(cards=4)), False)],
)
def test_the_core_tells_whether_filter_left_the_pod_a_node(req: Any, fits: bool) -> None:
    fake = _cluster()
    fake.add_node(make_node("n2", count=1, memory_mib=16384))
    told = Told()
    alloc = synced_allocator(fake, hooks=told)
    pod = make_gpu_pod("p", req, uid="u-1")
    alloc.filter(pod, ["n1", "n2"])
    [(what, ref, *rest)] = told.said
    assert ref == PodRef("default", "p", "u-1")
    if fits:
        assert what == "fits"
    else:
        assert what == "refused" and set(rest[0]) == {"n1", "n2"}


def test_an_invalid_request_is_a_refusal_with_its_reason_on_every_node() -> None:
    fake = _cluster()
    told = Told()
    alloc = synced_allocator(fake, hooks=told)
    pod = make_gpu_pod("p", request(share(core=30, mem=2048), policy="no-such-policy"), uid="u-1")
    alloc.filter(pod, ["n1"])
    [(what, _ref, reasons)] = told.said
    assert what == "refused" and "no-such-policy" in reasons["n1"]


# ---------------------------------------------------------------------- the app, wired
def test_the_app_records_an_allocated_event_and_counts_it() -> None:
    fake = _cluster()
    fake.add_pod(make_gpu_pod("p", request(share(core=30, mem=2048)), uid="u-1"))
    app, rt = make_app(fake)
    client = app.test_client()
    resp = client.post("/scheduler/bind", json={"PodName": "p", "PodNamespace": "default",
                                                 "PodUID": "u-1", "Node": "n1"})
    assert resp.get_json() == {"Error": ""}
    assert fake.api_events == {}  # the verb only enqueued
    rt.recorder.process()
    [event] = fake.api_events.values()
    assert event["note"] == f"allocated card 0 of node n1 (policy {DEFAULT_POLICY})"
    assert event["regarding"]["uid"] == "u-1"
    metrics = client.get("/metrics").get_data(as_text=True)
    assert 'tessera_allocator_events_total{outcome="created"} 1.0' in metrics


def test_due_series_are_looked_for_once_a_tick_not_after_every_event() -> None:
    """Looking for due updates walks every tracked series: per event, thousands of them
    cost more than the event."""
    looked: list[float] = []

    class Counting(Correlator):
        def due(self, now: float) -> list[Write]:
            looked.append(now)
            return super().due(now)

    fake = FakeKube()
    now = [NOW]
    rec = EventRecorder(fake, "r", correlator=Counting(), clock=lambda: now[0])
    for i in range(5):
        rec.allocated(PodRef("ns", f"p{i}", f"u{i}"), "n1", (0,), "binpack")
        rec.process()
    assert looked == [NOW]
    assert len(fake.api_events) == 5  # every event still sent at once
    now[0] += TICK_SECONDS
    rec.process()
    assert looked == [NOW, NOW + TICK_SECONDS]


def test_the_allocated_event_names_each_card_of_a_share_on_several_cards() -> None:
    alloc = Allocation("n1", (ContainerAllocation("main", (1, 3), 20, 3000),))
    spec = events.allocated(PodRef("ns", "p", "u"), "n1", alloc.card_indices(), "fgd")
    assert spec.note == "allocated cards 1,3 of node n1 (policy fgd)"
