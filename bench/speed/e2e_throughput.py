"""End to end: pods/s that the real kube-scheduler v1.34.4 schedules onto many fake nodes,
without Tessera (whole cards as a plain extended resource; CPU-only pods) and with it
(webhook + extender), and the CPU every control-plane process spends doing it.

Every run uses the dev-cluster harness (devcluster) with the same nodes, pods and
scheduler configuration: the shipped manifests/scheduler/kube-scheduler-config.yaml
(percentageOfNodesToScore 100, both extender entries) with the dev cluster's
clientConnection (qps 200 / burst 400); the baselines have no extenders. Modes:

- ``baseline``: ``Options(webhook=False, allocator=False)``; nodes advertise
  ``example.com/gpu: 8``; each pod asks ``example.com/gpu: 1``; the scheduler's own
  NodeResourcesFit decides and its DefaultBinder binds;
- ``whole``: the harness's full setup; nodes advertise 8 cards through ``elasticgpu.io``;
  each pod asks ``elasticgpu.io/gpu-core: 100`` (one whole card), the webhook rewrites it at
  CREATE, and the scheduler calls the allocator's filter and bind (mutual TLS), and the
  CPU-only entry's prioritize when filter leaves it more than one node;
- ``share25``: as ``whole``, each pod asking a quarter card (``gpu-core: 25``,
  ``gpu-memory: 4096`` of 16,384 MiB);
- ``share25-baseline``: a reference, not the issue's method: no extenders, the nodes of
  ``whole``; each pod asks what a ``share25`` pod asks (``gpu-core: 25``, ``gpu-memory:
  4096``), which the scheduler's NodeResourcesFit counts against the nodes' totals as plain
  extended resources: what these pods cost kube-scheduler alone (two extended resources a
  pod, against the baseline's one). Its ratio is against ``baseline``;
- ``hami``: as ``share25`` on a cluster of the ``hami`` agent profile (webhook and allocator
  with ``--agent-profile=hami``; nodes advertise HAMi's ``nvidia.com/gpu`` vGPUs), each pod
  asking HAMi's own quarter card (``nvidia.com/gpu: 1``, ``gpucores: 25``, ``gpumem: 4096``);
  every bind takes HAMi's node lock, which the dev cluster's HAMi node stand-in
  (devcluster/hami_node.py) releases after its Allocate; a node's next bind waits for that
  (docs/hami.md). The stand-in fleet runs as ``--standin-processes`` processes (default 2,
  devcluster/hami_fleet.py, the nodes sharded among them; 0: a thread of this process): one
  process for 1,000 nodes fell behind, and the run measured it rather than Tessera. Its CPU
  is not counted. Its ratio is against ``share25`` of the same run;
- ``cpu-baseline``: no extenders, the nodes of ``whole``; each pod requests ``cpu: 100m``
  and nothing else; the scheduler filters, scores and binds alone;
- ``cpu-only``: the same pods and nodes with the full setup: the webhook is not called
  (its matchConditions), the scheduler calls the allocator's ``prioritize-cpu-only`` for each
  pod over every node and binds itself. Its ratio and added CPU are against
  ``cpu-baseline``: the cost of the shipped CPU-only scoring entry;
- ``floor``: as ``whole``, but the allocator's port is served by the floor extender
  (bench/speed/floor_extender.py: filter answers the first node, bind creates the Binding
  through the allocator's API client; no picture, watches or Events) on the allocator's
  serving stack (granian): what serving the calls and the Binding cost, without Tessera's work;
- ``floor-gunicorn``: the floor extender served as the webhook is (gunicorn's asyncio worker,
  Python's ``ssl``), the allocator's stack before issue 13's tenth pass: a reference row.

Method: the scheduler is stopped while the nodes and all pods are created (pod creation,
including admission, is not part of the number) and until the control plane has settled (no
node written besides its status for 10 s: kube-controller-manager's TTL controller
re-annotates every node as the cluster grows, a long-running cluster does not;
``settle_s``), then started again; a raw watch on the
namespace records when each pod first shows ``spec.nodeName``. Throughput = pods bound
between the 10th and 90th percentile of bind times / that interval (start-up and tail
excluded); the overall rate (all pods / first-to-last) is reported too. CPU: user + system
seconds of each component's process group (``/proc``) from the scheduler's start until
:data:`SETTLE_S` after the last bind, per 1,000 pods (``components_cores``: all of them over
that window's length, the cores they kept busy; ``cpu_stolen_share``: the share of the
machine's CPU time in that window that the host of this virtual machine took, which slows a
run without showing in any component's CPU); *added* is a mode's total minus the
baseline's of the same repeat. ``--repeat N`` runs every mode N times (interleaved) and
reports medians. ``filter_ms_mean`` and ``bind_ms_mean`` are the allocator's own mean time
inside each verb over the run (its ``tessera_allocator_verb_seconds``). ``sched_*`` are
kube-scheduler's own (its /metrics after the run): the mean of its scheduling algorithm, the
one-pod-at-a-time part of each cycle (``sched_algorithm_ms_mean``), of the plugins' extension
points in it (``sched_plugins_ms_mean``), of the rest, mostly the extenders' calls
(``sched_rest_ms_mean``), and the algorithm's share of the time from the scheduler's start
to the last bind (``sched_algorithm_share``). ``calls_cpu_only``
is how often the allocator answered ``prioritize-cpu-only`` in the run, ``filters_per_pod``
how many filters it answered per pod bound, ``binds_refused`` how many binds it refused
(kube-scheduler then schedules the pod again),
``tls_connections_per_pod`` how many TLS connections it began per pod bound (its /metrics;
kube-scheduler keeps at most two idle connections per extender, and opens more while filter
and binds overlap). ``allocator_threads_s_per_1k`` splits the allocator's CPU in the same
window by thread (``/proc`` per thread, named by ``py-spy dump``): on granian (the
allocator's server) ``Dummy`` are granian's threads that run the verbs, ``body`` the body
readers, ``other`` granian's Rust threads (TLS, HTTP; py-spy names no Python thread there);
on gunicorn (``floor-gunicorn``) ``MainThread`` is the event loop (TLS, HTTP, filter
answered inline) and ``request`` the bind threads; ``sync-pods`` the pod watch
(``watch-bound-pods`` too before issue 13's seventh pass), ``watch-nodes`` the node watch,
``events`` the Events. ``tls_connections_per_pod`` is there only when the server counts them
(``floor-gunicorn``: granian does not).

Usage: ``.venv/bin/python -m bench.speed.e2e_throughput [--nodes 1000] [--pods 2000]
[--repeat 3] [--modes baseline whole share25 share25-baseline cpu-baseline cpu-only]
[--py-spy DIR] [--pprof DIR [--pprof-seconds 20]]``: ``--pprof`` takes CPU profiles of
kube-scheduler and kube-apiserver (Go's ``/debug/pprof``) from the scheduler's start, for the
profile of where the control plane's time goes.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from bench.speed.cluster import (
    BindWatch,
    admin_context,
    allocator_counters,
    cpu_seconds,
    in_parallel,
)
from bench.speed.common import (
    Timed,
    cpu_by_thread_name,
    histogram_totals,
    machine_cpu_ticks,
    metrics_text,
    percentile,
    print_table,
    python_thread_names,
    settle,
    stolen_share,
    thread_cpu_seconds,
    worker_pid,
    write_results,
)
from bench.speed.floor_extender import serve_in_allocators_place
from devcluster.binaries import ensure_binaries
from devcluster.cluster import DevCluster
from devcluster.nodes import GpuNodeSpec, create_nodes, uniform
from devcluster.options import Options
from devcluster.workloads import container, ensure_namespace, make_pod
from tessera.agent_profiles import AgentProfile

NAMESPACE = "e2e-bench"
PLAIN = "example.com/gpu"


@dataclass(frozen=True)
class Mode:
    #: Tessera's webhook and allocator run, and the scheduler has the shipped extenders.
    tessera: bool
    #: The mode this one's ratio and added CPU are measured against.
    baseline: str
    #: What each pod's one container asks.
    limits: dict[str, str] = field(default_factory=dict)
    requests: dict[str, str] = field(default_factory=dict)
    #: Nodes advertise their cards as ``example.com/gpu`` (no Tessera resources asked).
    plain_gpus: bool = False
    #: The allocator's port is served by the floor extender (bench/speed/floor_extender.py)
    #: on this server (its ``--server``: ``granian`` or ``gunicorn``) instead of the allocator.
    floor_server: Literal["granian", "gunicorn"] | None = None
    #: The cluster's node agent (the hami profile also runs the HAMi node stand-in).
    agent_profile: AgentProfile = AgentProfile.ELASTIC


MODES: dict[str, Mode] = {
    "baseline": Mode(False, "baseline", limits={PLAIN: "1"}, plain_gpus=True),
    "whole": Mode(True, "baseline", limits={"elasticgpu.io/gpu-core": "100"}),
    "share25": Mode(True, "baseline", limits={"elasticgpu.io/gpu-core": "25",
                                              "elasticgpu.io/gpu-memory": "4096"}),
    "share25-baseline": Mode(False, "baseline", limits={"elasticgpu.io/gpu-core": "25",
                                                        "elasticgpu.io/gpu-memory": "4096"}),
    "hami": Mode(True, "share25", limits={"nvidia.com/gpu": "1", "nvidia.com/gpucores": "25",
                                          "nvidia.com/gpumem": "4096"},
                 agent_profile=AgentProfile.HAMI),
    "cpu-baseline": Mode(False, "cpu-baseline", requests={"cpu": "100m"}),
    "cpu-only": Mode(True, "cpu-baseline", requests={"cpu": "100m"}),
    "floor": Mode(True, "baseline", limits={"elasticgpu.io/gpu-core": "100"},
                  floor_server="granian"),
    "floor-gunicorn": Mode(True, "baseline", limits={"elasticgpu.io/gpu-core": "100"},
                           floor_server="gunicorn"),
}
#: Seconds after the last bind still counted as CPU of the run (watch events of the last
#: binds, KWOK marking the last pods running): the same in every mode.
SETTLE_S = 3.0
#: Verbs whose mean time inside the allocator (its verb_seconds histogram) a row reports as
#: ``<verb>_ms_mean``: filter lies on kube-scheduler's one-pod-at-a-time cycle, bind not.
VERBS_TIMED = ("filter", "bind")
COMPONENTS = ["etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kwok",
              "allocator", "webhook"]
COLUMNS = ["mode", "run", "bound", "p10_p90_pods_per_s", "overall_pods_per_s",
           "first_to_last_s", "ratio_vs_baseline", "cpu_total_s_per_1k",
           "cpu_added_s_per_1k", "cpu_allocator_s_per_1k", "calls_cpu_only",
           "tls_connections_per_pod", "filter_ms_mean", "bind_ms_mean", "filters_per_pod",
           "binds_refused"]


#: kube-scheduler's extension points that run inside its scheduling algorithm (v1.34.4
#: ``schedule_one.go``, ``SchedulePod``); the rest of the algorithm's time is mostly the
#: extenders' filter and prioritize calls.
ALGORITHM_POINTS = ("PreFilter", "Filter", "PreScore", "Score")


def _scheduler_cycle(dev: DevCluster) -> dict[str, Timed]:
    """:func:`cycle_totals` of kube-scheduler's /metrics, read as the admin (its counters
    begin at its start, the timed window's start); none, said on stderr, when it cannot be
    read or parsed (the run's other columns are kept)."""
    try:
        return cycle_totals(metrics_text(f"127.0.0.1:{dev.control_plane.scheduler_port}",
                                         admin_context(dev)))
    except (OSError, ValueError) as exc:  # unreachable, or not Prometheus text (a refusal)
        print(f"kube-scheduler's /metrics not read: {exc}", file=sys.stderr)
        return {}


def cycle_totals(text: str) -> dict[str, Timed]:
    """From kube-scheduler's Prometheus ``text``: the calls and seconds of its scheduling
    algorithm (``algorithm``: the part of each pod's cycle that runs one pod at a time,
    plugins' filter and score and the extenders' filter and prioritize), and of each of
    :data:`ALGORITHM_POINTS` in it (every status added up)."""
    cycle = histogram_totals(text, "scheduler_scheduling_algorithm_duration_seconds",
                             lambda _labels: "algorithm")
    cycle.update(histogram_totals(
        text, "scheduler_framework_extension_point_duration_seconds",
        lambda labels: p if (p := labels.get("extension_point")) in ALGORITHM_POINTS else None))
    return cycle


#: The columns :func:`cycle_columns` makes.
CYCLE_COLUMNS = ("sched_algorithm_ms_mean", "sched_plugins_ms_mean", "sched_rest_ms_mean",
                 "sched_algorithm_share")


def cycle_columns(cycle: dict[str, Timed], busy_s: float) -> dict[str, float]:
    """A row's columns of kube-scheduler's algorithm (:func:`cycle_totals`): its mean per
    call, the mean of its plugins' part and of the rest (mostly the extenders' calls), and the
    share of ``busy_s`` (from the scheduler's start to the last bind) it took."""
    calls, total = cycle.get("algorithm", (0.0, 0.0))
    if not calls:
        return {}
    plugins = sum(cycle[point][1] for point in ALGORITHM_POINTS if point in cycle)
    return {"sched_algorithm_ms_mean": round(1000 * total / calls, 2),
            "sched_plugins_ms_mean": round(1000 * plugins / calls, 2),
            "sched_rest_ms_mean": round(1000 * (total - plugins) / calls, 2),
            "sched_algorithm_share": round(total / busy_s, 2) if busy_s > 0 else 0.0}


def _start_py_spy(dev: DevCluster, out: Path) -> subprocess.Popen[bytes] | None:
    """py-spy sampling the allocator (master and worker) into ``out`` (collapsed stacks).
    Only samples of the thread holding the GIL count (``--gil``): Python at work, not threads
    waiting for a socket (py-spy's idle detection misses those without pausing the process)."""
    exe = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    pid = dev.services.allocator.pid
    out.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([exe, "record", "--pid", str(pid), "--subprocesses", "--rate",
                             "200", "--gil", "--format", "raw", "--output", str(out),
                             "--nonblocking"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # attached before the scheduler starts
    return proc


#: Tries of ``--pprof`` while a component still forbids it (0.2 s apart).
PPROF_ATTEMPTS = 50


def _start_pprof(dev: DevCluster, seconds: int, out: Path) -> list[threading.Thread]:
    """Threads taking a ``seconds``-long CPU profile of kube-scheduler and kube-apiserver
    (``/debug/pprof/profile``, on by default in both; asked as the admin) into
    ``out``-<component>.pprof, from now."""
    cp = dev.control_plane
    context = admin_context(dev)
    ports = {"kube-scheduler": cp.scheduler_port, "kube-apiserver": cp.apiserver_port}
    out.parent.mkdir(parents=True, exist_ok=True)

    def take(component: str) -> None:
        url = f"https://127.0.0.1:{ports[component]}/debug/pprof/profile?seconds={seconds}"
        for _attempt in range(PPROF_ATTEMPTS):
            try:
                with urllib.request.urlopen(url, timeout=seconds + 30,
                                            context=context) as response:
                    Path(f"{out}-{component}.pprof").write_bytes(response.read())
                return
            except urllib.error.HTTPError as exc:
                # kube-scheduler answers /healthz before its delegated authentication has
                # read the client CA: until then the admin is anonymous (403)
                if exc.code != 403:
                    raise
                time.sleep(0.2)
        raise RuntimeError(f"{component}: /debug/pprof still forbidden")

    started = [threading.Thread(target=take, args=(c,), daemon=True) for c in ports]
    for t in started:
        t.start()
    return started


def run_mode(mode: str, nodes: int, pods: int, threads: int, timeout: float,
             profile: Path | None = None, pprof: Path | None = None,
             pprof_seconds: int = 20, standin_processes: int = 2) -> dict[str, Any]:
    spec = MODES[mode]
    tessera = spec.tessera
    dev = DevCluster(ensure_binaries(), None,
                     Options(webhook=tessera, allocator=tessera,
                             agent_profile=spec.agent_profile,
                             hami_standin_processes=standin_processes))
    try:
        dev.start()
        dev.control_plane.stop_scheduler()  # nodes and pods first; scheduling is timed alone
        if spec.floor_server is not None:
            serve_in_allocators_place(dev, spec.floor_server)
        ensure_namespace(dev.core_v1(), NAMESPACE)
        specs: list[GpuNodeSpec] = [
            uniform(f"n{i:05d}", 8, "T4", 16384,
                    extra_resources={PLAIN: "8"} if spec.plain_gpus else {})
            for i in range(nodes)
        ]
        agent = dev.options.agent
        in_parallel(dev, specs, lambda core, part: create_nodes(core, part, dev.vocabulary, agent),
                    threads)
        def create(core: Any, names: list[str]) -> None:
            for name in names:
                pod = make_pod(name, [container("main", limits=spec.limits or None,
                                                requests=spec.requests or None)])
                core.create_namespaced_pod(NAMESPACE, pod)

        in_parallel(dev, [f"p{i:05d}" for i in range(pods)], create, threads)
        cp = dev.control_plane
        settled_s = settle(f"127.0.0.1:{cp.apiserver_port}", admin_context(dev))
        if tessera:
            # The allocator must know every node before the scheduler asks about them.
            time.sleep(2.0)
        watch = BindWatch(dev, NAMESPACE)
        # /metrics is read outside both the CPU window and the profile: at 1,000 nodes its
        # per-card series make it a large reply, which is the benchmark's, not the run's.
        counters_before = allocator_counters(dev) if tessera else {}
        spy = _start_py_spy(dev, profile) if tessera and profile is not None else None
        worker = worker_pid(dev.services.allocator.pid) if tessera else None
        threads_before = thread_cpu_seconds(worker) if worker is not None else {}
        cpu_before = cpu_seconds(dev)
        ticks_before = machine_cpu_ticks()
        t_start = time.perf_counter()  # the CPU window's start too
        dev.control_plane.start_scheduler()  # the configuration dev.start() ran
        # from the scheduler's first answer to /healthz: scheduling has begun
        profiling = _start_pprof(dev, pprof_seconds, pprof) if pprof is not None else []
        deadline = time.perf_counter() + timeout
        while len(watch.bound) < pods and time.perf_counter() < deadline:
            time.sleep(0.5)
        time.sleep(SETTLE_S)
        cpu_after = cpu_seconds(dev)
        ticks_after = machine_cpu_ticks()
        cpu_window_s = time.perf_counter() - t_start
        threads_after = thread_cpu_seconds(worker) if worker is not None else {}
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(timeout=60)
        for t in profiling:
            t.join(timeout=pprof_seconds + 60)
        watch.stop.set()
        times = sorted(watch.bound.values())
        per_1k = 1000 / max(1, len(times))
        row: dict[str, Any] = {"mode": mode, "nodes": nodes, "pods": pods, "bound": len(times),
                               "settle_s": settled_s}
        if worker is not None:
            counters = allocator_counters(dev)

            def during(key: str) -> float:
                return counters.get(key, 0.0) - counters_before.get(key, 0.0)

            row["calls_cpu_only"] = int(during("prioritize-cpu-only_count"))
            row["filters_per_pod"] = round(during("filter_count") / max(1, len(times)), 3)
            row["binds_refused"] = int(during("binds_error"))
            for verb in VERBS_TIMED:
                if calls := during(f"{verb}_count"):
                    row[f"{verb}_ms_mean"] = round(1000 * during(f"{verb}_seconds") / calls, 2)
            if "tls_connections" in counters:  # counted by floor-gunicorn's server only
                # less 1: the connection this read of /metrics came on
                row["tls_connections_per_pod"] = round(
                    (during("tls_connections") - 1) / max(1, len(times)), 3)
            by_thread = cpu_by_thread_name(threads_before, threads_after,
                                           python_thread_names(worker))
            row["allocator_threads_s_per_1k"] = {name: round(seconds * per_1k, 2)
                                                 for name, seconds in by_thread.items()}
        if times:
            row.update(cycle_columns(_scheduler_cycle(dev), times[-1] - t_start))
        if len(times) >= 10:
            p10, p90 = percentile(times, 0.10), percentile(times, 0.90)
            inside = sum(1 for t in times if p10 <= t <= p90)
            row["p10_p90_pods_per_s"] = round((inside - 1) / (p90 - p10), 1)
            row["overall_pods_per_s"] = round((len(times) - 1) / (times[-1] - times[0]), 1)
            row["first_to_last_s"] = round(times[-1] - times[0], 1)
            row["scheduler_start_to_first_s"] = round(times[0] - t_start, 1)
        total = 0.0
        for name in COMPONENTS:
            if name in cpu_after:
                used = cpu_after[name] - cpu_before.get(name, 0.0)
                row[f"cpu_{name.replace('-', '_')}_s_per_1k"] = round(used * per_1k, 2)
                total += used
        row["cpu_total_s_per_1k"] = round(total * per_1k, 2)
        row["components_cores"] = round(total / cpu_window_s, 2)
        row["cpu_stolen_share"] = stolen_share(ticks_before, ticks_after)
        return row
    finally:
        dev.stop()


def _thread_medians(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The median CPU of each allocator thread (group) over ``rows``, if they have them."""
    runs = [r["allocator_threads_s_per_1k"] for r in rows if "allocator_threads_s_per_1k" in r]
    if not runs:
        return {}
    names = sorted({name for run in runs for name in run})
    return {"allocator_threads_s_per_1k": {
        name: round(statistics.median(run.get(name, 0.0) for run in runs), 2)
        for name in names}}


def _median(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rows if r.get(key) is not None]
    return round(statistics.median(values), 3) if values else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=6, help="setup threads")
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--modes", nargs="+", choices=list(MODES),
                        default=["baseline", "whole", "share25"])
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs of every mode (interleaved); medians are reported")
    parser.add_argument("--py-spy", type=Path, default=None, metavar="DIR",
                        help="record the allocator with py-spy into DIR/<mode>-<run>.txt "
                             "(collapsed stacks)")
    parser.add_argument("--pprof", type=Path, default=None, metavar="DIR",
                        help="CPU profiles of kube-scheduler and kube-apiserver from the "
                             "scheduler's start into DIR/<mode>-<run>-<component>.pprof "
                             "(read with: go tool pprof -top FILE)")
    parser.add_argument("--pprof-seconds", type=int, default=20,
                        help="how long --pprof profiles (keep it inside the scheduling)")
    parser.add_argument("--standin-processes", type=int, default=2,
                        help="processes of the HAMi node stand-in fleet (hami mode; 0: a "
                             "thread of this process)")
    parser.add_argument("--stem", default="speed_e2e")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    for run in range(1, args.repeat + 1):
        batch = []
        for mode in args.modes:
            profile = None if args.py_spy is None else args.py_spy / f"{mode}-{run}.txt"
            pprof = None if args.pprof is None else args.pprof / f"{mode}-{run}"
            row = run_mode(mode, args.nodes, args.pods, args.threads, args.timeout, profile,
                           pprof, args.pprof_seconds, args.standin_processes)
            row["run"] = run
            batch.append(row)
        for r in batch:
            base = next((b for b in batch if b["mode"] == MODES[r["mode"]].baseline), None)
            if base and base.get("p10_p90_pods_per_s") and r.get("p10_p90_pods_per_s"):
                r["ratio_vs_baseline"] = round(
                    r["p10_p90_pods_per_s"] / base["p10_p90_pods_per_s"], 3)
            if base and r is not base:
                r["cpu_added_s_per_1k"] = round(
                    r["cpu_total_s_per_1k"] - base["cpu_total_s_per_1k"], 2)
        print_table(batch, COLUMNS)
        rows += batch
        write_results(args.stem + "_partial", rows, {"note": "rows so far"})
    cpu_columns = [f"cpu_{n.replace('-', '_')}_s_per_1k" for n in COMPONENTS]
    medians = []
    for mode in args.modes:
        mine = [r for r in rows if r["mode"] == mode]
        medians.append({"mode": mode, "run": f"median of {len(mine)}", **{
            key: _median(mine, key) for key in
            ["bound", "p10_p90_pods_per_s", "overall_pods_per_s", "first_to_last_s",
             "ratio_vs_baseline", "cpu_total_s_per_1k", "cpu_added_s_per_1k",
             "calls_cpu_only", "tls_connections_per_pod", "filter_ms_mean", "bind_ms_mean",
             "filters_per_pod", "binds_refused", *CYCLE_COLUMNS, *cpu_columns,
             "components_cores", "cpu_stolen_share"]},
            **_thread_medians(mine)})
    print()
    print_table(rows + medians, [*COLUMNS, "scheduler_start_to_first_s"])
    for m in medians:
        if "allocator_threads_s_per_1k" in m:
            split = ", ".join(f"{k} {v}" for k, v in sorted(
                m["allocator_threads_s_per_1k"].items(), key=lambda kv: -kv[1]))
            print(f"allocator CPU s / 1k by thread, {m['mode']} (median): {split}")
    print()
    print_table(medians, ["mode", "run", *cpu_columns, "components_cores", "cpu_stolen_share"])
    print()
    print_table(medians, ["mode", "run", *CYCLE_COLUMNS])
    write_results(args.stem, rows + medians, {
        "command": "python -m bench.speed.e2e_throughput " + " ".join(sys.argv[1:]),
        "control_plane": "etcd + kube-apiserver + kube-scheduler v1.34.4 on loopback "
                         "(devcluster), scheduler qps 200 / burst 400",
        "nodes": "8 cards x 16 GiB each (fake, no kubelet)",
        "pods": "one container; baseline one example.com/gpu; whole elasticgpu.io/gpu-core: "
                "100; share25 gpu-core 25 + gpu-memory 4096 (webhook + extender); "
                "share25-baseline the same, no extenders (a reference); "
                "cpu-baseline and cpu-only request cpu 100m only (cpu-only: the shipped "
                "prioritize-cpu-only entry; ratio and added CPU against cpu-baseline)",
        "cpu": "user+system s of each process group from the scheduler's start to "
               f"{SETTLE_S:g} s after the last bind, per 1,000 bound pods",
    })


if __name__ == "__main__":
    main()
