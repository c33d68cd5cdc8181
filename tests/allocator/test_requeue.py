"""The release race: a pod filter left with no node for lack of room is asked again when our
watch releases room it fits in (allocator/verbs/requeue.py), and filter never waits for the API."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from alloc_harness import make_app
from builders import VOCAB, make_gpu_pod, make_node, request, share, whole
from fake_kube import FakeKube

from allocator.decisions import PodRef
from allocator.errors import ApiError
from allocator.service.app import Runtime
from allocator.verbs.config import AllocatorConfig
from allocator.verbs.requeue import RequeueOnRelease, pod_priority, requeue_patch
from tessera.vocabulary import PodRequest


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


WHOLE = request(whole())
POD_B = PodRef("default", "b", "u-b")


def _requeue(fits_on: set[str], clock: Clock | None = None,
             **kwargs: Any) -> tuple[RequeueOnRelease, list[PodRef]]:
    asked: list[PodRef] = []
    requeue = RequeueOnRelease(lambda _request, node: node in fits_on, asked.append,
                               clock=clock or Clock(), **kwargs)
    return requeue, asked


def test_a_release_where_the_refused_pod_now_fits_asks_it_again_once() -> None:
    requeue, _ = _requeue({"n1"})
    requeue.refused(POD_B, WHOLE)
    requeue.released("n1")
    assert requeue.due() == [POD_B]
    requeue.released("n1")
    assert requeue.due() == []  # asked once; a new refusal would remember it again


def test_a_release_where_the_pod_still_does_not_fit_leaves_it_for_the_next() -> None:
    requeue, _ = _requeue({"n2"})
    requeue.refused(POD_B, WHOLE)
    requeue.released("n1")
    assert requeue.due() == []
    requeue.released("n2")
    assert requeue.due() == [POD_B]


def test_a_refusal_older_than_the_window_is_not_asked_again() -> None:
    clock = Clock()
    requeue, _ = _requeue({"n1"}, clock, window_seconds=10.0)
    requeue.refused(POD_B, WHOLE)
    clock.now += 10.5
    requeue.released("n1")
    assert requeue.due() == []


def test_a_pod_that_fitted_since_is_not_asked_again() -> None:
    requeue, _ = _requeue({"n1"})
    requeue.refused(POD_B, WHOLE)
    requeue.fitted(POD_B.uid)
    requeue.released("n1")
    assert requeue.due() == []


def test_releases_with_no_refused_pod_are_not_even_noted() -> None:
    requeue, _ = _requeue({"n1"})
    requeue.released("n1")
    requeue.refused(POD_B, WHOLE)
    assert requeue.due() == []  # the release came before the refusal saw it


def test_a_pod_without_a_uid_is_not_remembered() -> None:
    requeue, _ = _requeue({"n1"})
    requeue.refused(PodRef("default", "b", ""), WHOLE)
    requeue.released("n1")
    assert requeue.due() == []


def test_at_most_limit_refused_pods_are_remembered_the_oldest_go_first() -> None:
    requeue, _ = _requeue({"n1"}, limit=3, per_node=5)
    pods = [PodRef("default", f"p{i}", f"u{i}") for i in range(5)]
    for pod in pods:
        requeue.refused(pod, WHOLE)
    requeue.released("n1")
    assert requeue.due() == pods[2:]


def test_a_release_asks_at_most_per_node_pods_the_least_recently_refused_first() -> None:
    clock = Clock()
    requeue, _ = _requeue({"n1", "n2"}, clock, per_node=2)
    pods = [PodRef("default", f"p{i}", f"u{i}") for i in range(5)]
    for pod in pods:
        requeue.refused(pod, WHOLE)
        clock.now += 0.1
    requeue.refused(pods[0], WHOLE)  # refused again: now the most recent
    requeue.released("n1")
    assert requeue.due() == pods[1:3]
    requeue.released("n1")
    requeue.released("n2")
    assert requeue.due() == [pods[3], pods[4], pods[0]]


def test_the_patch_sets_the_annotation_with_the_uid_as_precondition() -> None:
    assert requeue_patch(VOCAB.requeue_annotation, POD_B, "12.5") == {
        "metadata": {"uid": "u-b", "annotations": {"elasticgpu.io/requeued-at": "12.5"}}}


def _wait(what: str, done: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_the_asking_thread_goes_on_after_a_failed_write() -> None:
    calls: list[PodRef] = []

    def ask_again(pod: PodRef) -> None:
        calls.append(pod)
        if len(calls) == 1:
            raise ApiError("PATCH pod: HTTP 500", 500)

    requeue = RequeueOnRelease(lambda _r, _n: True, ask_again)
    stop = threading.Event()
    thread = threading.Thread(target=requeue.run, args=(stop,), daemon=True)
    thread.start()
    try:
        requeue.refused(PodRef("default", "a", "u-a"), WHOLE)
        requeue.released("n1")
        _wait("the first ask", lambda: len(calls) == 1)
        requeue.refused(POD_B, WHOLE)
        requeue.released("n1")
        _wait("the second ask", lambda: len(calls) == 2)
        assert [pod.uid for pod in calls] == ["u-a", "u-b"]
    finally:
        stop.set()
        thread.join(timeout=5)
    assert not thread.is_alive()


# ---------------------------------------------------------------- through the allocator

def _one_card_taken() -> tuple[FakeKube, Any, Runtime]:
    """n1 has one card, held by pod "a" (bound through the allocator); "b" waits for it."""
    fake = FakeKube()
    fake.add_node(make_node("n1", count=1))
    fake.add_pod(make_gpu_pod("a", WHOLE, uid="u-a"))
    # The app wires the requeue in, as in production. Preemption off: its look at a refused
    # pod lists the node's pods (tests/allocator/test_preempt.py), which this file does not
    # test; with it, "b" (priority equal to "a") would evict nobody.
    app, rt = make_app(fake, core=AllocatorConfig(preemption=False))
    rt.allocator.bind("default", "a", "u-a", "n1")
    fake.add_pod(make_gpu_pod("b", WHOLE, uid="u-b"))
    return fake, app, rt


def _filter_b(app: Any) -> dict[str, Any]:
    reply: dict[str, Any] = app.test_client().post("/scheduler/filter", json={
        "Pod": make_gpu_pod("b", WHOLE, uid="u-b"), "Nodes": None,
        "NodeNames": ["n1"]}).get_json()
    return reply


@pytest.mark.parametrize("how", ["Succeeded", "Failed", "deleted"])
def test_a_release_our_watch_applies_after_the_refusal_asks_the_pod_again(how: str) -> None:
    fake, app, rt = _one_card_taken()
    calls = len(fake.calls)
    assert _filter_b(app)["FailedNodes"] == {"n1": "needs 1 whole card (0 free)"}
    assert fake.calls[calls:] == []  # filter read nothing from the API and waited for nothing
    # The holder goes; our watch applies it after kube-scheduler's retry was refused.
    holder = fake.get_pod("default", "a")
    if how == "deleted":
        rt.state.remove_pod(holder)
    else:
        rt.state.apply_pod({**holder, "status": {"phase": how}})
    requeue = rt.allocator.requeue
    assert requeue is not None
    stop = threading.Event()
    thread = threading.Thread(target=requeue.run, args=(stop,), daemon=True)
    thread.start()
    try:
        _wait("b asked again", lambda: ("patch_pod", "b") in fake.calls)
    finally:
        stop.set()
        thread.join(timeout=5)
    annotations = fake.get_pod("default", "b")["metadata"]["annotations"]
    assert float(annotations[VOCAB.requeue_annotation]) > 0
    assert _filter_b(app)["NodeNames"] == ["n1"]  # the retry it causes finds the card


def test_a_hold_given_up_asks_the_pod_it_kept_out_again() -> None:
    fake = FakeKube()
    fake.add_node(make_node("n1", count=1))
    app, rt = make_app(fake)
    first = make_gpu_pod("x", WHOLE, uid="u-x")
    assert rt.allocator.filter(first, ["n1"]).nodes == ["n1"]  # holds the card for its bind
    assert _filter_b(app)["FailedNodes"] == {"n1": "needs 1 whole card (0 free)"}
    rt.state.release_hold("u-x")  # kube-scheduler asks about "x" again
    requeue = rt.allocator.requeue
    assert requeue is not None
    assert requeue.due() == [POD_B]


def test_a_refusal_no_release_can_mend_is_not_remembered() -> None:
    fake, _app, rt = _one_card_taken()
    pod = make_gpu_pod("c", request(share(core=10), models=("A100",)), uid="u-c")  # no A100
    assert rt.allocator.filter(pod, ["n1"]).unresolvable
    rt.state.remove_pod(fake.get_pod("default", "a"))
    requeue = rt.allocator.requeue
    assert requeue is not None
    assert requeue.due() == []


def test_fits_on_judges_one_node_and_an_unknown_node_fits_nothing() -> None:
    fake, _app, rt = _one_card_taken()
    small: PodRequest = request(share(core=10))
    assert not rt.allocator.filter.fits_on(WHOLE, "n1")
    assert not rt.allocator.filter.fits_on(small, "n1")
    assert not rt.allocator.filter.fits_on(small, "nowhere")
    rt.state.remove_pod(fake.get_pod("default", "a"))
    assert rt.allocator.filter.fits_on(WHOLE, "n1")


def test_a_release_asks_the_highest_priority_first_then_the_least_recently_refused() -> None:
    """Room for one pod goes to the one kube-scheduler's queue (PrioritySort) would pop."""
    clock = Clock()
    requeue, _ = _requeue({"n1"}, clock, per_node=2)
    low = [PodRef("default", f"low-{i}", f"u-low-{i}") for i in range(3)]
    high = PodRef("default", "high", "u-high")
    for pod in low:
        requeue.refused(pod, WHOLE, priority=1)
        clock.now += 0.1
    requeue.refused(high, WHOLE, priority=9)
    requeue.released("n1")
    assert requeue.due() == [high, low[0]]


def test_the_priority_is_read_from_the_pod_spec() -> None:
    assert pod_priority({"spec": {"priority": 9}}) == 9
    assert pod_priority({"spec": {"priority": True}}) == 0
    assert pod_priority({"spec": {}}) == 0
    assert pod_priority({"spec": "hostile"}) == 0
