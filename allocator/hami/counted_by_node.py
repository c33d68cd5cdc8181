"""Speed: entries by key, each on a node since a time, with how many each node has kept on
every change (a speed trick of its own, below :class:`allocator.hami.awaiting.AwaitingAgent`).

Why: filter asks for the pods every node's agent has still to start on every call
(``HamiAgent.nodes_to_avoid``), under the picture's lock. Counting them afresh walked every
waiting pod (and every locked node) twice per filter; here the counts are kept as entries come
and go, and entries past their age leave from the oldest, which stops at the first young one:
entries are kept in the order of their times (a re-entered key moves to the end), which holds
while the times come from one monotonic clock (the agent's).
"""

from __future__ import annotations

from collections import Counter


class CountedByNode:
    """Key -> (node, since), oldest first, and per node how many keys are on it."""

    def __init__(self) -> None:
        self._entries: dict[str, tuple[str, float]] = {}
        self._per_node: Counter[str] = Counter()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def put(self, key: str, node: str, since: float) -> None:
        """``key`` on ``node`` from ``since`` (no earlier than any entry's), replacing its
        entry if it had one."""
        self.pop(key)
        self._entries[key] = (node, since)
        self._per_node[node] += 1

    def pop(self, key: str) -> None:
        entry = self._entries.pop(key, None)
        if entry is None:
            return
        node = entry[0]
        left = self._per_node[node] - 1
        if left > 0:
            self._per_node[node] = left
        else:
            del self._per_node[node]

    def drop_older_than(self, oldest: float) -> None:
        """Forget the entries from before ``oldest``."""
        entries = self._entries
        while entries:
            key, (_node, since) = next(iter(entries.items()))
            if since >= oldest:
                return
            self.pop(key)

    def per_node(self) -> Counter[str]:
        """How many entries each node has (a copy)."""
        return self._per_node.copy()
