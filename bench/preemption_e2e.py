"""What card-aware preemption costs on a large cluster full of low-priority shares, end to end
(devcluster: the real kube-scheduler, webhook and allocator as processes, KWOK nodes).

The cluster: ``--nodes`` nodes of ``--cards`` T4 cards (16 GiB), every card shared by
``--shares`` pods of priority 1 (``100 / shares`` percent each, pinned to their node by
``kubernetes.io/hostname``), all bound before anything is timed; the allocator runs with
``--preemption=true``. Then, in one run:

1. **Preemptors** (preemption on): ``--preemptors`` pods of priority 100 asking one whole card,
   created one after the other (the next once the last is bound): the seconds from each
   create call to its bind (a raw watch of the namespace: the first version that shows
   ``spec.nodeName``; median, p90, max) and the victims evicted for each (the low pods gone
   between its create and its bind). Their filter calls include the preemption (the decision
   over every node, the list of pods it reads, the evictions, the nomination): the allocator's
   own ``tessera_allocator_verb_seconds{verb="filter"}`` over this phase (mean, and p99 as
   Prometheus' ``histogram_quantile`` reads its buckets: an upper bound within a bucket).
2. **Refusals, preemption on, then off** (the floor): ``--probes`` filter calls sent by this
   client as kube-scheduler sends them (the full Pod JSON the API server returns, every node's
   name, one kept-alive mutual-TLS connection), each for a new pod UID of priority 1 asking one
   whole card: every node refuses it and nothing can be preempted for it (every pod on the
   cluster is of priority 1, so nobody is evicted), which is what most refused GPU pods on a
   full cluster are. With preemption on, each such refusal also looks for a preemption (a
   fresh UID is never "looked at lately"); then the allocator is restarted without
   ``--preemption`` (same port, arguments, cluster) and the same calls are timed again:
   client-side latency median, p90, p99 of each.

Usage: ``.venv/bin/python -m bench.preemption_e2e [--nodes 1000] [--cards 2] [--shares 2]
[--preemptors 20] [--probes 100] [--stem preemption_e2e]``: prints a table and writes
bench/results/<stem>.json and .csv.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from bench.speed.cluster import (
    BindWatch,
    admin_context,
    core_v1,
    in_parallel,
    wait_allocator_records,
)
from bench.speed.common import Client, metrics_text, percentile, print_table, write_results
from devcluster import DevClusterError
from devcluster.binaries import ensure_binaries
from devcluster.cluster import DevCluster
from devcluster.nodes import create_nodes, uniform
from devcluster.options import Options
from devcluster.workloads import (
    container,
    create_priority_classes,
    ensure_namespace,
    get_object,
    make_pod,
)

NAMESPACE = "preemption-bench"
CARD_MIB = 16384
LOW, HIGH = ("bench-low", 1), ("bench-high", 100)
WHOLE = {"elasticgpu.io/gpu-core": "100"}
FILTER = "tessera_allocator_verb_seconds"


def node_name(index: int) -> str:
    return f"n{index:05d}"


def _priority_classes(dev: DevCluster) -> None:
    create_priority_classes(dev.api_client, [(name, value, True) for name, value in (LOW, HIGH)])


def _pod(name: str, limits: Mapping[str, str], klass: str,
         selector: Mapping[str, str]) -> dict[str, Any]:
    doc = make_pod(name, [container("main", limits=dict(limits))], node_selector=selector)
    doc["spec"]["priorityClassName"] = klass
    return doc


def _create(core: Any, pods: list[dict[str, Any]]) -> None:
    for pod in pods:
        core.create_namespaced_pod(NAMESPACE, pod)


def _wait(what: str, done: Any, timeout: float) -> None:
    deadline = time.perf_counter() + timeout
    while not done():
        if time.perf_counter() > deadline:
            raise DevClusterError(f"{what}: not within {timeout:g} s")
        time.sleep(0.2)


def filter_buckets(text: str) -> dict[float, float]:
    """The filter verb's cumulative bucket counts (upper bound -> count) in ``text``."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[float, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == f"{FILTER}_bucket" and s.labels.get("verb") == "filter":
                out[float(s.labels["le"])] = s.value
            elif s.name in (f"{FILTER}_sum", f"{FILTER}_count") and s.labels.get(
                    "verb") == "filter":
                out[-1.0 if s.name.endswith("_sum") else -2.0] = s.value
    return out


