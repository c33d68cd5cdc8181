"""Speed: one answer per distinct node content, memoised per request shape and per node slot.

Filter and prioritize ask the same question of every node a scheduling cycle sends, and the
nodes of a big cluster are mostly alike. What a fit answer or a content-only score depends on
is a node's *content*: its cards and their usage (:func:`content_key`), not its name, its
holders or its card indices. So:

- every node state gets a **content id** (:class:`NodeContents`); equal content, equal id, and
  one **representative** state is kept per id;
- an answer that also depends on the node's free CPU — as a policy declares it, through
  thresholds (:meth:`allocator.ranking.policies.Policy.cpu_thresholds`) — is keyed by
  **(content, CPU bucket before, CPU bucket after)** instead (:data:`CpuKey`): nodes alike in
  cards whose free CPU lies between the same two thresholds, before and after the pod, get
  the same answer;
- answers are **memoised per request shape** by key (:class:`ShapeMemo`): a node change needs
  no invalidation (changed content gets another id);
- every node name has a **slot** (:class:`NodeColumns`), and its content id and free CPU sit
  at that slot in arrays: a verb gathers them for all its nodes with one dictionary read per
  name, the rest is array indexing (or takes every slot, reading no name:
  :meth:`NodeColumns.every_node`);
- and per request shape, the last answer of each slot is kept with the key it answers
  (:class:`SlotMemo`): a scheduling cycle changes a node or two, so a warm call compares
  keys, answers the few slots whose key changed from the memo above, and reads the rest —
  no Python code per node.

Ids are never reused, so a memoised answer can never describe other content. Beyond
:data:`CONTENT_LIMIT` distinct contents, ids no node holds any more are retired and the memos
dropped (bounded memory under endless churn); a verb that read a retired id answers that node
as unknown, once.

Nothing here decides anything: the caller passes the function whose answers are shared.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any, Final, Generic, TypeVar

import numpy as np
import numpy.typing as npt

from allocator.ranking.fit import CardSignature, NodeState, Unfit, node_signature
from tessera.vocabulary import PodRequest, encode_request

T = TypeVar("T")
U = TypeVar("U")

#: Per-node integers and numbers as the verbs gather them.
Ints = npt.NDArray[np.int64]
Numbers = npt.NDArray[np.float64]

#: Request shapes whose answers are kept, per memo (least recently used beyond that go).
SHAPE_LIMIT = 256
#: Request shapes whose answers are also kept per node slot (:class:`SlotMemos`).
SLOT_SHAPE_LIMIT = 32
#: Distinct node contents remembered (ids and answers); beyond it both restart.
CONTENT_LIMIT = 100_000

#: What makes two nodes alike: the sorted signatures of their cards (see
#: :data:`allocator.ranking.fit.CardSignature` for what is left out, and why).
ContentKey = tuple[CardSignature, ...]

#: A pod request's shape, the key its answers are memoised by: its canonical encoding, made
#: once per distinct request (a filter asks for it two or three times, and most pods ask
#: alike; equal requests encode alike, so nothing is shared that should not be).
request_shape: Callable[[PodRequest], str] = functools.lru_cache(maxsize=SHAPE_LIMIT)(
    encode_request)

#: A fit verdict as filter memoises it: None when the pod fits, else why not.
FitVerdict = Unfit | None
#: A raw policy score as prioritize memoises it: None when the pod does not fit.
RawScore = float | None
#: A node's content id and where its free CPU lies among a policy's thresholds, before and
#: after the pod, as one int: ``content * W * W + before * W + after`` with ``W`` the number
#: of buckets (an unknown node's content counts as -1; :func:`decode_cpu_key` splits one).
CpuKey = int

#: The content id of a node we do not know.
UNKNOWN_CONTENT: Final = -1
#: Free CPU (milli) of a node whose CPU we do not know: above every threshold.
UNKNOWN_FREE: Final = 1 << 62
#: A slot memo's key for "nothing kept" (no content id or CpuKey is this low).
_NOTHING: Final = np.iinfo(np.int64).min


def cpu_keys(contents: Ints, free_cpu: Ints, thresholds: Sequence[int],
             pod_cpu_milli: int) -> Ints:
    """Each node's :data:`CpuKey` from its content id and free milli-CPU."""
    steps = np.asarray(thresholds, dtype=np.int64)
    width = len(thresholds) + 1
    before = np.searchsorted(steps, free_cpu, side="right")
    after = np.searchsorted(steps, free_cpu - pod_cpu_milli, side="right")
    return contents * (width * width) + before * width + after


