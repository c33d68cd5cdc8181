"""The cluster picture: nodes, their cards, and which pod holds what (thread-safe).

A cache of cluster truth, fed by list/watch events. Card usage is rebuilt **only** from the
canonical allocation annotation of bound pods (``decode_allocation``), plus the reservations
of binds running in this process. Succeeded/Failed or deleted pods release their cards.

Concurrency: one short global lock guards every mutation. Each node's state is an immutable
:class:`NodeView` (state, version) swapped atomically, so filter/prioritize read it without
locking. Binds on one node are serialised by a per-node lock and reserve with an optimistic
version check, so two binds can never both take the same free room.

Speed: filter and prioritize keep per-request-shape results for every node
(:meth:`ClusterState.shape_results`). Every node change is appended to a change log; a cached
shape drops only the nodes changed since it was last used, so a scheduling cycle recomputes
the few nodes that changed (typically the one the previous pod was bound to), not all 5,000.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from allocator.fit import Card, NodeState, build_node_state
from allocator.inventory import read_inventory
from tessera.logs import pod_context
from tessera.vocabulary import Allocation, CodecError, Vocabulary, decode_allocation

logger = logging.getLogger(__name__)

#: Request shapes whose per-node results are kept (least recently used beyond that go).
SHAPE_LIMIT = 256
#: Change-log length after which every shape cache is dropped and the log restarts.
CHANGE_LOG_LIMIT = 200_000

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


class Stage(StrEnum):
    INFLIGHT = "inflight"  # reserved by a bind that is still writing to the API
    BOUND = "bound"  # our bind succeeded; no watch event has shown the pod bound yet
    CONFIRMED = "confirmed"  # a watch event showed the pod bound with this allocation


@dataclass(frozen=True)
class PodRecord:
    uid: str
    namespace: str
    name: str
    node: str
    allocation: Allocation
    stage: Stage


@dataclass(frozen=True)
class NodeView:
    """One version of a node: swapped as a whole, so readers never see half an update."""

    state: NodeState
    version: int


@dataclass
class _ShapeCache:
    seq: int
    results: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Node:
    cards: tuple[Card, ...]
    source: str
    problem: str
    view: NodeView
    problems: tuple[str, ...] = ()
    lock: threading.Lock = field(default_factory=threading.Lock)


class ClusterState:
    def __init__(self, vocabulary: Vocabulary) -> None:
        self.vocabulary = vocabulary
        self._lock = threading.RLock()
        self._nodes: dict[str, _Node] = {}
        self._pods: dict[str, PodRecord] = {}
        self._by_node: dict[str, set[str]] = {}
        self._bad: dict[str, str] = {}  # pod uid -> why its allocation record was ignored
        self._synced = threading.Event()
        self._change_log: list[str] = []  # node names, in order of change
        self._log_base = 0  # sequence number of _change_log[0]
        self._shapes: dict[Any, _ShapeCache] = {}

    # ------------------------------------------------------------------ readiness
    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    def mark_synced(self) -> None:
        self._synced.set()

    # ------------------------------------------------------------------ reads (lock-free)
    def view(self, node: str) -> NodeView | None:
        entry = self._nodes.get(node)
        return entry.view if entry is not None else None

    def cards(self, node: str) -> tuple[Card, ...]:
        entry = self._nodes.get(node)
        return entry.cards if entry is not None else ()

    def node_names(self) -> list[str]:
        return list(self._nodes)

    def record(self, uid: str) -> PodRecord | None:
        return self._pods.get(uid)

    def node_lock(self, node: str) -> threading.Lock:
        entry = self._nodes.get(node)
        if entry is None:
            # Callers check the node exists first; an unknown node gets a throwaway lock.
            return threading.Lock()
        return entry.lock

    def shape_results(self, key: Any) -> dict[str, Any]:
        """Per-node results cached for a request shape, minus nodes changed since last use.

        The caller reads and fills the dict without the lock: a result computed from a view
        that changes meanwhile is dropped at the next call, because that change is logged
        after this call's sequence number.
        """
        with self._lock:
            seq = self._log_base + len(self._change_log)
            cache = self._shapes.pop(key, None)
            if cache is None or cache.seq < self._log_base:
                cache = _ShapeCache(seq)
            elif cache.seq < seq:
                for name in set(self._change_log[cache.seq - self._log_base:]):
                    cache.results.pop(name, None)
                cache.seq = seq
            if len(self._shapes) >= SHAPE_LIMIT:
                self._shapes.pop(next(iter(self._shapes)))
            self._shapes[key] = cache  # re-inserted last: LRU order
            return cache.results

    def drop_shape_caches(self) -> None:
        with self._lock:
            self._shapes.clear()

    # ------------------------------------------------------------------ nodes
    def apply_node(self, node: Mapping[str, Any]) -> None:
        name = (node.get("metadata") or {}).get("name")
        if not name:
            return
        inv = read_inventory(node, self.vocabulary)
        with self._lock:
            entry = self._nodes.get(name)
            if entry is not None and entry.cards == inv.cards:
                entry.source, entry.problem = inv.source, inv.problem
                return
            if inv.problem:
                logger.warning("node %s: %s", name, inv.problem, extra={"node": name})
            version = entry.view.version + 1 if entry is not None else 1
            lock = entry.lock if entry is not None else threading.Lock()
            self._nodes[name] = _Node(
                inv.cards, inv.source, inv.problem,
                NodeView(NodeState(name, ()), version), lock=lock,
            )
            self._recompute(name)

    def remove_node(self, name: str) -> None:
        with self._lock:
            self._nodes.pop(name, None)
            self._log_change(name)

    def replace_nodes(self, nodes: Iterable[Mapping[str, Any]]) -> None:
        """A fresh list: apply every node, forget nodes that are gone."""
        seen = set()
        for node in nodes:
            name = (node.get("metadata") or {}).get("name")
            if name:
                seen.add(name)
                self.apply_node(node)
        with self._lock:
            for name in list(self._nodes):
                if name not in seen:
                    del self._nodes[name]

    # ------------------------------------------------------------------ pods
    def apply_pod(self, pod: Mapping[str, Any]) -> None:
        """An added/modified pod (watch event or list item)."""
        meta = pod.get("metadata") or {}
        uid = meta.get("uid")
        if not uid:
            return
        phase = (pod.get("status") or {}).get("phase")
        if phase in TERMINAL_PHASES:
            self._drop(uid)
            return
        node = (pod.get("spec") or {}).get("nodeName") or ""
        text = (meta.get("annotations") or {}).get(self.vocabulary.allocation_annotation)
        allocation: Allocation | None = None
        if node and text:
            try:
                allocation = decode_allocation(text)
            except CodecError as exc:
                self._note_bad(uid, str(exc), pod)
            else:
                if allocation.pod_uid and allocation.pod_uid != uid:
                    # Copied from another pod (e.g. a template): not this pod's cards.
                    self._note_bad(uid, f"allocation belongs to pod {allocation.pod_uid}", pod)
                    allocation = None
                elif allocation.node != node:
                    # The node agent on spec.nodeName reads these indices: count them there.
                    logger.warning("allocation says node %s but pod is bound to %s",
                                   allocation.node, node, extra=pod_context(pod))
        with self._lock:
            current = self._pods.get(uid)
            if allocation is None:
                # Not (yet) bound with a record. Our own in-flight/just-bound reservations
                # stay: this event may predate our patch and binding.
                if current is not None and current.stage is Stage.CONFIRMED:
                    self._drop(uid)
                return
            self._bad.pop(uid, None)
            record = PodRecord(uid, meta.get("namespace", ""), meta.get("name", ""), node,
                               allocation, Stage.CONFIRMED)
            if current == record:
                return
            self._set(record)

    def remove_pod(self, pod: Mapping[str, Any]) -> None:
        uid = (pod.get("metadata") or {}).get("uid")
        if uid:
            self._drop(uid)

    def replace_pods(self, pods: Iterable[Mapping[str, Any]]) -> None:
        """A fresh list: apply every pod; release pods that are gone (unless a bind for
        them is running right now)."""
        seen = set()
        for pod in pods:
            uid = (pod.get("metadata") or {}).get("uid")
            if uid:
                seen.add(uid)
                self.apply_pod(pod)
        with self._lock:
            for uid, rec in list(self._pods.items()):
                if uid not in seen and rec.stage is not Stage.INFLIGHT:
                    self._drop(uid)

    # ------------------------------------------------------------------ bind reservations
    def reserve(self, uid: str, namespace: str, name: str, allocation: Allocation,
                expected_version: int) -> bool:
        """Reserve ``allocation`` if the node is still at ``expected_version``."""
        with self._lock:
            entry = self._nodes.get(allocation.node)
            if entry is None or entry.view.version != expected_version:
                return False
            if uid in self._pods:
                return False
            self._set(PodRecord(uid, namespace, name, allocation.node, allocation,
                                Stage.INFLIGHT))
            return True

    def mark_bound(self, uid: str) -> None:
        with self._lock:
            rec = self._pods.get(uid)
            if rec is not None and rec.stage is Stage.INFLIGHT:
                self._pods[uid] = PodRecord(rec.uid, rec.namespace, rec.name, rec.node,
                                            rec.allocation, Stage.BOUND)

    def unreserve(self, uid: str) -> None:
        with self._lock:
            rec = self._pods.get(uid)
            if rec is not None and rec.stage is not Stage.CONFIRMED:
                self._drop(uid)

    # ------------------------------------------------------------------ internals
    def _set(self, record: PodRecord) -> None:
        with self._lock:
            old = self._pods.get(record.uid)
            self._pods[record.uid] = record
            if old is not None and old.node != record.node:
                self._by_node.get(old.node, set()).discard(record.uid)
                self._recompute(old.node)
            self._by_node.setdefault(record.node, set()).add(record.uid)
            self._recompute(record.node)

    def _drop(self, uid: str) -> None:
        with self._lock:
            self._bad.pop(uid, None)
            old = self._pods.pop(uid, None)
            if old is not None:
                self._by_node.get(old.node, set()).discard(uid)
                self._recompute(old.node)

    def _note_bad(self, uid: str, why: str, pod: Mapping[str, Any]) -> None:
        with self._lock:
            self._bad[uid] = why
        logger.warning("ignoring allocation record: %s", why, extra=pod_context(pod))

    def _recompute(self, name: str) -> None:
        entry = self._nodes.get(name)
        if entry is None:
            return  # pods on unknown nodes are kept and applied when the node appears
        uids = sorted(self._by_node.get(name, ()))
        state, problems = build_node_state(
            name, entry.cards, [(u, self._pods[u].allocation.containers) for u in uids]
        )
        if problems and problems != entry.problems:
            logger.error("node %s over-committed: %s", name, "; ".join(problems),
                         extra={"node": name})
        entry.problems = problems
        entry.view = NodeView(state, entry.view.version + 1)
        self._log_change(name)

    def _log_change(self, name: str) -> None:
        self._change_log.append(name)
        if len(self._change_log) >= CHANGE_LOG_LIMIT:
            self._log_base += len(self._change_log)
            self._change_log = []  # every cache is now older than the base: rebuilt on use

    # ------------------------------------------------------------------ status
    def snapshot(self) -> dict[str, Any]:
        """Every node, card, capacity, and what is taken by which pods (JSON-ready)."""
        with self._lock:
            nodes = []
            for name in sorted(self._nodes):
                entry = self._nodes[name]
                st = entry.view.state
                cards = []
                for cs in st.cards:
                    cards.append({
                        "index": cs.card.index,
                        "model": cs.card.model,
                        "memoryMiB": cs.card.memory_mib,
                        "coreUsedPercent": cs.core_used,
                        "memoryUsedMiB": cs.memory_used_mib,
                        "whole": cs.whole,
                        "pods": [self._holder(uid, ctr) for uid, ctr in cs.holders],
                    })
                nodes.append({
                    "name": name,
                    "source": entry.source,
                    "problem": entry.problem or None,
                    "overCommitted": list(entry.problems),
                    "coreTotal": st.core_total,
                    "coreUsed": st.core_used,
                    "memoryTotalMiB": st.memory_total_mib,
                    "memoryUsedMiB": st.memory_used_mib,
                    "cards": cards,
                })
            return {
                "synced": self.synced,
                "nodes": nodes,
                "pods": len(self._pods),
                "ignoredRecords": dict(self._bad),
            }

    def _holder(self, uid: str, container: str) -> dict[str, str]:
        rec = self._pods.get(uid)
        return {
            "uid": uid,
            "namespace": rec.namespace if rec else "",
            "name": rec.name if rec else "",
            "container": container,
            "stage": rec.stage.value if rec else "",
        }

    def totals(self) -> list[tuple[str, int, int, int, int]]:
        """(node, core used, core total, memory used, memory total) for metrics."""
        out = []
        for name, entry in list(self._nodes.items()):
            st = entry.view.state
            out.append((name, st.core_used, st.core_total, st.memory_used_mib,
                        st.memory_total_mib))
        return out

    def comparable(self) -> dict[str, Any]:
        """Node states and pod allocations (for restart tests: equal means same picture)."""
        with self._lock:
            return {
                "nodes": {n: e.view.state for n, e in self._nodes.items()},
                "pods": {u: (r.node, r.allocation.containers) for u, r in self._pods.items()},
            }
