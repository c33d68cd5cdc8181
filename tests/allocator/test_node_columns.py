"""Node slots and the answers kept per slot (allocator.ranking.content_memo: NodeColumns, SlotMemo):
what a verb gathers for its nodes is each node's current fact, whatever came and went."""

from __future__ import annotations

import threading

import numpy as np
import numpy.typing as npt

from allocator.ranking.content_memo import (
    UNKNOWN_CONTENT,
    UNKNOWN_FREE,
    NodeColumns,
    SlotMemo,
    cpu_keys,
    decode_cpu_key,
)


def test_a_verb_gathers_each_nodes_content_and_free_cpu_and_unknown_for_strangers() -> None:
    columns = NodeColumns(capacity=2)  # grows twice below
    for i in range(5):
        columns.set_content(f"n{i}", 10 + i)
        columns.set_free_cpu(f"n{i}", 1000 * i)
    asked = columns.asked(["n3", "ghost", "n0", "n4"])
    assert asked.contents.tolist() == [13, UNKNOWN_CONTENT, 10, 14]
    assert asked.free_cpu.tolist() == [3000, UNKNOWN_FREE, 0, 4000]
    assert asked.unknown() == ["ghost"]
    assert asked.where(asked.contents >= 13).name_list() == ["n3", "n4"]


def test_a_slot_known_by_neither_owner_is_reused_and_reads_only_the_new_nodes_facts() -> None:
    columns = NodeColumns()
    columns.set_content("old", 1)
    columns.set_free_cpu("old", 500)
    slot = columns.asked(["old"]).slots[0]
    columns.set_content("old", UNKNOWN_CONTENT)
    assert columns.asked(["old"]).free_cpu.tolist() == [500]  # still known by one owner
    columns.set_free_cpu("old", UNKNOWN_FREE)
    columns.set_content("new", 2)
    asked = columns.asked(["new", "old"])
    assert asked.slots[0] == slot and asked.slots[1] == 0
    assert asked.contents.tolist() == [2, UNKNOWN_CONTENT]
    assert asked.free_cpu.tolist() == [UNKNOWN_FREE, UNKNOWN_FREE]


def test_a_name_bias_is_computed_once_per_node_and_not_inherited_by_a_reused_slot() -> None:
    columns = NodeColumns()
    computed: list[str] = []

    def bias(name: str) -> float:
        computed.append(name)
        return float(len(name))

    columns.set_content("ab", 1)
    asked = columns.asked(["ab", "ghost"])
    everyone = np.arange(2)
    assert columns.biases("p", bias, asked, everyone).tolist() == [2.0, 5.0]
    assert columns.biases("p", bias, asked, everyone).tolist() == [2.0, 5.0]
    assert computed == ["ab", "ghost", "ghost"]  # strangers (slot 0) are never kept
    columns.set_content("ab", UNKNOWN_CONTENT)
    columns.set_content("abcd", 1)  # takes the freed slot
    asked = columns.asked(["abcd"])
    assert columns.biases("p", bias, asked, np.arange(1)).tolist() == [4.0]


def test_a_slot_memo_answers_only_the_keys_it_does_not_hold() -> None:
    columns = NodeColumns()
    for i in range(4):
        columns.set_content(f"n{i}", i)
    memo = SlotMemo()
    asked: list[list[int]] = []

    def answer(keys: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        asked.append(keys.tolist())
        return keys * 2.0

    nodes = columns.asked(["n0", "n1", "n2", "n3", "ghost"])
    assert memo.numbers(nodes, nodes.contents, answer).tolist() == [0, 2, 4, 6, -2]
    columns.set_content("n2", 9)
    nodes = columns.asked(["n0", "n1", "n2", "n3", "ghost"])
    assert memo.numbers(nodes, nodes.contents, answer).tolist() == [0, 2, 18, 6, -2]
    assert asked == [[0, 1, 2, 3, -1], [9, -1]]


def test_concurrent_calls_with_different_keys_never_read_anothers_answer() -> None:
    """Threads asking the same slots with different keys: every answer read is its key's."""
    columns = NodeColumns()
    names = [f"n{i}" for i in range(200)]
    for i, name in enumerate(names):
        columns.set_content(name, i)
    nodes = columns.asked(names)
    memo = SlotMemo()
    wrong: list[int] = []

    def answer(keys: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        return keys * 3.0

    def ask(offset: int) -> None:
        for round_ in range(300):
            keys = nodes.contents + (offset + round_ % 3) * 1000
            got = memo.numbers(nodes, keys, answer)
            wrong.extend(np.flatnonzero(got != keys * 3.0).tolist())

    threads = [threading.Thread(target=ask, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    assert wrong == []


def test_cpu_keys_split_back_into_content_and_buckets() -> None:
    thresholds = (4000, 8000, 11300)
    contents = np.array([0, 5, UNKNOWN_CONTENT, 7], dtype=np.int64)
    free = np.array([0, 8000, UNKNOWN_FREE, 11299], dtype=np.int64)
    keys = cpu_keys(contents, free, thresholds, 4000)
    assert [decode_cpu_key(k, thresholds) for k in keys.tolist()] == [
        (0, 0, 0), (5, 2, 1), (UNKNOWN_CONTENT, 3, 3), (7, 2, 1)]


def test_every_node_is_each_slotted_name_with_its_facts_in_slot_order() -> None:
    columns = NodeColumns(capacity=2)
    for i in range(4):
        columns.set_content(f"n{i}", 10 + i)
    columns.set_free_cpu("cpu-only", 700)  # a node known by the CPU owner alone
    every = columns.every_node()
    assert list(every.names) == ["n0", "n1", "n2", "n3", "cpu-only"]
    assert every.slots.tolist() == [1, 2, 3, 4, 5]
    assert every.contents.tolist() == [10, 11, 12, 13, UNKNOWN_CONTENT]
    assert every.free_cpu.tolist() == [UNKNOWN_FREE] * 4 + [700]
    assert every.where(every.contents >= 12).name_list() == ["n2", "n3"]


def test_every_node_shows_a_freed_slot_nameless_and_a_reused_one_under_its_new_name() -> None:
    columns = NodeColumns()
    columns.set_content("a", 1)
    columns.set_content("b", 2)
    before = columns.every_node()
    columns.set_content("a", UNKNOWN_CONTENT)  # slot 1 is free again
    freed = columns.every_node()
    assert list(freed.names) == ["", "b"]
    assert freed.contents.tolist() == [UNKNOWN_CONTENT, 2]
    columns.set_content("c", 3)  # takes slot 1
    reused = columns.every_node()
    assert list(reused.names) == ["c", "b"] and reused.contents.tolist() == [3, 2]
    # what a verb took before stays as it was: a copy, not the live columns
    assert list(before.names) == ["a", "b"] and before.contents.tolist() == [1, 2]