def histogram_p99_ms(before: Mapping[float, float], after: Mapping[float, float]
                     ) -> dict[str, float]:
    """Mean and p99 (Prometheus' ``histogram_quantile``: linear within the bucket) of the
    filter calls between two readings, in ms."""
    count = after.get(-2.0, 0.0) - before.get(-2.0, 0.0)
    if count <= 0:
        return {}
    total = after.get(-1.0, 0.0) - before.get(-1.0, 0.0)
    bounds = sorted(b for b in after if b >= 0)
    rank, below, lower = 0.99 * count, 0.0, 0.0
    p99 = float("inf")
    for bound in bounds:
        seen = after[bound] - before.get(bound, 0.0)
        if seen >= rank:
            inside = seen - below
            # beyond the last finite bound Prometheus answers that bound
            p99 = lower if bound == float("inf") else bound if inside <= 0 else (
                lower + (bound - lower) * (rank - below) / inside)
            break
        below, lower = seen, bound
    return {"filters": int(count), "filter_ms_mean": round(1000 * total / count, 1),
            "filter_ms_p99_hist": round(1000 * p99, 1)}


def _fill(dev: DevCluster, args: argparse.Namespace, watch: BindWatch) -> float:
    specs = [uniform(node_name(i), args.cards, "T4", CARD_MIB) for i in range(args.nodes)]
    agent = dev.options.agent
    in_parallel(dev, specs, lambda core, part: create_nodes(core, part, dev.vocabulary, agent),
                args.threads)
    share = {"elasticgpu.io/gpu-core": str(100 // args.shares)}
    fill = [_pod(f"f{i:05d}-{k}", share, LOW[0], {"kubernetes.io/hostname": node_name(i)})
            for i in range(args.nodes) for k in range(args.cards * args.shares)]
    started = time.perf_counter()
    in_parallel(dev, fill, _create, args.threads)
    names = {p["metadata"]["name"] for p in fill}
    _wait("every low-priority share bound", lambda: names <= watch.bound.keys(), args.timeout)
    return time.perf_counter() - started


def _low_alive(core: Any) -> set[str]:
    reply = core.list_namespaced_pod(NAMESPACE, _preload_content=False)
    pods = json.loads(reply.data)["items"]
    return {p["metadata"]["name"] for p in pods if p["metadata"]["name"].startswith("f")
            and not p["metadata"].get("deletionTimestamp")}


def _preemptors(dev: DevCluster, args: argparse.Namespace, watch: BindWatch
                ) -> dict[str, Any]:
    core = core_v1(dev)
    waits, victims = [], []
    before = filter_buckets(_allocator_metrics(dev))
    alive = _low_alive(core)
    for i in range(args.preemptors):
        name = f"high-{i:03d}"
        created = time.perf_counter()
        core.create_namespaced_pod(NAMESPACE, _pod(name, WHOLE, HIGH[0], {}))
        _wait(f"{name} bound", lambda n=name: n in watch.bound, args.timeout)
        waits.append(watch.bound[name] - created)
        now = _low_alive(core)
        victims.append(len(alive - now))
        alive = now
    row: dict[str, Any] = {
        "phase": "preemptors", "pods": len(waits),
        "create_to_bind_s_p50": round(statistics.median(waits), 2),
        "create_to_bind_s_p90": round(percentile(waits, 0.90), 2),
        "create_to_bind_s_max": round(max(waits), 2),
        "victims_per_preemption": round(statistics.mean(victims), 2),
        "victims_max": max(victims),
    }
    row.update(histogram_p99_ms(before, filter_buckets(_allocator_metrics(dev))))
    return row


def _allocator_metrics(dev: DevCluster) -> str:
    return metrics_text(f"127.0.0.1:{dev.services.allocator_port}", admin_context(dev))


def _probe_pod(dev: DevCluster) -> dict[str, Any]:
    """A priority-1 whole-card pod as the API server returns it (webhook annotations, spec
    defaults); it selects no node, so kube-scheduler never asks about it."""
    core = core_v1(dev)
    core.create_namespaced_pod(NAMESPACE, _pod("probe", WHOLE, LOW[0], {"bench/none": "x"}))
    return get_object(core.read_namespaced_pod, "probe", NAMESPACE)


def _probes(dev: DevCluster, pod: dict[str, Any], names: Sequence[str], count: int,
            phase: str) -> dict[str, Any]:
    client = Client(dev.services.allocator_port, admin_context(dev))
    took = []
    refused = 0
    try:
        for _ in range(count):
            pod["metadata"]["uid"] = str(uuid.uuid4())  # never "looked at lately"
            body = json.dumps({"Pod": pod, "Nodes": None, "NodeNames": list(names)}).encode()
            status, data, seconds = client.post("/scheduler/filter", body)
            if status != 200:
                raise DevClusterError(f"filter answered {status}: {data[:200]!r}")
            refused += not json.loads(data).get("NodeNames")
            took.append(1000 * seconds)
    finally:
        client.close()
    return {"phase": phase, "pods": count, "refused": refused,
            "filter_ms_p50": round(statistics.median(took), 1),
            "filter_ms_p90": round(percentile(took, 0.90), 1),
            "filter_ms_p99": round(percentile(took, 0.99), 1)}


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    dev = DevCluster(ensure_binaries(), None, Options(preemption=True))
    try:
        dev.start()
        ensure_namespace(dev.core_v1(), NAMESPACE)
        _priority_classes(dev)
        watch = BindWatch(dev, NAMESPACE)
        fill_s = _fill(dev, args, watch)
        wait_allocator_records(dev, args.nodes * args.cards * args.shares, args.timeout)
        rows = [_preemptors(dev, args, watch)]
        names = [node_name(i) for i in range(args.nodes)]
        pod = _probe_pod(dev)
        rows.append(_probes(dev, pod, names, args.probes, "refusals, preemption on"))
        argv = [a for a in dev.services.allocator_argv if a != "--preemption=true"]
        dev.services.replace_allocator(argv)  # waits for /readyz: its picture is synced
        rows.append(_probes(dev, pod, names, args.probes, "refusals, preemption off"))
        watch.stop.set()
        for row in rows:
            row.update(nodes=args.nodes, cards=args.cards, shares=args.shares,
                       fill_s=round(fill_s, 1))
        return rows
    finally:
        dev.stop()


COLUMNS = ["phase", "pods", "create_to_bind_s_p50", "create_to_bind_s_p90",
           "create_to_bind_s_max", "victims_per_preemption", "filters", "filter_ms_mean",
           "filter_ms_p99_hist", "refused", "filter_ms_p50", "filter_ms_p90", "filter_ms_p99"]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--cards", type=int, default=2)
    parser.add_argument("--shares", type=int, default=2, help="low-priority pods a card")
    parser.add_argument("--preemptors", type=int, default=20)
    parser.add_argument("--probes", type=int, default=100, help="filter calls a phase")
    parser.add_argument("--threads", type=int, default=6, help="setup threads")
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--stem", default="preemption_e2e")
    args = parser.parse_args(argv)
    if not (args.nodes > 0 and args.cards > 0 and 0 < args.shares <= 100
            and 0 < args.preemptors <= args.nodes * args.cards and args.probes > 0):
        parser.exit(2, "preemption bench: nodes, cards, shares (1-100), probes > 0; "
                       "preemptors 1..nodes x cards\n")
    started = time.time()
    rows = run(args)
    print_table(rows, COLUMNS)
    write_results(args.stem, rows, {"args": vars(args),
                                    "wall_s": round(time.time() - started, 1)})


if __name__ == "__main__":
    main()
