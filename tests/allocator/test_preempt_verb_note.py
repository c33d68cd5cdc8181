"""The ``preemptVerb``'s answer noted on the preemptor before it goes back to kube-scheduler
(allocator/verbs/preempt_answers.py, decision 0026): a restarted allocator or a new leader
restores its reservation and hold from that note, and never evicts its victims (kube-scheduler
deletes them); a note filter's path wrote before ``evictor`` existed still reads as its own."""

from __future__ import annotations

from typing import Any

import pytest
from alloc_harness import NOW, make_app
from builders import VOCAB
from fake_kube import FakeKube
from flask import Flask
from preempting_cluster import WHOLE, full_node, priority_pod

from allocator.errors import ApiError
from allocator.service.app import Runtime
from allocator.verbs.config import AllocatorConfig
from allocator.verbs.preempt import DEADLINE_SECONDS, Preempt
from allocator.verbs.preempt_note import ALLOCATOR, KUBE_SCHEDULER, Note, decode_note, encode_note

URL = "/scheduler/preempt"
NOTE = VOCAB.preemption_annotation


def _preempt(rt: Runtime) -> Preempt:
    assert rt.preempt is not None
    return rt.preempt


def _ask(app: Flask, fake: FakeKube, name: str, proposed: list[str]) -> dict[str, set[str]]:
    """kube-scheduler's call (its own victims ``proposed`` on n1), and the answer by node."""
    body = {"Pod": fake.get_pod("default", name), "NodeNameToMetaVictims": {
        "n1": {"Pods": [{"UID": f"u-{n}"} for n in proposed], "NumPDBViolations": 0}}}
    resp = app.test_client().post(URL, json=body)
    assert resp.status_code == 200
    return {node: {p["UID"] for p in v["Pods"]}
            for node, v in resp.get_json()["NodeNameToMetaVictims"].items()}


def _note(fake: FakeKube, name: str) -> Note | None:
    return decode_note(fake.get_pod("default", name)["metadata"].get("annotations", {})
                       .get(NOTE))


def _evicted(fake: FakeKube) -> list[str]:
    return [name for call, name in fake.calls if call == "create_eviction"]


def _held_cards(rt: Runtime, uid: str) -> set[int] | None:
    record = rt.state.record(uid)
    if record is None or record.stage != "held":
        return None
    return {i for c in record.allocation.containers for i in c.card_indices}


def _restarted(fake: FakeKube) -> Runtime:
    """A new allocator over the same API (a restart, or a new leader), after its first tick."""
    _app, rt = make_app(fake, core=AllocatorConfig(preemption=True))
    _preempt(rt).worker.drain()
    return rt


def _answered_big() -> tuple[FakeKube, Flask, Runtime, set[str]]:
    fake, app, rt = full_node()
    fake.add_pod(priority_pod("big", WHOLE, 100))
    (victims,) = _ask(app, fake, "big", ["d"]).values()
    return fake, app, rt, victims


def _kube_scheduler_deletes(fake: FakeKube, uids: set[str]) -> None:
    for uid in sorted(uids):
        fake.delete_pod("default", uid.removeprefix("u-"))


# ------------------------------------------------------------------ the note
def test_the_answer_is_noted_on_the_pod_before_it_goes_back() -> None:
    fake, _app, rt, victims = _answered_big()
    (flight,) = _preempt(rt).snapshot()
    # There when kube-scheduler reads the answer, so before it deletes anybody.
    assert _note(fake, "big") == Note("n1", flight.cards, NOW + DEADLINE_SECONDS,
                                      flight.victims, KUBE_SCHEDULER)
    assert set(flight.victims) == victims and flight.evictor == KUBE_SCHEDULER
    # kube-scheduler nominates the pod itself; the allocator evicts nobody.
    assert [c for c, _ in fake.calls if c == "patch_pod_status"] == []
    assert _evicted(fake) == []


@pytest.mark.parametrize("note", [
    Note("n1", (0, 3), NOW + 60.25, ("u-a", "u-b"), KUBE_SCHEDULER),
    Note("n1", (1,), NOW, ("u-a",), ALLOCATOR),
])
def test_a_note_with_its_evictor_reads_back_as_written(note: Note) -> None:
    assert decode_note(encode_note(note)) == note


def test_a_note_written_before_the_evictor_existed_is_filters_paths() -> None:
    old = '{"node":"n1","cards":[1],"until":5,"victims":["u-a"]}'
    assert decode_note(old) == Note("n1", (1,), 5.0, ("u-a",), ALLOCATOR)


@pytest.mark.parametrize("evictor", ['"kubelet"', '""', "1", "true", '["allocator"]'])
def test_a_note_naming_an_unknown_evictor_is_no_note(evictor: str) -> None:
    assert decode_note('{"node":"n1","cards":[1],"until":5,"evictor":' + evictor + '}') is None


