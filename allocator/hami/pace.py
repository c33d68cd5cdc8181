"""How fast HAMi's device plugins start pods, and how many binds a node may queue.

HAMi's plugin allocates one pod at a time per node, and every bind to that node waits for the
lock until the pods ahead are allocated (:mod:`allocator.hami.lock`). kube-scheduler gives a
bind ``httpTimeout`` (10 s in the shipped configuration): a bind that would wait longer fails
as a Warning Event and the pod goes back to kube-scheduler's backoff. So filter gives a node
to a pod only when the binds ahead of it on that node can be served within a budget under the
bind's wait (:meth:`PluginPace.room`), and otherwise waits a little for its turn
(``HamiAgent.wait_for_turn``, decision docs/decisions/0023-hami-turns-under-the-lock.md).

The plugin's pace is measured, not configured: the time from our bind taking a node's lock
to our node watch seeing it released (the Binding, the plugin's ``Allocate`` and the watch
between), the slowest of the last :data:`WINDOW` binds of every node (one plugin build and
one API server serve them all). The slowest, because a plugin's first Allocates are quick:
its client's rate limiter starts with a burst (HAMi's: 10 requests, then 5 a second, eight
requests an Allocate, 1.6 s), and a pace learnt from them would queue a burst of binds that
then wait far longer. Until :data:`WINDOW` releases are seen the window holds a slow first
guess too, so the first burst queues few binds.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

#: Assumed seconds a node's lock is held for one pod until one is measured.
FIRST_GUESS_SECONDS = 2.0
#: Releases the pace is the slowest of.
WINDOW = 8
#: Binds filter lets queue on one node at most, however fast its plugin.
MAX_QUEUE = 32
#: Measurements are kept within these bounds (a watch that lagged, a clock that jumped).
FASTEST_SECONDS, SLOWEST_SECONDS = 0.005, 60.0
#: Filter waits for a node's turn three of its plugin's Allocates, within these bounds: the
#: most under the filter verb's 10 s ``httpTimeout``, kube-scheduler's cycle waiting with it.
TURN_WAIT_SECONDS = (1.0, 5.0)


class PluginPace:
    """The time a node's lock stays held for one pod, from our binds' locks: the slowest
    of the last :data:`WINDOW`."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        #: Seconds, only ever subtracted (monotonic by default).
        self.clock = clock
        self._taken: dict[str, float] = {}
        self._last: deque[float] = deque([FIRST_GUESS_SECONDS], maxlen=WINDOW)
        self._seconds = FIRST_GUESS_SECONDS
        self._measured = 0
        self._lock = threading.Lock()

    @property
    def seconds(self) -> float:
        return self._seconds

    @property
    def measured(self) -> int:
        """Releases measured so far."""
        return self._measured

    def taken(self, node: str) -> None:
        """Our bind holds ``node``'s lock now (and the pod is bound)."""
        with self._lock:
            self._taken[node] = self.clock()

    def released(self, node: str) -> None:
        """Our node watch shows ``node``'s lock free (said for every event of an unlocked
        node: only a lock we took counts, once)."""
        if node not in self._taken:  # the common case, read without the lock
            return
        with self._lock:
            since = self._taken.pop(node, None)
            if since is None:
                return
            self._last.append(min(max(self.clock() - since, FASTEST_SECONDS),
                                  SLOWEST_SECONDS))
            self._seconds = max(self._last)
            self._measured += 1

    def forget(self, node: str) -> None:
        with self._lock:
            self._taken.pop(node, None)

    def turn_wait(self, bounds: tuple[float, float] = TURN_WAIT_SECONDS) -> float:
        """How long filter waits for a node's turn at most."""
        return min(bounds[1], max(bounds[0], 3 * self._seconds))

    def room(self, budget_seconds: float) -> int:
        """How many pods may be ahead of a new bind on one node for it to be served within
        ``budget_seconds`` (at least one: the pod the plugin is starting)."""
        return max(1, min(MAX_QUEUE, int(budget_seconds / self._seconds)))
