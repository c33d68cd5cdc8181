"""Pod records: which pod holds which cards on which node, and at what stage (not locked:
the picture's lock guards every write, :class:`allocator.picture.state.ClusterState`).

Card usage is rebuilt **only** from the canonical allocation annotation of bound pods
(:func:`read_record`), plus the records of binds and holds of this process.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from tessera.logs import pod_context
from tessera.vocabulary import Allocation, CodecError, ContainerAllocation, decode_allocation

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
        allocation = decode_allocation(text)
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
                     Stage.CONFIRMED), ""


class PodRecords:
    """Every record by pod UID, the UIDs on each node, ignored records and when each record
    last changed (a counter, not a clock: a relist only releases records that did not change
    after its list began)."""

    def __init__(self) -> None:
        self._pods: dict[str, PodRecord] = {}
        self._by_node: dict[str, set[str]] = {}
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

    def put(self, record: PodRecord) -> list[str]:
        """Keep ``record``; the nodes whose usage it changed."""
        old = self._pods.get(record.uid)
        self._pods[record.uid] = record
        self.touch(record.uid)
        if (old is not None and old.node == record.node
                and old.allocation.containers == record.allocation.containers):
            # The same cards on the same node (our own bind, seen bound by the watch): a
            # node's state is built from the containers' cards alone, so it and whatever
            # was computed from it stay as they are.
            return []
        changed = []
        if old is not None and old.node != record.node:
            self._by_node.get(old.node, set()).discard(record.uid)
            changed.append(old.node)
        self._by_node.setdefault(record.node, set()).add(record.uid)
        return [*changed, record.node]

    def restage(self, record: PodRecord, stage: Stage) -> None:
        """The same record at another stage (the node's usage unchanged)."""
        self._pods[record.uid] = PodRecord(record.uid, record.namespace, record.name,
                                           record.node, record.allocation, stage)
        self.touch(record.uid)

    def pop(self, uid: str) -> PodRecord | None:
        """Forget the pod (its record, note and mark); its record, if it had one."""
        self.bad.pop(uid, None)
        self._touched.pop(uid, None)
        old = self._pods.pop(uid, None)
        if old is not None:
            self._by_node.get(old.node, set()).discard(uid)
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
