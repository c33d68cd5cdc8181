"""What the allocator keeps so that the events of HAMi's protocol cost less: the pods to
start counted per node as they change (allocator/hami/counted_by_node.py), allocation texts
decoded once (allocator/picture/record_memo.py), and a pod event that moves no requests
leaving every node's figures alone (allocator/picture/resources.py)."""

from __future__ import annotations

from typing import Any

import pytest
from builders import VOCAB, make_gpu_pod
from test_node_resources import _pod

import allocator.picture.record_memo as record_memo
from allocator.hami.awaiting import AwaitingAgent
from allocator.hami.codec import HAMI
from allocator.hami.counted_by_node import CountedByNode
from allocator.picture.records import read_record
from allocator.picture.requests import pod_usage
from allocator.picture.resources import NodeResources
from tessera.vocabulary import Allocation, CodecError, ContainerAllocation, encode_allocation

# --------------------------------------------------------------------------- counted by node


def test_counts_follow_every_entry_and_a_moved_key_counts_on_its_new_node_only() -> None:
    table = CountedByNode()
    table.put("a", "n1", 1.0)
    table.put("b", "n1", 2.0)
    table.put("c", "n2", 3.0)
    assert table.per_node() == {"n1": 2, "n2": 1} and len(table) == 3
    table.put("a", "n2", 4.0)  # re-entered: one entry, on its new node
    assert table.per_node() == {"n1": 1, "n2": 2} and len(table) == 3
    table.pop("b")
    table.pop("b")  # twice: nothing more leaves
    table.pop("unknown")
    assert table.per_node() == {"n2": 2} and "b" not in table


def test_the_counts_handed_out_are_a_copy() -> None:
    table = CountedByNode()
    table.put("a", "n1", 1.0)
    counts = table.per_node()
    counts["n1"] += 5
    counts["n9"] = 1
    assert table.per_node() == {"n1": 1}


def test_entries_leave_oldest_first_up_to_the_first_young_one() -> None:
    table = CountedByNode()
    for i, node in enumerate(["n1", "n2", "n1", "n3"]):
        table.put(f"k{i}", node, float(i))
    table.put("k0", "n1", 10.0)  # re-entered late: young now
    table.drop_older_than(3.0)
    assert table.per_node() == {"n3": 1, "n1": 1}
    assert "k0" in table and "k3" in table and len(table) == 2
    table.drop_older_than(100.0)
    assert not table.per_node() and len(table) == 0


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_waiting_list_counts_as_before_with_binds_events_locks_and_expiry() -> None:
    clock = _Clock()
    table = AwaitingAgent(clock, max_age_seconds=300)
    table.bound("u1", "n1")
    table.bound("u2", "n1")
    clock.now += 100
    pod = make_gpu_pod("p3", uid="u3", node="n2",
                       extra_annotations={HAMI.bind_phase_key: "allocating"})
    table.seen("u3", pod)
    table.node_seen("n3", {HAMI.lock_key: "held"})
    table.node_seen("n1", {HAMI.lock_key: "held"})  # its pods count, not the lock on top
    assert table.by_node() == {"n1": 2, "n2": 1, "n3": 1}
    table.bound("u1", "n2")  # bound again elsewhere (a bind retried): counted there only
    assert table.by_node() == {"n1": 1, "n2": 2, "n3": 1}
    clock.now += 201  # u2 (and n1's lock, seen later) past the expiry; u1 bound again later
    table.node_seen("n1", {})
    assert table.by_node() == {"n2": 2, "n3": 1}
    clock.now += 100
    assert not table.by_node() and len(table) == 0


# --------------------------------------------------------------------------- record memo


def _record_text(uid: str) -> str:
    return encode_allocation(Allocation("n1", (ContainerAllocation("main", (0,), 25, 4096),),
                                        pod_uid=uid))


def test_an_allocation_text_is_decoded_once_for_all_the_pods_events(
        monkeypatch: pytest.MonkeyPatch) -> None:
    decoded: list[str] = []
    real = record_memo.decode_allocation

    def counting(text: str) -> Allocation:
        decoded.append(text)
        return real(text)

    monkeypatch.setattr(record_memo, "decode_allocation", counting)
    record_memo.allocation_of_text.cache_clear()
    text = _record_text("u-memo")
    annotation = VOCAB.allocation_annotation
    pod = make_gpu_pod("p", uid="u-memo", node="n1", extra_annotations={annotation: text})
    first, _ = read_record(pod, "u-memo", annotation)
    pod["status"] = {"phase": "Running"}  # the pod's next event: same record text
    second, _ = read_record(pod, "u-memo", annotation)
    assert first is not None and second is not None
    assert second.allocation is first.allocation and decoded == [text]
    assert read_record(pod, "someone-else", annotation)[1] == "allocation belongs to pod u-memo"


def test_a_text_that_fails_to_decode_is_not_kept() -> None:
    record_memo.allocation_of_text.cache_clear()
    for _ in range(2):
        with pytest.raises(CodecError):
            record_memo.allocation_of_text('{"v":1}')
    assert record_memo.allocation_of_text.cache_info().currsize == 0


# --------------------------------------------------------------------------- node figures


def _resources() -> tuple[NodeResources, list[tuple[str, int | None]]]:
    told: list[tuple[str, int | None]] = []
    resources = NodeResources(on_free_cpu=lambda name, milli: told.append((name, milli)))
    resources.apply_node("n1", {"status": {"allocatable": {"cpu": "8", "memory": "32Gi"}}})
    return resources, told


def test_a_pod_event_that_moves_no_requests_tells_no_node_of_its_cpu() -> None:
    resources, told = _resources()
    pod: dict[str, Any] = _pod("u1", "n1", phase="Pending")
    resources.apply_pod(pod)
    assert told[-1] == ("n1", 7000)
    told.clear()
    pod["status"] = {"phase": "Running"}  # kwok's status; a plugin's annotations alike
    pod["metadata"]["annotations"] = {HAMI.bind_phase_key: "success"}
    resources.apply_pod(pod)
    assert told == [] and resources.free_cpu["n1"] == 7000
    usage = pod_usage(pod)
    assert usage is not None and resources.pod("u1") == ("n1", 1000, 1024**3)


def test_a_pod_event_that_moves_requests_still_counts() -> None:
    resources, told = _resources()
    pod = _pod("u1", "n1")
    resources.apply_pod(pod)
    pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "3"  # resized
    resources.apply_pod(pod)
    assert resources.free_cpu["n1"] == 5000 and told[-1] == ("n1", 5000)
    resources.remove_pod(pod)
    assert resources.free_cpu["n1"] == 8000

