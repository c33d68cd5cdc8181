"""Run the openb scheduling-quality replay and write CSVs (then the report: plots + tables).

Usage (from the repository root)::

    .venv/bin/python -m bench.openb --full             # every trace x policy x 10 seeds
    .venv/bin/python -m bench.openb --small            # one trace, one seed, small cluster
    .venv/bin/python -m bench.openb --traces default --policies fgd fgd-ff --seeds 42 43

Two scheduler profiles (what the replay does in kube-scheduler's place):

- ``paper`` (default): the authors' simulator — equal scores go to the first node in a fixed,
  seeded order, and CPU-only pods are placed by the policy under test (when it can score
  them; otherwise first fit in that order; random for the random policy). This is the setting
  of the published numbers.
- ``kube``: stock kube-scheduler defaults — equal scores at random (``selectHost``), CPU-only
  pods by NodeResourcesFit LeastAllocated, GPU pods by the raw policy score alone.
- ``deployed``: the shipped path (:class:`bench.openb.replay.Deployed`): every pod scored by
  kube-scheduler's integer LeastAllocated + BalancedAllocation, random ties, the allocator's
  live workload mix; a GPU pod only among the nodes the policy scores best (the extender's
  filter), a CPU-only pod also by the CPU-only entry's scaled 0..10 times its weight (10)
  (``--extender prioritize`` with ``--extender-weight`` and ``--scaling``, ``--mix``,
  ``--cpu-only-weight`` vary it).
"""

from __future__ import annotations

import argparse
import csv
import logging
import math
import os
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from multiprocessing import get_context
from pathlib import Path

from allocator.ranking.policies import REGISTRY
from allocator.ranking.policies.base import SCALINGS
from bench.openb.replay import MAX_ARRIVED_PERCENT, Classes, CpuPods, Deployed, Replay, Ties
from bench.openb.trace import (
    MILLI,
    SEEDS,
    TRACES,
    TraceNode,
    load_nodes,
    load_pods,
    repo_root,
    typical_pods,
    workload_sequence,
)

logger = logging.getLogger("bench.openb")

#: Policies shipped in the registry, in report order.
POLICIES: tuple[str, ...] = ("random", "spread", "binpack", "fgd", "fgd-ff", "fgd-cpu")
PROFILES: dict[str, tuple[CpuPods, Ties]] = {
    "paper": ("policy", "ordered"),
    "kube": ("least", "random"),
    "deployed": ("least", "random"),
}
#: The shipped path's settings: the extender's weight and scaling in the shipped
#: KubeSchedulerConfiguration and ``allocator.ranking.policies.scaled``, the live mix.
SHIPPED = Deployed()
#: ``--small``: nodes kept (every k-th of the trace's node list) and pods replayed.
SMALL_NODES = 150


@dataclass(frozen=True)
class Task:
    trace: str
    policy: str
    seeds: tuple[int, ...]
    profile: str
    nodes_kept: int = 0
    max_pods: int = 0
    #: overrides of the profile's scheduler behaviour (ablations)
    cpu_pods: CpuPods | None = None
    ties: Ties | None = None
    #: profile ``deployed``: the shipped path's settings
    deployed: Deployed | None = None
    #: every card's split count (HAMi's ``deviceSplitCount``); 0: none, as in the trace
    split_count: int = 0


@dataclass(frozen=True)
class SeedResult:
    trace: str
    policy: str
    profile: str
    seed: int
    pods: int
    placed: int
    failed_gpu_pods: int
    failed_cpu_pods: int
    seconds: float
    capacity_gpus: int
    curve: tuple[float, ...]
    final_allocated_pct: float
    problems: tuple[str, ...]


def pick_nodes(nodes: Sequence[TraceNode], keep: int) -> list[TraceNode]:
    """Every k-th node (a deterministic sample with the same mix of node types)."""
    if keep <= 0 or keep >= len(nodes):
        return list(nodes)
    step = len(nodes) / keep
    return [nodes[int(i * step)] for i in range(keep)]


def run_task(task: Task) -> list[SeedResult]:
    nodes = pick_nodes(load_nodes(), task.nodes_kept)
    if task.split_count:
        nodes = [replace(n, split_count=task.split_count) for n in nodes]
    pods = load_pods(task.trace)
    typical = typical_pods(pods)
    capacity = MILLI * sum(n.gpus for n in nodes)
    cpu_pods, ties = PROFILES["deployed" if task.deployed else task.profile] if (
        task.deployed or task.profile in PROFILES) else PROFILES["paper"]
    cpu_pods, ties = task.cpu_pods or cpu_pods, task.ties or ties
    classes = Classes()  # shared by the seeds of this task: most node states recur
    out = []
    for seed in task.seeds:
        seq = workload_sequence(pods, seed, capacity)
        if task.max_pods:
            seq = seq[: task.max_pods]
        replay = Replay(nodes, REGISTRY[task.policy], typical, trace=task.trace,
                        cpu_pods=cpu_pods, ties=ties, classes=classes, deployed=task.deployed)
        start = time.perf_counter()
        res = replay.run(seq, seed)
        seconds = time.perf_counter() - start
        final = float(res.allocated[-1]) / capacity * 100 if len(seq) else 0.0
        out.append(SeedResult(task.trace, task.policy, task.profile, seed, res.pods, res.placed,
                              res.failed_gpu_pods, res.failed_cpu_pods, seconds,
                              capacity // MILLI, tuple(res.curve()), final,
                              tuple(res.problems)))
    return out


