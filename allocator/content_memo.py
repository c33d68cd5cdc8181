"""Speed: one answer per distinct node content, memoised per request shape.

Filter and prioritize ask the same question of every node a scheduling cycle sends, and the
nodes of a big cluster are mostly alike. What a fit answer or a content-only score depends on
is a node's *content*: its cards and their usage (:func:`content_key`), not its name, its
holders or its card indices. So:

- every node state gets a **content id** (:class:`NodeContents`); equal content, equal id, and
  one **representative** state is kept per id;
- answers are **memoised per request shape** by content id (:class:`ShapeMemo`): a shape seen
  before costs a dictionary read per distinct content, a new one one computation per distinct
  content, and a node change needs no invalidation (changed content gets another id);
- :meth:`NodeContents.per_content` **fans out**: it computes (or recalls) one answer per
  distinct content among the asked nodes and hands back a :class:`PerContent`, from which each
  node's answer is one C-level map;
- an answer that also depends on the node's free CPU — as a policy declares it, through
  thresholds (:meth:`allocator.policies.Policy.cpu_thresholds`) — is shared by
  **(content, CPU bucket before, CPU bucket after)** instead (:class:`CpuBuckets`,
  :meth:`NodeContents.per_content_cpu`): nodes alike in cards whose free CPU lies between the
  same two thresholds, before and after the pod, get the same answer.

Ids are never reused, so a memoised answer can never describe other content. Beyond
:data:`CONTENT_LIMIT` distinct contents, ids no node holds any more are retired and the memos
dropped (bounded memory under endless churn).

Nothing here decides anything: the caller passes the function whose answers are shared.
"""

from __future__ import annotations

import threading
from bisect import bisect_right
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, TypeVar

from allocator.fit import CardSignature, NodeState, Unfit, node_signature

T = TypeVar("T")
U = TypeVar("U")

#: Request shapes whose answers are kept, per memo (least recently used beyond that go).
SHAPE_LIMIT = 256
#: Distinct node contents remembered (ids and answers); beyond it both restart.
CONTENT_LIMIT = 100_000

#: What makes two nodes alike: the sorted signatures of their cards (see
#: :data:`allocator.fit.CardSignature` for what is left out, and why).
ContentKey = tuple[CardSignature, ...]

#: A fit verdict as filter memoises it: None when the pod fits, else why not.
FitVerdict = Unfit | None
#: A raw policy score as prioritize memoises it: None when the pod does not fit.
RawScore = float | None
#: A node's content id and where its free CPU lies among a policy's thresholds, before and
#: after the pod, as one int: ``content * W * W + before * W + after`` with ``W`` the number
#: of buckets (an unknown node's content counts as -1). An int, not a tuple: the set and memo
#: reads downstream hash one per node, and an int's hash costs nothing
#: (:meth:`CpuBuckets.decode` splits one).
CpuKey = int


class _KeyTable(dict[tuple[int | None, int], CpuKey]):
    """(content id, free milli-CPU) -> :data:`CpuKey`, for one set of thresholds and one pod
    CPU request; a pair never seen is computed on the first read (C calls ``__missing__``
    only then)."""

    def __init__(self, thresholds: tuple[int, ...], pod_cpu_milli: int) -> None:
        super().__init__()
        self._bucket = partial(bisect_right, thresholds)
        self._width = len(thresholds) + 1
        self._pod_cpu = pod_cpu_milli

    def __missing__(self, pair: tuple[int | None, int]) -> CpuKey:
        content, free = pair
        width = self._width
        key = ((-1 if content is None else content) * width * width
               + self._bucket(free) * width + self._bucket(free - self._pod_cpu))
        self[pair] = key
        return key


class CpuBuckets:
    """Each node's :data:`CpuKey`. The key of each (content id, free CPU) pair is kept per
    thresholds and pod CPU (pairs repeat across nodes and calls), so a call is one C-level
    map with a dictionary read per node, no Python code per node."""

    #: Pairs kept per table, and tables kept (beyond either: restart).
    VALUES = 200_000
    TABLES = 64

    def __init__(self) -> None:
        self._tables: dict[tuple[tuple[int, ...], int], _KeyTable] = {}

    def keys(self, contents: Sequence[int | None], free_cpu: Sequence[int],
             thresholds: tuple[int, ...], pod_cpu_milli: int) -> list[CpuKey]:
        table = self._table(thresholds, pod_cpu_milli)
        if len(table) > self.VALUES:
            table.clear()  # bounded under churn; another thread's read refills it
        return list(map(table.__getitem__, zip(contents, free_cpu, strict=True)))

    @staticmethod
    def decode(key: CpuKey, thresholds: tuple[int, ...]) -> tuple[int | None, int, int]:
        """(content id or None for an unknown node, bucket before, bucket after)."""
        width = len(thresholds) + 1
        content, buckets = divmod(key, width * width)
        before, after = divmod(buckets, width)
        return (None if content < 0 else content), before, after

    def _table(self, thresholds: tuple[int, ...], pod_cpu_milli: int) -> _KeyTable:
        table = self._tables.get((thresholds, pod_cpu_milli))
        if table is None:
            if len(self._tables) >= self.TABLES:
                self._tables.clear()
            table = self._tables.setdefault((thresholds, pod_cpu_milli),
                                            _KeyTable(thresholds, pod_cpu_milli))
        return table


