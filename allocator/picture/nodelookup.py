"""Reading a node by name when kube-scheduler names one our node watch has not delivered yet.

Why: kube-scheduler and the allocator learn of a new node through separate watches. The
scheduler may send a node to filter before our watch has it; answering "unknown node" then
leaves the pod Pending with a reason that is not about the pod, until some later cluster
event requeues it (on a quiet cluster, minutes). So filter first reads the unknown names from
the API — a GET by name, served from etcd (consistent) — and applies them to the state
(:meth:`ClusterState.apply_looked_up_node`), then decides.

Cost control: one read per name in flight (concurrent filters asking for the same name wait for
it), at most ``max_names`` reads started per call, a name the API did not have is not asked
again within ``min_interval``, and no filter waits longer than ``max_wait`` (well under
kube-scheduler's extender ``httpTimeout``). Reads run in their own threads, so a hanging API
call never holds a filter beyond ``max_wait``. Clock and thread start are injected for tests.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from functools import partial

from allocator.picture.state import ClusterState
from allocator.ports import Obj

logger = logging.getLogger(__name__)

#: Names remembered as absent (beyond that the oldest are forgotten).
REMEMBERED_ABSENT = 4096


def _thread(target: Callable[[], None]) -> None:
    threading.Thread(target=target, name="node-lookup", daemon=True).start()


class NodeLookup:
    def __init__(
        self,
        get_node: Callable[[str], Obj | None],
        state: ClusterState,
        *,
        min_interval: float = 1.0,
        max_wait: float = 2.0,
        max_names: int = 16,
        clock: Callable[[], float] = time.monotonic,
        spawn: Callable[[Callable[[], None]], None] = _thread,
    ) -> None:
        self._get_node = get_node
        self._state = state
        self.min_interval = min_interval
        self.max_wait = max_wait
        self.max_names = max_names
        self._clock = clock
        self._spawn = spawn
        self._cond = threading.Condition()
        self._in_flight: set[str] = set()
        self._absent: OrderedDict[str, float] = OrderedDict()  # name -> when found absent
        self.reads = 0  # reads started (for tests and logs)

    def settled(self, names: Sequence[str]) -> bool:
        """Whether :meth:`ensure` would neither read nor wait: each name was found absent
        too recently to be read again."""
        with self._cond:
            now = self._clock()
            return not any(n in self._in_flight
                           or now - self._absent.get(n, float("-inf")) >= self.min_interval
                           for n in names)

    def ensure(self, names: Sequence[str]) -> None:
        """Try to make each of ``names`` known to the state, waiting at most ``max_wait``."""
        deadline = self._clock() + self.max_wait
        wanted = set(names)
        with self._cond:
            now = self._clock()
            start = [
                n for n in wanted
                if n not in self._in_flight
                and now - self._absent.get(n, float("-inf")) >= self.min_interval
            ][: self.max_names]
            self._in_flight.update(start)
            self.reads += len(start)
        for name in start:
            self._spawn(partial(self._read, name))
        with self._cond:
            while wanted & self._in_flight:
                left = deadline - self._clock()
                if left <= 0:
                    return
                self._cond.wait(left)

    def _read(self, name: str) -> None:
        found = False
        try:
            node = self._get_node(name)
            if node is not None:
                found = True
                if self._state.apply_looked_up_node(node):
                    logger.info("node %s read from the API ahead of the node watch", name,
                                extra={"node": name})
        except Exception as exc:
            logger.warning("reading node %s failed: %s", name, exc, extra={"node": name})
        finally:
            with self._cond:
                self._in_flight.discard(name)
                if found:
                    self._absent.pop(name, None)
                else:
                    self._absent[name] = self._clock()
                    self._absent.move_to_end(name)
                    if len(self._absent) > REMEMBERED_ABSENT:
                        self._absent.popitem(last=False)
                self._cond.notify_all()
