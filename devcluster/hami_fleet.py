"""The HAMi node stand-in (devcluster/hami_node.py) on every node of a dev cluster: one pod
watch serving every node's Allocate, in this process or sharded over several.

On a real cluster each node's plugin is its own process. At 1,000 nodes one Python process
serving them all shares one interpreter lock with its watch: the benchmark then measures the
stand-in, not Tessera (docs/hami.md, "Speed under the lock"). ``Options.hami_standin_processes``
runs the fleet as that many processes (``python -m devcluster.hami_fleet``), each serving the
nodes of its shard (:func:`shard_of`).

Usage: ``python -m devcluster.hami_fleet --kubeconfig FILE [--flavor hami] [--shard 0/4]
[--qps 5 --burst 10] [--preferred-allocation]``
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading
import time
import zlib
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from allocator.errors import ApiError
from allocator.hami.codec import FLAVORS, HAMI, Flavor, HamiFormatError
from allocator.ports import KubeApi
from devcluster.hami_node import HamiNode
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
    Allocate).

    With ``rate`` (HAMi's client rate, devcluster/plugin_client.py) each node's stand-in has
    its own rate-limited client and makes v2.10.0's requests: it finds the pod from the node
    lock, as the plugin's Allocate does when kubelet calls it, so Allocate takes as long as the
    plugin's."""

    def __init__(self, api: KubeApi, flavor: Flavor = HAMI, workers: int = 16,
                 preferred_allocation: bool = False, rate: ClientRate | None = None,
                 shard: tuple[int, int] = (0, 1)) -> None:
        self.api, self.flavor, self.workers = api, flavor, workers
        self.preferred_allocation = preferred_allocation
        self.rate = rate
        self.shard = shard
        self.served = 0
        self._nodes: dict[str, HamiNode | None] = {}
        self._done: set[str] = set()
        self._node_locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def mine(self, name: str) -> bool:
        index, shards = self.shard
        return shards <= 1 or shard_of(name, shards) == index

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

    def _serve(self, name: str, pod: Mapping[str, Any]) -> None:
        uid = pod["metadata"].get("uid", "")
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
                            if self.mine(pod["spec"]["nodeName"]):
                                pool.submit(self._serve, pod["spec"]["nodeName"], pod)
                    for kind, pod in self.api.watch_pods_by_field(selector, version,
                                                                  timeout_seconds):
                        if stop.is_set():
                            return
                        version = (pod.get("metadata") or {}).get("resourceVersion", version)
                        name = (pod.get("spec") or {}).get("nodeName", "")
                        if not name or not self.mine(name):
                            continue
                        if kind == "DELETED":
                            self._forget(name, pod)
                        else:
                            pool.submit(self._serve, name, pod)
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


def fleet_argv(kubeconfig: str, flavor: Flavor, shard: tuple[int, int],
               rate: ClientRate | None, preferred_allocation: bool) -> list[str]:
    """The arguments of one shard's process (after ``python -m devcluster.hami_fleet``)."""
    argv = ["--kubeconfig", kubeconfig, "--flavor", flavor.name,
            "--shard", f"{shard[0]}/{shard[1]}"]
    if rate is not None:
        argv += ["--qps", f"{rate.qps:g}", "--burst", str(rate.burst)]
    if preferred_allocation:
        argv.append("--preferred-allocation")
    return argv


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--flavor", default=HAMI.name, choices=sorted(FLAVORS))
    parser.add_argument("--shard", default="0/1", help="INDEX/COUNT")
    parser.add_argument("--qps", type=float, default=None)
    parser.add_argument("--burst", type=int, default=10)
    parser.add_argument("--preferred-allocation", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    index, count = (int(part) for part in args.shard.split("/"))
    from allocator.kube.client import KubeClient

    rate = ClientRate(args.qps, args.burst) if args.qps else None
    fleet = HamiFleet(KubeClient.from_config(args.kubeconfig), FLAVORS[args.flavor],
                      preferred_allocation=args.preferred_allocation, rate=rate,
                      shard=(index, count))
    stop = fleet.start()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    while not stop.is_set():
        time.sleep(0.5)


if __name__ == "__main__":
    main()
