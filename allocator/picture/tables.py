"""The cluster picture's tables and how they are read (thread-safe);
:class:`allocator.picture.state.ClusterState` is how events change them.

Three tables under one short lock: the node table (:mod:`~allocator.picture.nodes`, views read
lock-free by the verbs), the pod records (:mod:`~allocator.picture.records`) and filter's holds
(:mod:`~allocator.picture.holds`); beside them each node's measured figures, the node agent's
watch (:class:`~allocator.picture.agent_watch.AgentWatch`: its own node descriptions and its
list of pods to start) and node CPU and memory
(:mod:`allocator.picture.resources`). What is built from the picture for speed is told every
node change by one observer (:meth:`PictureTables.observe`); the picture imports none of it.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from allocator.picture import status
from allocator.picture.agent_watch import NO_AGENT_WATCH, AgentWatch
from allocator.picture.holds import Holds
from allocator.picture.measured import Overlay, apply_overlay
from allocator.picture.names import NodeNames
from allocator.picture.nodes import NodeTable, NodeView
from allocator.picture.observer import NodeObserver, Observers
from allocator.picture.records import PodRecord, PodRecords, Stage
from allocator.picture.resources import NodeResources
from allocator.ranking.cards import Card, NodeState, build_node_state
from tessera.agent_profiles import NodeAgent
from tessera.logs import pod_context
from tessera.vocabulary import Vocabulary

logger = logging.getLogger(__name__)

class PictureTables:
    def __init__(self, vocabulary: Vocabulary, agent: NodeAgent | None = None,
                 watch: AgentWatch = NO_AGENT_WATCH) -> None:
        self.vocabulary = vocabulary
        #: The cluster's node agent: what its nodes advertise (the inventory's last source).
        self.agent = agent or NodeAgent(vocabulary=vocabulary)
        self._lock = threading.RLock()
        self._nodes = NodeTable()
        self._pods = PodRecords()
        #: Filter's holds by pod UID (records at Stage.HELD), oldest first (:meth:`hold`).
        self._holds = Holds()
        #: The node agent's side of the picture: its node descriptions, the pods it has to
        #: start (told every node and pod event, under the lock).
        self._agent_watch = watch
        #: Each node's measured figures as applied to its cards (:meth:`apply_sample`).
        self._measured: dict[str, Overlay] = {}
        self._synced = threading.Event()
        #: told every node's new state, removal and free CPU (:meth:`observe`)
        self._observers = Observers()
        #: one string object per node name, for every per-node table
        self.names = NodeNames()
        #: every node's CPU and memory, allocatable and requested
        self.resources = NodeResources(self.names, self._observers.free_cpu_changed)
        #: Told the node whenever a pod's record leaves it and its cards are free again, or its
        #: cards change (room may have appeared)
        #: (called under the lock: it must only note the node; :mod:`allocator.verbs.requeue`).
        self.on_release: Callable[[str], None] | None = None

    # ------------------------------------------------------------------ readiness
    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    def mark_synced(self) -> None:
        self._synced.set()

    def observe(self, observer: NodeObserver) -> None:
        """Tell ``observer`` every node change from now on, after the picture as it is."""
        with self._lock, self.resources.lock:
            for name, entry in self._nodes.entries.items():
                observer.node_changed(name, entry.view.state)
            for name, milli in self.resources.free_cpu.items():
                observer.free_cpu_changed(name, milli)
            self._observers.add(observer)

    # ------------------------------------------------------------------ reads (lock-free)
    def view(self, node: str) -> NodeView | None:
        return self._nodes.view(node)

    def views(self, names: Iterable[str]) -> list[NodeView | None]:
        """The current view of each named node (None for unknown ones), in order."""
        return self._nodes.views(names)

    def cards(self, node: str) -> tuple[Card, ...]:
        return self._nodes.cards(node)

    def node_names(self) -> list[str]:
        return self._nodes.names()

    def record(self, uid: str) -> PodRecord | None:
        return self._pods.get(uid)

    def binds_in_flight(self) -> int:
        """Reservations of binds that have not finished yet."""
        with self._lock:
            return sum(1 for _, r in self._pods.items() if r.stage is Stage.INFLIGHT)

    def node_lock(self, node: str) -> threading.Lock:
        return self._nodes.node_lock(node)

    def pods_to_start(self) -> Counter[str]:
        """Per node, the pods held there for their bind or bound and not yet started by the
        node agent (:meth:`AgentWatch.waiting_by_node <allocator.picture.agent_watch.
        AgentWatch.waiting_by_node>`): with an agent that starts one pod at a time per node,
        a bind there waits for each of them."""
        with self._lock:
            queued = self._agent_watch.waiting_by_node()
            queued.update(self._holds.per_node())
        return queued

    # ------------------------------------------------------------------ internals
    def _set(self, record: PodRecord) -> None:
        with self._lock:
            if record.stage is not Stage.HELD:
                self._holds.pop(record.uid)  # a hold replaced by the truth is gone
            for node in self._pods.put(record):
                self._recompute(node)

    def _drop(self, uid: str, tell: bool = True) -> None:
        """(``tell``: tell :attr:`on_release` of the room.)"""
        with self._lock:
            self._holds.pop(uid)
            self._agent_watch.pod_gone(uid)
            old = self._pods.pop(uid)
            if old is not None:
                self._recompute(old.node)
                if tell and self.on_release is not None:
                    self.on_release(old.node)

    def _note_bad(self, uid: str, why: str, pod: Mapping[str, Any]) -> None:
        with self._lock:
            self._pods.bad[uid] = why
        logger.warning("ignoring allocation record: %s", why, extra=pod_context(pod))

    def _recompute(self, name: str) -> None:
        entry = self._nodes.entries.get(name)
        if entry is None:
            return  # pods on unknown nodes are kept and applied when the node appears
        state, problems = build_node_state(name, entry.cards, self._pods.on_node(name))
        if problems and problems != entry.problems:
            logger.error("node %s over-committed: %s", name, "; ".join(problems),
                         extra={"node": name})
        state = apply_overlay(state, self._measured.get(name, ()))  # hook: measured figures
        self._observers.node_changed(name, state)
        self._nodes.set_state(name, state, problems)

    # ------------------------------------------------------------------ status
    def snapshot(self, max_nodes: int | None = None) -> dict[str, Any]:
        """Every node (the first ``max_nodes`` by name; ``nodeCount`` counts them all), card,
        capacity, and what is taken by which pods (JSON-ready). The lock is held only to copy
        references (states are immutable, records frozen): binds and watches never wait for
        a large cluster's document."""
        with self._lock:
            nodes = [(name, e.source, e.problem, e.problems, e.view.state)
                     for name, e in self._nodes.entries.items()]
            pods = self._pods.all()
            bad = dict(self._pods.bad)
            synced = self.synced
        return status.document(nodes, pods, bad, synced, self.resources, max_nodes)

    def problem_counts(self) -> tuple[int, int]:
        """(pods whose allocation record is ignored, nodes whose inventory has a problem)."""
        with self._lock:
            return (len(self._pods.bad),
                    sum(1 for e in self._nodes.entries.values() if e.problem))

    def node_states(self) -> tuple[list[tuple[str, NodeState]], dict[str, PodRecord]]:
        """Every node's state and every pod record, read together (for metrics)."""
        with self._lock:
            return ([(name, e.view.state) for name, e in self._nodes.entries.items()],
                    self._pods.all())

    def below_on(self, names: Iterable[str], priority: int) -> bool:
        """Whether a pod that may be evicted, of priority strictly below ``priority``, is on
        one of the ``names`` nodes (lock-free: one dict read per node, each atomic)."""
        lowest = self._pods.lowest.get
        return any(lowest(name, priority) < priority for name in names)

    def evictable_on(self, names: Iterable[str]
                     ) -> tuple[list[tuple[str, NodeState]], list[PodRecord]]:
        """The ``names`` nodes' states (the unknown ones left out) and the records on them
        whose pods may be evicted, read together (what a preemption decides over)."""
        wanted = list(names)
        with self._lock:
            entries = self._nodes.entries
            states = [(n, e.view.state) for n in wanted if (e := entries.get(n)) is not None]
            return states, self._pods.evictable_on(wanted)

    def comparable(self) -> dict[str, Any]:
        """Node states and pod allocations (for restart tests: equal means same picture)."""
        with self._lock:
            return {
                "nodes": {n: e.view.state for n, e in self._nodes.entries.items()},
                "pods": {u: (r.node, r.allocation.containers) for u, r in self._pods.items()},
            }
