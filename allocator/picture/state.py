"""The cluster picture: nodes, their cards, and which pod holds what (thread-safe).

A cache of cluster truth fed by list/watch events, our binds and filter's holds, kept in the
tables of :class:`~allocator.picture.tables.PictureTables` (node table, pod records, holds)
under one short lock. Card usage is rebuilt **only** from the allocation annotation of bound
pods plus this process's binds and holds. Binds on one node are serialised by a per-node lock
and reserve with an optimistic version check, so two binds never take the same free room.

Node CPU and memory are kept by :attr:`ClusterState.resources`
(:mod:`allocator.picture.resources`; the watch of all bound pods feeds the requests, our binds
count at once).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from allocator.picture.holds import Hold
from allocator.picture.inventory import Inventory
from allocator.picture.measured import (
    MeasuredConfig,
    Overlay,
    Sample,
    booked_before,
    overlay,
)
from allocator.picture.names import meta_str
from allocator.picture.nodes import inventory_of, kept, read_from, resource_version
from allocator.picture.records import TERMINAL_PHASES, PodRecord, Stage, read_record
from allocator.picture.tables import PictureTables
from tessera.logs import pod_context
from tessera.vocabulary import Allocation

logger = logging.getLogger(__name__)


class ClusterState(PictureTables):
    """The picture as list/watch events, our binds and filter's holds change it."""

    #: Told the UID of each pod the watch saw deleted, after its record is gone (outside the
    #: lock): a preemption for a pending pod ends (allocator/verbs/preempt.py).
    on_pod_deleted: Callable[[str], None] | None = None

    # ------------------------------------------------------------------ nodes
    def apply_node(self, node: Mapping[str, Any]) -> None:
        """A node from the watch or a list (newer than anything applied before it, except a
        node read by :meth:`apply_looked_up_node`: see there)."""
        name = meta_str(node, "name")
        if not name:
            return
        name = self.names.intern(name)
        meta = node.get("metadata") or {}
        with self._lock:
            self._agent_watch.node_seen(name, meta.get("annotations") or {},
                                        str(meta.get("resourceVersion") or ""))
        inputs = read_from(node, self._agent_watch.unread_annotations)
        if self._nodes.unchanged(name, inputs):
            return  # nothing the cards or the CPU are read from has changed
        inv = inventory_of(node, name, self.vocabulary, self.agent,
                           self._agent_watch.describe)
        with self._lock:
            looked_up = self._nodes.looked_up.get(name)
            if looked_up is not None:
                version = resource_version(node)
                if version is not None and version < looked_up:
                    return  # the watch catching up with a read we already applied
                del self._nodes.looked_up[name]
            self._apply_read(name, node, inv, inputs)

    def apply_looked_up_node(self, node: Mapping[str, Any]) -> bool:
        """A node read by name before the watch delivered it (:mod:`~allocator.picture.
        nodelookup`), applied only while the name is unknown; the watch's older events for it
        are then skipped (by resourceVersion, etcd's revision; a non-numeric one never is)."""
        name = meta_str(node, "name")
        if not name:
            return False
        name = self.names.intern(name)
        inv = inventory_of(node, name, self.vocabulary, self.agent,
                           self._agent_watch.describe)
        with self._lock:
            if name in self._nodes.entries:
                return False
            version = resource_version(node)
            if version is not None:
                self._nodes.looked_up[name] = version
            self._apply_read(name, node, inv,
                             read_from(node, self._agent_watch.unread_annotations))
            return True

    def _apply_read(self, name: str, node: Mapping[str, Any], inv: Inventory,
                    inputs: tuple[object, object, object]) -> None:
        """(Under the lock.) The node's cards (usage rebuilt when they changed) and CPU."""
        if self._nodes.set_inventory(name, inv):
            self._recompute(name)
            if self.on_release is not None:
                self.on_release(name)  # cards added or changed: room may have appeared
        self.resources.apply_node(name, node)
        self._nodes.read_from[name] = kept(inputs)

    def remove_node(self, name: str) -> None:
        with self._lock:
            self._nodes.remove(name)
            self._measured.pop(name, None)
            self._agent_watch.node_gone(name)
            self._observers.node_gone(name)
            self.resources.remove_node(name)

    def replace_nodes(self, nodes: Iterable[Mapping[str, Any]]) -> None:
        """A fresh list: apply every node, forget nodes that are gone."""
        seen = set()
        for node in nodes:
            name = meta_str(node, "name")
            if name:
                seen.add(name)
                self.apply_node(node)
        with self._lock:
            for name in self._nodes.names():
                if name not in seen:
                    self._nodes.remove(name)
                    self._agent_watch.node_gone(name)
                    self._observers.node_gone(name)
            self.resources.keep_nodes(seen)

    # ------------------------------------------------------------------ pods
    def apply_pod(self, pod: Mapping[str, Any]) -> None:
        """An added/modified pod (watch event or list item). Never raises: an unreadable pod
        is noted (``/status`` ``ignoredRecords``, a metric) and skipped."""
        uid = meta_str(pod, "uid")
        if not uid:
            return
        try:
            self._apply_pod(pod, uid)
        except Exception as exc:
            # The record decoder raises CodecError only; this is a bug, seen in the log.
            logger.exception("pod unreadable", extra=pod_context(pod))
            self._note_bad(uid, f"pod unreadable: {type(exc).__name__}: {exc}", pod)

    def _apply_pod(self, pod: Mapping[str, Any], uid: str) -> None:
        with self._lock:
            self._agent_watch.pod_seen(uid, pod)
        phase = (pod.get("status") or {}).get("phase")
        if phase in TERMINAL_PHASES:
            self._drop(uid)
            return
        # The node agent gave up starting the pod (a device plugin's failed Allocate): its
        # cards are free again. Only while the pod is Pending (Allocate runs before any
        # container starts): anyone who may edit the pod can write that, and a running pod's
        # cards must not be freed by it.
        failed = (bool((pod.get("spec") or {}).get("nodeName")) and phase in (None, "Pending")
                  and self._agent_watch.start_failed(
                      pod["metadata"].get("annotations") or {}))
        record, bad = ((None, "") if failed
                       else read_record(pod, uid, self.vocabulary.allocation_annotation))
        with self._lock:
            current = self._pods.get(uid)
            if record is None:
                # Not (yet) bound with a record. Our own in-flight/just-bound reservations
                # stay: this event may predate our patch and binding.
                if current is not None and (current.stage is Stage.CONFIRMED or failed):
                    self._drop(uid)
                if bad:
                    self._note_bad(uid, bad, pod)  # after _drop, which forgets notes
                return
            self._pods.bad.pop(uid, None)
            if current == record:
                return
            self._set(record)

    def remove_pod(self, pod: Mapping[str, Any]) -> None:
        uid = meta_str(pod, "uid")
        if uid:
            self._drop(uid)
            if self.on_pod_deleted is not None:
                self.on_pod_deleted(uid)

    def replace_pods(self, pods: Iterable[Mapping[str, Any]], since: int | None = None) -> None:
        """A fresh list: apply every pod; release pods that are gone.

        ``since`` is :meth:`epoch` taken before the list was requested. A record touched after
        that (a bind of ours that finished while the list was on the wire, or a newer watch
        event) is neither overwritten by the list's copy nor released for missing from it:
        else a relist after 410 Gone could forget a pod we had just bound and hand its cards
        out again. A bind still running is never released. Without ``since`` the list is
        taken as newer than everything but running binds."""
        seen = set()
        for pod in pods:
            uid = meta_str(pod, "uid")
            if uid:
                seen.add(uid)
                with self._lock:
                    skip = self._pods.newer_than(uid, since)
                if not skip:
                    self.apply_pod(pod)
        with self._lock:
            for uid in self._pods.released_by_list(seen, since):
                self._drop(uid)

    def epoch(self) -> int:
        """A mark to take *before* a list of the pods (see :meth:`replace_pods`)."""
        with self._lock:
            return self._pods.epoch

    # ------------------------------------------------------------------ bind reservations
    def reserve(self, uid: str, namespace: str, name: str, allocation: Allocation,
                expected_version: int, requests: tuple[int, int] | None = None) -> bool:
        """Reserve ``allocation`` if the node is still at ``expected_version``; the pod's
        ``requests`` (milli-CPU, memory bytes), when node resources are tracked, count on the
        node from now on too."""
        with self._lock:
            entry = self._nodes.entries.get(allocation.node)
            if entry is None or entry.view.version != expected_version:
                return False
            if uid in self._pods:
                return False
            self._set(PodRecord(uid, namespace, name, allocation.node, allocation,
                                Stage.INFLIGHT))
            if requests is not None:
                self.resources.reserve(uid, allocation.node, *requests)
            return True

    def mark_bound(self, uid: str, priority: int | None = None) -> None:
        """Our bind of the pod succeeded; ``priority``: its ``spec.priority`` (a preemption
        may evict it before the watch shows it bound)."""
        with self._lock:
            rec = self._pods.get(uid)
            if rec is not None and rec.stage is Stage.INFLIGHT:
                self._pods.restage(rec, Stage.BOUND, priority)

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
        """Hold ``allocation`` (counted as taken) until the pod's bind claims it, it is
        released or ``until`` passes (:mod:`allocator.picture.holds` says why); as
        :meth:`reserve`, and ``made_for`` is what the bind must match (the pod's request)."""
        with self._lock:
            entry = self._nodes.entries.get(allocation.node)
            if entry is None or entry.view.version != expected_version or uid in self._pods:
                return False
            self._set(PodRecord(uid, namespace, name, allocation.node, allocation, Stage.HELD))
            if requests is not None:
                self.resources.reserve(uid, allocation.node, *requests)
            self._holds.add(uid, Hold(until, entry.cards, made_for, allocation.node))
            return True

    def claim_hold(self, uid: str, node: str, made_for: object) -> Allocation | None:
        """The pod's hold turned into a bind's reservation, if held on ``node`` for
        ``made_for`` on the cards it was placed on; else None, the hold released."""
        with self._lock:
            hold = self._holds.pop(uid)
            rec = self._pods.get(uid)
            if hold is None or rec is None or rec.stage is not Stage.HELD:
                return None
            entry = self._nodes.entries.get(node)
            if (rec.node != node or entry is None or entry.cards is not hold.cards
                    or hold.made_for != made_for):
                self._drop_held(uid)
                return None
            # The same cards on the same node: the node's state stays as it is.
            self._pods.restage(rec, Stage.INFLIGHT)
            return rec.allocation

    def release_hold(self, uid: str, *, tell: bool = True) -> str | None:
        """Forget the pod's hold, if it has one (its filter is asked again); the node it was
        on. ``tell`` False: the requeue is not told of the room (:meth:`tell_released` later):
        the pod is placed again at once, and room held for it after a release must not go to
        another refused pod meanwhile."""
        if uid not in self._holds:  # lock-free miss: the common case on the verbs' path
            return None
        with self._lock:
            rec = self._pods.get(uid)
            if self._holds.pop(uid) is None or rec is None:
                return None
            self._drop_held(uid, tell)
            return rec.node

    def tell_released(self, node: str) -> None:
        """Tell the requeue of room on ``node`` (a hold released untold, not taken again)."""
        with self._lock:
            if self.on_release is not None:
                self.on_release(node)

    def expire_holds(self, now: float) -> None:
        """Release the holds whose time has passed (no bind came for them: the pod was
        deleted, or kube-scheduler bound it elsewhere or not at all)."""
        with self._lock:
            for uid in self._holds.take_expired(now):
                self._drop_held(uid)

    def holds(self) -> int:
        """Holds not yet claimed, released or expired."""
        return len(self._holds)

    def _drop_held(self, uid: str, tell: bool = True) -> None:
        """(Under the lock.) Drop the pod's record if it is still a hold: a watch event may
        have put the truth in its place (the pod seen bound with its cards), which stays."""
        rec = self._pods.get(uid)
        if rec is not None and rec.stage is Stage.HELD:
            self._drop(uid, tell)
            self.resources.unreserve(uid)

    # ------------------------------------------------------------------ measured figures
    def apply_sample(self, sample: Sample | None, config: MeasuredConfig) -> int:
        """Put each node's measured figures on its cards (None: take them all off, placing by
        bookings alone); the nodes whose cards changed. A node's foreign memory is what its
        sample shows beyond the bookings the sample can show
        (:mod:`allocator.picture.measured`), and stays as computed until the next sample: a
        pod bound or released meanwhile changes the bookings, not what the sample saw."""
        changed = 0
        for name in self._nodes.names():
            with self._lock:  # per node: binds and watches wait for one node at most
                entry = self._nodes.entries.get(name)
                if entry is None:
                    continue
                figures: Overlay = ()
                reading = sample.nodes.get(name) if sample is not None else None
                if sample is not None and reading:
                    seen = booked_before(self._pods.bookings_on(name), entry.cards,
                                         sample.at - config.settle_seconds)
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

