"""``why`` on preemption: whom the allocator would evict for a Pending pod and why those, why
nobody, and which preemption it made for a pod."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from plugin_builders import VOCAB, gpu_node, gpu_pod, picture_of, shares, wholes
from test_plugin_cli import FakeApi

from kubectl_tessera import cli, why
from kubectl_tessera.preempting import CRITERIA

Obj = dict[str, Any]


def _prio(pod: Obj, priority: int, **spec: Any) -> Obj:
    pod["spec"].update(priority=priority, **spec)
    return pod


def _full(node: str, priority: int, first_at: float = 1.0) -> list[Obj]:
    """Two cards of ``node``, each shared by two half-card pods of ``priority``."""
    return [_prio(gpu_pod(f"{node}-{i}", shares(50), node=node, cards=[i // 2],
                          at=first_at + i), priority) for i in range(4)]


def _explain(nodes: list[Obj], pods: list[Obj], name: str = "big", now: float | None = None,
             **kw: Any) -> why.Explanation:
    pic = picture_of(nodes, pods)
    pod = pic.pod("default", name)
    assert pod is not None
    return why.explain(pic, pod, "binpack", now=now, **kw)


def test_a_pending_pod_is_told_the_minimal_victims_on_one_card() -> None:
    pods = [*_full("n1", 1), _prio(gpu_pod("big", wholes(1)), 100)]
    word = _explain([gpu_node("n1")], pods).preemption
    assert word is not None and word.kind == "would"
    # Pods alike are put back in their order: the first card's return, the second's go.
    assert word.node == "n1" and word.cards == (1,)
    assert [v.pod for v in word.victims] == ["default/n1-2", "default/n1-3"]
    assert all(v.priority == 1 and v.cards == (1,) for v in word.victims)
    assert "the fewest pods of lower priority" in word.reason and "below this pod's 100" \
        in word.reason


def test_the_node_with_lower_priority_victims_is_chosen_and_the_reason_says_so() -> None:
    pods = [*_full("n1", 5), *_full("n2", 1), _prio(gpu_pod("big", wholes(1)), 100)]
    word = _explain([gpu_node("n1"), gpu_node("n2")], pods).preemption
    assert word is not None and word.node == "n2"
    assert [c.node for c in word.candidates] == ["n2", "n1"]
    assert f"n2 before n1 (2 victims): {CRITERIA[1]}" in word.reason


def test_a_budget_over_one_nodes_pods_sends_the_preemption_to_the_other() -> None:
    pods = [*_full("n1", 1), *_full("n2", 1), _prio(gpu_pod("big", wholes(1)), 100)]
    for pod in pods[:4]:
        pod["metadata"]["labels"]["app"] = "db"
    pdb = {"metadata": {"name": "db", "namespace": "default"},
           "spec": {"selector": {"matchLabels": {"app": "db"}}},
           "status": {"disruptionsAllowed": 0}}
    word = _explain([gpu_node("n1"), gpu_node("n2")], pods, pdbs=[pdb]).preemption
    assert word is not None and word.node == "n2"
    assert CRITERIA[0] in word.reason
    assert all(v.protected for v in word.candidates[1].victims)
    assert not any(v.protected for v in word.victims)


@pytest.mark.parametrize(("big", "expected"), [
    (_prio(gpu_pod("big", wholes(1)), 100, preemptionPolicy="Never"), "preemptionPolicy is Never"),
    (_prio(gpu_pod("big", wholes(1)), 1), "no GPU pod of lower priority on its cards"),
    (_prio(gpu_pod("big", wholes(3)), 100), "no node would have room even with other pods gone"),
])
def test_a_pod_no_preemption_helps_is_told_why(big: Obj, expected: str) -> None:
    word = _explain([gpu_node("n1")], [*_full("n1", 1), big]).preemption
    assert word is not None and word.kind == "none"
    assert expected in word.reason


def test_a_pod_that_fits_or_is_bound_gets_no_preemption_word() -> None:
    pods = [_prio(gpu_pod("big", wholes(1)), 100)]
    assert _explain([gpu_node("n1")], pods).preemption is None
    bound = [_prio(gpu_pod("big", wholes(1), node="n1", cards=[0]), 100)]
    assert _explain([gpu_node("n1")], bound).preemption is None


def _preempted(pod: Obj, note: str) -> Obj:
    pod["metadata"]["annotations"][VOCAB.preemption_annotation] = note
    return pod


EVENT = {"reason": "Preempted",
         "message": "preempting default/n1-2, default/n1-3 for card 1 of node n1"}
NOTE = '{"node":"n1","cards":[1],"until":1000.0}'


def test_the_preemption_made_for_a_pod_names_its_node_cards_and_victims() -> None:
    pods = [*_full("n1", 1)[:2], _preempted(_prio(gpu_pod("big", wholes(1)), 100), NOTE)]
    e = _explain([gpu_node("n1")], pods, events=[EVENT, {"reason": "Scheduled"}], now=999.0)
    made = e.preemption_made
    assert made is not None and made.kind == "made"
    assert (made.node, made.cards, made.until) == ("n1", (1,), 1000.0)
    assert [v.pod for v in made.victims] == ["default/n1-2", "default/n1-3"]
    assert made.events == (EVENT["message"],)
    assert "kept for it until the deadline" in made.reason
    assert e.preemption is None  # the allocator makes no second one meanwhile
    text = why.render(e)
    assert "preemption: the allocator preempted on n1 for card #1, evicting default/n1-2, " \
        "default/n1-3" in text


def test_after_the_deadline_the_pod_is_told_what_a_new_preemption_would_do() -> None:
    pods = [*_full("n1", 1), _preempted(_prio(gpu_pod("big", wholes(1)), 100), NOTE)]
    e = _explain([gpu_node("n1")], pods, now=1001.0)
    assert e.preemption_made is not None and "deadline passed" in e.preemption_made.reason
    assert "Events expire" in e.preemption_made.reason
    assert e.preemption is not None and e.preemption.kind == "would"


def test_a_pod_bound_where_its_preemption_made_room_is_told_so() -> None:
    big = _preempted(_prio(gpu_pod("big", wholes(1), node="n1", cards=[1]), 100), NOTE)
    made = _explain([gpu_node("n1")], [big], events=[EVENT]).preemption_made
    assert made is not None and made.reason.endswith("it was bound there")


@pytest.mark.parametrize("note", ["{not json", "[]", '{"cards":[1]}'])
def test_an_unreadable_annotation_is_reported_not_raised(note: str) -> None:
    pods = [_preempted(_prio(gpu_pod("big", wholes(1)), 100), note)]
    made = _explain([gpu_node("n1")], pods).preemption_made
    assert made is not None and "annotation" in made.reason and made.node == ""


class _Refusing(FakeApi):
    def list_pod_disruption_budgets(self) -> list[Obj]:
        from allocator.errors import ApiError
        raise ApiError("poddisruptionbudgets is forbidden: HTTP 403", 403)


def test_why_prints_the_victims_as_text_and_json_and_goes_on_without_budgets() -> None:
    api = _Refusing([gpu_node("n1")], [*_full("n1", 1), _prio(gpu_pod("big", wholes(1)), 100)])
    out, err = io.StringIO(), io.StringIO()
    assert cli.main(["why", "big"], reader=lambda _a: api, out=out, err=err) == 0
    assert "PodDisruptionBudgets not read" in err.getvalue()
    assert "    evict default/n1-2 (priority 1, card #1)" in out.getvalue()
    out = io.StringIO()
    assert cli.main(["why", "big", "-o", "json"], reader=lambda _a: api, out=out,
                    err=io.StringIO()) == 0
    doc = json.loads(out.getvalue())
    assert doc["preemption"]["kind"] == "would" and doc["preemption"]["node"] == "n1"
    assert [v["pod"] for v in doc["preemption"]["victims"]] == ["default/n1-2", "default/n1-3"]
    assert doc["preemption_made"] is None
