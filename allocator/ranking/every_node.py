"""Speed: filter-best ranks every node it knows first, then looks for the best among the asked
names (:meth:`allocator.ranking.fast.FastRanker.best_known`).

Two helpers, pure apart from a counter:

- :func:`asked_among`: which of a few candidates kube-scheduler asked about, found by
  comparing strings (no name hashed, none looked up in the picture);
- :class:`TriesAfterMisses`: when ranking every node first is worth trying. On a fragmented
  cluster kube-scheduler's own filters (node CPU and memory) leave the policy's best known
  nodes out of most lists, and ranking every node then only adds to the ranking of the asked
  ones (docs/benchmarks.md, issue 13's eighteenth pass): after a miss the next calls skip it,
  twice as many after each further miss, up to :data:`MOST_SKIPPED`; a hit tries every call
  again.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Final

#: Up to this many candidates are each found in the asked names by a scan (string compares,
#: no hashing); more are matched through a set of them, which hashes every asked name.
SCANNED_CANDIDATES: Final = 4
#: The most calls skipped after a run of misses (one try in this many + 1 at worst).
MOST_SKIPPED: Final = 64


def asked_among(candidates: Sequence[str], names: Sequence[str]) -> list[str]:
    """The ``candidates`` that are among ``names``, in the order of ``names``."""
    if len(candidates) <= SCANNED_CANDIDATES:
        found = [c for c in candidates if c in names]
        if len(found) > 1:
            found.sort(key=names.index)
        return found
    return list(filter(set(candidates).__contains__, names))


class TriesAfterMisses:
    """Whether to try a shortcut on this call: every call while it hits; after a miss, skip
    the next 1, then 2, 4, ... calls after each further miss, at most ``most_skipped``."""

    def __init__(self, most_skipped: int = MOST_SKIPPED) -> None:
        self.most_skipped = most_skipped
        self._lock = threading.Lock()
        self._skip = 0
        self._after_miss = 0
        self.hit()  # nothing has missed yet

    def should_try(self) -> bool:
        with self._lock:
            if self._skip > 0:
                self._skip -= 1
                return False
            return True

    def hit(self) -> None:
        with self._lock:
            self._after_miss = min(1, self.most_skipped)

    def miss(self) -> None:
        with self._lock:
            self._skip = self._after_miss
            self._after_miss = min(2 * self._after_miss, self.most_skipped)
