"""Priority holds when room appears (issue 47, item 4): room a release leaves goes to the
highest-priority refused pod that fits it, not to a lower-priority pod kube-scheduler filters
first (allocator/verbs/requeue.py, allocator/verbs/priority.py)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from alloc_harness import make_app
from builders import make_gpu_pod, make_node, request, whole
from fake_kube import FakeKube

from allocator.decisions import PodRef
from allocator.picture.records import Stage
from allocator.service.app import Runtime
from allocator.verbs.config import AllocatorConfig
from allocator.verbs.priority import pod_priority
from allocator.verbs.requeue import Refused, RequeueOnRelease

WHOLE = request(whole())


def _pod(name: str, priority: int, how: str) -> dict[str, Any]:
    pod = make_gpu_pod(name, WHOLE, uid=f"u-{name}")
    if how == "genius":
        pod["metadata"].setdefault("labels", {})["genius/priority"] = str(priority)
    else:  # a PriorityClass, as the Priority admission plugin fills it in
        pod["spec"].update(priorityClassName=f"class-{priority}", priority=priority)
    return pod


def _full_node() -> tuple[FakeKube, Any, Runtime]:
    """n1 has one card, taken by "holder" (bound through the allocator)."""
    fake = FakeKube()
    fake.add_node(make_node("n1", count=1))
    fake.add_pod(make_gpu_pod("holder", WHOLE, uid="u-holder"))
    # Preemption off: with it (on by default) the pods of higher priority here would evict
    # the holder (tests/allocator/test_preempt.py); this file tests room that appears.
    app, rt = make_app(fake, core=AllocatorConfig(preemption=False))
    rt.allocator.bind("default", "holder", "u-holder", "n1")
    return fake, app, rt


def _filter(app: Any, pod: dict[str, Any]) -> dict[str, Any]:
    reply: dict[str, Any] = app.test_client().post("/scheduler/filter", json={
        "Pod": pod, "Nodes": None, "NodeNames": ["n1"]}).get_json()
    return reply


@pytest.mark.parametrize("how", ["genius", "class"])
def test_the_freed_card_goes_to_the_high_priority_pod_not_the_one_filtered_first(
        how: str) -> None:
    fake, app, rt = _full_node()
    high, low = _pod("high", 9, how), _pod("low", 1, how)
    for pod in (high, low):
        fake.add_pod(pod)
    # The holder is deleted: kube-scheduler retries "high" on the event before our watch has
    # applied it, so "high" is refused on the stale picture.
    assert _filter(app, high)["FailedNodes"] == {"n1": "needs 1 whole card (0 free)"}
    rt.state.remove_pod(fake.get_pod("default", "holder"))  # our watch catches up
    # "low" is filtered before "high" is asked again: the card is held for "high".
    reply = _filter(app, low)
    assert reply["NodeNames"] == []
    assert "n1" in reply["FailedNodes"]
    record = rt.state.record("u-high")
    assert record is not None and record.node == "n1" and record.stage is Stage.HELD
    requeue = rt.allocator.requeue
    assert requeue is not None and requeue.held == 1
    # "high" is asked again (the asking thread's queue), and its filter and bind get the card.
    assert requeue.due() == [] and list(requeue._asking) == ["u-high"]
    assert _filter(app, high)["NodeNames"] == ["n1"]
    rt.allocator.bind("default", "high", "u-high", "n1")
    record = rt.state.record("u-high")
    assert record is not None and record.node == "n1" and record.stage is not Stage.HELD
    assert _filter(app, low)["NodeNames"] == []  # still none: the card is high's


def test_the_hold_ends_when_its_pod_is_deleted_and_the_room_is_free_again() -> None:
    fake, app, rt = _full_node()
    high, low = _pod("high", 9, "genius"), _pod("low", 1, "genius")
    assert _filter(app, high)["NodeNames"] == []
    rt.state.remove_pod(fake.get_pod("default", "holder"))
    assert _filter(app, low)["NodeNames"] == []
    rt.state.remove_pod(high)  # deleted before it was asked again
    assert _filter(app, low)["NodeNames"] == ["n1"]


def test_a_pod_of_higher_priority_than_the_held_for_one_takes_the_room() -> None:
    """As kube-scheduler's queue would pop it first; an equal one does not."""
    fake, app, rt = _full_node()
    low, same, top = (_pod("low", 1, "class"), _pod("same", 1, "class"),
                      _pod("top", 20, "class"))
    assert _filter(app, low)["NodeNames"] == []
    rt.state.remove_pod(fake.get_pod("default", "holder"))
    assert _filter(app, same)["NodeNames"] == []  # held for "low", refused first
    assert _filter(app, top)["NodeNames"] == ["n1"]
    record = rt.state.record("u-top")
    assert record is not None and record.stage is Stage.HELD
    assert rt.state.record("u-low") is None
    assert _filter(app, low)["NodeNames"] == []  # asked again: the room is top's


