"""The preemptVerb's wire format (k8s.io/kube-scheduler v0.34.4 extender/v1/types.go:32-69):
``ExtenderPreemptionArgs`` in, ``ExtenderPreemptionResult`` out."""

from __future__ import annotations

import json
from typing import Any

import pytest

from allocator.preemption import (
    NO_LOWER_PRIORITY,
    GpuPod,
    NodeOffer,
    PreemptionPolicy,
    Preemptor,
)
from allocator.preemption.extender_answer import UNKNOWN_NODE, answer_preemption
from allocator.preemption.extender_wire import (
    PreemptionArgs,
    ProposedVictims,
    decode_args,
    encode_result,
)
from allocator.ranking.cards import Card, CardState, NodeState, apply_placement
from tessera.vocabulary import Allocation, ContainerAllocation, ContainerRequest, PodRequest
from tessera.wire import WireError

POD = {"metadata": {"name": "big", "namespace": "ns", "uid": "u-big"}, "spec": {"priority": 9}}


def body(doc: Any) -> bytes:
    return json.dumps(doc).encode()


def test_meta_victims_decode_to_uids_in_the_order_sent() -> None:
    # What kube-scheduler sends a nodeCacheCapable extender (pkg/scheduler/extender.go:151-157).
    args = decode_args(body({"Pod": POD, "NodeNameToMetaVictims": {
        "n2": {"Pods": [{"UID": "a"}, {"UID": "b"}], "NumPDBViolations": 1},
        "n1": {"Pods": [{"UID": "c"}], "NumPDBViolations": 0},
    }}))
    assert args == PreemptionArgs(POD, {"n2": ProposedVictims(("a", "b"), 1),
                                        "n1": ProposedVictims(("c",), 0)})
    assert list(args.nodes) == ["n2", "n1"]


def test_full_victims_decode_to_the_uids_of_their_pods() -> None:
    # What any other extender gets (extender.go:158-162): whole Pod objects.
    victim = {"metadata": {"name": "v", "namespace": "ns", "uid": "u-v"}}
    args = decode_args(body({"Pod": POD, "NodeNameToVictims": {
        "n1": {"Pods": [victim], "NumPDBViolations": 0}}}))
    assert args.nodes == {"n1": ProposedVictims(("u-v",), 0)}


def test_meta_victims_win_when_both_maps_are_sent() -> None:
    args = decode_args(body({"Pod": POD, "NodeNameToMetaVictims": {"n1": {"Pods": []}},
                             "NodeNameToVictims": {"n2": {"Pods": []}}}))
    assert list(args.nodes) == ["n1"]


@pytest.mark.parametrize("doc", [
    {"Pod": POD},
    {"Pod": POD, "NodeNameToMetaVictims": None, "NodeNameToVictims": None},
    {"Pod": POD, "NodeNameToMetaVictims": {}},
])
def test_no_candidates_decode_to_no_nodes(doc: dict[str, Any]) -> None:
    assert decode_args(body(doc)).nodes == {}


def test_a_nil_victims_entry_is_a_node_without_victims() -> None:
    args = decode_args(body({"Pod": POD, "NodeNameToMetaVictims": {"n1": None}}))
    assert args.nodes == {"n1": ProposedVictims(())}


@pytest.mark.parametrize("raw", [
    b"not json",
    b"[]",
    body({"NodeNameToMetaVictims": {}}),
    body({"Pod": "x"}),
    body({"Pod": {"metadata": {"uid": 5}}}),
    body({"Pod": POD, "NodeNameToMetaVictims": []}),
    body({"Pod": POD, "NodeNameToMetaVictims": {"": {"Pods": []}}}),
    body({"Pod": POD, "NodeNameToMetaVictims": {"n1": "x"}}),
    body({"Pod": POD, "NodeNameToMetaVictims": {"n1": {"Pods": {}}}}),
    body({"Pod": POD, "NodeNameToMetaVictims": {"n1": {"Pods": [None]}}}),
    body({"Pod": POD, "NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": ""}]}}}),
    body({"Pod": POD, "NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": 7}]}}}),
    body({"Pod": POD, "NodeNameToMetaVictims": {"n1": {"NumPDBViolations": -1}}}),
    body({"Pod": POD, "NodeNameToMetaVictims": {"n1": {"NumPDBViolations": True}}}),
    body({"Pod": POD, "NodeNameToMetaVictims": {"n1": {"NumPDBViolations": "1"}}}),
    body({"Pod": POD, "NodeNameToVictims": {"n1": {"Pods": [{"metadata": {}}]}}}),
    body({"Pod": POD, "NodeNameToVictims": {"n1": {"Pods": ["pod"]}}}),
    b"[" * 100_000,
])
def test_a_body_that_is_not_preemption_args_is_a_wire_error(raw: bytes) -> None:
    with pytest.raises(WireError):
        decode_args(raw)


def test_the_result_uses_the_go_field_names() -> None:
    doc = encode_result([("n1", ["a", "b"], 1)])
    assert json.dumps(doc) == ('{"NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "a"}, '
                               '{"UID": "b"}], "NumPDBViolations": 1}}}')