def decode_cpu_key(key: CpuKey, thresholds: Sequence[int]) -> tuple[int, int, int]:
    """(content id or :data:`UNKNOWN_CONTENT`, bucket before, bucket after)."""
    width = len(thresholds) + 1
    content, buckets = divmod(key, width * width)
    before, after = divmod(buckets, width)
    return max(content, UNKNOWN_CONTENT), before, after


def bucket_value(thresholds: Sequence[int], bucket: int) -> int:
    """A free-CPU value inside ``bucket`` (what a representative node is scored with: the
    policy tells values of one bucket apart from no other)."""
    if not thresholds:
        return 0
    return thresholds[0] - 1 if bucket == 0 else thresholds[bucket - 1]


def content_key(state: NodeState) -> ContentKey:
    return tuple(sorted(node_signature(state)))


class _PerShape(Generic[U]):
    """One kept value per request shape (any hashable key), the least recently used dropped
    beyond ``limit``."""

    def __init__(self, limit: int, make: Callable[[], U],
                 worn: Callable[[U], bool] = lambda _value: False) -> None:
        self._limit = limit
        self._make = make
        self._worn = worn  # a kept value that has grown too big: made afresh
        self._shapes: dict[Hashable, U] = {}
        self._lock = threading.Lock()

    def of(self, shape: Hashable) -> U:
        with self._lock:
            kept = self._shapes.pop(shape, None)
            if kept is None or self._worn(kept):
                kept = self._make()
            if len(self._shapes) >= self._limit:
                self._shapes.pop(next(iter(self._shapes)))
            self._shapes[shape] = kept  # re-inserted last: LRU order
            return kept

    def clear(self) -> None:
        with self._lock:
            self._shapes.clear()


class ShapeMemo(Generic[T]):
    """Answers per request shape (any hashable key), each a dict ``content id -> answer``
    (or :data:`CpuKey` -> answer).

    Callers read and fill a shape's dict without a lock: an entry never goes stale, because
    it depends only on the content its id stands for (and the CPU buckets of its key, whose
    thresholds are part of the shape).
    """

    def __init__(self, limit: int = SHAPE_LIMIT) -> None:
        self._kept: _PerShape[dict[Any, T]] = _PerShape(
            limit, dict, lambda kept: len(kept) > CONTENT_LIMIT)

    def answers(self, shape: Hashable) -> dict[Any, T]:
        return self._kept.of(shape)

    def clear(self) -> None:
        self._kept.clear()


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


