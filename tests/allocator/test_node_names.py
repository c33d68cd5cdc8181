"""Node names as one shared string object per name (allocator.picture.names.NodeNames), held
by every per-node table of the picture; a verb's names, decoded from JSON, are answered
without being kept."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from builders import VOCAB, NullApi, make_gpu_pod, make_node, request, share

import allocator.picture.state as state_module
from allocator.picture.names import NodeNames
from allocator.picture.state import ClusterState
from allocator.ranking.content_memo import NodeContents
from allocator.ranking.fast import FastRanker
from allocator.verbs.core import AllocatorConfig, assemble


def _fresh(name: str) -> str:
    """An equal string that is another object (what a decoded request body holds)."""
    copy: str = json.loads(json.dumps(name))
    assert copy == name and copy is not name
    return copy


def test_a_name_interned_twice_is_one_object() -> None:
    names = NodeNames()
    shared = names.intern("node-a")
    assert names.intern(_fresh("node-a")) is shared


def test_every_per_node_table_of_the_picture_holds_the_same_name_object() -> None:
    state = ClusterState(VOCAB)
    memo = NodeContents()  # the fast ranker's, told every node change
    state.observe(memo)
    # a bound pod's event before its node's: its nodeName is the first object seen
    state.resources.apply_pod({"metadata": {"uid": "u"}, "spec": {"nodeName": _fresh("n1"),
                               "containers": [{"name": "c", "resources": {
                                   "requests": {"cpu": "1"}}}]}})
    state.replace_nodes([make_node(_fresh("n1"), count=2), make_node(_fresh("n2"), count=2)])
    state.mark_synced()
    assert state.resources.free_cpu["n1"] < state.resources.free_cpu["n2"]
    shared = state.names.intern(_fresh("n1"))
    assert next(k for k in memo.columns._slot if k == "n1") is shared
    assert next(k for k in state.resources.free_cpu if k == "n1") is shared
    assert next(k for k in state._nodes._views if k == "n1") is shared


def test_filter_answers_with_the_names_asked_for() -> None:
    state = ClusterState(VOCAB)
    state.replace_nodes([make_node(f"n{i}", count=2) for i in range(3)])
    state.mark_synced()
    allocator = assemble(state, api=NullApi(),
                          config=AllocatorConfig(filter_best=False))
    asked = [_fresh("n0"), _fresh("n1"), "ghost", _fresh("n2")]
    out = allocator.filter(make_gpu_pod("p", request(share(core=30, mem=1000)), uid="u"), asked)
    assert out.nodes == ["n0", "n1", "n2"]
    assert set(out.failed) | set(out.unresolvable) == {"ghost"}
    assert isinstance(allocator.ranker, FastRanker)
    assert "ghost" not in allocator.ranker.columns._slot  # a name asked about is never kept
    assert allocator.prioritize(make_gpu_pod("p", request(share(core=30, mem=1000)), uid="u"),
                                asked)[2] == ("ghost", 0)


def test_a_node_update_that_changes_no_input_of_its_cards_is_not_read_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    state = ClusterState(VOCAB)
    reads: list[str] = []
    inventory = state_module.inventory_of

    def counting(node: Any, name: str, vocabulary: Any, agent: Any, described: Any) -> Any:
        reads.append(name)
        return inventory(node, name, vocabulary, agent, described)

    monkeypatch.setattr(state_module, "inventory_of", counting)
    node = make_node("n1", count=2)
    node["status"]["allocatable"]["cpu"] = "8"
    state.apply_node(node)
    heartbeat = copy.deepcopy(node)
    heartbeat["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    state.apply_node(heartbeat)
    assert reads == ["n1"]
    node["status"]["allocatable"]["cpu"] = "4"  # changed in place: still seen as a change
    state.apply_node(node)
    assert reads == ["n1", "n1"] and state.resources.free_cpu["n1"] == 4000
    relabelled = copy.deepcopy(node)
    relabelled["metadata"]["labels"][VOCAB.node_model_label] = "A100"
    state.apply_node(relabelled)
    assert reads == ["n1"] * 3
    state.remove_node("n1")
    state.apply_node(relabelled)  # known again after its removal: read again
    assert reads == ["n1"] * 4
