"""The extender's ``preemptVerb`` over HTTP (allocator/verbs/preempt_verb.py): kube-scheduler's
candidates answered with card-level victims, its proposal unchanged with preemption off, a
clear 4xx for a malformed body, 503 on a replica that cannot decide, and never both
preemption paths evicting for one pod."""

from __future__ import annotations

from typing import Any

import pytest
from alloc_harness import make_app
from builders import VOCAB, make_gpu_pod, make_node, make_pod, request, share
from fake_kube import FakeKube
from preempting_cluster import WHOLE, full_node, priority_pod

from allocator.service.app import Runtime
from allocator.verbs import preempt_verb as verb_module
from allocator.verbs.config import AllocatorConfig
from allocator.verbs.preempt import DEADLINE_SECONDS

URL = "/scheduler/preempt"
NOTE = VOCAB.preemption_annotation


def _card(rt: Runtime, name: str) -> int:
    record = rt.state.record(f"u-{name}")
    assert record is not None
    (card,) = {i for c in record.allocation.containers for i in c.card_indices}
    return card


def _args(pod: dict[str, Any], proposed: dict[str, list[str]]) -> dict[str, Any]:
    """What a nodeCacheCapable kube-scheduler sends (extender.go:151-163)."""
    return {"Pod": pod, "NodeNameToMetaVictims": {
        node: {"Pods": [{"UID": f"u-{n}"} for n in names], "NumPDBViolations": 0}
        for node, names in proposed.items()}}


def _victims(reply: dict[str, Any]) -> dict[str, set[str]]:
    return {node: {p["UID"] for p in v["Pods"]}
            for node, v in reply["NodeNameToMetaVictims"].items()}


def _evicted(fake: FakeKube, rt: Runtime) -> list[str]:
    """The evictions, once the preemption worker has run what filter queued."""
    if rt.preempt is not None:
        rt.preempt.worker.drain()
    return [name for call, name in fake.calls if call == "create_eviction"]


def _card_pods(rt: Runtime) -> list[set[str]]:
    """The UIDs of the pods on each card of n1."""
    return [{f"u-{n}" for n in "abcd" if _card(rt, n) == card} for card in (0, 1)]


def test_kube_schedulers_victim_is_kept_and_the_other_pod_of_its_card_added() -> None:
    fake, app, rt = full_node()
    fake.add_pod(priority_pod("big", WHOLE, 100))
    # kube-scheduler, short of room in sum, would take the youngest pod only.
    resp = app.test_client().post(URL, json=_args(fake.get_pod("default", "big"),
                                                  {"n1": ["d"]}))
    assert resp.status_code == 200
    answer = _victims(resp.get_json())
    assert list(answer) == ["n1"]
    assert "u-d" in answer["n1"] and answer["n1"] in _card_pods(rt)  # d's card's two pods
    assert resp.get_json()["NodeNameToMetaVictims"]["n1"]["NumPDBViolations"] == 0
    # kube-scheduler evicts them, not the allocator.
    assert _evicted(fake, rt) == []
    status = app.test_client().get("/status").get_json()
    assert status["preemptVerb"] == {"cardLevel": 1, "unchanged": 0, "none": 0}


def test_after_the_verb_answered_filters_path_evicts_nobody_for_the_pod() -> None:
    fake, app, rt = full_node()
    fake.add_pod(priority_pod("big", WHOLE, 100))
    big = fake.get_pod("default", "big")
    answer = _victims(app.test_client().post(URL, json=_args(big, {"n1": ["d"]})).get_json())
    assert rt.allocator.filter(big, ["n1"]).nodes == []  # the victims are still there
    assert _evicted(fake, rt) == []
    # Once they are gone, their cards are held for the pod, which binds there.
    freed = {_card(rt, uid[2:]) for uid in answer["n1"]}
    for uid in answer["n1"]:
        rt.state.remove_pod({"metadata": {"uid": uid}})
    held = rt.state.record("u-big")
    assert held is not None and held.stage == "held"
    assert {i for c in held.allocation.containers for i in c.card_indices} == freed
    fake.add_pod(priority_pod("small", WHOLE, 1))
    assert rt.allocator.filter(fake.get_pod("default", "small"), ["n1"]).nodes == []
    assert rt.allocator.filter(big, ["n1"]).nodes == ["n1"]
    assert _evicted(fake, rt) == []


def test_after_filters_path_evicted_the_verb_answers_no_candidates() -> None:
    fake, app, rt = full_node()
    fake.add_pod(priority_pod("big", WHOLE, 100))
    big = fake.get_pod("default", "big")
    rt.allocator.filter(big, ["n1"])
    assert len(_evicted(fake, rt)) == 2
    resp = app.test_client().post(URL, json=_args(big, {"n1": ["d"]}))
    assert resp.status_code == 200
    assert resp.get_json() == {"NodeNameToMetaVictims": {}}
    status = app.test_client().get("/status").get_json()
    assert status["preemptVerb"]["none"] == 1


