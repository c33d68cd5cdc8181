"""Speed: a slot per node name, and at it the node's content id and free CPU, in arrays.

A verb gathers the content ids and free CPU of all its nodes with one dictionary read per
name, the rest is array indexing (:meth:`NodeColumns.asked`), or takes every slot, reading no
name (:meth:`NodeColumns.every_node`). The content ids come from
:class:`allocator.ranking.content_memo.NodeContents`, which the picture tells every change.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Final

import numpy as np
import numpy.typing as npt

#: Per-node integers and numbers as the verbs gather them.
Ints = npt.NDArray[np.int64]
Numbers = npt.NDArray[np.float64]

#: The content id of a node we do not know.
UNKNOWN_CONTENT: Final = -1
#: Free CPU (milli) of a node whose CPU we do not know: above every threshold.
UNKNOWN_FREE: Final = 1 << 62


@dataclass(frozen=True, slots=True)
class AskedNodes:
    """The nodes one verb call is about, as :class:`NodeColumns` saw them: the names as
    asked, and aligned with them each node's slot, content id and free milli-CPU."""

    names: Sequence[str]
    slots: Ints
    contents: Ints
    free_cpu: Ints
    #: Slots the columns had room for when gathered (every slot here is below it).
    capacity: int
    #: Where each node is in :attr:`names` (None: every name, in order).
    at: Ints | None = None

    def __len__(self) -> int:
        return len(self.slots)

    def unknown(self) -> list[str]:
        """The names of the nodes whose content is unknown."""
        return self.names_at(np.flatnonzero(self.contents == UNKNOWN_CONTENT))

    def names_at(self, positions: Ints) -> list[str]:
        """The names at ``positions`` (into these nodes)."""
        if self.at is not None:
            positions = self.at[positions]
        names = self.names
        return [names[i] for i in positions.tolist()]

    def name_list(self) -> list[str]:
        if self.at is None:
            return list(self.names)
        return self.names_at(np.arange(len(self.slots)))

    def where(self, mask: npt.NDArray[np.bool_]) -> AskedNodes:
        """The nodes where ``mask`` holds, in order."""
        positions = np.flatnonzero(mask)
        at = positions if self.at is None else self.at[positions]
        return AskedNodes(self.names, self.slots[positions], self.contents[positions],
                          self.free_cpu[positions], self.capacity, at)


class NodeColumns:
    """A slot per node name, and at it the node's content id and free milli-CPU, in arrays.

    The owners of the two facts (:class:`NodeContents` and
    :class:`allocator.picture.resources.NodeResources`) write them under their own locks, which call
    in here (never the reverse); a slot whose both facts are unknown again is reused. The
    verbs read lock-free: :meth:`asked` reads the slots first, then the arrays, which always
    have room for every slot handed out (they grow before a slot beyond them is).
    """

    def __init__(self, capacity: int = 1024) -> None:
        self._lock = threading.Lock()
        self._slot: dict[str, int] = {}
        #: the name at each slot ("" at slot 0 and at free slots), and its copy for the verbs
        #: (None: made again at the next :meth:`every_node`, after a slot changed hands)
        self._names: list[str] = [""]
        self._names_copy: tuple[str, ...] | None = None
        self._spare: list[int] = []
        # slot 0: every name we do not know (content and CPU unknown forever)
        self._used = 1
        self._arrays = (np.full(capacity, UNKNOWN_CONTENT, dtype=np.int64),
                        np.full(capacity, UNKNOWN_FREE, dtype=np.int64))
        #: per policy, the name bias of the node at each slot (NaN: not computed yet)
        self._biases: dict[str, Numbers] = {}

    def set_content(self, name: str, content: int) -> None:
        self._set(name, 0, content)

    def set_free_cpu(self, name: str, milli: int) -> None:
        self._set(name, 1, milli)

    def _set(self, name: str, column: int, value: int) -> None:
        with self._lock:
            slot = self._slot.get(name)
            if slot is None:
                if value == (UNKNOWN_CONTENT, UNKNOWN_FREE)[column]:
                    return
                slot = self._new_slot(name)
            arrays = self._arrays
            arrays[column][slot] = value
            if arrays[0][slot] == UNKNOWN_CONTENT and arrays[1][slot] == UNKNOWN_FREE:
                del self._slot[name]  # known by neither owner: the slot is free again
                self._spare.append(slot)
                self._names[slot] = ""
                self._names_copy = None
                for biases in self._biases.values():
                    if slot < len(biases):
                        biases[slot] = np.nan

    def _new_slot(self, name: str) -> int:
        if self._spare:
            slot = self._spare.pop()
        else:
            slot = self._used
            self._used += 1
            self._names.append("")
            contents, free_cpu = self._arrays
            if slot >= len(contents):
                grown = 2 * len(contents)
                self._arrays = (
                    np.concatenate([contents, np.full(grown - len(contents), UNKNOWN_CONTENT,
                                                      dtype=np.int64)]),
                    np.concatenate([free_cpu, np.full(grown - len(free_cpu), UNKNOWN_FREE,
                                                      dtype=np.int64)]))
        self._slot[name] = slot
        self._names[slot] = name
        self._names_copy = None
        return slot

    def contents_held(self) -> set[int]:
        """The content ids some node holds now."""
        with self._lock:
            held = set(self._arrays[0][:self._used].tolist())
        held.discard(UNKNOWN_CONTENT)
        return held

    def asked(self, names: Sequence[str]) -> AskedNodes:
        """Each named node's slot, content id and free CPU, in order (unknown names: slot 0,
        :data:`UNKNOWN_CONTENT`, :data:`UNKNOWN_FREE`)."""
        slots = np.fromiter(map(self._slot.get, names, repeat(0)), dtype=np.int64,
                            count=len(names))
        contents, free_cpu = self._arrays  # read after the slots: room for every one of them
        return AskedNodes(names, slots, contents[slots], free_cpu[slots], len(contents))

    def every_node(self) -> AskedNodes:
        """Every node that has a slot, in slot order, as :meth:`asked` would give them: no
        name is looked up (a free slot is there under the name ``""``, its content and CPU
        unknown). Read under the lock, so names and facts are of one moment."""
        with self._lock:
            used = self._used
            names = self._names_copy
            if names is None:
                names = self._names_copy = tuple(self._names[1:used])
            contents, free_cpu = self._arrays
            capacity = len(contents)
            contents, free_cpu = contents[1:used].copy(), free_cpu[1:used].copy()
        return AskedNodes(names, np.arange(1, used, dtype=np.int64), contents, free_cpu,
                          capacity)

    def biases(self, policy: str, bias: Callable[[str], float], nodes: AskedNodes,
               positions: Ints) -> Numbers:
        """The policy's name bias (:meth:`allocator.ranking.policies.Policy.name_bias`) of the nodes
        at ``positions`` among ``nodes``: computed once per node, kept at its slot."""
        slots = nodes.slots[positions]
        with self._lock:
            column = self._biases.get(policy)
            capacity = len(self._arrays[0])
            if column is None or len(column) < capacity:
                grown = np.full(capacity, np.nan)
                if column is not None:
                    grown[:len(column)] = column
                column = self._biases[policy] = grown
            values = column[slots]
        missing = np.flatnonzero(np.isnan(values) | (slots == 0))
        if len(missing):
            names = nodes.names_at(positions[missing])
            fresh = [bias(name) for name in names]
            values[missing] = fresh
            with self._lock:
                column = self._biases[policy]
                for name, value in zip(names, fresh, strict=True):
                    slot = self._slot.get(name)
                    if slot is not None and slot < len(column):  # still this node's slot
                        column[slot] = value
        return values
