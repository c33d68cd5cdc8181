"""What names an API object, and one string object per node name, shared by every per-node
table."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

#: Names kept at most (bounded under endless churn; only memory sharing is lost beyond it).
NAME_LIMIT: Final = 100_000


class NodeNames:
    """One string object per node name, shared by every per-node table of the picture (the
    state's, the node resources', an observer's): one copy of each name in memory, and the
    tables' reads of each other's keys stop at the identity check. Only real nodes' names
    are kept (a verb's names are never kept)."""

    def __init__(self, limit: int = NAME_LIMIT) -> None:
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


def meta_str(obj: Mapping[str, Any], key: str) -> str:
    """``metadata.<key>`` when it is a non-empty string, else ``""``: list and watch items
    are API objects, but one malformed item must be skipped, not raise."""
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    value = meta.get(key) if isinstance(meta, Mapping) else None
    return value if isinstance(value, str) else ""
