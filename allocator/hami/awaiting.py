"""Nodes whose node agent still has a bound pod to start (not locked: its owner,
:class:`allocator.agents.hami.HamiAgent`, guards it, told every event by the picture).

HAMi's device plugin, and volcano-vgpu's, allocate one pod at a time per node: the scheduler
takes the node's lock before the Binding and the plugin's ``Allocate`` gives it back, setting
the pod's ``bind-phase`` to ``success`` (or ``failed``). A node between the two cannot take
another pod until then (:mod:`allocator.hami.lock` waits for it), so filter prefers other
nodes that fit while it lasts (``HamiAgent.nodes_to_avoid``, asked by
:mod:`allocator.verbs.filter`).

The plugin writes the pod's end before it gives the lock back, so a node also counts as
having a pod to start while our node watch shows its lock held (by anyone: another
scheduler's bind too). A pod awaits its node's agent from our bind's lock until an event
shows its ``bind-phase`` ended, it is gone, or
:data:`~allocator.hami.codec.LOCK_EXPIRY_SECONDS` passed (HAMi's lock is stale then,
whatever the plugin does); a held lock counts as long. Pods bound by another scheduler (a
hami-scheduler being replaced) count from their first event with ``bind-phase:
allocating``. Only an ended phase or the pod's end clears a pod's entry: watch events are in
order, and the plugin writes the end only after our bind.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from allocator.hami.codec import BIND_ALLOCATING, HAMI, LOCK_EXPIRY_SECONDS, VOLCANO_VGPU
from allocator.hami.counted_by_node import CountedByNode


def bind_phase(annotations: Mapping[str, str]) -> str:
    """The pod's ``bind-phase`` under HAMi's or volcano-vgpu's key ("" without one)."""
    return (annotations.get(HAMI.bind_phase_key)
            or annotations.get(VOLCANO_VGPU.bind_phase_key) or "")


class AwaitingAgent:
    """Pod UID -> (node, since) of the pods whose node agent has not started them yet."""

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 max_age_seconds: float = LOCK_EXPIRY_SECONDS) -> None:
        self._clock = clock
        self._max_age = max_age_seconds
        #: Pod UID -> (node, since), counted per node as they change.
        self._pods = CountedByNode()
        #: Nodes whose lock the node watch shows held, since when (oldest first).
        self._locked: dict[str, float] = {}

    def bound(self, uid: str, node: str) -> None:
        """Our bind takes ``node``'s lock for the pod: its agent has it to start."""
        self._pods.put(uid, node, self._clock())

    def seen(self, uid: str, pod: Mapping[str, Any]) -> None:
        """A watch event or list item of the pod."""
        phase = bind_phase((pod.get("metadata") or {}).get("annotations") or {})
        if not phase:
            return  # not a pod of HAMi's plugins, or ours before our bind wrote the keys
        if phase != BIND_ALLOCATING:
            self._pods.pop(uid)
            return
        node = (pod.get("spec") or {}).get("nodeName") or ""
        if node and uid not in self._pods:
            self._pods.put(uid, node, self._clock())

    def gone(self, uid: str) -> None:
        self._pods.pop(uid)

    def node_seen(self, node: str, annotations: Mapping[str, str]) -> None:
        """A watch event or list item of ``node``: is its lock held?"""
        if HAMI.lock_key in annotations or VOLCANO_VGPU.lock_key in annotations:
            self._locked.setdefault(node, self._clock())
        else:
            self._locked.pop(node, None)

    def node_gone(self, node: str) -> None:
        self._locked.pop(node, None)

    def by_node(self) -> Counter[str]:
        """How many pods each node's agent has to start, entries past the lock's expiry
        forgotten."""
        oldest = self._clock() - self._max_age
        self._pods.drop_older_than(oldest)
        locked = self._locked
        while locked:
            node, since = next(iter(locked.items()))
            if since >= oldest:
                break
            del locked[node]
        queued = self._pods.per_node()
        for node in locked:
            queued[node] = max(queued[node], 1)  # the lock's pod is most likely among them
        return queued

    def __len__(self) -> int:
        return len(self._pods)