def test_a_refusal_judged_before_a_release_and_recorded_after_it_is_judged_again() -> None:
    """The race that left the requeue idle: the release applied between filter's judging and
    the refusal's record, while nothing else was remembered (the release not even noted)."""
    asked: list[PodRef] = []
    requeue = RequeueOnRelease(lambda _request, node: node == "n1", asked.append)
    pod = PodRef("default", "high", "u-high")
    mark = requeue.mark()
    requeue.released("n1")  # the watch, while filter judged on the stale picture
    requeue.refused(pod, WHOLE, 9, nodes=["n1"], since=mark)
    assert requeue.due() == [pod]


def test_room_is_held_only_on_nodes_the_pod_lacked_room_on() -> None:
    held: list[tuple[str, str]] = []
    requeue = RequeueOnRelease(lambda _request, _node: True, lambda _pod: None,
                               hold=lambda r, node: held.append((r.pod.uid, node)) is None)
    requeue.refused(PodRef("default", "high", "u-high"), WHOLE, 9, nodes=["n2"])
    requeue.refused(PodRef("default", "low", "u-low"), WHOLE, 1, nodes=["n1"])
    requeue.released("n1")
    assert [p.uid for p in requeue.due()] == ["u-low"]
    assert held == [("u-low", "n1")]


def test_the_priority_reads_the_class_then_the_genius_label() -> None:
    assert pod_priority({"spec": {"priority": 9, "priorityClassName": "x"},
                         "metadata": {"labels": {"genius/priority": "2"}}}) == 9
    assert pod_priority({"spec": {"priority": 0},
                         "metadata": {"labels": {"genius/priority": "7"}}}) == 7
    assert pod_priority({"metadata": {"labels": {"genius/priority": "x"}}}) == 0
    assert pod_priority({"metadata": {"labels": {"genius/priority": "-3"}}}) == -3
    assert pod_priority({"metadata": {"labels": {"genius/priority": "9" * 30}}}) == 0
    assert pod_priority({"spec": {"priority": 5}}) == 5
    assert pod_priority({"metadata": "hostile", "spec": []}) == 0


def test_a_card_added_to_the_node_is_held_for_the_high_priority_pod() -> None:
    _fake, app, rt = _full_node()
    high, low = _pod("high", 9, "class"), _pod("low", 1, "class")
    assert _filter(app, high)["NodeNames"] == []
    rt.state.apply_node(make_node("n1", count=2, rv="2"))  # a second card appears
    assert _filter(app, low)["NodeNames"] == []
    record = rt.state.record("u-high")
    assert record is not None and record.stage is Stage.HELD
    assert _filter(app, high)["NodeNames"] == ["n1"]


def test_a_filter_waits_for_a_judging_the_asking_thread_began() -> None:
    """Else the filter could place its pod in room the asking thread is about to hold."""
    entered, go = threading.Event(), threading.Event()

    def hold(_r: Refused, _node: str) -> bool:
        entered.set()
        return go.wait(timeout=5)

    requeue = RequeueOnRelease(lambda _request, _node: True, lambda _pod: None, hold=hold)
    requeue.refused(PodRef("default", "high", "u-high"), WHOLE, 9)
    requeue.released("n1")
    asking = threading.Thread(target=requeue.due, daemon=True)
    asking.start()
    assert entered.wait(timeout=5)
    settled = threading.Event()
    filtering = threading.Thread(target=lambda: (requeue.settle(), settled.set()), daemon=True)
    filtering.start()
    assert not settled.wait(timeout=0.3)  # waits while the hold is being made
    go.set()
    assert settled.wait(timeout=5)
    asking.join(timeout=5)
    assert requeue.held == 1
