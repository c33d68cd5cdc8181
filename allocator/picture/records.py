"""Pod records: which pod holds which cards on which node, and at what stage (not locked:
the picture's lock guards every write, :class:`allocator.picture.state.ClusterState`).

Card usage is rebuilt **only** from the canonical allocation annotation of bound pods
(:func:`read_record`), plus the records of binds and holds of this process. A record also
keeps what preemption weighs a pod by, its ``spec.priority`` and ``status.startTime`` (two
scalars, read from each version the watch sees: the start time comes after the bind), so a
refused pod's preemption reads no pod from the API (:mod:`allocator.verbs.preempt_offers`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from allocator.picture.record_memo import allocation_of_text
from allocator.preemption.pod_fields import priority_of, started_at
from tessera.logs import pod_context
from tessera.vocabulary import Allocation, CodecError, ContainerAllocation

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
#: Stages whose pods may be evicted (a hold or a running bind is not a pod's yet).
EVICTABLE = frozenset({Stage.BOUND, Stage.CONFIRMED})


@dataclass(frozen=True, slots=True)
class PodRecord:
    uid: str
    namespace: str
    name: str
    node: str
    allocation: Allocation
    stage: Stage
    #: ``spec.priority`` as kube-scheduler reads it (absent: 0); None: not known, for a hold
    #: or a bind of ours not yet marked bound (such a pod is never a preemption's victim).
    priority: int | None = None
    #: ``status.startTime`` in Unix seconds; None: not started (yet), which preemption reads
    #: as "now", as kube-scheduler does (:func:`allocator.preemption.started_at`).
    started_at: float | None = None


def read_record(pod: Mapping[str, Any], uid: str, annotation: str
                ) -> tuple[PodRecord | None, str]:
    """The pod's confirmed record from its allocation ``annotation`` (None: not bound with
    one), and why a record it carries is ignored ("" when none is)."""
    meta = pod["metadata"]
    node = (pod.get("spec") or {}).get("nodeName") or ""
    text = (meta.get("annotations") or {}).get(annotation)
    if not node or not text:
        return None, ""
    try:
        allocation = allocation_of_text(text)
    except CodecError as exc:
        return None, str(exc)
    if allocation.pod_uid and allocation.pod_uid != uid:
        # Copied from another pod (e.g. a template): not this pod's cards.
        return None, f"allocation belongs to pod {allocation.pod_uid}"
    if allocation.node != node:
        # The node agent on spec.nodeName reads these indices: count them there.
        logger.warning("allocation says node %s but pod is bound to %s",
                       allocation.node, node, extra=pod_context(pod))
    return PodRecord(uid, meta.get("namespace", ""), meta.get("name", ""), node, allocation,
                     Stage.CONFIRMED, priority_of(pod), started_at(pod)), ""


class PodRecords:
    """Every record by pod UID, the UIDs on each node, ignored records and when each record
    last changed (a counter, not a clock: a relist only releases records that did not change
    after its list began), and the lowest priority that may be evicted on each node."""

    def __init__(self) -> None:
        self._pods: dict[str, PodRecord] = {}
        self._by_node: dict[str, set[str]] = {}
        #: Per node, the lowest ``priority`` among its records that may be evicted (stage
        #: :data:`EVICTABLE`, priority known); a node without one is absent. Kept on every
        #: change, so a refused pod's look for victims is one read per refused node.
        self.lowest: dict[str, int] = {}
        self.bad: dict[str, str] = {}  # pod uid -> why its allocation record was ignored
        self.epoch = 0
        self._touched: dict[str, int] = {}

    def get(self, uid: str) -> PodRecord | None:
        return self._pods.get(uid)

    def __contains__(self, uid: str) -> bool:
        return uid in self._pods

    def __len__(self) -> int:
        return len(self._pods)

    def all(self) -> dict[str, PodRecord]:
        return dict(self._pods)

    def items(self) -> list[tuple[str, PodRecord]]:
        return list(self._pods.items())

    def on_node(self, node: str) -> list[tuple[str, tuple[ContainerAllocation, ...]]]:
        """(uid, containers) of every record on ``node``, by uid."""
        return [(u, self._pods[u].allocation.containers)
                for u in sorted(self._by_node.get(node, ()))]

    def bookings_on(self, node: str) -> list[tuple[float, tuple[ContainerAllocation, ...]]]:
        """When each pod on ``node`` was allocated, and its containers' cards."""
        return [(self._pods[u].allocation.allocated_at, self._pods[u].allocation.containers)
                for u in self._by_node.get(node, ()) if u in self._pods]

    def evictable_on(self, nodes: Iterable[str]) -> list[PodRecord]:
        """The records on ``nodes`` whose pods may be evicted (stage and priority known)."""
        pods, by_node = self._pods, self._by_node
        return [r for node in nodes for u in by_node.get(node, ())
                if (r := pods[u]).stage in EVICTABLE and r.priority is not None]

    def _relow(self, node: str) -> None:
        found = [r.priority for r in self.evictable_on((node,)) if r.priority is not None]
        if found:
            self.lowest[node] = min(found)
        else:
            self.lowest.pop(node, None)

    def put(self, record: PodRecord) -> list[str]:
        """Keep ``record``; the nodes whose usage it changed."""
        old = self._pods.get(record.uid)
        self._pods[record.uid] = record
        self.touch(record.uid)
        if (old is not None and old.node == record.node
                and old.allocation.containers == record.allocation.containers):
            # The same cards on the same node (our own bind, seen bound by the watch, or a
            # later version with its start time): a node's state is built from the
            # containers' cards alone, so it and whatever was computed from it stay as they
            # are.
            if (old.stage, old.priority) != (record.stage, record.priority):
                self._relow(record.node)
            return []
        changed = []
        if old is not None and old.node != record.node:
            self._by_node.get(old.node, set()).discard(record.uid)
            self._relow(old.node)
            changed.append(old.node)
        self._by_node.setdefault(record.node, set()).add(record.uid)
        self._relow(record.node)
        return [*changed, record.node]

    def restage(self, record: PodRecord, stage: Stage, priority: int | None = None) -> None:
        """The same record at another stage (the node's usage unchanged), with the pod's
        ``priority`` when given."""
        self._pods[record.uid] = PodRecord(
            record.uid, record.namespace, record.name, record.node, record.allocation, stage,
            record.priority if priority is None else priority, record.started_at)
        self.touch(record.uid)
        self._relow(record.node)

    def pop(self, uid: str) -> PodRecord | None:
        """Forget the pod (its record, note and mark); its record, if it had one."""
        self.bad.pop(uid, None)
        self._touched.pop(uid, None)
        old = self._pods.pop(uid, None)
        if old is not None:
            self._by_node.get(old.node, set()).discard(uid)
            self._relow(old.node)
        return old

    def touch(self, uid: str) -> None:
        self._touched[uid] = self.epoch
        self.epoch += 1

    def newer_than(self, uid: str, since: int | None) -> bool:
        """Whether the record changed after the mark ``since`` (None: never)."""
        return since is not None and self._touched.get(uid, -1) >= since

    def released_by_list(self, seen: Iterable[str], since: int | None) -> list[str]:
        """The records a fresh list releases: missing from it, written to the API, and not
        changed since the list began."""
        listed = set(seen)
        return [uid for uid, rec in self._pods.items()
                if uid not in listed and rec.stage not in UNWRITTEN
                and not self.newer_than(uid, since)]
