"""List-then-watch loops that keep :class:`ClusterState` current (I/O through the adapter).

Each :class:`Reflector` lists once (replacing its part of the state), then watches from the
list's resourceVersion, resuming from the last seen resourceVersion whenever the stream ends
or drops. A 410 Gone means that version is compacted away: relist. Any other error backs off
exponentially (capped) and resumes. Time is injected (``sleep``) so tests run instantly.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from allocator.errors import Gone
from allocator.ports import KubeApi, Obj, WatchEvent
from allocator.resources import BOUND_ACTIVE_PODS, NodeResources, pod_usage
from allocator.state import ClusterState

logger = logging.getLogger(__name__)

#: Server-side watch timeout; the stream then ends cleanly and we resume.
WATCH_TIMEOUT_SECONDS = 300


@dataclass
class Reflector:
    kind: str
    list_fn: Callable[[], tuple[list[Any], str]]
    watch_fn: Callable[[str, int], Iterator[WatchEvent]]
    #: Replaces the state with a list (of objects, or of what ``list_fn`` reduced them to);
    #: gets the :attr:`mark` taken before the list call.
    replace: Callable[[Iterable[Any], int], None]
    upsert: Callable[[Obj], None]
    delete: Callable[[Obj], None]
    sleep: Callable[[float], None]
    stop: threading.Event
    #: Taken just before each list request, so ``replace`` can tell what is newer than it.
    mark: Callable[[], int] = lambda: 0
    backoff_initial: float = 0.5
    backoff_max: float = 30.0

    resource_version: str = ""
    relists: int = 0

    def relist(self) -> None:
        since = self.mark()
        items, rv = self.list_fn()
        self.replace(items, since)
        self.resource_version = rv
        self.relists += 1
        logger.info("listed %d %s at resourceVersion %s", len(items), self.kind, rv)

    def watch_once(self) -> None:
        """Consume one watch stream until it ends (normally or with an exception)."""
        for kind, obj in self.watch_fn(self.resource_version, WATCH_TIMEOUT_SECONDS):
            if self.stop.is_set():
                return
            if kind in ("ADDED", "MODIFIED"):
                self.upsert(obj)
            elif kind == "DELETED":
                self.delete(obj)
            rv = (obj.get("metadata") or {}).get("resourceVersion")
            if rv:  # BOOKMARK events only move the resourceVersion
                self.resource_version = rv

    def step(self, delay: float) -> float:
        """One list-or-watch round; returns the next backoff delay."""
        try:
            if not self.resource_version:
                self.relist()
            self.watch_once()
            return self.backoff_initial
        except Gone:
            logger.info("%s watch expired (410 Gone): relisting", self.kind)
            self.resource_version = ""
            return self.backoff_initial
        except Exception as exc:
            logger.warning("%s watch failed (%s); retrying in %.1fs", self.kind, exc, delay)
            self.sleep(delay)
            return min(delay * 2, self.backoff_max)

    def run(self) -> None:
        delay = self.backoff_initial
        while not self.stop.is_set():
            delay = self.step(delay)


def reflectors(api: KubeApi, state: ClusterState, stop: threading.Event,
               sleep: Callable[[float], None]) -> tuple[Reflector, Reflector]:
    """The node and GPU-pod reflectors over one state.

    Pods are watched by the GPU-pod label only: the state is rebuilt from allocation records,
    which only our bind writes, and our bind labels every pod it binds — so the selector sees
    every pod that holds cards, without watching every pod of the cluster.
    """
    selector = state.vocabulary.gpu_pod_selector
    nodes = Reflector(
        "nodes", api.list_nodes,
        lambda rv, t: api.watch_nodes(rv, t),
        lambda items, _since: state.replace_nodes(items), state.apply_node,
        lambda obj: state.remove_node((obj.get("metadata") or {}).get("name", "")),
        sleep, stop,
    )
    pods = Reflector(
        "pods", lambda: api.list_pods(selector),
        lambda rv, t: api.watch_pods(selector, rv, t),
        state.replace_pods, state.apply_pod, state.remove_pod,
        sleep, stop, mark=state.epoch,
    )
    return nodes, pods


def resource_reflector(api: KubeApi, resources: NodeResources, stop: threading.Event,
                       sleep: Callable[[float], None]) -> Reflector:
    """The requests of every bound, non-terminated pod (:mod:`allocator.resources`): a lean
    reflector apart from the GPU pods', selected by fields, reduced to ``(node, CPU,
    memory)`` page by page as the list arrives, so the pods of a big cluster are never held
    as objects."""
    return Reflector(
        "bound pods", lambda: api.list_pods_by_field(BOUND_ACTIVE_PODS, pod_usage),
        lambda rv, t: api.watch_pods_by_field(BOUND_ACTIVE_PODS, rv, t),
        resources.replace_pods, resources.apply_pod, resources.remove_pod,
        sleep, stop, mark=resources.epoch,
    )


def initial_sync(api: KubeApi, state: ClusterState, nodes: Reflector, pods: Reflector,
                 sleep: Callable[[float], None], stop: threading.Event,
                 *more: Reflector) -> None:
    """List nodes, then pods (and ``more``, e.g. :func:`resource_reflector`), retrying with
    backoff, then mark the state synced."""
    delay = nodes.backoff_initial
    while not stop.is_set():
        try:
            nodes.relist()
            pods.relist()
            for reflector in more:
                reflector.relist()
        except Exception as exc:
            logger.warning("initial list failed (%s); retrying in %.1fs", exc, delay)
            sleep(delay)
            delay = min(delay * 2, nodes.backoff_max)
            continue
        state.mark_synced()
        return
