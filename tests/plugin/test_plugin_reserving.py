"""``why`` and the cards reserved for the preemptions in flight (kubectl_tessera/reserving.py),
read from the preemptors' notes as a new allocator leader reads them: a pod of lower or equal
priority is told those cards are kept from it and for whom; its own preemption would not
evict on them nor the victims already leaving."""

from __future__ import annotations

import io
import json
import time
from typing import Any

import pytest
from plugin_builders import VOCAB, gpu_node, gpu_pod, picture_of, shares, wholes
from test_plugin_cli import FakeApi

from allocator.verbs.preempt_note import ALLOCATOR, KUBE_SCHEDULER, Note, encode_note
from kubectl_tessera import cli, why

Obj = dict[str, Any]
NOW = 1000.0


def _prio(pod: Obj, priority: int) -> Obj:
    pod["spec"]["priority"] = priority
    return pod


def _preemptor(name: str, priority: int, note: Note) -> Obj:
    pod = _prio(gpu_pod(name, wholes(1)), priority)
    pod["metadata"]["annotations"][VOCAB.preemption_annotation] = encode_note(note)
    return pod


def _half_on(name: str, card: int, priority: int = 1) -> Obj:
    return _prio(gpu_pod(name, shares(50), node="n1", cards=[card], at=float(card)), priority)


#: big's preemption (kube-scheduler evicted card 1's two pods): card 1 of n1 reserved.
BIG = Note("n1", (1,), NOW + 30, ("uid-gone1", "uid-gone2"), KUBE_SCHEDULER)


def _explain(pods: list[Obj], name: str, now: float = NOW) -> why.Explanation:
    pic = picture_of([gpu_node("n1")], pods)
    pod = pic.pod("default", name)
    assert pod is not None
    return why.explain(pic, pod, "binpack", now=now)


def _card0_full_and_card1_free(waiting: Obj) -> list[Obj]:
    return [_half_on("a", 0), _half_on("b", 0), _preemptor("big", 100, BIG), waiting]


@pytest.mark.parametrize("priority", [1, 100])
def test_a_pod_of_lower_or_equal_priority_is_told_the_free_card_is_reserved(
        priority: int) -> None:
    e = _explain(_card0_full_and_card1_free(_prio(gpu_pod("low", wholes(1)), priority)), "low")
    (v,) = e.verdicts
    assert v.outcome == "reserved"
    assert "#1 would fit it but is reserved for a preemption in flight" in v.reason
    assert "default/big, priority 100, its victims evicted by kube-scheduler, 30 s left" \
        in v.reason
    assert "reserved for a preemption in flight" in e.summary
    assert "reserved" in why.render(e)


def test_a_pod_of_higher_priority_is_not_kept_off_and_the_preemptor_not_off_its_own() -> None:
    pods = _card0_full_and_card1_free(_prio(gpu_pod("top", wholes(1)), 101))
    assert [v.outcome for v in _explain(pods, "top").verdicts] == ["fits"]
    assert [v.outcome for v in _explain(pods, "big").verdicts] == ["fits"]


def test_a_note_past_its_deadline_reserves_nothing() -> None:
    pods = _card0_full_and_card1_free(_prio(gpu_pod("low", wholes(1)), 1))
    assert [v.outcome for v in _explain(pods, "low", now=NOW + 31).verdicts] == ["fits"]


def test_the_other_cards_of_the_node_still_take_the_pod() -> None:
    pods = [_half_on("a", 0), _preemptor("big", 100, BIG), _prio(gpu_pod("half", shares(50)), 1)]
    (v,) = _explain(pods, "half").verdicts
    assert v.outcome == "fits"


def test_a_preemption_would_neither_evict_on_reserved_cards_nor_take_leaving_victims() -> None:
    # Card 1's pods are the victims of big's preemption (filter's path), still terminating.
    note = Note("n1", (1,), NOW + 30, ("uid-c", "uid-d"), ALLOCATOR)
    pods = [_half_on("a", 0), _half_on("b", 0), _half_on("c", 1), _half_on("d", 1),
            _preemptor("big", 100, note), _prio(gpu_pod("mid", wholes(1)), 50)]
    e = _explain(pods, "mid")
    assert [v.outcome for v in e.verdicts] == ["no-room"]
    word = e.preemption
    assert word is not None and word.kind == "would"
    # Blind to big, it would name card 1's pods (the youngest); they are big's already.
    assert (word.cards, [v.pod for v in word.victims]) == ((0,), ["default/a", "default/b"])


def test_a_verb_answer_over_several_nodes_reserves_nothing_and_leaves_no_victim_taken() -> None:
    # big's note without a node (the preemptVerb's answer left whole over several nodes): the
    # allocator counts it in no reservation, so why does not either.
    note = Note("", (), NOW + 30, ("uid-c", "uid-d"), KUBE_SCHEDULER)
    pods = [_half_on("a", 0), _half_on("b", 0), _half_on("c", 1), _half_on("d", 1),
            _preemptor("big", 100, note), _prio(gpu_pod("mid", wholes(1)), 50)]
    e = _explain(pods, "mid")
    assert [v.outcome for v in e.verdicts] == ["no-room"]  # no card reserved
    word = e.preemption
    assert word is not None and word.kind == "would"
    assert (word.cards, [v.pod for v in word.victims]) == ((1,), ["default/c", "default/d"])


def test_the_preemptors_own_word_says_kube_scheduler_deletes_the_victims() -> None:
    made = _explain(_card0_full_and_card1_free(_prio(gpu_pod("low", wholes(1)), 1)),
                    "big").preemption_made
    assert made is not None and made.reason.startswith(
        "kube-scheduler preempted on n1 for card #1, deleting the pods the allocator's "
        "preemptVerb answered it")


def test_why_prints_the_reservation_as_text_and_json() -> None:
    note = Note("n1", (1,), time.time() + 600, (), KUBE_SCHEDULER)  # why judges by the clock
    api = FakeApi([gpu_node("n1")], [_half_on("a", 0), _half_on("b", 0),
                                     _preemptor("big", 100, note),
                                     _prio(gpu_pod("low", wholes(1)), 1)])
    out = io.StringIO()
    assert cli.main(["why", "low", "-o", "json"], reader=lambda _a: api, out=out,
                    err=io.StringIO()) == 0
    doc = json.loads(out.getvalue())
    assert [v["outcome"] for v in doc["verdicts"]] == ["reserved"]
    assert "default/big" in doc["verdicts"][0]["reason"]