def _cost(task: Task) -> float:
    """Rough relative cost, to start the slow tasks first."""
    per_policy = {"fgd": 4.0, "fgd-ff": 4.0, "fgd-cpu": 6.0, "spread": 1.5, "random": 1.2,
                  "binpack": 1.0}
    return per_policy.get(task.policy, 2.0) * len(task.seeds)


def run_tasks(tasks: Sequence[Task], jobs: int) -> list[SeedResult]:
    ordered = sorted(tasks, key=_cost, reverse=True)
    results: list[SeedResult] = []
    start = time.perf_counter()
    if jobs <= 1:
        iterator: Iterable[list[SeedResult]] = map(run_task, ordered)
        for done, batch in enumerate(iterator, 1):
            results.extend(batch)
            _progress(done, len(ordered), batch, start)
        return results
    with get_context("fork").Pool(jobs) as pool:
        for done, batch in enumerate(pool.imap_unordered(run_task, ordered), 1):
            results.extend(batch)
            _progress(done, len(ordered), batch, start)
    return results


def _progress(done: int, total: int, batch: list[SeedResult], start: float) -> None:
    if not batch:
        return
    b = batch[0]
    at100 = [r.curve[100] for r in batch if not math.isnan(r.curve[100])]
    mean100 = sum(at100) / len(at100) if at100 else math.nan
    logger.info("[%d/%d] %s %s %s: %d seeds, %.0fs, alloc@100%% %.2f (elapsed %.0fs)",
                done, total, b.profile, b.trace, b.policy, len(batch),
                sum(r.seconds for r in batch), mean100, time.perf_counter() - start)


# ----------------------------------------------------------------------------- output

STEPS = [str(k) for k in range(MAX_ARRIVED_PERCENT + 1)]


def write_results(results: Sequence[SeedResult], out: Path, suffix: str) -> tuple[Path, Path]:
    """Per-seed curves + run statistics, and the seed-averaged curves."""
    out.mkdir(parents=True, exist_ok=True)
    per_seed = out / f"allocation_{suffix}.csv"
    mean = out / f"allocation_{suffix}_mean.csv"
    runs = out / f"runs_{suffix}.csv"
    rows = sorted(results, key=lambda r: (r.profile, r.trace, r.policy, r.seed))
    with per_seed.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["profile", "trace", "policy", "seed", *STEPS])
        for r in rows:
            w.writerow([r.profile, r.trace, r.policy, r.seed, *(_fmt(v) for v in r.curve)])
    groups: dict[tuple[str, str, str], list[SeedResult]] = {}
    for r in rows:
        groups.setdefault((r.profile, r.trace, r.policy), []).append(r)
    with mean.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["profile", "trace", "policy", "seeds", *STEPS])
        for (profile, trace, policy), rs in groups.items():
            w.writerow([profile, trace, policy, len(rs),
                        *(_fmt(_nanmean([r.curve[k] for r in rs]))
                          for k in range(MAX_ARRIVED_PERCENT + 1))])
    with runs.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["profile", "trace", "policy", "seed", "pods", "placed", "failed_gpu_pods",
                    "failed_cpu_pods", "seconds", "capacity_gpus", "final_allocated_pct",
                    "problems"])
        for r in rows:
            w.writerow([r.profile, r.trace, r.policy, r.seed, r.pods, r.placed,
                        r.failed_gpu_pods, r.failed_cpu_pods, f"{r.seconds:.2f}",
                        r.capacity_gpus, f"{r.final_allocated_pct:.3f}",
                        "; ".join(r.problems)])
    return per_seed, mean


def _nanmean(values: Sequence[float]) -> float:
    vals = [v for v in values if not math.isnan(v)]
    return sum(vals) / len(vals) if vals else math.nan


def _fmt(v: float) -> str:
    return "" if math.isnan(v) else f"{v:.3f}"