def test_the_verbs_preemption_ends_at_its_deadline() -> None:
    fake, app, rt = full_node()
    fake.add_pod(priority_pod("big", WHOLE, 100))
    big = fake.get_pod("default", "big")
    app.test_client().post(URL, json=_args(big, {"n1": ["d"]}))
    preempt = rt.preempt
    assert preempt is not None
    assert [(f.pod.name, f.evictor) for f in preempt.snapshot()] == [("big", "kube-scheduler")]
    assert NOTE in fake.get_pod("default", "big")["metadata"]["annotations"]
    preempt.clock = lambda: rt.allocator.clock() + DEADLINE_SECONDS + 1
    preempt.worker.drain()  # the tick ends it
    assert preempt.snapshot() == ()
    assert NOTE not in fake.get_pod("default", "big")["metadata"]["annotations"]
    assert _evicted(fake, rt) == []


def test_with_preemption_off_the_proposal_is_answered_unchanged() -> None:
    fake, app, rt = full_node(preemption=False)
    fake.add_pod(priority_pod("big", WHOLE, 100))
    rt.allocator.reader.is_leader = lambda: False  # no state read: any replica answers
    body = _args(fake.get_pod("default", "big"), {"n1": ["c", "d"]})
    body["NodeNameToMetaVictims"]["n1"]["NumPDBViolations"] = 1
    body["NodeNameToMetaVictims"]["n2"] = {"Pods": [], "NumPDBViolations": 0}
    reply = app.test_client().post(URL, json=body).get_json()
    assert reply == {"NodeNameToMetaVictims": {
        "n1": {"Pods": [{"UID": "u-c"}, {"UID": "u-d"}], "NumPDBViolations": 1}}}


def test_a_pod_asking_no_card_gets_the_proposal_unchanged() -> None:
    _fake, app, _rt = full_node()
    pod = make_pod({"cpu": "1"}, name="cpu")
    pod["metadata"]["uid"] = "u-cpu"
    pod["spec"]["priority"] = 100
    reply = app.test_client().post(URL, json=_args(pod, {"n1": ["d"]})).get_json()
    assert _victims(reply) == {"n1": {"u-d"}}


def test_a_node_where_the_cards_cannot_make_room_is_left_out() -> None:
    fake, app, _rt = full_node()
    fake.add_pod(priority_pod("peer", WHOLE, 1))  # equal priority: nobody may go
    reply = app.test_client().post(
        URL, json=_args(fake.get_pod("default", "peer"), {"n1": ["d"], "n9": ["x"]})).get_json()
    assert reply == {"NodeNameToMetaVictims": {}}


def test_the_full_pod_objects_of_a_non_cache_capable_scheduler_are_understood() -> None:
    fake, app, rt = full_node()
    fake.add_pod(priority_pod("big", WHOLE, 100))
    body = {"Pod": fake.get_pod("default", "big"),
            "NodeNameToVictims": {"n1": {"Pods": [fake.get_pod("default", "d")],
                                         "NumPDBViolations": 0}}}
    reply = app.test_client().post(URL, json=body).get_json()
    assert _victims(reply)["n1"] in _card_pods(rt)


@pytest.mark.parametrize("body", [
    b"not json", b"[]", b'{"Pod": "x"}',
    b'{"Pod": {"metadata": {"name": 5}}, "NodeNameToMetaVictims": {}}',
    b'{"Pod": {}, "NodeNameToMetaVictims": 3}',
    b'{"Pod": {}, "NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": 5}]}}}',
    b'{"Pod": {}, "NodeNameToMetaVictims": {"n1": {"Pods": {}}}}',
    b'{"Pod": {}, "NodeNameToMetaVictims": {"n1": {"Pods": [], "NumPDBViolations": -1}}}',
    b'{"Pod": {}, "NodeNameToMetaVictims": {"": {"Pods": []}}}',
    b'{"Pod": {}, "NodeNameToVictims": {"n1": {"Pods": [{"metadata": {}}]}}}',
])
def test_a_malformed_body_is_a_400_in_the_services_error_shape(body: bytes) -> None:
    fake, app, rt = full_node()
    resp = app.test_client().post(URL, data=body, content_type="application/json")
    assert resp.status_code == 400
    doc = resp.get_json()
    assert doc["code"] == 400 and doc["message"]
    assert _evicted(fake, rt) == []


def test_an_oversized_body_is_a_413_and_a_get_a_405() -> None:
    fake = FakeKube()
    fake.add_node(make_node("n1"))
    app, _rt = make_app(fake, max_body_bytes=1024, core=AllocatorConfig(preemption=True))
    client = app.test_client()
    resp = client.post(URL, data=b"{" + b" " * 2048 + b"}", content_type="application/json")
    assert resp.status_code == 413
    resp = client.get(URL)
    assert resp.status_code == 405 and resp.headers["Allow"] == "POST"


