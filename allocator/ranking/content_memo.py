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
- every node name has a **slot** (:class:`~allocator.ranking.columns.NodeColumns`), and its
  content id and free CPU sit at that slot in arrays (:mod:`allocator.ranking.columns`);
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
from typing import Any, Final, Generic, TypeVar

import numpy as np

from allocator.ranking.cards import CardSignature, NodeState, node_signature
from allocator.ranking.columns import (
    UNKNOWN_CONTENT,
    UNKNOWN_FREE,
    AskedNodes,
    Ints,
    NodeColumns,
    Numbers,
)
from allocator.ranking.fit import Unfit
from tessera.vocabulary import PodRequest, encode_request

T = TypeVar("T")
U = TypeVar("U")


#: Request shapes whose answers are kept, per memo (least recently used beyond that go).
SHAPE_LIMIT = 256
#: Request shapes whose answers are also kept per node slot (:class:`SlotMemos`).
SLOT_SHAPE_LIMIT = 32
#: Distinct node contents remembered (ids and answers); beyond it both restart.
CONTENT_LIMIT = 100_000

#: What makes two nodes alike: the sorted signatures of their cards (see
#: :data:`allocator.ranking.cards.CardSignature` for what is left out, and why).
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


class NodeContents:
    """Content ids of the nodes of one cluster picture, and the answers memoised by them.

    It observes the picture (:class:`allocator.picture.observer.NodeObserver`, told under the
    picture's locks); the verbs read it without locking.
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

    # ------------------------------------------------------------------ the picture's news
    def node_changed(self, name: str, state: NodeState) -> None:
        self.assign(name, state)

    def node_gone(self, name: str) -> None:
        self.forget(name)

    def free_cpu_changed(self, name: str, milli: int | None) -> None:
        self.columns.set_free_cpu(name, UNKNOWN_FREE if milli is None else milli)

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
