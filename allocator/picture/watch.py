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
from allocator.picture.resources import BOUND_ACTIVE_PODS, PodUsage, pod_usage
from allocator.picture.state import ClusterState
from allocator.ports import KubeApi, Obj, WatchEvent

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
    replace: Callable[[Iterable[Any], Any], None]
    upsert: Callable[[Obj], None]
    delete: Callable[[Obj], None]
    sleep: Callable[[float], None]
    stop: threading.Event
    #: Taken just before each list request, so ``replace`` can tell what is newer than it.
    mark: Callable[[], Any] = lambda: 0
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
               sleep: Callable[[float], None], *, bound_pods: bool,
               listed: Callable[[list[Obj]], None] = lambda _pods: None,
               ) -> tuple[Reflector, Reflector]:
    """The node reflector and the pod reflector over one state; ``listed`` gets the GPU pods
    of every pod list, after the state has them.

    The pod reflector watches one of two selections:

    - ``bound_pods`` (node CPU and memory on): every bound, non-terminated pod
      (:data:`BOUND_ACTIVE_PODS`, kube-scheduler's own selector), one watch feeding both
      pictures: every pod's requests to :class:`NodeResources`, and the pods with the GPU-pod
      label to the cards. A GPU pod's events are then read and decoded once, not once by a
      watch of GPU pods and again by a watch of bound pods. The list is reduced page by page
      (:func:`pod_usage`); only the GPU pods are kept whole.
    - otherwise the GPU pods by label alone.

    Either way the cards come from GPU-labelled pods only: allocation records are written
    only by our bind, and our bind labels every pod it binds, so the label selects every pod
    that holds cards, without reading every pod of the cluster. (A GPU pod holds cards only
    once bound, so the bound selection loses none; a pod that turns Succeeded or Failed
    leaves it as DELETED, which releases its cards as the label watch's MODIFIED does.)
    """
    nodes = Reflector(
        "nodes", api.list_nodes,
        lambda rv, t: api.watch_nodes(rv, t),
        lambda items, _since: state.replace_nodes(items), state.apply_node,
        lambda obj: state.remove_node((obj.get("metadata") or {}).get("name", "")),
        sleep, stop,
    )
    if bound_pods:
        return nodes, _bound_pods_reflector(api, state, stop, sleep, listed)
    selector = state.vocabulary.gpu_pod_selector

    def replace(items: Iterable[Obj], since: int) -> None:
        pods = list(items)
        state.replace_pods(pods, since)
        listed(pods)

    pods = Reflector(
        "GPU pods", lambda: api.list_pods(selector),
        lambda rv, t: api.watch_pods(selector, rv, t),
        replace, state.apply_pod, state.remove_pod,
        sleep, stop, mark=state.epoch,
    )
    return nodes, pods


def _bound_pods_reflector(api: KubeApi, state: ClusterState, stop: threading.Event,
                          sleep: Callable[[float], None],
                          listed: Callable[[list[Obj]], None]) -> Reflector:
    resources = state.resources
    label = state.vocabulary.gpu_pod_label

    def is_gpu_pod(pod: Obj) -> bool:
        meta = pod.get("metadata")
        labels = meta.get("labels") if isinstance(meta, dict) else None
        return isinstance(labels, dict) and labels.get(label) == "true"

    def reduce(pod: Obj) -> tuple[PodUsage | None, Obj | None]:
        return pod_usage(pod), (pod if is_gpu_pod(pod) else None)

    def mark() -> tuple[int, int]:
        return state.epoch(), resources.epoch()

    def replace(items: Iterable[tuple[PodUsage | None, Obj | None]],
                since: tuple[int, int]) -> None:
        reduced = list(items)
        gpu_pods = [pod for _usage, pod in reduced if pod is not None]
        state.replace_pods(gpu_pods, since[0])
        resources.replace_pods((usage for usage, _pod in reduced), since[1])
        listed(gpu_pods)

    def upsert(pod: Obj) -> None:
        resources.apply_pod(pod)
        if is_gpu_pod(pod):
            state.apply_pod(pod)

    def delete(pod: Obj) -> None:
        resources.remove_pod(pod)
        state.remove_pod(pod)

    return Reflector(
        "bound pods", lambda: api.list_pods_by_field(BOUND_ACTIVE_PODS, reduce),
        lambda rv, t: api.watch_pods_by_field(BOUND_ACTIVE_PODS, rv, t),
        replace, upsert, delete, sleep, stop, mark=mark,
    )


def initial_sync(api: KubeApi, state: ClusterState, nodes: Reflector, pods: Reflector,
                 sleep: Callable[[float], None], stop: threading.Event) -> None:
    """List nodes, then pods, retrying with backoff, then mark the state synced."""
    delay = nodes.backoff_initial
    while not stop.is_set():
        try:
            nodes.relist()
            pods.relist()
        except Exception as exc:
            logger.warning("initial list failed (%s); retrying in %.1fs", exc, delay)
            sleep(delay)
            delay = min(delay * 2, nodes.backoff_max)
            continue
        state.mark_synced()
        return
