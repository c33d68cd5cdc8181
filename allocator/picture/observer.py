"""Who the picture tells of its nodes: one observer, told every change in order.

The picture (:class:`allocator.picture.state.ClusterState`) knows nothing of what is built
from it. The fast ranker's memo (:class:`allocator.ranking.content_memo.NodeContents`) is told
each node's new cards and usage, its removal, and its free CPU, under the picture's locks, as
they happen; an observer added late is first told the picture as it is.
"""

from __future__ import annotations

from typing import Protocol

from allocator.ranking.cards import NodeState


class NodeObserver(Protocol):
    def node_changed(self, name: str, state: NodeState) -> None:
        """``name``'s cards and usage are now ``state``."""

    def node_gone(self, name: str) -> None:
        """``name`` left the picture."""

    def free_cpu_changed(self, name: str, milli: int | None) -> None:
        """``name``'s free milli-CPU is now ``milli`` (None: not known)."""


class Observers:
    """Every observer added, told in the order added."""

    def __init__(self) -> None:
        self._all: tuple[NodeObserver, ...] = ()

    def add(self, observer: NodeObserver) -> None:
        self._all = (*self._all, observer)

    def node_changed(self, name: str, state: NodeState) -> None:
        for observer in self._all:
            observer.node_changed(name, state)

    def node_gone(self, name: str) -> None:
        for observer in self._all:
            observer.node_gone(name)

    def free_cpu_changed(self, name: str, milli: int | None) -> None:
        for observer in self._all:
            observer.free_cpu_changed(name, milli)