def bucket_value(thresholds: Sequence[int], bucket: int) -> int:
    """A free-CPU value inside ``bucket`` (what a representative node is scored with: the
    policy tells values of one bucket apart from no other)."""
    if not thresholds:
        return 0
    return thresholds[0] - 1 if bucket == 0 else thresholds[bucket - 1]


def content_key(state: NodeState) -> ContentKey:
    return tuple(sorted(node_signature(state)))


class ShapeMemo(Generic[T]):
    """Answers per request shape (any hashable key), each a dict ``content id -> answer``
    (or :data:`CpuKey` -> answer).

    Callers read and fill a shape's dict without a lock: an entry never goes stale, because
    it depends only on the content its id stands for (and the CPU buckets of its key, whose
    thresholds are part of the shape).
    """

    def __init__(self, limit: int = SHAPE_LIMIT) -> None:
        self._limit = limit
        self._shapes: dict[Hashable, dict[Any, T]] = {}
        self._lock = threading.Lock()

    def answers(self, shape: Hashable) -> dict[Any, T]:
        with self._lock:
            kept = self._shapes.pop(shape, None)
            if kept is None or len(kept) > CONTENT_LIMIT:
                kept = {}
            if len(self._shapes) >= self._limit:
                self._shapes.pop(next(iter(self._shapes)))
            self._shapes[shape] = kept  # re-inserted last: LRU order
            return kept

    def clear(self) -> None:
        with self._lock:
            self._shapes.clear()


@dataclass(frozen=True, slots=True)
class PerContent(Generic[T]):
    """One answer per distinct content among some nodes, and the way back to each node."""

    #: The content id (or :data:`CpuKey`) of each node asked about, in order (None: a node
    #: we do not know).
    contents: Sequence[Hashable]
    #: The answer of each distinct content (key None: the answer for unknown nodes).
    answers: dict[Any, T]

    def distinct(self) -> Iterable[T]:
        return self.answers.values()

    def per_node(self) -> list[T]:
        return list(map(self.answers.__getitem__, self.contents))

    def map_distinct(self, convert: Callable[[list[T]], list[U]]) -> PerContent[U]:
        """``convert`` applied to every distinct answer at once (e.g. min-max scaling, which
        depends only on the distinct values)."""
        converted = convert(list(self.answers.values()))
        return PerContent(self.contents, dict(zip(self.answers, converted, strict=True)))


def _at(answer: Callable[[NodeState, int, int], T], before: int, after: int,
        state: NodeState) -> T:
    return answer(state, before, after)


class NameBiases:
    """Each policy's name bias (:meth:`allocator.policies.Policy.name_bias`) per node name,
    computed once (a hash per node and call was most of a 5,000-node prioritize)."""

    def __init__(self, limit: int = CONTENT_LIMIT) -> None:
        self._limit = limit
        self._by_policy: dict[str, dict[str, float]] = {}

    def of(self, policy: str, bias: Callable[[str], float], names: Sequence[str]
           ) -> list[float]:
        known = self._by_policy.setdefault(policy, {})
        try:
            return list(map(known.__getitem__, names))
        except KeyError:
            if len(known) > self._limit:
                known.clear()
            for name in names:
                if name not in known:
                    known[name] = bias(name)
            return list(map(known.__getitem__, names))


class NodeNames:
    """One string object per node name, shared by every per-node table of the picture (the
    state's, the contents', the node resources', the name biases).

    A verb's node names are decoded from the request: new string objects, equal to the
    tables' keys but not the same. A dict read by an equal object compares characters, one
    more memory read per node and table; by the same object it stops at the identity check.
    :meth:`canonical` pays that once per call, and every table read after it is by identity.
    Names never seen are passed through, so hostile names are never kept."""

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

    def canonical(self, names: Iterable[str]) -> list[str]:
        """``names`` in order, each as the shared object when there is one."""
        get = self._by_name.get
        return list(map(get, names, names))


