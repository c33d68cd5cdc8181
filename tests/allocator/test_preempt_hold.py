"""A preemption's life after the decision (allocator/verbs/preempt.py, issue 47 items 2 and
4): the evictions off filter's thread, the note a restarted allocator reads back, the end by
bind, deletion or deadline (with its Event), one hold of the freed room, and bad input."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from alloc_harness import NOW, make_app
from builders import VOCAB
from fake_kube import FakeKube
from preempting_cluster import WHOLE, full_node, priority_pod

from allocator.decisions import PodRef
from allocator.errors import ApiError, NotReady
from allocator.service.app import Runtime
from allocator.verbs.config import AllocatorConfig
from allocator.verbs.evictions import Worker
from allocator.verbs.preempt import DEADLINE_SECONDS, Preempt
from allocator.verbs.preempt_note import Note, decode_note, encode_note

NOTE = VOCAB.preemption_annotation


def _app(fake: FakeKube) -> Runtime:
    _flask, rt = make_app(fake, core=AllocatorConfig(preemption=True))
    return rt


def _full_node() -> tuple[FakeKube, Runtime]:
    fake, _flask, rt = full_node()
    return fake, rt


def _preempt(rt: Runtime) -> Preempt:
    assert rt.preempt is not None
    return rt.preempt


def _filter(rt: Runtime, fake: FakeKube, name: str, nodes: list[str] | None = None
            ) -> list[str]:
    out = rt.allocator.filter(fake.get_pod("default", name), nodes or ["n1"]).nodes
    _preempt(rt).worker.drain()
    return out


def _evicted(fake: FakeKube) -> list[str]:
    return [name for call, name in fake.calls if call == "create_eviction"]


def _watch_sees_gone(rt: Runtime, names: list[str]) -> None:
    for name in names:
        rt.state.remove_pod({"metadata": {"uid": f"u-{name}"}})


def _preempted_for_big(priority: int = 100) -> tuple[FakeKube, Runtime, list[str]]:
    fake, rt = _full_node()
    fake.add_pod(priority_pod("big", WHOLE, priority))
    _filter(rt, fake, "big")
    return fake, rt, _evicted(fake)


def _held(rt: Runtime, uid: str) -> bool:
    record = rt.state.record(uid)
    return record is not None and record.stage == "held"


# ------------------------------------------------------------------ the note
def test_a_note_reads_back_as_written() -> None:
    note = Note("n1", (0, 3), NOW + 60.25, ("u-a", "u-b"))
    assert decode_note(encode_note(note)) == note


@pytest.mark.parametrize("text", [
    None, 7, "", "not json", "[]", '{"node":"","cards":[0],"until":1}',
    '{"node":"n1","cards":"0","until":1}', '{"node":"n1","cards":[true],"until":1}',
    '{"node":"n1","cards":[0],"until":"soon"}', '{"node":"n1","cards":[0],"until":1e999}',
    '{"node":"n1","cards":[0],"until":1,"victims":[1]}',
    '{"node":"n1","cards":[' + ",".join(["0"] * 65) + '],"until":1}',
    "x" * 10_000,
])
def test_an_unreadable_note_is_no_note(text: object) -> None:
    assert decode_note(text) is None


def test_a_note_without_victims_reads_as_none_named() -> None:
    assert decode_note('{"node":"n1","cards":[1],"until":5}') == Note("n1", (1,), 5.0, ())


# ------------------------------------------------------------------ off filter's thread
def test_filter_answers_before_any_eviction_and_the_worker_evicts_in_order() -> None:
    fake, rt = _full_node()
    fake.add_pod(priority_pod("big", WHOLE, 100))
    assert rt.allocator.filter(fake.get_pod("default", "big"), ["n1"]).nodes == []
    assert _evicted(fake) == []  # filter only queued the work
    (flight,) = _preempt(rt).snapshot()
    assert flight.pod.name == "big" and flight.node == "n1" and len(flight.victims) == 2
    _preempt(rt).worker.drain()
    assert [f"u-{name}" for name in _evicted(fake)] == list(flight.victims)
    note = decode_note(fake.get_pod("default", "big")["metadata"]["annotations"][NOTE])
    assert note == Note("n1", flight.cards, NOW + DEADLINE_SECONDS, flight.victims)


def test_a_full_queue_starts_nothing_and_the_pod_is_looked_at_again_later() -> None:
    fake, rt = _full_node()
    preempt = _preempt(rt)
    preempt.worker = Worker(preempt.tick, size=1)
    assert preempt.worker.submit(lambda: None)  # the queue is full now
    fake.add_pod(priority_pod("big", WHOLE, 100))
    rt.allocator.filter(fake.get_pod("default", "big"), ["n1"])
    preempt.worker.drain()
    assert _evicted(fake) == [] and preempt.snapshot() == ()
    assert NOTE not in fake.get_pod("default", "big")["metadata"].get("annotations", {})


def test_a_preemptor_deleted_while_its_work_is_queued_evicts_nobody() -> None:
    fake, rt = _full_node()
    fake.add_pod(priority_pod("big", WHOLE, 100))
    rt.allocator.filter(fake.get_pod("default", "big"), ["n1"])
    rt.state.remove_pod(fake.get_pod("default", "big"))  # the watch sees it deleted
    _preempt(rt).worker.drain()
    assert _evicted(fake) == []


# ------------------------------------------------------------------ restart and new leader
def test_a_restarted_allocator_holds_the_freed_card_for_the_preemptor() -> None:
    fake, rt, evicted = _preempted_for_big()
    freed = set(_preempt(rt).snapshot()[0].cards)
    # The allocator dies before its watch saw the victims go; a new one starts.
    after = _app(fake)
    assert _held(after, "u-") is False
    _preempt(after).worker.drain()  # its first tick: synced and leader, it restores
    assert _held(after, "u-big")
    held = after.state.record("u-big")
    assert held is not None
    assert {i for c in held.allocation.containers for i in c.card_indices} == freed
    fake.add_pod(priority_pod("small", WHOLE, 1))
    assert _filter(after, fake, "small") == []  # a lower-priority pod created meanwhile
    assert _evicted(fake) == evicted
    assert _filter(after, fake, "big") == ["n1"]


def test_a_restarted_allocator_restores_before_its_first_answer() -> None:
    fake, _rt, _gone = _preempted_for_big()
    fake.add_pod(priority_pod("small", WHOLE, 1))
    after = _app(fake)  # no tick of its worker yet
    assert after.allocator.filter(fake.get_pod("default", "small"), ["n1"]).nodes == []
    assert _held(after, "u-big")


def test_a_restore_the_api_fails_is_tried_again_at_the_next_verb() -> None:
    fake, _rt, _gone = _preempted_for_big()
    fake.add_pod(priority_pod("small", WHOLE, 1))
    after = _app(fake)
    fake.fail("list_pods_by_field", ApiError("service unavailable", 503))
    with pytest.raises(NotReady):  # no answer on a picture without the preemption's hold
        after.allocator.filter(fake.get_pod("default", "small"), ["n1"])
    assert _filter(after, fake, "small") == [] and _held(after, "u-big")


def test_a_restored_preemption_evicts_the_victims_left_and_waits_for_them_to_go() -> None:
    fake, _rt = _full_node()
    fake.add_pod(priority_pod("big", WHOLE, 100))
    # The last leader wrote the note and died before its evictions.
    note = Note("n1", (0,), NOW + 30, ("u-a", "u-b"))
    fake.patch_pod("default", "big", {"metadata": {"annotations": {NOTE: encode_note(note)}}})
    after = _app(fake)
    _preempt(after).worker.drain()
    assert _evicted(fake) == ["a", "b"]
    (flight,) = _preempt(after).snapshot()
    assert flight.until == NOW + 30 and not _held(after, "u-big")
    _watch_sees_gone(after, ["a"])
    assert not _held(after, "u-big")
    _watch_sees_gone(after, ["b"])
    assert _held(after, "u-big")


def test_a_note_past_its_deadline_is_cleared_at_restore_and_a_far_one_is_capped() -> None:
    fake, _rt = _full_node()
    for name, until in (("late", NOW - 1), ("far", NOW + 10 * DEADLINE_SECONDS)):
        fake.add_pod(priority_pod(name, WHOLE, 100))
        fake.patch_pod("default", name, {"metadata": {"annotations": {
            NOTE: encode_note(Note("n1", (0,), until))}}})
    after = _app(fake)
    _preempt(after).worker.drain()
    assert NOTE not in fake.get_pod("default", "late")["metadata"]["annotations"]
    (flight,) = _preempt(after).snapshot()
    assert flight.pod.name == "far" and flight.until == NOW + DEADLINE_SECONDS


def test_a_follower_restores_only_once_it_leads_and_again_after_each_gain() -> None:
    fake, _rt, _gone = _preempted_for_big()
    leading = [False]
    after = _app(fake)
    preempt = _preempt(after)
    preempt.ready = lambda: leading[0]
    preempt.worker.drain()
    assert preempt.snapshot() == ()
    leading[0] = True
    preempt.worker.drain()
    assert [f.pod.name for f in preempt.snapshot()] == ["big"]
    preempt.allocated(PodRef("default", "big", "u-big"), "n1", (0,), "binpack")
    preempt.worker.drain()
    assert preempt.snapshot() == ()  # restored once per leadership
    leading[0] = False
    preempt.worker.drain()
    leading[0] = True
    preempt.worker.drain()
    assert [f.pod.name for f in preempt.snapshot()] == ["big"]


# ------------------------------------------------------------------ the end
def test_a_preemptor_deleted_before_its_victims_are_gone_gets_no_hold() -> None:
    fake, rt, evicted = _preempted_for_big()
    rt.state.remove_pod(fake.get_pod("default", "big"))
    _watch_sees_gone(rt, evicted)
    assert rt.state.record("u-big") is None and _preempt(rt).snapshot() == ()
    fake.add_pod(priority_pod("next", WHOLE, 1))
    assert _filter(rt, fake, "next") == ["n1"]  # the freed card is the next pod's


def test_a_deleted_preemptors_hold_goes_to_the_next_refused_pod() -> None:
    fake, rt, evicted = _preempted_for_big()
    fake.add_pod(priority_pod("next", WHOLE, 1))
    _watch_sees_gone(rt, evicted)
    assert _filter(rt, fake, "next") == []  # held for big
    rt.state.remove_pod(fake.get_pod("default", "big"))
    assert rt.state.record("u-big") is None
    assert _filter(rt, fake, "next") == ["n1"]


def test_a_hold_for_a_preemptor_deleted_unseen_by_the_watch_goes_to_the_next_pod() -> None:
    # With node resources on, the picture watches bound pods only: a pending pod's deletion
    # reaches it never. The hold is checked against the API as soon as it is placed.
    fake, rt, evicted = _preempted_for_big()
    fake.add_pod(priority_pod("next", WHOLE, 1))
    assert _filter(rt, fake, "next") == []
    fake.delete_pod("default", "big")
    _watch_sees_gone(rt, evicted)
    _preempt(rt).worker.drain()
    assert rt.state.record("u-big") is None and _preempt(rt).snapshot() == ()
    assert _filter(rt, fake, "next") == ["n1"]


def test_a_preemptor_deleted_unseen_before_its_victims_go_is_forgotten_at_the_next_check(
        ) -> None:
    fake, rt, evicted = _preempted_for_big()
    fake.delete_pod("default", "big")
    _preempt(rt).tick(NOW + 5)
    assert _preempt(rt).snapshot() == ()
    _watch_sees_gone(rt, evicted)
    assert rt.state.record("u-big") is None


@pytest.mark.parametrize("victims_go", [True, False], ids=["held", "victims-stuck"])
def test_the_deadline_frees_the_hold_with_an_event_and_clears_note_and_nomination(
        victims_go: bool) -> None:
    fake, rt, evicted = _preempted_for_big()
    if victims_go:
        _watch_sees_gone(rt, evicted)
        assert _held(rt, "u-big")
    _preempt(rt).tick(NOW + DEADLINE_SECONDS + 1)
    assert rt.state.record("u-big") is None and _preempt(rt).snapshot() == ()
    big = fake.get_pod("default", "big")
    assert NOTE not in big["metadata"]["annotations"]
    assert big["status"].get("nominatedNodeName") is None
    rt.recorder.process()
    expired = [e for e in fake.api_events.values() if e["reason"] == "PreemptionExpired"]
    assert [e["regarding"]["name"] for e in expired] == ["big"]
    assert "node n1" in expired[0]["note"]


def test_a_nomination_kube_scheduler_changed_is_left_alone_at_the_deadline() -> None:
    fake, rt, _gone = _preempted_for_big()
    fake.patch_pod_status("default", "big", {"status": {"nominatedNodeName": "n9"}})
    _preempt(rt).tick(NOW + DEADLINE_SECONDS + 1)
    assert fake.get_pod("default", "big")["status"]["nominatedNodeName"] == "n9"


# ------------------------------------------------------------------ one hold of released room
def test_the_hold_asks_the_preemptor_again_through_the_requeue() -> None:
    fake, rt, evicted = _preempted_for_big()
    requeue = rt.allocator.requeue
    assert requeue is not None
    held_before = requeue.held
    _watch_sees_gone(rt, evicted)
    assert requeue.held == held_before + 1
    stop = threading.Event()
    asking = threading.Thread(target=requeue.run, args=(stop,), daemon=True)
    asking.start()
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not any(
                name == "big" and VOCAB.requeue_annotation in
                (patch.get("metadata") or {}).get("annotations", {})
                for name, patch in fake.patches):
            time.sleep(0.01)
    finally:
        stop.set()
        asking.join(timeout=5)
    assert VOCAB.requeue_annotation in fake.get_pod("default", "big")["metadata"]["annotations"]


def test_a_pod_of_higher_priority_takes_the_preemptors_hold() -> None:
    fake, rt, evicted = _preempted_for_big()
    _watch_sees_gone(rt, evicted)
    fake.add_pod(priority_pod("urgent", WHOLE, 500))
    assert _filter(rt, fake, "urgent") == ["n1"]
    assert rt.state.record("u-big") is None or not _held(rt, "u-big")


def test_a_preemptor_whose_hold_was_taken_preempts_again_at_its_next_refusal() -> None:
    fake, rt, evicted = _preempted_for_big()
    _watch_sees_gone(rt, evicted)
    fake.add_pod(priority_pod("urgent", WHOLE, 500))
    _filter(rt, fake, "urgent")  # takes the held card: the preemption for big is over
    rt.allocator.bind("default", "urgent", "u-urgent", "n1")
    assert _preempt(rt).snapshot() == ()
    assert _filter(rt, fake, "big") == []
    again = _evicted(fake)[len(evicted):]  # kube-scheduler's next attempt preempts again
    assert len(again) == 2 and not set(again) & set(evicted)
    (flight,) = _preempt(rt).snapshot()
    assert flight.pod.name == "big"


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize("spec", [
    {},  # a priority and no class
    {"priorityClassName": "deleted-since"},  # a class gone since admission
], ids=["no-class", "class-gone"])
def test_priority_is_read_from_the_pod(spec: dict[str, Any]) -> None:
    fake, rt = _full_node()
    fake.add_pod(priority_pod("big", WHOLE, 100, **spec))
    _filter(rt, fake, "big")
    assert len(_evicted(fake)) == 2


def test_a_budget_over_everything_is_weighed_and_the_api_server_decides() -> None:
    fake, rt = _full_node()
    fake.budgets.append({"metadata": {"name": "all", "namespace": "default"},
                         "spec": {"selector": {}}, "status": {"disruptionsAllowed": 0}})
    fake.add_pod(priority_pod("big", WHOLE, 100))
    _filter(rt, fake, "big")
    assert len(_evicted(fake)) == 2  # the only node: kube-scheduler preempts too


@pytest.mark.parametrize("fault", [ApiError("timed out", 504), TimeoutError("read timed out")],
                         ids=["api-error", "timeout"])
def test_an_eviction_that_fails_stops_the_preemption_and_the_deadline_ends_it(
        fault: BaseException) -> None:
    fake, rt = _full_node()
    fake.fail("create_eviction", fault)
    fake.add_pod(priority_pod("big", WHOLE, 100))
    _filter(rt, fake, "big")
    assert len(fake.pods) == 5  # nobody evicted, nobody deleted
    _preempt(rt).tick(NOW + DEADLINE_SECONDS + 1)
    assert _preempt(rt).snapshot() == ()
    assert NOTE not in fake.get_pod("default", "big")["metadata"]["annotations"]


def test_the_worker_goes_on_after_a_failing_job_and_refuses_beyond_its_bound() -> None:
    done: list[str] = []
    worker = Worker(lambda: done.append("tick"), size=2)

    def boom() -> None:
        raise RuntimeError("a bug")

    assert worker.submit(boom) and worker.submit(lambda: done.append("next"))
    assert not worker.submit(lambda: done.append("third"))  # full: refused, not waited for
    stop = threading.Event()
    running = threading.Thread(target=worker.run, args=(stop,), daemon=True)
    running.start()
    deadline = time.monotonic() + 5
    while "next" not in done and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    running.join(timeout=5)
    assert "next" in done and "third" not in done and not running.is_alive()


def test_a_preemptor_bound_while_its_note_is_written_evicts_nobody_and_keeps_no_note() -> None:
    fake, rt = _full_node()
    fake.add_pod(priority_pod("big", WHOLE, 100))
    preempt = _preempt(rt)
    patch_pod = fake.patch_pod

    def bound_meanwhile(namespace: str, name: str, patch: dict[str, Any]) -> Any:
        answer = patch_pod(namespace, name, patch)
        if NOTE in (patch.get("metadata") or {}).get("annotations", {}) and patch[
                "metadata"]["annotations"][NOTE]:
            # kube-scheduler bound the pod elsewhere (room held by the requeue) just now.
            preempt.allocated(PodRef("default", "big", "u-big"), "n0", (0,), "fgd")
        return answer

    fake.patch_pod = bound_meanwhile  # type: ignore[method-assign]
    rt.allocator.filter(fake.get_pod("default", "big"), ["n1"])
    preempt.worker.drain()
    assert _evicted(fake) == []
    assert NOTE not in fake.get_pod("default", "big")["metadata"].get("annotations", {})