def test_a_note_the_api_refuses_is_answered_with_no_candidates() -> None:
    fake, app, rt = full_node()
    fake.add_pod(priority_pod("big", WHOLE, 100))
    fake.fail("patch_pod", ApiError("service unavailable", 503))
    assert _ask(app, fake, "big", ["d"]) == {}  # kube-scheduler deletes nobody
    assert _preempt(rt).snapshot() == () and _note(fake, "big") is None
    assert app.test_client().get("/status").get_json()["preemptVerb"]["none"] == 1
    # Nothing stands in the way of the next attempt.
    assert _ask(app, fake, "big", ["d"]) != {} and _note(fake, "big") is not None


# ------------------------------------------------------------------ restart, new leader
def test_a_restarted_allocator_keeps_the_freed_card_for_the_preemptor() -> None:
    fake, _app, rt, victims = _answered_big()
    freed = set(_preempt(rt).snapshot()[0].cards)
    # kube-scheduler deletes the victims; the allocator dies before its watch saw them go.
    _kube_scheduler_deletes(fake, victims)
    after = _restarted(fake)
    (flight,) = _preempt(after).snapshot()
    assert (flight.pod.name, flight.evictor, flight.node) == ("big", KUBE_SCHEDULER, "n1")
    assert _held_cards(after, "u-big") == freed
    fake.add_pod(priority_pod("low", WHOLE, 1))
    assert after.allocator.filter(fake.get_pod("default", "low"), ["n1"]).nodes == []
    assert after.allocator.filter(fake.get_pod("default", "big"), ["n1"]).nodes == ["n1"]
    _preempt(after).worker.drain()
    assert _evicted(fake) == []


def test_a_restored_answer_evicts_none_of_its_victims_and_waits_for_kube_scheduler() -> None:
    fake, _app, _rt, victims = _answered_big()
    after = _restarted(fake)  # the victims not deleted yet
    big = fake.get_pod("default", "big")
    assert after.allocator.filter(big, ["n1"]).nodes == []  # refused: filter's path claims
    _preempt(after).worker.drain()  # nothing for the pod, and the restore evicts nobody
    assert _evicted(fake) == [] and _held_cards(after, "u-big") is None
    for uid in sorted(victims):  # kube-scheduler deleted them; the watch sees them go
        after.state.remove_pod({"metadata": {"uid": uid}})
    assert _held_cards(after, "u-big") is not None
    assert after.allocator.filter(big, ["n1"]).nodes == ["n1"]


def test_an_answer_lost_with_the_allocator_is_answered_again_at_once() -> None:
    # The note was written, then the allocator died before its answer went back: nobody
    # was deleted, and kube-scheduler, which got no answer, asks the new leader.
    fake, _app, _rt, victims = _answered_big()
    after_app, after = make_app(fake, core=AllocatorConfig(preemption=True))
    _preempt(after).worker.drain()
    assert _ask(after_app, fake, "big", ["d"]) == {"n1": victims}
    assert [f.evictor for f in _preempt(after).snapshot()] == [KUBE_SCHEDULER]
    assert _evicted(fake) == []


def test_a_replaced_answer_is_counted_as_ended_and_its_successor_as_begun() -> None:
    fake, app, rt, victims = _answered_big()
    assert _ask(app, fake, "big", ["d"]) == {"n1": victims}
    sample = rt.metrics.registry.get_sample_value
    assert sample("tessera_allocator_preemptions_total") == 2
    assert sample("tessera_allocator_preemptions_ended_total", {"outcome": "forgotten"}) == 1
    assert sample("tessera_allocator_preemptions_in_flight") == 1


def test_an_answer_whose_cards_are_held_is_not_replaced() -> None:
    fake, app, rt, victims = _answered_big()
    for uid in sorted(victims):
        rt.state.remove_pod({"metadata": {"uid": uid}})
    assert _held_cards(rt, "u-big") is not None
    assert _ask(app, fake, "big", ["c"]) == {}


def test_an_answer_replaced_by_one_left_whole_replaces_its_note() -> None:
    fake, app, _rt, victims = _answered_big()
    # kube-scheduler's next proposal frees a whole card by itself: answered as it came, over
    # no node of ours, so nothing is reserved and no restore may bring the first one back.
    assert _ask(app, fake, "big", sorted(v.removeprefix("u-") for v in victims)) == {
        "n1": victims}
    assert _note(fake, "big") == Note("", (), NOW + DEADLINE_SECONDS, tuple(sorted(victims)),
                                      KUBE_SCHEDULER)
    after = _preempt(_restarted(fake))
    assert after.snapshot() == () and after.in_flight["u-big"].node == ""