class NodeContents:
    """Content ids of the nodes of one cluster picture, and the answers memoised by them.

    :class:`allocator.state.ClusterState` owns one and calls :meth:`assign` and :meth:`forget`
    under its lock; the verbs read it without locking.
    """

    def __init__(self, limit: int = CONTENT_LIMIT) -> None:
        self._limit = limit
        self._of: dict[str, int] = {}  # node name -> content id of its current state
        self._ids: dict[ContentKey, int] = {}
        self._representative: dict[int, NodeState] = {}  # content id -> a state with it
        self._next = 0  # never reused: an id always means one content
        #: filter's verdicts, per request shape
        self.fit_verdicts: ShapeMemo[FitVerdict] = ShapeMemo()
        #: prioritize's content-only scores, per (policy, request shape)
        self.raw_scores: ShapeMemo[RawScore] = ShapeMemo()
        #: the policies' name biases, per node name
        self.name_biases = NameBiases()
        #: free-CPU buckets per policy thresholds, for answers shared by :data:`CpuKey`
        self.cpu_buckets = CpuBuckets()

    # ------------------------------------------------------------------ writes (owner's lock)
    def assign(self, name: str, state: NodeState) -> int:
        """Record ``state`` as the node's current state; its content id."""
        content = self._id(state)
        self._of[name] = content
        return content

    def forget(self, name: str) -> None:
        self._of.pop(name, None)

    def drop_memos(self) -> None:
        self.fit_verdicts.clear()
        self.raw_scores.clear()

    def _id(self, state: NodeState) -> int:
        key = content_key(state)
        found = self._ids.get(key)
        if found is not None:
            return found
        if len(self._ids) >= self._limit:
            live = set(self._of.values())
            self._ids = {k: i for k, i in self._ids.items() if i in live}
            self._representative = {
                i: s for i, s in self._representative.items() if i in live}
            self.drop_memos()
        found = self._ids[key] = self._next
        self._representative[found] = state
        self._next += 1
        return found

    # ------------------------------------------------------------------ reads (lock-free)
    def ids(self, names: Iterable[str]) -> list[int | None]:
        """The content id of each named node (None for unknown ones), in order."""
        return list(map(self._of.get, names))

    def representative(self, content: int) -> NodeState | None:
        """A state with this content (None only if the id was retired meanwhile)."""
        return self._representative.get(content)

    def per_content(self, names: Sequence[str], contents: list[int | None],
                    memo: dict[Any, T], answer: Callable[[NodeState], T], *,
                    unknown: T) -> PerContent[T]:
        """``answer`` for every distinct content among ``names`` (whose :meth:`ids` are
        ``contents``), from ``memo`` or computed once on a representative (and kept);
        ``unknown`` for nodes we do not know."""
        answers: dict[int | None, T] = {}
        for content in set(contents):
            if content is None:
                answers[None] = unknown
            elif content in memo:
                answers[content] = memo[content]
            else:
                state = self._representative.get(content)
                if state is not None:
                    answers[content] = memo[content] = answer(state)
                else:
                    answers[content] = self._answer_now(
                        names[contents.index(content)], answer, unknown)
        return PerContent(contents, answers)

    def per_content_cpu(self, names: Sequence[str], keys: list[CpuKey],
                        thresholds: tuple[int, ...], memo: dict[Any, T],
                        answer: Callable[[NodeState, int, int], T], *,
                        unknown: T) -> PerContent[T]:
        """:meth:`per_content` for answers that also depend on the CPU buckets: ``answer``
        gets a representative state of the key's content and the key's two buckets
        (``keys`` from :meth:`CpuBuckets.keys` with ``thresholds``).

        Keys are many more than contents (a content spreads over several CPU buckets), so
        the answers already kept are gathered by C-level set and map operations, and Python
        runs only for the keys never seen."""
        distinct = set(keys)
        local: dict[Any, T] = {}  # answers not kept: unknown nodes, retired ids
        # difference with the dict itself (not .keys()): C walks the few distinct keys
        # instead of every key the memo ever kept
        for key in distinct.difference(memo):
            content, before, after = CpuBuckets.decode(key, thresholds)
            state = None if content is None else self._representative.get(content)
            if content is None:
                local[key] = unknown
            elif state is not None:
                memo[key] = answer(state, before, after)
            else:
                local[key] = self._answer_now(names[keys.index(key)],
                                              partial(_at, answer, before, after), unknown)
        kept = distinct.difference(local) if local else distinct
        answers: dict[Any, T] = dict(zip(kept, map(memo.__getitem__, kept), strict=True))
        answers.update(local)
        return PerContent(keys, answers)

    def _answer_now(self, name: str, answer: Callable[[NodeState], T], unknown: T) -> T:
        """The id was retired after the names were read: answer from a state with the node's
        current content, and keep nothing under either id."""
        content = self._of.get(name)
        state = None if content is None else self._representative.get(content)
        return unknown if state is None else answer(state)
