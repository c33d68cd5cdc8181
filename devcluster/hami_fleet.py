"""The HAMi node stand-in (devcluster/hami_node.py) on every node of a dev cluster: one pod
watch serving every node's Allocate, in this process or over several.

On a real cluster each node's plugin is its own process, started by kubelet's call. At 1,000
nodes one Python process serving them all shares one interpreter lock with its watch: the
benchmark then measures the stand-in, not Tessera (docs/hami.md, "Speed under the lock").
``Options.hami_standin_processes`` runs the plugins as that many processes
(``python -m devcluster.hami_fleet``), each serving the nodes of its shard (:func:`shard_of`):
the one pod watch stays here and plays kubelet, telling a node's process which node has a pod
to start (a line on its stdin); the process's plugin finds the pod itself, as HAMi's
``Allocate`` does (from the node lock, else the node's pending pod). A watch per process was
tried first: each then decoded every pod's events, and four of them fell further behind than
one.

Usage: ``python -m devcluster.hami_fleet --kubeconfig FILE [--flavor hami] [--qps 5
--burst 10] [--preferred-allocation]``, node names on stdin.
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
import zlib
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from allocator.errors import ApiError
from allocator.hami.codec import FLAVORS, HAMI, Flavor, HamiFormatError
from allocator.ports import KubeApi
from devcluster.hami_node import HamiNode, waiting_on
from devcluster.plugin_client import ClientRate, RateLimitedApi

logger = logging.getLogger(__name__)


def shard_of(node: str, shards: int) -> int:
    """The shard that serves ``node`` (stable across processes)."""
    return zlib.crc32(node.encode()) % max(1, shards)


class HamiFleet:
    """The stand-in on every node of a HAMi cluster (of its shard), driven by one pod watch
    (the dev cluster runs it as the node agents of the hami and volcano-vgpu profiles): each
    pod that shows up bound and waiting is allocated by its node's stand-in, built from the
    node's register annotation when first needed; nodes in parallel (each node's plugin is
    its own process on a real cluster), one pod at a time per node (the plugin serialises its
    Allocate). With ``dispatch`` it only plays kubelet: a waiting pod's node is handed to
    ``dispatch`` (the node's process, :func:`serve_stdin`), once per pod.

    With ``rate`` (HAMi's client rate, devcluster/plugin_client.py) each node's stand-in has
    its own rate-limited client and makes v2.10.0's requests: it finds the pod from the node
    lock, as the plugin's Allocate does when kubelet calls it, so Allocate takes as long as the
    plugin's."""

    def __init__(self, api: KubeApi, flavor: Flavor = HAMI, workers: int = 16,
                 preferred_allocation: bool = False, rate: ClientRate | None = None,
                 dispatch: Callable[[str], None] | None = None) -> None:
        self.api, self.flavor, self.workers = api, flavor, workers
        self.preferred_allocation = preferred_allocation
        self.rate = rate
        self.dispatch = dispatch
        self.served = 0
        self._nodes: dict[str, HamiNode | None] = {}
        self._done: set[str] = set()
        self._node_locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def allocate_seconds(self) -> list[float]:
        """Every Allocate's duration so far, all nodes."""
        with self._guard:
            nodes = [n for n in self._nodes.values() if n is not None]
        return [s for n in nodes for s in list(n.allocate_seconds)]

    def node(self, name: str) -> HamiNode | None:
        """The stand-in of node ``name`` (None: it registered no device)."""
        with self._guard:
            if name in self._nodes and self._nodes[name] is not None:
                return self._nodes[name]
        obj = self.api.get_node(name) or {}
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        text = annotations.get(self.flavor.register_key)
        found = None
        if text:
            try:
                from allocator.hami.register import parse_register
                api = self.api if self.rate is None else RateLimitedApi(self.api, self.rate)
                found = HamiNode(api, name, parse_register(text, self.flavor), self.flavor,
                                 self.preferred_allocation, hami_requests=self.rate is not None)
            except HamiFormatError as exc:
                logger.warning("stand-in %s: register annotation unreadable: %s", name, exc)
        with self._guard:
            self._nodes[name] = found
            self._node_locks.setdefault(name, threading.Lock())
        return found

    def serve_event(self, name: str, pod: Mapping[str, Any]) -> None:
        """A watch event of a pod bound to node ``name``."""
        uid = pod["metadata"].get("uid", "")
        if self.dispatch is not None:
            if waiting_on(pod, name, self.flavor) and self._first(uid):
                self.dispatch(name)
                with self._guard:
                    self.served += 1
            return
        node = self.node(name)
        if node is None or not node.waiting(pod):
            return
        with self._node_locks[name]:
            with self._guard:
                if uid in self._done:
                    return  # a second event of the same wait
                self._done.add(uid)
            try:
                if self.rate is None:
                    node.allocate(pod)
                elif node.allocate_next() is None:
                    return  # served already, as the lock's pod of an earlier event
            except ApiError as exc:
                logger.warning("stand-in %s: %s", name, exc)
                return
            with self._guard:
                self.served += 1

    def _first(self, uid: str) -> bool:
        with self._guard:
            if uid in self._done:
                return False
            self._done.add(uid)
            return True

    def serve_node(self, name: str) -> None:
        """kubelet's call for a pod of node ``name``: its plugin's Allocate, one at a time per
        node, the pod found as the plugin finds it."""
        node = self.node(name)
        if node is None:
            return
        with self._node_locks[name]:
            try:
                if node.allocate_next() is not None:
                    with self._guard:
                        self.served += 1
            except ApiError as exc:
                logger.warning("stand-in %s: %s", name, exc)

    def _forget(self, name: str, pod: Mapping[str, Any]) -> None:
        """kubelet frees a deleted pod's devices."""
        with self._guard:
            node = self._nodes.get(name)
        if node is not None:
            with self._node_locks[name]:
                node.kubelet.forget(str(pod["metadata"].get("uid", "")))

    def run(self, stop: threading.Event, timeout_seconds: int = 60) -> None:
        selector = "spec.nodeName!="
        with ThreadPoolExecutor(self.workers, thread_name_prefix="hami-standin") as pool:
            version = ""
            while not stop.is_set():
                try:
                    if not version:
                        pods, version = self.api.list_pods_by_field(selector, lambda p: p)
                        for pod in pods:
                            pool.submit(self.serve_event, pod["spec"]["nodeName"], pod)
                    for kind, pod in self.api.watch_pods_by_field(selector, version,
                                                                  timeout_seconds):
                        if stop.is_set():
                            return
                        version = (pod.get("metadata") or {}).get("resourceVersion", version)
                        name = (pod.get("spec") or {}).get("nodeName", "")
                        if not name:
                            continue
                        if kind == "DELETED":
                            self._forget(name, pod)
                        elif self.dispatch is not None:
                            self.serve_event(name, pod)  # a line to a pipe: no thread needed
                        else:
                            pool.submit(self.serve_event, name, pod)
                except ApiError as exc:
                    logger.warning("stand-in fleet watch: %s", exc)
                    version = ""
                    stop.wait(0.5)

    def start(self) -> threading.Event:
        """Run in a daemon thread; set the returned event to stop it."""
        stop = threading.Event()
        threading.Thread(target=self.run, args=(stop,), name="hami-standins",
                         daemon=True).start()
        return stop


def fleet_argv(kubeconfig: str, flavor: Flavor, rate: ClientRate | None,
               preferred_allocation: bool) -> list[str]:
    """The arguments of one shard's process (after ``python -m devcluster.hami_fleet``)."""
    argv = ["--kubeconfig", kubeconfig, "--flavor", flavor.name]
    if rate is not None:
        argv += ["--qps", f"{rate.qps:g}", "--burst", str(rate.burst)]
    if preferred_allocation:
        argv.append("--preferred-allocation")
    return argv


def serve_stdin(fleet: HamiFleet, lines: Any = None) -> None:
    """Serve each node named on a line of ``lines`` (stdin), nodes in parallel, until EOF."""
    with ThreadPoolExecutor(fleet.workers, thread_name_prefix="hami-plugin") as pool:
        for line in lines if lines is not None else sys.stdin:
            name = line.strip()
            if name:
                pool.submit(fleet.serve_node, name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--flavor", default=HAMI.name, choices=sorted(FLAVORS))
    parser.add_argument("--qps", type=float, default=None)
    parser.add_argument("--burst", type=int, default=10)
    parser.add_argument("--preferred-allocation", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    from allocator.kube.client import KubeClient

    rate = ClientRate(args.qps, args.burst) if args.qps else None
    fleet = HamiFleet(KubeClient.from_config(args.kubeconfig), FLAVORS[args.flavor],
                      preferred_allocation=args.preferred_allocation, rate=rate)
    serve_stdin(fleet)


if __name__ == "__main__":
    main()