def test_a_restored_preemption_of_filters_path_keeps_the_verb_away() -> None:
    fake, _app, _rt = full_node()
    fake.add_pod(priority_pod("big", WHOLE, 100))
    note = Note("n1", (0,), NOW + 30, ("u-a", "u-b"))  # filter's path: the allocator evicts
    fake.patch_pod("default", "big", {"metadata": {"annotations": {NOTE: encode_note(note)}}})
    after_app, after = make_app(fake, core=AllocatorConfig(preemption=True))
    _preempt(after).worker.drain()
    assert sorted(_evicted(fake)) == ["a", "b"]
    assert _ask(after_app, fake, "big", ["d"]) == {}  # kube-scheduler evicts nobody more


def _status_preemptions(app: Flask) -> list[dict[str, Any]]:
    doc: list[dict[str, Any]] = app.test_client().get("/status").get_json()["preemptions"]
    return doc


def test_status_says_who_evicts() -> None:
    _fake, app, _rt, _victims = _answered_big()
    assert [p["evictor"] for p in _status_preemptions(app)] == [KUBE_SCHEDULER]


# ------------------------------------------------------------------ an answer over several nodes
#: kube-scheduler's own victims (c, d: card 1 of n1) free a whole card: answered as proposed,
#: remembered without a node (kube-scheduler picks the node).
WHOLE_CARD = ["c", "d"]


def _answered_whole() -> tuple[FakeKube, Flask, Runtime]:
    fake, app, rt = full_node()
    fake.add_pod(priority_pod("big", WHOLE, 100))
    assert _ask(app, fake, "big", WHOLE_CARD) == {"n1": {"u-c", "u-d"}}
    return fake, app, rt


def test_an_answer_left_whole_is_noted_without_a_node() -> None:
    fake, _app, rt = _answered_whole()
    assert _note(fake, "big") == Note("", (), NOW + DEADLINE_SECONDS, ("u-c", "u-d"),
                                      KUBE_SCHEDULER)
    assert _preempt(rt).snapshot() == ()  # no reservation, no hold, nothing on /status
    assert _evicted(fake) == [] and [c for c, _ in fake.calls if c == "patch_pod_status"] == []


def test_an_answer_left_whole_whose_note_the_api_refuses_is_no_candidates() -> None:
    fake, app, rt = full_node()
    fake.add_pod(priority_pod("big", WHOLE, 100))
    fake.fail("patch_pod", ApiError("service unavailable", 503))
    assert _ask(app, fake, "big", WHOLE_CARD) == {}  # the note comes before the answer
    assert "u-big" not in _preempt(rt).in_flight and _note(fake, "big") is None


def test_a_restarted_allocator_evicts_nobody_for_an_answer_left_whole() -> None:
    fake, _app, _rt = _answered_whole()
    after = _restarted(fake)  # kube-scheduler has not deleted c and d yet
    flight = _preempt(after).in_flight["u-big"]
    assert (flight.node, flight.cards, flight.evictor) == ("", (), KUBE_SCHEDULER)
    big = fake.get_pod("default", "big")
    assert after.allocator.filter(big, ["n1"]).nodes == []  # refused, and filter's path waits
    _preempt(after).worker.drain()
    assert _evicted(fake) == [] and _held_cards(after, "u-big") is None
    assert _note(fake, "big") is not None


def test_the_deadline_clears_a_note_without_a_node() -> None:
    fake, _app, _rt = _answered_whole()
    after = _preempt(_restarted(fake))
    assert after.in_flight["u-big"].until == NOW + DEADLINE_SECONDS
    after.tick(NOW + DEADLINE_SECONDS + 1)
    assert "u-big" not in after.in_flight and _raw_note(fake, "big") is None
    assert [c for c, _ in fake.calls if c == "patch_pod_status"] == []  # the nomination stays


def test_a_note_without_a_node_past_its_deadline_is_cleared_at_restore() -> None:
    fake, _app, _rt = full_node()
    fake.add_pod(priority_pod("big", WHOLE, 100))
    late = Note("", (), NOW - 1, ("u-c",), KUBE_SCHEDULER)
    fake.patch_pod("default", "big", {"metadata": {"annotations": {NOTE: encode_note(late)}}})
    after = _preempt(_restarted(fake))
    assert "u-big" not in after.in_flight and _raw_note(fake, "big") is None


def _raw_note(fake: FakeKube, name: str) -> object:
    return fake.get_pod("default", name)["metadata"].get("annotations", {}).get(NOTE)


def test_a_note_without_a_node_reads_back_as_written() -> None:
    note = Note("", (), NOW + 5, ("u-c", "u-d"), KUBE_SCHEDULER)
    assert decode_note(encode_note(note)) == note


@pytest.mark.parametrize("text", [
    '{"node":"","cards":[],"until":5,"evictor":"allocator"}',  # filter's path needs a node
    '{"node":"","cards":[],"until":5}',  # no evictor: filter's path's
    '{"node":"","cards":[1],"until":5,"evictor":"kube-scheduler"}',  # cards but no node
])
def test_a_note_without_a_node_is_no_note_unless_kube_schedulers_and_cardless(
        text: str) -> None:
    assert decode_note(text) is None