class SlotMemo:
    """For one request shape: the last answer (a number) of each node slot, and the key
    (content id or :data:`CpuKey`) it answers."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._keys: Ints = np.full(0, _NOTHING, dtype=np.int64)
        self._numbers: Numbers = np.zeros(0)

    def numbers(self, nodes: AskedNodes, keys: Ints, answer: Callable[[Ints], Numbers]
                ) -> Numbers:
        """The number of each node for its key in ``keys``: kept ones read, the others from
        ``answer`` (called with the keys not kept, outside the lock) and kept."""
        slots = nodes.slots
        with self._lock:
            if len(self._keys) < nodes.capacity:
                grow = nodes.capacity - len(self._keys)
                self._keys = np.concatenate([self._keys, np.full(grow, _NOTHING, np.int64)])
                self._numbers = np.concatenate([self._numbers, np.zeros(grow)])
            kept = self._keys[slots]
            numbers = self._numbers[slots]
        # slot 0 (unknown names) is shared by all of them: never kept
        stale = np.flatnonzero((kept != keys) | (slots == 0))
        if len(stale):
            fresh = answer(keys[stale])
            numbers[stale] = fresh
            with self._lock:
                # a slot answered now by two calls gets either's answer, with its own key
                self._numbers[slots[stale]] = fresh
                self._keys[slots[stale]] = keys[stale]
        return numbers


class SlotMemos:
    """A :class:`SlotMemo` per request shape, the least recently used beyond the limit
    dropped."""

    def __init__(self, limit: int = SLOT_SHAPE_LIMIT) -> None:
        self._kept: _PerShape[SlotMemo] = _PerShape(limit, SlotMemo)

    def of(self, shape: Hashable) -> SlotMemo:
        return self._kept.of(shape)

    def clear(self) -> None:
        self._kept.clear()


class NodeNames:
    """One string object per node name, shared by every per-node table of the picture (the
    state's, the node resources', the columns' slots): one copy of each name in memory, and
    the tables' reads of each other's keys stop at the identity check. Only real nodes'
    names are kept (a verb's names are read through the columns' slots, never kept)."""

    def __init__(self, limit: int = CONTENT_LIMIT) -> None:
        self._limit = limit
        self._by_name: dict[str, str] = {}

    def intern(self, name: str) -> str:
        """The shared object for ``name`` (kept from now on: call for real nodes only)."""
        found = self._by_name.get(name)
        if found is not None:
            return found
        if len(self._by_name) >= self._limit:
            self._by_name.clear()  # bounded under endless churn; only speed is lost
        return self._by_name.setdefault(name, name)


class NodeContents:
    """Content ids of the nodes of one cluster picture, and the answers memoised by them.

    :class:`allocator.picture.state.ClusterState` owns one and calls :meth:`assign` and
    :meth:`forget`
    under its lock; the verbs read it without locking.
    """

    def __init__(self, columns: NodeColumns | None = None, limit: int = CONTENT_LIMIT
                 ) -> None:
        self._limit = limit
        #: every node's content id (and free CPU) at its slot, for the verbs
        self.columns = columns if columns is not None else NodeColumns()
        self._ids: dict[ContentKey, int] = {}
        self._representative: dict[int, NodeState] = {}  # content id -> a state with it
        self._next = 0  # never reused: an id always means one content
        #: filter's verdicts, per request shape
        self.fit_verdicts: ShapeMemo[FitVerdict] = ShapeMemo()
        #: prioritize's content-only scores, per (policy, request shape)
        self.raw_scores: ShapeMemo[RawScore] = ShapeMemo()
        #: the same two per node slot, as numbers (1.0: fits; a score, NaN: does not fit)
        self.fit_slots = SlotMemos()
        self.score_slots = SlotMemos()

    # ------------------------------------------------------------------ writes (owner's lock)
    def assign(self, name: str, state: NodeState) -> int:
        """Record ``state`` as the node's current state; its content id."""
        content = self._id(state)
        self.columns.set_content(name, content)
        return content

    def forget(self, name: str) -> None:
        self.columns.set_content(name, UNKNOWN_CONTENT)

    def drop_memos(self) -> None:
        self.fit_verdicts.clear()
        self.raw_scores.clear()
        self.fit_slots.clear()
        self.score_slots.clear()

    def _id(self, state: NodeState) -> int:
        key = content_key(state)
        found = self._ids.get(key)
        if found is not None:
            return found
        if len(self._ids) >= self._limit:
            live = self.columns.contents_held()
            self._ids = {k: i for k, i in self._ids.items() if i in live}
            self._representative = {
                i: s for i, s in self._representative.items() if i in live}
            self.drop_memos()
        found = self._ids[key] = self._next
        self._representative[found] = state
        self._next += 1
        return found

    # ------------------------------------------------------------------ reads (lock-free)
    def representative(self, content: int) -> NodeState | None:
        """A state with this content (None for :data:`UNKNOWN_CONTENT`, or if the id was
        retired meanwhile)."""
        return self._representative.get(content)

    def answers(self, keys: Iterable[int], memo: dict[Any, T], answer: Callable[[int], T]
                ) -> dict[int, T]:
        """``answer`` of every distinct key among ``keys``, from ``memo`` or computed once
        (and kept)."""
        distinct = set(keys)
        # difference with the dict itself (not .keys()): C walks the few distinct keys
        # instead of every key the memo ever kept
        for key in distinct.difference(memo):
            memo[key] = answer(key)
        return dict(zip(distinct, map(memo.__getitem__, distinct), strict=True))

    def numbers(self, memos: SlotMemos, shape: Hashable, nodes: AskedNodes, keys: Ints,
                memo: dict[Any, T], answer: Callable[[int], T],
                number: Callable[[T], float]) -> Numbers:
        """``number(answer(key))`` of each node, with ``keys`` aligned with ``nodes``: kept
        per slot (:class:`SlotMemo`), else per key (``memo``), else computed once per
        distinct key."""

        def fresh(missing: Ints) -> Numbers:
            distinct, inverse = np.unique(missing, return_inverse=True)
            found = self.answers(distinct.tolist(), memo, answer)
            values = np.fromiter((number(found[k]) for k in distinct.tolist()),
                                 dtype=np.float64, count=len(distinct))
            return values[inverse]

        return memos.of(shape).numbers(nodes, keys, fresh)
