"""The cluster picture: nodes, their cards, and which pod holds what (thread-safe).

A cache of cluster truth, fed by list/watch events. Card usage is rebuilt **only** from the
canonical allocation annotation of bound pods (``decode_allocation``), plus the reservations
of binds running in this process. Succeeded/Failed or deleted pods release their cards.

Concurrency: one short global lock guards every mutation. Each node's state is an immutable
:class:`NodeView` (state, version) swapped atomically, so filter/prioritize read it without
locking. Binds on one node are serialised by a per-node lock and reserve with an optimistic
version check, so two binds can never both take the same free room.

Speed: every node view carries a *content id* from :attr:`ClusterState.node_contents`
(:mod:`allocator.ranking.content_memo`, which also keeps the verbs' answers by content id).

Node CPU and memory (allocatable, and the requests of every pod bound to the node) are kept
by :attr:`ClusterState.resources` (:mod:`allocator.picture.resources`): the node watch feeds both,
the
watch of all bound pods feeds the requests (and this picture its GPU pods:
:func:`allocator.picture.watch.reflectors`), and our binds count there at once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from allocator.picture.inventory import Inventory, read_inventory
from allocator.picture.measured import (
    MeasuredConfig,
    Overlay,
    Sample,
    apply_overlay,
    booked_before,
    overlay,
)
from allocator.picture.resources import NodeResources
from allocator.ranking.content_memo import NodeColumns, NodeContents, NodeNames
from allocator.ranking.fit import Card, NodeState, build_node_state
from tessera.logs import pod_context
from tessera.vocabulary import Allocation, CodecError, Vocabulary, decode_allocation

logger = logging.getLogger(__name__)

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


class Stage(StrEnum):
    HELD = "held"  # filter's choice for the pod, held until its bind comes (or expires)
    INFLIGHT = "inflight"  # reserved by a bind that is still writing to the API
    BOUND = "bound"  # our bind succeeded; no watch event has shown the pod bound yet
    CONFIRMED = "confirmed"  # a watch event showed the pod bound with this allocation


#: Records only this process knows of (nothing of them is written to the API yet): a list of
#: the pods cannot show them, so it never releases them.
UNWRITTEN = frozenset({Stage.HELD, Stage.INFLIGHT})


@dataclass(frozen=True)
class PodRecord:
    uid: str
    namespace: str
    name: str
    node: str
    allocation: Allocation
    stage: Stage


@dataclass(frozen=True, slots=True)
class _Hold:
    until: float
    #: The node's cards the held allocation was placed on (the same object while unchanged).
    cards: tuple[Card, ...]
    made_for: object


@dataclass(frozen=True, slots=True, eq=False)
class NodeView:
    """One version of a node: swapped as a whole, so readers never see half an update.

    Compared by identity (one object per version): ``None in views`` over 5,000 views then
    stays a C loop instead of 5,000 calls of a generated ``__eq__``.

    ``content`` is equal for two views exactly when their cards and usage are equal (see
    :data:`allocator.ranking.content_memo.ContentKey`): answers computed from the cards alone may be
    shared between them.
    """

    state: NodeState
    version: int
    content: int = -1


def _resource_version(obj: Mapping[str, Any]) -> int | None:
    version = (obj.get("metadata") or {}).get("resourceVersion")
    if isinstance(version, str) and version.isascii() and version.isdigit():
        return int(version)
    return None


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
        #: Nodes read by name ahead of the watch: name -> the resourceVersion read.
        self._looked_up: dict[str, int] = {}
        self._pods: dict[str, PodRecord] = {}
        self._by_node: dict[str, set[str]] = {}
        self._bad: dict[str, str] = {}  # pod uid -> why its allocation record was ignored
        self._synced = threading.Event()
        # name -> current view: one dict read per node on the verbs' hot path (lock-free).
        self._views: dict[str, NodeView] = {}
        #: every node's content id and free CPU in arrays, for the verbs (content_memo)
        self.columns = NodeColumns()
        #: content ids of the current views, and the verbs' answers memoised by them
        self.node_contents = NodeContents(self.columns)
        #: one string object per node name, for every per-node table (content_memo.NodeNames)
        self.names = NodeNames()
        #: every node's CPU and memory, allocatable and requested
        self.resources = NodeResources(self.names, self.columns)
        #: What cards and CPU were last read from, per node (labels, annotations,
        #: allocatable): a node update that changes none of them (a status heartbeat) is not
        #: read again.
        self._read_from: dict[str, tuple[object, object, object]] = {}
        # Pod records by the moment they last changed (a counter, not a clock): a relist only
        # releases records that did not change after its list began (replace_pods).
        self._epoch = 0
        self._touched: dict[str, int] = {}
        #: Filter's holds by pod UID (records at Stage.HELD), oldest first (:meth:`hold`).
        self._holds: dict[str, _Hold] = {}
        #: Each node's measured figures as applied to its cards (:meth:`apply_sample`).
        self._measured: dict[str, Overlay] = {}
        #: Told the node whenever a pod's record leaves it and its cards are free again
        #: (called under the lock: it must only note the node; :mod:`allocator.verbs.requeue`).
        self.on_release: Callable[[str], None] | None = None

    # ------------------------------------------------------------------ readiness
    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    def mark_synced(self) -> None:
        self._synced.set()

    # ------------------------------------------------------------------ reads (lock-free)
    def view(self, node: str) -> NodeView | None:
        return self._views.get(node)

    def views(self, names: Iterable[str]) -> list[NodeView | None]:
        """The current view of each named node (None for unknown ones), in order."""
        get = self._views.get
        return [get(n) for n in names]

    def cards(self, node: str) -> tuple[Card, ...]:
        entry = self._nodes.get(node)
        return entry.cards if entry is not None else ()

    def node_names(self) -> list[str]:
        return list(self._nodes)

    def record(self, uid: str) -> PodRecord | None:
        return self._pods.get(uid)

    def binds_in_flight(self) -> int:
        """Reservations of binds that have not finished yet."""
        with self._lock:
            return sum(1 for r in self._pods.values() if r.stage is Stage.INFLIGHT)

    def node_lock(self, node: str) -> threading.Lock:
        entry = self._nodes.get(node)
        if entry is None:
            # Callers check the node exists first; an unknown node gets a throwaway lock.
            return threading.Lock()
        return entry.lock

    # ------------------------------------------------------------------ nodes
    def apply_node(self, node: Mapping[str, Any]) -> None:
        """A node from the watch or a list (newer than anything applied before it, except a
        node read by :meth:`apply_looked_up_node`: see there)."""
        name = _name(node)
        if not name:
            return
        name = self.names.intern(name)
        inputs = _read_from(node)
        if self._read_from.get(name) == inputs and name not in self._looked_up:
            return  # nothing the cards or the CPU are read from has changed
        inv = self._inventory(node, name)
        with self._lock:
            looked_up = self._looked_up.get(name)
            if looked_up is not None:
                version = _resource_version(node)
                if version is not None and version < looked_up:
                    return  # the watch catching up with a read we already applied
                del self._looked_up[name]
            self._apply_inventory(name, inv)
            self.resources.apply_node(name, node)
            self._read_from[name] = _kept(inputs)

    def apply_looked_up_node(self, node: Mapping[str, Any]) -> bool:
        """A node read by name because the watch had not delivered it yet
        (:mod:`allocator.picture.nodelookup`). Applied only while the name is still unknown; until
        the watch reaches the same resourceVersion, its older events for the node are
        skipped (ordering the read against the watch needs comparing resourceVersions, which
        etcd's revisions allow; a non-numeric version is simply never skipped)."""
        name = _name(node)
        if not name:
            return False
        name = self.names.intern(name)
        inv = self._inventory(node, name)
        with self._lock:
            if name in self._nodes:
                return False
            version = _resource_version(node)
            if version is not None:
                self._looked_up[name] = version
            self._apply_inventory(name, inv)
            self.resources.apply_node(name, node)
            self._read_from[name] = _kept(_read_from(node))
            return True

    def _inventory(self, node: Mapping[str, Any], name: str) -> Inventory:
        """The node's cards. Never raises: read_inventory reports what it cannot read as a
        problem; anything else is a bug, and one node must still not stop the node list or
        watch (no cards, the reason in ``/status``)."""
        try:
            return read_inventory(node, self.vocabulary)
        except Exception as exc:
            logger.exception("node %s: inventory unreadable", name, extra={"node": name})
            return Inventory((), "none", f"inventory unreadable: {type(exc).__name__}: {exc}")

    def _apply_inventory(self, name: str, inv: Inventory) -> None:
        """(Under the lock.) The node's cards as read; usage recomputed when they changed."""
        entry = self._nodes.get(name)
        if entry is not None and entry.cards == inv.cards:
            entry.source, entry.problem = inv.source, inv.problem
            return
        if inv.problem:
            logger.warning("node %s: %s", name, inv.problem, extra={"node": name})
        elif not inv.cards:
            logger.debug("node %s has no GPU cards", name, extra={"node": name})
        version = entry.view.version + 1 if entry is not None else 1
        lock = entry.lock if entry is not None else threading.Lock()
        self._nodes[name] = _Node(
            inv.cards, inv.source, inv.problem,
            NodeView(NodeState(name, ()), version), lock=lock,
        )
        self._recompute(name)

    def remove_node(self, name: str) -> None:
        with self._lock:
            self._looked_up.pop(name, None)
            self._read_from.pop(name, None)
            self._nodes.pop(name, None)
            self._views.pop(name, None)
            self._measured.pop(name, None)
            self.node_contents.forget(name)
            self.resources.remove_node(name)

    def replace_nodes(self, nodes: Iterable[Mapping[str, Any]]) -> None:
        """A fresh list: apply every node, forget nodes that are gone."""
        seen = set()
        for node in nodes:
            name = _name(node)
            if name:
                seen.add(name)
                self.apply_node(node)
        with self._lock:
            for name in list(self._nodes):
                if name not in seen:
                    self._looked_up.pop(name, None)
                    self._read_from.pop(name, None)
                    del self._nodes[name]
                    self._views.pop(name, None)
                    self.node_contents.forget(name)
            self.resources.keep_nodes(seen)

    # ------------------------------------------------------------------ pods
    def apply_pod(self, pod: Mapping[str, Any]) -> None:
        """An added/modified pod (watch event or list item). Never raises: one pod that
        cannot be read is noted (``/status`` ``ignoredRecords``, a metric) and skipped, so the
        list and the watch go on."""
        uid = _uid(pod)
        if not uid:
            return
        try:
            self._apply_pod(pod, uid)
        except Exception as exc:
            # The record decoder raises CodecError only; this is a bug, seen in the log.
            logger.exception("pod unreadable", extra=pod_context(pod))
            self._note_bad(uid, f"pod unreadable: {type(exc).__name__}: {exc}", pod)

    def _apply_pod(self, pod: Mapping[str, Any], uid: str) -> None:
        meta = pod["metadata"]
        phase = (pod.get("status") or {}).get("phase")
        if phase in TERMINAL_PHASES:
            self._drop(uid)
            return
        node = (pod.get("spec") or {}).get("nodeName") or ""
        text = (meta.get("annotations") or {}).get(self.vocabulary.allocation_annotation)
        allocation: Allocation | None = None
        bad = ""
        if node and text:
            try:
                allocation = decode_allocation(text)
            except CodecError as exc:
                bad = str(exc)
            else:
                if allocation.pod_uid and allocation.pod_uid != uid:
                    # Copied from another pod (e.g. a template): not this pod's cards.
                    bad = f"allocation belongs to pod {allocation.pod_uid}"
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
                if bad:
                    self._note_bad(uid, bad, pod)  # after _drop, which forgets notes
                return
            self._bad.pop(uid, None)
            record = PodRecord(uid, meta.get("namespace", ""), meta.get("name", ""), node,
                               allocation, Stage.CONFIRMED)
            if current == record:
                return
            self._set(record)

    def remove_pod(self, pod: Mapping[str, Any]) -> None:
        uid = _uid(pod)
        if uid:
            self._drop(uid)

    def replace_pods(self, pods: Iterable[Mapping[str, Any]], since: int | None = None) -> None:
        """A fresh list: apply every pod; release pods that are gone.

        ``since`` is :meth:`epoch` taken before the list was requested. A record touched after
        that (a bind of ours that finished while the list was on the wire, or a newer watch
        event) is newer than the list: it is neither overwritten by the list's copy of the pod
        nor released for missing from it — otherwise a relist after 410 Gone could forget a
        pod we had just bound (it got its GPU-pod label from that bind, after the list was
        taken) and hand its cards out again before the watch replays the bind. A bind still
        running is never released. Without ``since`` the list is taken as newer than
        everything but running binds.
        """
        def newer_than_list(uid: str) -> bool:
            return since is not None and self._touched.get(uid, -1) >= since

        seen = set()
        for pod in pods:
            uid = _uid(pod)
            if uid:
                seen.add(uid)
                with self._lock:
                    skip = newer_than_list(uid)
                if not skip:
                    self.apply_pod(pod)
        with self._lock:
            for uid, rec in list(self._pods.items()):
                if (uid not in seen and rec.stage not in UNWRITTEN
                        and not newer_than_list(uid)):
                    self._drop(uid)

    def epoch(self) -> int:
        """A mark to take *before* a list of the pods (see :meth:`replace_pods`)."""
        with self._lock:
            return self._epoch

    # ------------------------------------------------------------------ bind reservations
    def reserve(self, uid: str, namespace: str, name: str, allocation: Allocation,
                expected_version: int, requests: tuple[int, int] | None = None) -> bool:
        """Reserve ``allocation`` if the node is still at ``expected_version``; the pod's
        ``requests`` (milli-CPU, memory bytes), when node resources are tracked, count on the
        node from now on too."""
        with self._lock:
            entry = self._nodes.get(allocation.node)
            if entry is None or entry.view.version != expected_version:
                return False
            if uid in self._pods:
                return False
            self._set(PodRecord(uid, namespace, name, allocation.node, allocation,
                                Stage.INFLIGHT))
            if requests is not None:
                self.resources.reserve(uid, allocation.node, *requests)
            return True

    def mark_bound(self, uid: str) -> None:
        with self._lock:
            rec = self._pods.get(uid)
            if rec is not None and rec.stage is Stage.INFLIGHT:
                self._pods[uid] = PodRecord(rec.uid, rec.namespace, rec.name, rec.node,
                                            rec.allocation, Stage.BOUND)
                self._touch(uid)

    def unreserve(self, uid: str) -> None:
        with self._lock:
            rec = self._pods.get(uid)
            if rec is not None and rec.stage is not Stage.CONFIRMED:
                self._drop(uid)
                self.resources.unreserve(uid)

    # ------------------------------------------------------------------ filter's holds
    def hold(self, uid: str, namespace: str, name: str, allocation: Allocation,
             expected_version: int, requests: tuple[int, int] | None, *, until: float,
             made_for: object) -> bool:
        """Hold ``allocation`` for the pod until its bind claims it (:meth:`claim_hold`), it
        is released, or ``until`` passes (:meth:`expire_holds`), counted as taken meanwhile.

        Why: kube-scheduler binds a pod while it already filters the next ones, and tells the
        extender its choice only with the bind; without a hold, each of those filters would
        see the same free cards and name the same node. (kube-scheduler's own cache does the
        same for its plugins: it assumes a pod on its node before binding it.) As
        :meth:`reserve`: only if the node is still at ``expected_version`` and the pod has no
        record; ``made_for`` is what the bind must match to claim it (the pod's request)."""
        with self._lock:
            entry = self._nodes.get(allocation.node)
            if entry is None or entry.view.version != expected_version or uid in self._pods:
                return False
            self._set(PodRecord(uid, namespace, name, allocation.node, allocation, Stage.HELD))
            if requests is not None:
                self.resources.reserve(uid, allocation.node, *requests)
            self._holds[uid] = _Hold(until, entry.cards, made_for)
            return True

    def claim_hold(self, uid: str, node: str, made_for: object) -> Allocation | None:
        """The pod's held allocation, turned into a bind's reservation (as :meth:`reserve`
        makes, node resources included), if it is held on ``node`` for ``made_for`` and the
        node's cards are still those it was placed on; otherwise None, and any hold of the
        pod is released."""
        with self._lock:
            hold = self._holds.pop(uid, None)
            rec = self._pods.get(uid)
            if hold is None or rec is None or rec.stage is not Stage.HELD:
                return None
            entry = self._nodes.get(node)
            if (rec.node != node or entry is None or entry.cards is not hold.cards
                    or hold.made_for != made_for):
                self._drop_held(uid)
                return None
            # The same cards on the same node: the node's state stays as it is (see _set).
            self._pods[uid] = PodRecord(uid, rec.namespace, rec.name, node, rec.allocation,
                                        Stage.INFLIGHT)
            self._touch(uid)
            return rec.allocation

    def release_hold(self, uid: str) -> None:
        """Forget the pod's hold, if it has one (its filter is asked again)."""
        if uid not in self._holds:  # lock-free miss: the common case on the verbs' path
            return
        with self._lock:
            if self._holds.pop(uid, None) is not None:
                self._drop_held(uid)

    def expire_holds(self, now: float) -> None:
        """Release the holds whose time has passed (no bind came for them: the pod was
        deleted, or kube-scheduler bound it elsewhere or not at all)."""
        with self._lock:
            expired = []
            for uid, hold in self._holds.items():  # oldest first
                if hold.until > now:
                    break
                expired.append(uid)
            for uid in expired:
                del self._holds[uid]
                self._drop_held(uid)

    def holds(self) -> int:
        """Holds not yet claimed, released or expired."""
        return len(self._holds)

    def _drop_held(self, uid: str) -> None:
        """(Under the lock.) Drop the pod's record if it is still a hold: a watch event may
        have put the truth in its place (the pod seen bound with its cards), which stays."""
        rec = self._pods.get(uid)
        if rec is not None and rec.stage is Stage.HELD:
            self._drop(uid)
            self.resources.unreserve(uid)

    # ------------------------------------------------------------------ measured figures
    def apply_sample(self, sample: Sample | None, config: MeasuredConfig) -> int:
        """Put each node's measured figures on its cards (None: take them all off, placing by
        bookings alone); the nodes whose cards changed. A node's foreign memory is what its
        sample shows beyond the bookings the sample can show
        (:mod:`allocator.picture.measured`), and stays as computed until the next sample: a
        pod bound or released meanwhile changes the bookings, not what the sample saw."""
        changed = 0
        for name in list(self._nodes):
            with self._lock:  # per node: binds and watches wait for one node at most
                entry = self._nodes.get(name)
                if entry is None:
                    continue
                figures: Overlay = ()
                reading = sample.nodes.get(name) if sample is not None else None
                if sample is not None and reading:
                    seen = booked_before(
                        ((self._pods[u].allocation.allocated_at,
                          self._pods[u].allocation.containers)
                         for u in self._by_node.get(name, ()) if u in self._pods),
                        entry.cards, sample.at - config.settle_seconds)
                    figures = overlay(entry.cards, seen, reading, config)
                if self._measured.get(name, ()) == figures:
                    continue
                if figures:
                    self._measured[name] = figures
                else:
                    self._measured.pop(name, None)
                self._recompute(name)
                changed += 1
        return changed

    # ------------------------------------------------------------------ internals
    def _touch(self, uid: str) -> None:
        self._touched[uid] = self._epoch
        self._epoch += 1

    def _set(self, record: PodRecord) -> None:
        with self._lock:
            if record.stage is not Stage.HELD:
                self._holds.pop(record.uid, None)  # a hold replaced by the truth is gone
            old = self._pods.get(record.uid)
            self._pods[record.uid] = record
            self._touch(record.uid)
            if (old is not None and old.node == record.node
                    and old.allocation.containers == record.allocation.containers):
                # The same cards on the same node (our own bind, seen bound by the watch): a
                # node's state is built from the containers' cards alone (_recompute), so it
                # and whatever was computed from it stay as they are.
                return
            if old is not None and old.node != record.node:
                self._by_node.get(old.node, set()).discard(record.uid)
                self._recompute(old.node)
            self._by_node.setdefault(record.node, set()).add(record.uid)
            self._recompute(record.node)

    def _drop(self, uid: str) -> None:
        with self._lock:
            self._holds.pop(uid, None)
            self._bad.pop(uid, None)
            self._touched.pop(uid, None)
            old = self._pods.pop(uid, None)
            if old is not None:
                self._by_node.get(old.node, set()).discard(uid)
                self._recompute(old.node)
                if self.on_release is not None:
                    self.on_release(old.node)

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
        state = apply_overlay(state, self._measured.get(name, ()))  # hook: measured figures
        content = self.node_contents.assign(name, state)
        entry.view = NodeView(state, entry.view.version + 1, content)
        self._views[name] = entry.view

    # ------------------------------------------------------------------ status
    def snapshot(self, max_nodes: int | None = None) -> dict[str, Any]:
        """Every node (the first ``max_nodes`` by name, when given; ``nodeCount`` counts them
        all), card, capacity, and what is taken by which pods (JSON-ready).

        The lock is held only to copy references: node states are immutable and records
        frozen, so the document is built from one consistent reading without making binds
        and watches wait for it (a large cluster's document takes a while to build)."""
        with self._lock:
            nodes = [(name, e.source, e.problem, e.problems, e.view.state)
                     for name, e in self._nodes.items()]
            pods = dict(self._pods)
            bad = dict(self._bad)
            synced = self.synced
        free_cpu, free_memory = self.resources.free_cpu, self.resources.free_memory
        docs = []
        nodes.sort(key=lambda n: n[0])
        for name, source, problem, problems, st in nodes[:max_nodes]:
            cards = []
            for cs in st.cards:
                cards.append({
                    "index": cs.card.index,
                    "model": cs.card.model,
                    "memoryMiB": cs.card.memory_mib,
                    "coreUsedPercent": cs.core_used,
                    "memoryUsedMiB": cs.memory_used_mib,
                    "whole": cs.whole,
                    "foreignMemoryMiB": cs.foreign_memory_mib,
                    "busyPercent": cs.busy_percent,
                    "pods": [_holder(pods.get(uid), uid, ctr) for uid, ctr in cs.holders],
                })
            docs.append({
                "name": name,
                "source": source,
                "problem": problem or None,
                "overCommitted": list(problems),
                "coreTotal": st.core_total,
                "coreUsed": st.core_used,
                "memoryTotalMiB": st.memory_total_mib,
                "memoryUsedMiB": st.memory_used_mib,
                "cpuFreeMilli": free_cpu.get(name),
                "memoryFreeBytes": free_memory.get(name),
                "cards": cards,
            })
        return {
            "synced": synced,
            "nodeCount": len(nodes),
            "nodes": docs,
            "pods": len(pods),
            "ignoredRecords": bad,
            "ignoredPodRequests": self.resources.noted(),
        }

    def problem_counts(self) -> tuple[int, int]:
        """(pods whose allocation record is ignored, nodes whose inventory has a problem)."""
        with self._lock:
            return len(self._bad), sum(1 for e in self._nodes.values() if e.problem)

    def node_states(self) -> tuple[list[tuple[str, NodeState]], dict[str, PodRecord]]:
        """Every node's state and every pod record, read together (for metrics)."""
        with self._lock:
            return [(name, e.view.state) for name, e in self._nodes.items()], dict(self._pods)

    def comparable(self) -> dict[str, Any]:
        """Node states and pod allocations (for restart tests: equal means same picture)."""
        with self._lock:
            return {
                "nodes": {n: e.view.state for n, e in self._nodes.items()},
                "pods": {u: (r.node, r.allocation.containers) for u, r in self._pods.items()},
            }


def _holder(rec: PodRecord | None, uid: str, container: str) -> dict[str, str]:
    return {
        "uid": uid,
        "namespace": rec.namespace if rec else "",
        "name": rec.name if rec else "",
        "container": container,
        "stage": rec.stage.value if rec else "",
    }


def _meta_str(obj: Mapping[str, Any], key: str) -> str:
    """``metadata.<key>`` when it is a non-empty string, else ``""``: list and watch items
    are API objects, but one malformed item must be skipped, not raise."""
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    value = meta.get(key) if isinstance(meta, Mapping) else None
    return value if isinstance(value, str) else ""


def _uid(pod: Mapping[str, Any]) -> str:
    return _meta_str(pod, "uid")


def _read_from(node: Mapping[str, Any]) -> tuple[object, object, object]:
    """What a node's cards (:func:`allocator.picture.inventory.read_inventory`) and CPU
    (:func:`allocator.picture.resources.node_allocatable`) are read from (the node's own objects:
    :func:`_kept` before keeping them)."""
    meta = node.get("metadata")
    status = node.get("status")
    meta = meta if isinstance(meta, Mapping) else {}
    status = status if isinstance(status, Mapping) else {}
    return meta.get("labels"), meta.get("annotations"), status.get("allocatable")


def _kept(inputs: tuple[object, object, object]) -> tuple[object, object, object]:
    """Copies of :func:`_read_from`'s maps: a caller that changes a node object in place must
    not change what was kept (a heartbeat compares without copying)."""
    labels, annotations, allocatable = (
        dict(v) if isinstance(v, Mapping) else v for v in inputs)
    return labels, annotations, allocatable


def _name(node: Mapping[str, Any]) -> str:
    return _meta_str(node, "name")
