"""End to end: pods/s that the real kube-scheduler v1.34.4 schedules onto many fake nodes,
without Tessera (whole cards as a plain extended resource) and with it (webhook + extender).

Both runs use the dev-cluster harness (devcluster) with the same nodes, pods and
scheduler configuration: the shipped manifests/scheduler/kube-scheduler-config.yaml
(percentageOfNodesToScore 100), the dev cluster's clientConnection (qps 200 / burst 400), and
for the baseline no extenders:

- *baseline*: ``Options(webhook=False, allocator=False)``; nodes advertise
  ``example.com/gpu: 8``; each pod asks ``example.com/gpu: 1``; the scheduler's own
  NodeResourcesFit decides and its DefaultBinder binds;
- *tessera*: the harness's full setup; nodes advertise 8 cards through ``elasticgpu.io``;
  each pod asks ``elasticgpu.io/gpu-core: 100`` (one whole card), the webhook rewrites it at
  CREATE, and the scheduler calls the allocator's filter, prioritize and bind (mutual TLS).

Method: the scheduler is stopped while the nodes and all pods are created (pod creation,
including admission, is not part of the number), then started again; a raw watch on the
namespace records when each pod first shows ``spec.nodeName``. Throughput = pods bound
between the 10th and 90th percentile of bind times / that interval (start-up and tail
excluded); the overall rate (all pods / first-to-last) is reported too.

Usage: ``.venv/bin/python -m bench.speed.e2e_throughput [--nodes 1000] [--pods 2000]``
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench.speed.common import percentile, print_table, write_results
from devcluster.binaries import ensure_binaries
from devcluster.cluster import DevCluster, Options
from devcluster.nodes import GpuNodeSpec, create_nodes, uniform
from devcluster.workloads import container, ensure_namespace, make_pod

NAMESPACE = "e2e-bench"
PLAIN = "example.com/gpu"
COLUMNS = ["mode", "nodes", "pods", "bound", "p10_p90_pods_per_s", "overall_pods_per_s",
           "first_to_last_s", "ratio_vs_baseline"]


def _core(dev: DevCluster) -> Any:
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=str(dev.kubeconfig))  # type: ignore[no-untyped-call]
    return client.CoreV1Api(api)


def _parallel(dev: DevCluster, items: list[Any], work: Any, threads: int) -> None:
    chunks = [items[i::threads] for i in range(threads)]
    with ThreadPoolExecutor(threads) as pool:
        for f in [pool.submit(work, _core(dev), c) for c in chunks if c]:
            f.result()


class BindWatch:
    """Raw watch of the namespace's pods: first time each pod is seen with a node."""

    def __init__(self, dev: DevCluster) -> None:
        self.core = _core(dev)
        self.bound: dict[str, float] = {}
        self.stop = threading.Event()
        resp = self.core.list_namespaced_pod(NAMESPACE, _preload_content=False)
        self.rv = json.loads(resp.data)["metadata"]["resourceVersion"]
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self._watch()
        except Exception:
            if not self.stop.is_set():  # the API server going away at the end is expected
                raise

    def _watch(self) -> None:
        from kubernetes.watch.watch import iter_resp_lines

        while not self.stop.is_set():
            resp = self.core.list_namespaced_pod(
                NAMESPACE, watch=True, resource_version=self.rv, timeout_seconds=60,
                allow_watch_bookmarks=True, _preload_content=False)
            for line in iter_resp_lines(resp):  # type: ignore[no-untyped-call]
                now = time.perf_counter()
                event = json.loads(line)
                obj = event.get("object") or {}
                self.rv = (obj.get("metadata") or {}).get("resourceVersion", self.rv)
                name = (obj.get("metadata") or {}).get("name")
                if name and (obj.get("spec") or {}).get("nodeName") and name not in self.bound:
                    self.bound[name] = now
                if self.stop.is_set():
                    break


def run_mode(mode: str, nodes: int, pods: int, threads: int, timeout: float) -> dict[str, Any]:
    tessera = mode == "tessera"
    dev = DevCluster(ensure_binaries(), None,
                     Options(webhook=tessera, allocator=tessera))
    try:
        dev.start()
        dev.control_plane.stop_scheduler()  # nodes and pods first; scheduling is timed alone
        ensure_namespace(dev.core_v1(), NAMESPACE)
        specs: list[GpuNodeSpec] = [
            uniform(f"n{i:05d}", 8, "T4", 16384,
                    extra_resources={} if tessera else {PLAIN: "8"})
            for i in range(nodes)
        ]
        _parallel(dev, specs, lambda core, chunk: create_nodes(core, chunk, dev.vocabulary),
                  threads)
        limits = {"elasticgpu.io/gpu-core": "100"} if tessera else {PLAIN: "1"}

        def create(core: Any, names: list[str]) -> None:
            for name in names:
                pod = make_pod(name, [container("main", limits=limits)])
                core.create_namespaced_pod(NAMESPACE, pod)

        _parallel(dev, [f"p{i:05d}" for i in range(pods)], create, threads)
        if tessera:
            # The allocator must know every node before the scheduler asks about them.
            time.sleep(2.0)
        watch = BindWatch(dev)
        t_start = time.perf_counter()
        dev.control_plane.start_scheduler()  # the configuration dev.start() ran
        deadline = time.perf_counter() + timeout
        while len(watch.bound) < pods and time.perf_counter() < deadline:
            time.sleep(0.5)
        watch.stop.set()
        times = sorted(watch.bound.values())
        row: dict[str, Any] = {"mode": mode, "nodes": nodes, "pods": pods, "bound": len(times)}
        if len(times) >= 10:
            p10, p90 = percentile(times, 0.10), percentile(times, 0.90)
            inside = sum(1 for t in times if p10 <= t <= p90)
            row["p10_p90_pods_per_s"] = round((inside - 1) / (p90 - p10), 1)
            row["overall_pods_per_s"] = round((len(times) - 1) / (times[-1] - times[0]), 1)
            row["first_to_last_s"] = round(times[-1] - times[0], 1)
            row["scheduler_start_to_first_s"] = round(times[0] - t_start, 1)
        return row
    finally:
        dev.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=6, help="setup threads")
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--modes", nargs="+", default=["baseline", "tessera"])
    parser.add_argument("--stem", default="speed_e2e")
    args = parser.parse_args()
    rows = []
    for mode in args.modes:
        rows.append(run_mode(mode, args.nodes, args.pods, args.threads, args.timeout))
        print_table(rows[-1:], COLUMNS)
    base = next((r for r in rows if r["mode"] == "baseline"), None)
    for r in rows:
        if base and base.get("p10_p90_pods_per_s") and r.get("p10_p90_pods_per_s"):
            r["ratio_vs_baseline"] = round(r["p10_p90_pods_per_s"] / base["p10_p90_pods_per_s"], 3)
    print()
    print_table(rows, [*COLUMNS, "scheduler_start_to_first_s"])
    write_results(args.stem, rows, {
        "command": "python -m bench.speed.e2e_throughput " + " ".join(sys.argv[1:]),
        "control_plane": "etcd + kube-apiserver + kube-scheduler v1.34.4 on loopback "
                         "(devcluster), scheduler qps 200 / burst 400",
        "nodes": "8 cards x 16 GiB each (fake, no kubelet)",
        "pods": "one container, one whole card; baseline via example.com/gpu, tessera via "
                "elasticgpu.io/gpu-core: 100 through webhook + extender",
    })


if __name__ == "__main__":
    main()
