"""Node CPU and memory as kube-scheduler counts them: allocatable minus the requests of the
non-terminal pods bound to the node (every pod, not only GPU pods).

Placement policies that weigh a node's free CPU (fgd and its kin) read it through
:attr:`allocator.ranking.policies.PolicyContext.node_facts`; this module keeps the numbers.

- :func:`~allocator.picture.requests.pod_requests` is kube-scheduler's per-pod request
  (:mod:`allocator.picture.requests`).
- :class:`NodeResources` keeps, per pod, only ``(node, milli-CPU, memory bytes)`` — never the
  pod object — and per node the sums, so free CPU is one dictionary read. A bind of ours
  counts at once (:meth:`NodeResources.reserve`), so the picture is never behind for GPU pods;
  other pods count when the watch of bound pods delivers them.

Thread-safety: one lock for writes; the verbs read :attr:`NodeResources.free_cpu` without it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Final

from allocator.picture.names import NodeNames
from allocator.picture.requests import PodUsage, ResourceError, node_allocatable, pod_usage
from allocator.ranking.policies import NodeFacts

logger = logging.getLogger(__name__)

#: Pods whose requests could not be read, kept for ``/status`` (bounded: anyone may create pods).
MAX_NOTED: Final = 256
#: Free memory of a node that has CPU facts but no memory figure (above any request).
UNKNOWN_MEMORY: Final = 1 << 62

class NodeResources:
    """Allocatable and requested CPU and memory per node (module doc)."""

    def __init__(self, names: NodeNames | None = None,
                 on_free_cpu: Callable[[str, int | None], None] = lambda name, milli: None
                 ) -> None:
        self._lock = threading.Lock()
        #: node names as the shared objects of the cluster picture (allocator.picture.names)
        self._names = names if names is not None else NodeNames()
        #: told each node's free CPU as it changes (None: no longer known), under the lock
        self._on_free_cpu = on_free_cpu
        self._allocatable: dict[str, tuple[int, int]] = {}
        #: pod uid -> (node, milli-CPU, memory bytes): the compact record, nothing more
        self._pods: dict[str, tuple[str, int, int]] = {}
        self._used: dict[str, tuple[int, int]] = {}
        #: node -> free milli-CPU / memory bytes, read lock-free on the verbs' hot path
        self.free_cpu: dict[str, int] = {}
        self.free_memory: dict[str, int] = {}
        #: uids reserved by a bind of ours that no list or watch event has shown bound yet
        self._reserved: set[str] = set()
        self._epoch = 0
        self._touched: dict[str, int] = {}
        self._noted: dict[str, str] = {}
        #: amounts are shared between records instead of one copy each (node names: _names)
        self._interned: dict[object, Any] = {}
        self.max_cpu_milli = 0

    # ------------------------------------------------------------------ reads
    @property
    def lock(self) -> threading.Lock:
        """Held while the free CPU changes (and its news is told)."""
        return self._lock

    def facts(self, node: str) -> NodeFacts | None:
        cpu = self.free_cpu.get(node)
        if cpu is None:
            return None
        return NodeFacts(cpu, self.free_memory.get(node, UNKNOWN_MEMORY))

    def view(self) -> NodeFactsView:
        return NodeFactsView(self)

    def pod(self, uid: str) -> tuple[str, int, int] | None:
        return self._pods.get(uid)

    def counts(self) -> tuple[int, int]:
        """(nodes with known allocatable, pods counted)."""
        return len(self._allocatable), len(self._pods)

    def noted(self) -> dict[str, str]:
        with self._lock:
            return dict(self._noted)

    # ------------------------------------------------------------------ nodes
    def apply_node(self, name: str, node: Mapping[str, Any]) -> None:
        """A node object; an unreadable allocatable leaves the node without facts (noted)."""
        try:
            allocatable = node_allocatable(node)
        except (ResourceError, TypeError, ValueError, ArithmeticError) as exc:
            logger.warning("node %s: CPU/memory not tracked: %s", name, exc,
                           extra={"node": name})
            allocatable = None
        with self._lock:
            if allocatable is None:
                self._forget_node(name)
                return
            if self._allocatable.get(name) == allocatable:
                return
            self._allocatable[self._names.intern(name)] = allocatable
            self.max_cpu_milli = max(self.max_cpu_milli, allocatable[0])
            self._refresh(name)

    def remove_node(self, name: str) -> None:
        with self._lock:
            self._forget_node(name)

    def keep_nodes(self, names: set[str]) -> None:
        """After a node list: forget the allocatable of nodes that are gone."""
        with self._lock:
            for name in [n for n in self._allocatable if n not in names]:
                self._forget_node(name)

    def _forget_node(self, name: str) -> None:
        if self._allocatable.pop(name, None) is None:
            return
        self.free_cpu.pop(name, None)
        self.free_memory.pop(name, None)
        self._on_free_cpu(name, None)
        self.max_cpu_milli = max((a[0] for a in self._allocatable.values()), default=0)

    # ------------------------------------------------------------------ pods
    def apply_pod(self, pod: Mapping[str, Any]) -> None:
        """An added/modified pod from the watch of bound pods."""
        usage = pod_usage(pod)
        if usage is None:
            self.remove_pod(pod)  # terminated (or not bound): counts nowhere
        else:
            self.apply_usage(usage)

    def apply_usage(self, usage: PodUsage) -> None:
        with self._lock:
            self._reserved.discard(usage.uid)
            if usage.problem:
                self._note(usage.uid, usage.problem)
                self._set(usage.uid, None)
                return
            self._noted.pop(usage.uid, None)
            self._set(usage.uid, (usage.node, usage.cpu_milli, usage.memory_bytes))

    def remove_pod(self, pod: Mapping[str, Any]) -> None:
        meta = pod.get("metadata")
        uid = meta.get("uid") if isinstance(meta, Mapping) else None
        if isinstance(uid, str) and uid:
            with self._lock:
                self._reserved.discard(uid)
                self._noted.pop(uid, None)
                self._set(uid, None)

    def replace_pods(self, usages: Iterable[PodUsage | None], since: int | None = None) -> None:
        """A fresh list (already reduced, :func:`pod_usage`): every pod it shows, and the
        release of every pod it does not — except records touched after ``since`` (the
        :meth:`epoch` taken before the list was requested: a bind of ours, or a watch event,
        newer than the list) and reservations of binds (their pods are bound, or the bind is
        rolled back, both of which we hear of)."""
        seen: set[str] = set()
        for usage in usages:
            if usage is None:
                continue
            seen.add(usage.uid)
            if since is None or self._touched.get(usage.uid, -1) < since:
                self.apply_usage(usage)
        with self._lock:
            for uid in [u for u in self._pods if u not in seen]:
                if uid in self._reserved or (since is not None
                                             and self._touched.get(uid, -1) >= since):
                    continue
                self._set(uid, None)
            for uid in [u for u in self._noted if u not in seen]:
                del self._noted[uid]

    def epoch(self) -> int:
        with self._lock:
            return self._epoch

    # ------------------------------------------------------------------ our binds
    def reserve(self, uid: str, node: str, cpu_milli: int, memory_bytes: int) -> None:
        """A bind of ours: the pod counts on ``node`` from now on."""
        with self._lock:
            if uid in self._pods and uid not in self._reserved:
                return  # the watch already showed it bound
            self._reserved.add(uid)
            self._set(uid, (node, cpu_milli, memory_bytes))

    def unreserve(self, uid: str) -> None:
        """The bind failed: release what :meth:`reserve` counted (never a watched pod)."""
        with self._lock:
            if uid in self._reserved:
                self._reserved.discard(uid)
                self._set(uid, None)

    # ------------------------------------------------------------------ internals (locked)
    def _intern(self, value: Any) -> Any:
        return self._interned.setdefault(value, value)

    def _set(self, uid: str, record: tuple[str, int, int] | None) -> None:
        self._touched[uid] = self._epoch
        self._epoch += 1
        old = self._pods.pop(uid, None)
        if old is not None and old == record:
            # The same node and requests (most events of a bound pod: its status, a node
            # agent's annotations): no node's figures change.
            self._pods[uid] = old
            return
        if record is None:
            self._touched.pop(uid, None)
        else:
            node, cpu, memory = record
            self._pods[uid] = (self._names.intern(node), self._intern(cpu),
                               self._intern(memory))
            self._add(node, cpu, memory)
        if old is not None:
            self._add(old[0], -old[1], -old[2])

    def _add(self, node: str, cpu: int, memory: int) -> None:
        used_cpu, used_memory = self._used.get(node, (0, 0))
        used = (used_cpu + cpu, used_memory + memory)
        if used == (0, 0):
            self._used.pop(node, None)
        else:
            self._used[self._names.intern(node)] = used
        self._refresh(node)

    def _refresh(self, node: str) -> None:
        allocatable = self._allocatable.get(node)
        if allocatable is None:
            return  # pods of an unknown node count once it is known
        used_cpu, used_memory = self._used.get(node, (0, 0))
        name = self._names.intern(node)
        self.free_cpu[name] = allocatable[0] - used_cpu
        self.free_memory[name] = allocatable[1] - used_memory
        self._on_free_cpu(name, allocatable[0] - used_cpu)

    def _note(self, uid: str, why: str) -> None:
        if uid not in self._noted and len(self._noted) >= MAX_NOTED:
            self._noted.pop(next(iter(self._noted)))
        self._noted[uid] = why
        logger.warning("pod %s: not counted on its node: %s", uid, why, extra={"uid": uid})


class NodeFactsView(Mapping[str, NodeFacts]):
    """``PolicyContext.node_facts`` over the live picture: a node's facts, read when asked."""

    def __init__(self, resources: NodeResources) -> None:
        self._resources = resources

    def __getitem__(self, node: str) -> NodeFacts:
        facts = self._resources.facts(node)
        if facts is None:
            raise KeyError(node)
        return facts

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._resources.free_cpu))

    def __len__(self) -> int:
        return len(self._resources.free_cpu)
