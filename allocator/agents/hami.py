"""The ``hami`` and ``volcano-vgpu`` node agents: HAMi's device plugin and Volcano's vGPU
plugin (allocator/hami/, docs/hami.md).

:class:`HamiAgent` owns everything the allocator does for them: the flavor (its keys,
:data:`allocator.hami.codec.FLAVORS`), the node locks taken around bind's write step
(:mod:`allocator.hami.lock`), the waiting list of pods bound and not started yet
(:mod:`allocator.hami.awaiting`) and filter's preference for nodes with none, the pods
another HAMi scheduler placed, adopted at start (:mod:`allocator.hami.adopt`), the pods
filter keeps back until a bind could be served in time (:mod:`allocator.hami.pace`), and the
pod annotations written at bind, from the node's register annotation (the writers below, pure).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Final

from allocator.agents import AgentMetadata, AgentWriter, BindContext
from allocator.agents.port import NodeAgent, PodsToStart
from allocator.decisions import PodRef
from allocator.errors import ApiError, BindError
from allocator.hami.adopt import adopt_placed_pods
from allocator.hami.awaiting import AwaitingAgent
from allocator.hami.codec import HAMI, VOLCANO_VGPU, Flavor
from allocator.hami.lock import NodeLocks, NodeLockTimeout
from allocator.hami.pace import TURN_WAIT_SECONDS, PluginPace
from allocator.hami.task_priority import TASK_PRIORITY_UNSET, unset_task_priority
from allocator.hami.topology import with_links
from allocator.hami.writer import all_keys, bind_annotations, bind_labels, read_devices
from allocator.picture.inventory import Inventory
from allocator.ports import KubeApi
from tessera.agent_profiles import AgentProfile
from tessera.vocabulary import Vocabulary

logger = logging.getLogger(__name__)

def write_for(profile: AgentProfile, flavor: Flavor, annotations: Mapping[str, str],
              ctx: BindContext) -> AgentMetadata:
    """HAMi's pod annotations for the allocation, the node's register annotation read from
    its ``annotations``; ``skipped`` says why they cannot be written."""
    devices = read_devices(annotations, flavor)
    if devices is None or devices.problem:
        why = devices.problem if devices else f"node has no {flavor.register_key}"
        return AgentMetadata(skipped={profile: why})
    written = bind_annotations(ctx.allocation, ctx.pod, devices, flavor, ctx.now_ns / 1e9)
    if isinstance(written, str):
        return AgentMetadata(skipped={profile: written})
    return AgentMetadata(annotations=written, labels=bind_labels(ctx.allocation.node, flavor))


def _owns(flavor: Flavor) -> Callable[[str, Vocabulary], bool]:
    keys = frozenset(all_keys(flavor))

    def owns(key: str, _vocabulary: Vocabulary) -> bool:
        return key in keys
    return owns


def _no_node(profile: AgentProfile, flavor: Flavor) -> Callable[[BindContext], AgentMetadata]:
    """The writer as the registry lists it (the agent itself writes with the node read)."""
    return lambda ctx: write_for(profile, flavor, {}, ctx)


HAMI_WRITERS: Final = {
    AgentProfile.HAMI: AgentWriter(_no_node(AgentProfile.HAMI, HAMI), _owns(HAMI)),
    AgentProfile.VOLCANO_VGPU: AgentWriter(_no_node(AgentProfile.VOLCANO_VGPU, VOLCANO_VGPU),
                                           _owns(VOLCANO_VGPU)),
}


class _ThisFilter(threading.local):
    """What this thread's filter read already: the pods to start that ``nodes_to_avoid`` read,
    reused by ``wait_for_turn`` a moment later (one count of every node's queue a filter)."""

    queued: Counter[str] | None = None


class HamiAgent(NodeAgent):
    """HAMi's plugins: one pod at a time per node, behind the node's lock."""

    def __init__(self, profile: AgentProfile, flavor: Flavor, api: KubeApi, vocabulary:
                 Vocabulary, clock: Callable[[], float]) -> None:
        self.profile = profile
        #: The flavor the cluster's plugin speaks (an older one: ``--hami-agent``).
        self.flavor = flavor
        self.api = api
        self.vocabulary = vocabulary
        self.locks = NodeLocks(api, flavor, clock=clock)
        #: Pods bound and not started yet (told by the picture under its lock, and by our
        #: binds: guarded by this lock too).
        self.waiting = AwaitingAgent()
        self._waiting_lock = threading.Lock()
        #: How long a node's lock is held for one pod (our binds' locks, measured).
        self.pace = PluginPace()
        #: The least and most filter waits for a node's turn (:data:`TURN_WAIT_SECONDS`).
        self.turn_wait_bounds = TURN_WAIT_SECONDS
        #: Notified on every event that may shorten a node's queue (filter waits on it).
        self._changed = threading.Condition()
        self._this_filter = _ThisFilter()

    # ------------------------------------------------------------------ bind
    def metadata(self, ctx: BindContext) -> AgentMetadata:
        if note := unset_task_priority(ctx.pod):
            self.warn(PodRef.of(ctx.pod), TASK_PRIORITY_UNSET, note)
        return write_for(self.profile, self.flavor, self._node_annotations(ctx.allocation.node),
                         ctx)

    def _node_annotations(self, node: str) -> Mapping[str, str]:
        """The node's annotations as etcd has them now (its register annotation names the
        cards' UUIDs): the node as the lock just read it, else a read."""
        try:
            obj = self.locks.seen(node) or self.api.get_node(node) or {}
        except ApiError as exc:
            raise BindError(f"reading node {node} failed: {exc}") from exc
        annotations: Mapping[str, str] = (obj.get("metadata") or {}).get("annotations") or {}
        return annotations

    @contextmanager
    def guard(self, pod: PodRef, node: str) -> Iterator[None]:
        """HAMi's node lock around the write step, left held when the pod is bound (the
        device plugin releases it after Allocate) and given back when it is not."""
        with self._waiting_lock:
            self.waiting.bound(pod.uid, node)  # filter prefers other nodes from now
        try:
            self.locks.acquire(node, pod.namespace, pod.name)
        except NodeLockTimeout as exc:
            raise BindError(str(exc)) from exc
        except ApiError as exc:
            raise BindError(f"taking HAMi's lock on node {node} failed: {exc}") from exc
        try:
            yield
        except BaseException:
            self.locks.release(node, pod.namespace, pod.name)
            raise
        self.pace.taken(node)

    # ------------------------------------------------------------------ filter
    def nodes_to_avoid(self, names: Sequence[str], pods_to_start: PodsToStart
                       ) -> Iterator[set[str]]:
        """Every node whose agent has a pod to start, then those with more than the fewest,
        and so on: the plugin starts one pod at a time per node, so a bind to a node with
        pods to start waits for them."""
        self._this_filter.queued = None
        if len(names) < 2:
            return
        queued = self._this_filter.queued = pods_to_start()
        depths = sorted(set(queued.values()))
        if depths:
            yield set(queued)  # every count is at least the fewest
        for depth in depths[1:]:
            yield {node for node, count in queued.items() if count >= depth}

    def wait_for_turn(self, nodes: Sequence[str], pods_to_start: PodsToStart) -> str | None:
        """Wait until a bind to one of ``nodes`` would be served within the budget (three
        quarters of the bind's lock wait, itself under kube-scheduler's bind timeout), at
        most a few of the plugin's Allocates; the reason when none got there (filter then
        refuses them: kube-scheduler retries the pod on the node's next event, where a bind
        that waited too long would fail as a Warning Event)."""
        budget = 0.75 * self.locks.settings.wait_seconds
        deadline = self.pace.clock() + self.pace.turn_wait(self.turn_wait_bounds)
        read, self._this_filter.queued = self._this_filter.queued, None
        while True:
            room = self.pace.room(budget)
            queued = read if read is not None else pods_to_start()
            read = None  # waiting: read afresh
            ahead = min(queued[node] for node in nodes)
            if ahead <= room:
                return None
            left = deadline - self.pace.clock()
            if left <= 0:
                return (f"HAMi's device plugin has {ahead} pods to start on this node, about "
                        f"{self.pace.seconds:.1f}s each: a bind would wait past its timeout; "
                        f"retried when it starts them")
            with self._changed:
                self._changed.wait(min(left, 0.1))

    def _tell_changed(self) -> None:
        with self._changed:
            self._changed.notify_all()

    def answer(self, nodes: list[str]) -> list[str]:
        """Tied nodes answered by the first (kube-scheduler's order starts at a node it moves
        on each cycle): held at once, the filters that follow leave that node to its bind,
        where kube-scheduler's choice among ties would reach the picture only with the
        bind, after a burst of filters had chosen the same node and queued at its lock."""
        return nodes[:1]

    # ------------------------------------------------------------------ inventory
    def describe(self, annotations: Mapping[str, str]) -> Inventory | None:
        """The register annotation's cards, with HAMi's pair scores (``hami.io/node-nvidia-
        score``) as their links when the node has them: multi-card containers then take the
        best-connected cards among those the policy leaves equal."""
        return with_links(super().describe(annotations), annotations)

    # ------------------------------------------------------------------ start
    def adopt(self) -> None:
        try:
            adopt_placed_pods(self.api, self.vocabulary, self.flavor)
        except ApiError as exc:
            logger.warning("adopting pods another HAMi scheduler placed failed: %s", exc)

    # ------------------------------------------------------------------ the waiting list
    def node_seen(self, node: str, annotations: Mapping[str, str], version: str) -> None:
        with self._waiting_lock:
            self.waiting.node_seen(node, annotations)
        self.locks.watched(node, version, annotations)
        if self.flavor.lock_key not in annotations:
            self.locks.released(node)
            self.pace.released(node)
        self._tell_changed()

    def node_gone(self, node: str) -> None:
        with self._waiting_lock:
            self.waiting.node_gone(node)
        self.pace.forget(node)
        self._tell_changed()

    def pod_seen(self, uid: str, pod: Mapping[str, Any]) -> None:
        with self._waiting_lock:
            self.waiting.seen(uid, pod)
        self._tell_changed()

    def pod_gone(self, uid: str) -> None:
        with self._waiting_lock:
            self.waiting.gone(uid)
        self._tell_changed()

    def waiting_by_node(self) -> Counter[str]:
        with self._waiting_lock:
            return self.waiting.by_node()
