"""What kube-scheduler's sampled node window costs GPU pods on a fragmented cluster: how often
the allocator must refuse every node of the window, and how much later the pods are bound,
with ``percentageOfNodesToScore`` below the shipped 100.

Below 100, kube-scheduler stops looking once it has found its share of nodes that pass its own
filters (v1.34.4 ``schedule_one.go``, ``numFeasibleNodesToFind``: 0 means ``50 - nodes/125``
percent, at least 5%, and never fewer than 100 nodes), and asks the extender about those only.
Its own filters judge a GPU by the node's sums (``gpu-core`` 400 on four cards); the allocator
judges it card by card. On a fragmented cluster a window can hold only nodes that fit by sums
and on no card, while nodes outside it fit: the allocator refuses the whole window, the pod
goes back to kube-scheduler's queue until the next cluster event (any event re-tries a pod an
extender refused, after its backoff: 1 s, doubling to 10 s) and the next try looks at the next
window (the window's start moves on by the nodes it looked at). With 100 every fitting node is
in every window, and no such refusal happens. docs/deploy.md ("``percentageOfNodesToScore``")
cites these runs.

The cluster, one per run (devcluster: the real kube-scheduler, webhook and allocator):
``--nodes`` nodes of ``--cards`` cards (16 GiB each); all but ``--good`` of them are filled
with one 60% pod on every card (each pinned to its node by ``kubernetes.io/hostname``): 40% is
left on each card, so a whole card fits by the node's sums (``--cards`` x 40 >= 100) and on
none of its cards. The ``--good`` nodes are left empty, placed ``contiguous`` (the last names:
kube-scheduler lists nodes in their names' order, and a node pool added at once has
neighbouring names) or ``spread`` (evenly among the others). Then, with kube-scheduler
stopped, ``--pods`` pods of one whole card each are created, and kube-scheduler started: the
run times each pod from that start to its bind (a raw watch), and reads kube-scheduler's
attempts by result (its ``scheduler_schedule_attempts_total``) and the allocator's filter calls.
Every whole-card pod must land on a good node (``on_fragmented`` counts those that did not:
a card handed out twice). ``--waiting N`` adds N whole-card pods that select the filled nodes
(a node label), created just before the timed ones: they fit there by the node's sums and on
no card, so kube-scheduler sends them to the allocator, which refuses them at every try, as
GPU pods queued on a full cluster are; the timed pods then show what those refusals cost
everybody else.

Usage: ``.venv/bin/python -m bench.speed.sampled_window [--nodes 1000] [--cards 4]
[--good 50] [--pods 150] [--layouts contiguous spread] [--percentages 100 0] [--waiting 0]
[--stem speed_sampled_window]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from bench.speed.cluster import (
    BindWatch,
    admin_context,
    allocator_counters,
    core_v1,
    in_parallel,
    wait_allocator_records,
)
from bench.speed.common import (
    counter_totals,
    metrics_text,
    percentile,
    print_table,
    write_results,
)
from devcluster import DevClusterError
from devcluster.binaries import Binaries, ensure_binaries
from devcluster.cluster import DevCluster
from devcluster.nodes import create_nodes, uniform
from devcluster.options import Options
from devcluster.workloads import container, ensure_namespace, make_pod

NAMESPACE = "sampled-window"
CARD_MIB = 16384
#: Node label of the filled nodes (the ``--waiting`` pods select it).
FILLED_LABEL = "tessera.bench/filled"
#: Each card of a filled node holds one such pod: 40% of it is left, on every card.
FILL_LIMITS = {"elasticgpu.io/gpu-core": "60", "elasticgpu.io/gpu-memory": "8192"}
WHOLE_LIMITS = {"elasticgpu.io/gpu-core": "100"}
#: kube-scheduler's floor of the window, and of its adaptive share (v1.34.4
#: ``schedule_one.go``: ``minFeasibleNodesToFind``, ``minFeasibleNodesPercentageToFind``).
MIN_WINDOW_NODES = 100
MIN_ADAPTIVE_PERCENT = 5

Layout = Literal["contiguous", "spread"]
LAYOUTS: tuple[Layout, ...] = ("contiguous", "spread")


def window_nodes(percentage: int, nodes: int) -> int:
    """How many nodes that pass its filters kube-scheduler looks for before it asks the
    extender, with ``percentageOfNodesToScore`` ``percentage`` (0: adaptive) among ``nodes``
    (v1.34.4 ``numFeasibleNodesToFind``)."""
    if nodes < MIN_WINDOW_NODES:
        return nodes
    share = percentage or max(MIN_ADAPTIVE_PERCENT, 50 - nodes // 125)
    return max(MIN_WINDOW_NODES, nodes * share // 100)


def good_nodes(nodes: int, good: int, layout: Layout) -> list[int]:
    """The indices of the nodes left empty: the last ``good`` (``contiguous``), or ``good``
    evenly spaced, the last node among them (``spread``)."""
    if not 0 < good <= nodes:
        raise ValueError(f"good nodes must be 1..{nodes}, not {good}")
    if layout == "contiguous":
        return list(range(nodes - good, nodes))
    return sorted(nodes - 1 - (i * nodes) // good for i in range(good))


def node_name(index: int) -> str:
    return f"n{index:05d}"


@dataclass(frozen=True)
class Case:
    nodes: int
    cards: int
    good: int
    layout: Layout
    pods: int
    #: kube-scheduler's ``percentageOfNodesToScore`` (0: adaptive).
    percentage: int
    #: Whole-card pods that only the filled nodes may take (module doc), created before the
    #: timed ones: GPU pods waiting for room, refused at every try.
    waiting: int = 0

    def __post_init__(self) -> None:
        if self.cards * 40 < 100:
            raise ValueError(f"{self.cards} cards at 40% free each do not fit a whole card by "
                             "the node's sums: nothing to refuse falsely")
        if not 0 < self.pods <= self.good * self.cards:
            raise ValueError(f"pods must be 1..{self.good * self.cards} (the good nodes' "
                             f"cards), not {self.pods}")
        good_nodes(self.nodes, self.good, self.layout)  # refuses a bad count
        if self.waiting < 0:
            raise ValueError(f"waiting pods must be 0 or more, not {self.waiting}")


def schedule_attempts(text: str) -> dict[str, int]:
    """kube-scheduler's scheduling attempts by result (``scheduled``, ``unschedulable``,
    ``error``), all profiles, from its Prometheus ``text``."""
    totals = counter_totals(text, "scheduler_schedule_attempts_total",
                            lambda labels: labels.get("result", ""))
    return {result: int(count) for result, count in totals.items()}


def waits_row(waits_s: Sequence[float]) -> dict[str, float]:
    """The seconds from kube-scheduler's start to each pod's bind: median, p90, last."""
    if not waits_s:
        return {}
    return {"wait_p50_s": round(statistics.median(waits_s), 2),
            "wait_p90_s": round(percentile(waits_s, 0.90), 2),
            "last_bound_s": round(max(waits_s), 2)}


def _create(core: Any, pods: list[dict[str, Any]]) -> None:
    for pod in pods:
        core.create_namespaced_pod(NAMESPACE, pod)


def _wait_bound(watch: BindWatch, names: set[str], timeout: float) -> None:
    deadline = time.perf_counter() + timeout
    while not names <= watch.bound.keys() and time.perf_counter() < deadline:
        time.sleep(0.2)


def run_case(case: Case, binaries: Binaries, threads: int = 6, timeout: float = 600.0
             ) -> dict[str, Any]:
    """One run of ``case`` on a dev cluster of its own (module doc): a row of results."""
    good = set(good_nodes(case.nodes, case.good, case.layout))
    dev = DevCluster(binaries, None, Options(nodes_to_score=case.percentage))
    try:
        dev.start()
        ensure_namespace(dev.core_v1(), NAMESPACE)
        specs = [uniform(node_name(i), case.cards, "T4", CARD_MIB,
                         labels={} if i in good else {FILLED_LABEL: "true"})
                 for i in range(case.nodes)]
        agent = dev.options.agent
        in_parallel(dev, specs, lambda core, part: create_nodes(core, part, dev.vocabulary, agent),
                    threads)
        watch = BindWatch(dev, NAMESPACE)
        fill = [make_pod(f"f{i:05d}-{card}", [container("main", limits=FILL_LIMITS)],
                         node_selector={"kubernetes.io/hostname": node_name(i)})
                for i in range(case.nodes) if i not in good for card in range(case.cards)]
        started = time.perf_counter()
        in_parallel(dev, fill, _create, threads)
        fill_names = {p["metadata"]["name"] for p in fill}
        _wait_bound(watch, fill_names, timeout)
        if missing := len(fill_names - watch.bound.keys()):
            raise DevClusterError(f"{missing} of {len(fill)} filling pods not bound within "
                                  f"{timeout:g} s; {dev.logs_hint()}")
        fill_s = time.perf_counter() - started
        dev.control_plane.stop_scheduler()  # the whole-card pods all wait for its start
        waiting = [make_pod(f"u{i:05d}", [container("main", limits=WHOLE_LIMITS)],
                            node_selector={FILLED_LABEL: "true"})
                   for i in range(case.waiting)]
        # ahead of the timed pods in kube-scheduler's queue (equal priority: first added first;
        # its first list of pods is in name order)
        in_parallel(dev, waiting, _create, threads)
        whole = [make_pod(f"w{i:05d}", [container("main", limits=WHOLE_LIMITS)])
                 for i in range(case.pods)]
        in_parallel(dev, whole, _create, threads)
        wait_allocator_records(dev, len(fill), timeout)  # its picture has every filled card
        counters_before = allocator_counters(dev)
        start = time.perf_counter()
        dev.control_plane.start_scheduler()  # the configuration dev.start() ran
        whole_names = {p["metadata"]["name"] for p in whole}
        _wait_bound(watch, whole_names, timeout)
        watch.stop.set()
        waits = [watch.bound[n] - start for n in whole_names if n in watch.bound]
        counters = allocator_counters(dev)
        attempts = schedule_attempts(metrics_text(
            f"127.0.0.1:{dev.control_plane.scheduler_port}", admin_context(dev)))
        placed = {p.metadata.name: p.spec.node_name for p in core_v1(dev).list_namespaced_pod(
            NAMESPACE).items if p.metadata.name in whole_names}
        good_names = {node_name(i) for i in good}
        filters = counters.get("filter_count", 0.0) - counters_before.get("filter_count", 0.0)
        return {
            **asdict(case), "window_nodes": window_nodes(case.percentage, case.nodes),
            "fill_s": round(fill_s, 1), "bound": len(waits),
            "on_fragmented": sum(1 for node in placed.values()
                                 if node and node not in good_names),
            **waits_row(waits),
            "attempts_scheduled": attempts.get("scheduled", 0),
            "attempts_unschedulable": attempts.get("unschedulable", 0),
            "attempts_error": attempts.get("error", 0),
            "filters_per_pod": round(filters / max(1, len(waits)), 2),
        }
    finally:
        dev.stop()


COLUMNS = ["layout", "percentage", "waiting", "window_nodes", "bound", "on_fragmented",
           "wait_p50_s", "wait_p90_s", "last_bound_s", "attempts_unschedulable",
           "filters_per_pod", "fill_s"]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--cards", type=int, default=4)
    parser.add_argument("--good", type=int, default=50, help="nodes left empty")
    parser.add_argument("--pods", type=int, default=150, help="whole-card pods")
    parser.add_argument("--layouts", nargs="+", choices=LAYOUTS, default=list(LAYOUTS))
    parser.add_argument("--percentages", nargs="+", type=int, default=[100, 0],
                        help="kube-scheduler's percentageOfNodesToScore, one run each "
                             "(0: adaptive)")
    parser.add_argument("--waiting", type=int, default=0,
                        help="whole-card pods only the filled nodes may take (they never "
                             "fit), created before the timed ones")
    parser.add_argument("--threads", type=int, default=6, help="setup threads")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--stem", default="speed_sampled_window")
    args = parser.parse_args(argv)
    try:
        cases = [Case(args.nodes, args.cards, args.good, layout, args.pods, percentage,
                      args.waiting)
                 for layout in args.layouts for percentage in args.percentages]
        for case in cases:
            Options(nodes_to_score=case.percentage)  # refuses outside 0-100 before any run
    except (ValueError, DevClusterError) as exc:
        parser.exit(2, f"sampled window: {exc}\n")
    binaries = ensure_binaries()
    meta = {
        "command": "python -m bench.speed.sampled_window " + " ".join(sys.argv[1:]),
        "cluster": f"{args.nodes} nodes x {args.cards} cards of {CARD_MIB} MiB; all but "
                   f"{args.good} filled with one 60% pod on every card",
        "pods": f"{args.pods} pods of one whole card (elasticgpu.io/gpu-core: 100), created "
                "while kube-scheduler was stopped; waits from its start",
    }
    rows = []
    for case in cases:
        rows.append(run_case(case, binaries, args.threads, args.timeout))
        print_table(rows[-1:], COLUMNS)
        write_results(args.stem + "_partial", rows, {**meta, "note": "rows so far"})
    print()
    print_table(rows, COLUMNS)
    write_results(args.stem, rows, meta)


if __name__ == "__main__":
    main()