def test_a_node_without_victims_is_left_out_and_none_is_no_preemption() -> None:
    # kube-scheduler fails the whole preemption on a node answered without victims
    # (pkg/scheduler/framework/preemption/preemption.go:363-373).
    assert encode_result([("n1", [], 0), ("n2", ["x"], 0)]) == {
        "NodeNameToMetaVictims": {"n2": {"Pods": [{"UID": "x"}], "NumPDBViolations": 0}}}
    assert encode_result([]) == {"NodeNameToMetaVictims": {}}


def test_result_and_args_round_trip() -> None:
    answers = [("n1", ("a", "b"), 0), ("n2", ("c",), 2)]
    sent = encode_result(answers)
    back = decode_args(body({"Pod": POD, **sent}))
    assert [(n, v.uids, v.pdb_violations) for n, v in back.nodes.items()] == answers


# ----------------------------------------------------------------------------- the answer

def _offer(name: str, *pods: GpuPod) -> NodeOffer:
    state = NodeState(name, (CardState(Card(0, "T4", 16000)), CardState(Card(1, "T4", 16000))))
    for p in pods:
        state = apply_placement(state, p.containers, p.uid)
    return NodeOffer(state, pods)


def _gpu(uid: str, card: int, core: int, priority: int) -> GpuPod:
    container = ContainerAllocation("main", (card,), core_percent=core)
    return GpuPod(uid, "ns", uid, Allocation("", (container,), pod_uid=uid), priority)


BIG = Preemptor("u-big", PodRequest((ContainerRequest("main", core_percent=50),)), 9)


def test_kube_schedulers_victims_are_kept_and_card_victims_added_where_the_cards_need_them(
        ) -> None:
    # kube-scheduler, short of CPU, proposed a CPU-only pod; the cards still have no 50% free
    # (60% on each): the share of lower priority goes too, "b" (more important) stays.
    offer = _offer("n1", _gpu("a", 0, 60, 1), _gpu("b", 1, 60, 2))
    proposed = {"n1": ProposedVictims(("cpu-hog",), 1)}
    answer = answer_preemption(BIG, proposed, [offer])
    assert answer.result == {"NodeNameToMetaVictims": {"n1": {
        "Pods": [{"UID": "cpu-hog"}, {"UID": "a"}], "NumPDBViolations": 1}}}
    assert answer.left_out == {}
    (chosen,) = answer.candidates
    assert [v.uid for v in chosen.victims] == ["a"] and chosen.cards == (0,)


def test_a_gpu_victim_of_kube_schedulers_frees_its_card_share_before_any_is_added() -> None:
    # Its victim "b" (chosen for CPU) frees card 1: the pod fits, nothing is added.
    offer = _offer("n1", _gpu("a", 0, 60, 1), _gpu("b", 1, 60, 2))
    answer = answer_preemption(BIG, {"n1": ProposedVictims(("b",))}, [offer])
    assert answer.result == {"NodeNameToMetaVictims": {"n1": {
        "Pods": [{"UID": "b"}], "NumPDBViolations": 0}}}
    assert answer.candidates == ()


def test_the_added_victims_are_listed_with_kube_schedulers_gpu_victims_most_important_first(
        ) -> None:
    whole = Preemptor("u-big", PodRequest((ContainerRequest("main", cards=1),)), 9)
    offer = _offer("n1", _gpu("a", 0, 50, 1), _gpu("c", 0, 50, 3), _gpu("b", 1, 60, 2))
    answer = answer_preemption(whole, {"n1": ProposedVictims(("a",))}, [offer])
    # "a" gone leaves "c" on card 0, "b" on card 1: "b" (lower) goes, "c" returns.
    assert answer.result["NodeNameToMetaVictims"]["n1"]["Pods"] == [{"UID": "a"}, {"UID": "b"}]
    (chosen,) = answer.candidates
    assert [v.uid for v in chosen.victims] == ["b", "a"] and chosen.highest_priority == 2


def test_the_answer_leaves_out_nodes_where_the_cards_cannot_make_room() -> None:
    high = _offer("n1", _gpu("h0", 0, 60, 9), _gpu("h1", 1, 60, 9))
    fits = _offer("n2")
    proposed = {"n1": ProposedVictims(("cpu-x",)), "n2": ProposedVictims(("cpu-hog",)),
                "n3": ProposedVictims(("x",))}
    answer = answer_preemption(BIG, proposed, [high, fits])
    assert answer.result == {"NodeNameToMetaVictims": {
        "n2": {"Pods": [{"UID": "cpu-hog"}], "NumPDBViolations": 0}}}
    assert answer.left_out["n1"] == NO_LOWER_PRIORITY
    assert answer.left_out["n3"] == UNKNOWN_NODE


def test_a_pod_that_never_preempts_gets_an_empty_answer() -> None:
    never = Preemptor(BIG.uid, BIG.request, 9, PreemptionPolicy.NEVER)
    offer = _offer("n1", _gpu("a", 0, 60, 1), _gpu("b", 1, 60, 2))
    answer = answer_preemption(never, {"n1": ProposedVictims(("a",))}, [offer])
    assert answer.result == {"NodeNameToMetaVictims": {}}
