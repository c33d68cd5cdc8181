"""The node table: each node's cards as read, its problems, and its current view (not locked
for writes: the picture's lock guards them, :class:`allocator.picture.state.ClusterState`;
reads are lock-free).

Each node's state is an immutable :class:`NodeView` (state, version) swapped atomically, so
filter and prioritize read it without locking.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from allocator.picture.inventory import Described, Inventory, read_inventory
from allocator.ranking.cards import Card, NodeState
from tessera.agent_profiles import NodeAgent
from tessera.vocabulary import Vocabulary

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, eq=False)
class NodeView:
    """One version of a node: swapped as a whole, so readers never see half an update.

    Compared by identity (one object per version): ``None in views`` over 5,000 views then
    stays a C loop instead of 5,000 calls of a generated ``__eq__``.
    """

    state: NodeState
    version: int


@dataclass
class NodeEntry:
    cards: tuple[Card, ...]
    source: str
    problem: str
    view: NodeView
    problems: tuple[str, ...] = ()
    lock: threading.Lock = field(default_factory=threading.Lock)


class NodeTable:
    def __init__(self) -> None:
        self.entries: dict[str, NodeEntry] = {}
        # name -> current view: one dict read per node on the verbs' hot path (lock-free).
        self._views: dict[str, NodeView] = {}
        #: Nodes read by name ahead of the watch: name -> the resourceVersion read.
        self.looked_up: dict[str, int] = {}
        #: What cards and CPU were last read from, per node (labels, annotations,
        #: allocatable): a node update that changes none of them (a status heartbeat) is not
        #: read again.
        self.read_from: dict[str, tuple[object, object, object]] = {}

    # ------------------------------------------------------------------ reads (lock-free)
    def view(self, node: str) -> NodeView | None:
        return self._views.get(node)

    def views(self, names: Iterable[str]) -> list[NodeView | None]:
        """The current view of each named node (None for unknown ones), in order."""
        get = self._views.get
        return [get(n) for n in names]

    def cards(self, node: str) -> tuple[Card, ...]:
        entry = self.entries.get(node)
        return entry.cards if entry is not None else ()

    def names(self) -> list[str]:
        return list(self.entries)

    def node_lock(self, node: str) -> threading.Lock:
        entry = self.entries.get(node)
        if entry is None:
            # Callers check the node exists first; an unknown node gets a throwaway lock.
            return threading.Lock()
        return entry.lock

    def unchanged(self, name: str, inputs: tuple[object, object, object]) -> bool:
        """Whether nothing the node's cards or CPU are read from changed since last read."""
        return self.read_from.get(name) == inputs and name not in self.looked_up

    # ------------------------------------------------------------------ writes
    def set_inventory(self, name: str, inv: Inventory) -> bool:
        """The node's cards as read; whether they changed (then its usage is to be rebuilt,
        :meth:`set_state`)."""
        entry = self.entries.get(name)
        if entry is not None and entry.cards == inv.cards:
            entry.source, entry.problem = inv.source, inv.problem
            return False
        if inv.problem:
            logger.warning("node %s: %s", name, inv.problem, extra={"node": name})
        elif not inv.cards:
            logger.debug("node %s has no GPU cards", name, extra={"node": name})
        version = entry.view.version + 1 if entry is not None else 1
        lock = entry.lock if entry is not None else threading.Lock()
        self.entries[name] = NodeEntry(
            inv.cards, inv.source, inv.problem, NodeView(NodeState(name, ()), version),
            lock=lock)
        return True

    def set_state(self, name: str, state: NodeState, problems: tuple[str, ...]) -> None:
        """The node's usage rebuilt: a new view."""
        entry = self.entries[name]
        entry.problems = problems
        entry.view = NodeView(state, entry.view.version + 1)
        self._views[name] = entry.view

    def remove(self, name: str) -> None:
        self.looked_up.pop(name, None)
        self.read_from.pop(name, None)
        self.entries.pop(name, None)
        self._views.pop(name, None)


def inventory_of(node: Mapping[str, Any], name: str, vocabulary: Vocabulary,
                 agent: NodeAgent, described: Described | None = None) -> Inventory:
    """The node's cards. Never raises: read_inventory reports what it cannot read as a
    problem; anything else is a bug, and one node must still not stop the node list or watch
    (no cards, the reason in ``/status``)."""
    try:
        return read_inventory(node, vocabulary, agent, described)
    except Exception as exc:
        logger.exception("node %s: inventory unreadable", name, extra={"node": name})
        return Inventory((), "none", f"inventory unreadable: {type(exc).__name__}: {exc}")


def resource_version(obj: Mapping[str, Any]) -> int | None:
    version = (obj.get("metadata") or {}).get("resourceVersion")
    if isinstance(version, str) and version.isascii() and version.isdigit():
        return int(version)
    return None


def read_from(node: Mapping[str, Any], unread: frozenset[str] = frozenset()
              ) -> tuple[object, object, object]:
    """What a node's cards (:func:`allocator.picture.inventory.read_inventory`) and CPU
    (:func:`allocator.picture.requests.node_allocatable`) are read from (the node's own
    objects: :func:`kept` before keeping them), its ``unread`` annotations left out."""
    meta = node.get("metadata")
    status = node.get("status")
    meta = meta if isinstance(meta, Mapping) else {}
    status = status if isinstance(status, Mapping) else {}
    annotations = meta.get("annotations")
    if isinstance(annotations, Mapping) and not unread.isdisjoint(annotations):
        annotations = {k: v for k, v in annotations.items() if k not in unread}
    return meta.get("labels"), annotations, status.get("allocatable")


def kept(inputs: tuple[object, object, object]) -> tuple[object, object, object]:
    """Copies of :func:`read_from`'s maps: a caller that changes a node object in place must
    not change what was kept (a heartbeat compares without copying)."""
    labels, annotations, allocatable = (
        dict(v) if isinstance(v, Mapping) else v for v in inputs)
    return labels, annotations, allocatable