def test_a_follower_and_an_unsynced_replica_answer_503() -> None:
    fake, app, rt = full_node()
    fake.add_pod(priority_pod("big", WHOLE, 100))
    body = _args(fake.get_pod("default", "big"), {"n1": ["d"]})
    rt.allocator.reader.is_leader = lambda: False
    resp = app.test_client().post(URL, json=body)
    assert resp.status_code == 503 and "not the leader" in resp.get_json()["message"]
    rt.allocator.reader.is_leader = lambda: True
    rt.state._synced.clear()  # as before the first list
    resp = app.test_client().post(URL, json=body)
    assert resp.status_code == 503 and "syncing" in resp.get_json()["message"]


def test_a_bug_is_answered_with_no_candidates_never_a_500(
        monkeypatch: pytest.MonkeyPatch) -> None:
    fake, app, _rt = full_node()
    fake.add_pod(priority_pod("big", WHOLE, 100))

    def broken(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(verb_module, "answer_preemption", broken)
    resp = app.test_client().post(URL, json=_args(fake.get_pod("default", "big"),
                                                  {"n1": ["d"]}))
    assert resp.status_code == 200
    assert resp.get_json() == {"NodeNameToMetaVictims": {}}


def test_an_unreadable_gpu_request_gets_no_candidates() -> None:
    _fake, app, _rt = full_node()
    pod = make_gpu_pod("bad", uid="u-bad",
                       extra_annotations={VOCAB.request_annotation: '{"v": 99}'})
    pod["spec"]["priority"] = 100
    reply = app.test_client().post(URL, json=_args(pod, {"n1": ["d"]})).get_json()
    assert reply == {"NodeNameToMetaVictims": {}}


# ------------------------------------------------------- the reservations of other preemptions
QUARTER_POD = request(share(core=25, mem=4000))
HALF_POD = request(share(core=50, mem=8000))


def _quarters() -> tuple[FakeKube, Any, Runtime]:
    """n1: two cards, four priority-1 quarter-card pods on each (low0 ... low7)."""
    return full_node(pods=[(f"low{n}", 1) for n in range(8)], req=QUARTER_POD)


def _on_card(rt: Runtime, card: int, but: set[str]) -> list[str]:
    """The pods on ``card`` of n1 outside ``but`` (UIDs), by name."""
    return sorted(f"u-low{n}" for n in range(8)
                  if _card(rt, f"low{n}") == card and f"u-low{n}" not in but)


def _filter_preempts(fake: FakeKube, rt: Runtime, name: str, req: Any, priority: int
                     ) -> tuple[int, set[str]]:
    """``name`` preempts through filter's path: (its reserved card, its victims)."""
    fake.add_pod(priority_pod(name, req, priority))
    assert rt.allocator.filter(fake.get_pod("default", name), ["n1"]).nodes == []
    assert rt.preempt is not None
    (entry,) = [f for f in rt.preempt.snapshot() if f.pod.name == name]
    (card,) = entry.cards
    return card, set(entry.victims)


def _verb_proposing_one_on(fake: FakeKube, app: Any, rt: Runtime, card: int,
                           victims: set[str], pod: dict[str, Any]) -> tuple[str, set[str]]:
    """The verb asked for ``pod`` with kube-scheduler proposing the first pod of ``card`` that
    is not among ``victims``: (that pod's UID, the victims answered on n1)."""
    fake.add_pod(pod)
    theirs = _on_card(rt, card, victims)[0]
    reply = app.test_client().post(URL, json=_args(pod, {"n1": [theirs[2:]]})).get_json()
    return theirs, _victims(reply)["n1"]


def test_the_verb_adds_no_victim_on_a_card_reserved_for_an_equal_preemption() -> None:
    fake, app, rt = _quarters()
    reserved, victims = _filter_preempts(fake, rt, "first", HALF_POD, 10)
    # kube-scheduler proposes one pod on the reserved card (short of room in sum): on that
    # card one more quarter would do, but the card is the first preemption's.
    theirs, answered = _verb_proposing_one_on(fake, app, rt, reserved, victims,
                                              priority_pod("second", HALF_POD, 10))
    other = 1 - reserved
    assert theirs in answered
    assert answered - {theirs} and all(_card(rt, uid[2:]) == other
                                       for uid in answered - {theirs})
    assert not answered & victims


def test_the_verbs_answer_on_a_lower_preemptions_card_ends_it_as_outranked() -> None:
    fake, app, rt = _quarters()
    reserved, victims = _filter_preempts(fake, rt, "low-preemptor", HALF_POD, 5)
    _, answered = _verb_proposing_one_on(fake, app, rt, reserved, victims,
                                         priority_pod("big", WHOLE, 100))
    # The lower preemption's victims are leaving: one more quarter frees the card for big.
    assert answered == set(_on_card(rt, reserved, victims))
    assert rt.preempt is not None
    assert [f.pod.name for f in rt.preempt.snapshot()] == ["big"]
    rt.preempt.worker.drain()  # the outranked preemption's note is cleared
    assert NOTE not in (fake.get_pod("default", "low-preemptor")["metadata"].get(
        "annotations") or {})
    metrics = app.test_client().get("/metrics").get_data(as_text=True)
    assert 'tessera_allocator_preemptions_ended_total{outcome="outranked"} 1.0' in metrics
