"""Filter's holds: a pod's cards on the node filter chose, kept for its bind (not locked: the
picture's lock guards them, :class:`allocator.picture.state.ClusterState`).

Why: kube-scheduler binds a pod while it already filters the next ones, and tells the
extender its choice only with the bind; without a hold, each of those filters would see the
same free cards and name the same node. (kube-scheduler's own cache does the same for its
plugins: it assumes a pod on its node before binding it.) A hold is a pod record at
:attr:`~allocator.picture.records.Stage.HELD`; this table keeps when it ends and what it was
made for, oldest first.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from allocator.ranking.cards import Card


@dataclass(frozen=True, slots=True)
class Hold:
    until: float
    #: The node's cards the held allocation was placed on (the same object while unchanged).
    cards: tuple[Card, ...]
    made_for: object
    #: The node held on.
    node: str = ""


class Holds:
    """Holds by pod UID, oldest first. Filter's holds end in the order they were made; a
    preemption's hold (allocator/verbs/preempt.py) may outlast holds made after it: then
    expiry looks at every hold until the table is empty again."""

    def __init__(self) -> None:
        self._holds: dict[str, Hold] = {}
        #: Holds per node, kept with every change (a node agent's count of pods to start
        #: reads it on every filter).
        self._per_node: Counter[str] = Counter()
        self._in_order = True
        self._latest = float("-inf")

    def __contains__(self, uid: str) -> bool:
        return uid in self._holds

    def __len__(self) -> int:
        return len(self._holds)

    def __iter__(self) -> Iterator[str]:
        return iter(self._holds)

    def add(self, uid: str, hold: Hold) -> None:
        self.pop(uid)
        self._holds[uid] = hold
        self._per_node[hold.node] += 1
        if hold.until < self._latest:
            self._in_order = False
        self._latest = max(self._latest, hold.until)

    def pop(self, uid: str) -> Hold | None:
        hold = self._holds.pop(uid, None)
        if hold is not None:
            self._uncount(hold.node)
        return hold

    def _uncount(self, node: str) -> None:
        left = self._per_node[node] - 1
        if left > 0:
            self._per_node[node] = left
        else:
            del self._per_node[node]

    def per_node(self) -> Counter[str]:
        """How many holds each node has (a copy)."""
        return self._per_node.copy()

    def take_expired(self, now: float) -> list[str]:
        """Forget the holds whose time has passed; their pods' UIDs."""
        expired = []
        for uid, hold in self._holds.items():  # oldest first
            if hold.until > now:
                if self._in_order:
                    break
                continue
            expired.append(uid)
        for uid in expired:
            self._uncount(self._holds.pop(uid).node)
        if not self._holds:
            self._in_order, self._latest = True, float("-inf")
        return expired