# ----------------------------------------------------------------------------- CLI


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.openb", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--full", action="store_true",
                      help="every trace and policy, seeds 42..51, profile paper; plus the "
                           "kube profile on the default trace")
    mode.add_argument("--small", action="store_true",
                      help=f"default trace, seed 42, every {SMALL_NODES}-node sample, "
                           "policies random and fgd (the smoke test's setting)")
    p.add_argument("--traces", nargs="+", default=["default"], choices=TRACES)
    p.add_argument("--policies", nargs="+", default=list(POLICIES), choices=sorted(REGISTRY))
    p.add_argument("--seeds", nargs="+", type=int, default=list(SEEDS))
    p.add_argument("--profile", choices=sorted(PROFILES), default="paper")
    p.add_argument("--cpu-pods", choices=["least", "most", "policy"], default=None,
                   help="override the profile: how CPU-only pods are placed")
    p.add_argument("--ties", choices=["random", "ordered"], default=None,
                   help="override the profile: how equal scores are broken")
    p.add_argument("--extender", choices=["filter-best", "prioritize"],
                   default=SHIPPED.extender,
                   help="profile deployed: the extender's filter passes only the nodes the "
                        "policy scores best (filter-best, shipped), or every node that fits "
                        "and prioritize adds its weighted scores (prioritize)")
    p.add_argument("--extender-weight", type=int, default=SHIPPED.extender_weight,
                   help="profile deployed, --extender prioritize: the extender's weight")
    p.add_argument("--cpu-only-weight", type=int, default=SHIPPED.cpu_only_weight,
                   help="profile deployed: weight of the CPU-only scoring entry "
                        "(0: not configured)")
    p.add_argument("--scaling", choices=sorted(SCALINGS), default=SHIPPED.scaling,
                   help="profile deployed: raw scores -> the extender's 0..10")
    p.add_argument("--mix", choices=["live", "oracle"],
                   default="live" if SHIPPED.live_mix else "oracle",
                   help="profile deployed: the allocator's live mix or the trace's typical pods")
    p.add_argument("--mix-refresh", type=int, default=SHIPPED.mix_refresh,
                   help="profile deployed: GPU pods between two published live mixes")
    p.add_argument("--nodes", type=int, default=0,
                   help="keep only this many nodes (every k-th); 0 = all 1,213")
    p.add_argument("--max-pods", type=int, default=0, help="replay only a prefix of the pods")
    p.add_argument("--split-count", type=int, default=0,
                   help="cap every card at this many holders, as HAMi's deviceSplitCount "
                        "(its chart's default: 10); 0 = no cap, as in the trace")
    p.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    p.add_argument("--out", type=Path, default=repo_root() / "bench" / "results" / "openb")
    p.add_argument("--tag", default="", help="file suffix (default: the profile, or 'full')")
    p.add_argument("--no-report", action="store_true", help="skip plots and tables")
    return p


def tasks_for(args: argparse.Namespace) -> list[Task]:
    if args.full:
        tasks = [Task(t, p, tuple(SEEDS), "paper") for t in TRACES for p in POLICIES]
        tasks += [Task("default", p, tuple(SEEDS), "kube") for p in POLICIES]
        return tasks
    if args.small:
        return [Task("default", p, (42,), args.profile, SMALL_NODES)
                for p in ("random", "fgd")]
    profile = args.profile
    deployed = None
    if profile == "deployed":
        deployed = Deployed(args.extender, args.extender_weight, args.cpu_only_weight,
                            args.scaling, args.mix == "live", args.mix_refresh)
        profile = deployed_label(deployed)
    elif args.cpu_pods or args.ties:
        cpu, ties = PROFILES[profile]
        profile = f"cpu-{args.cpu_pods or cpu}/ties-{args.ties or ties}"
    if args.split_count:
        profile = f"{profile}-split{args.split_count}"
    return [Task(t, p, tuple(args.seeds), profile, args.nodes, args.max_pods,
                 args.cpu_pods, args.ties, deployed, args.split_count)
            for t in args.traces for p in args.policies]


def deployed_label(d: Deployed) -> str:
    """The profile column of a deployed-mode run: ``deployed`` for the shipped settings."""
    if d == SHIPPED:
        return "deployed"
    parts: list[str] = ([d.extender] if d.extender == SHIPPED.extender
                        else [f"w{d.extender_weight}", d.scaling])
    parts.append("live" if d.live_mix else "oracle")
    if d.live_mix and d.mix_refresh != SHIPPED.mix_refresh:
        parts.append(f"r{d.mix_refresh}")
    if d.cpu_only_weight != SHIPPED.cpu_only_weight:
        parts.append(f"cpu{d.cpu_only_weight}")
    return "deployed-" + "-".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s",
                        stream=sys.stderr)
    tasks = tasks_for(args)
    suffix = args.tag or ("full" if args.full else ("small" if args.small else
                                                     tasks[0].profile.replace("/", "_")))
    start = time.perf_counter()
    results = run_tasks(tasks, args.jobs)
    elapsed = time.perf_counter() - start
    per_seed, mean = write_results(results, args.out, suffix)
    logger.info("%d runs in %.0fs wall (%d jobs); wrote %s and %s", len(results), elapsed,
                args.jobs, per_seed, mean)
    bad = [r for r in results if r.problems]
    for r in bad:
        logger.error("%s %s seed %d: %s", r.trace, r.policy, r.seed, "; ".join(r.problems))
    if not args.no_report:
        from bench.openb.report import write_report

        write_report(mean, args.out, suffix)
    return 1 if bad else 0
