"""The preemptVerb's wire format (k8s.io/kube-scheduler v0.34.4 extender/v1/types.go:32-69):
``ExtenderPreemptionArgs`` in, ``ExtenderPreemptionResult`` out."""

from __future__ import annotations

import json
from typing import Any

import pytest

from allocator.preemption.extender_wire import (
    PreemptionArgs,
    ProposedVictims,
    decode_args,
    encode_result,
    merged_victims,
)
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


def test_our_card_victims_replace_kube_schedulers_gpu_victims_and_keep_the_others() -> None:
    proposed = ProposedVictims(("gpu-1", "cpu-hog", "gpu-2"))
    merged = merged_victims(proposed, ["gpu-3"], gpu_pods=["gpu-1", "gpu-2", "gpu-3"])
    assert merged == ("gpu-3", "cpu-hog")
