"""The live replay: openb through the dev cluster's real kube-scheduler, webhook and allocator.

``.venv/bin/python -m bench.openb.live --trace default --seed 42``

The openb cluster (1,213 nodes) becomes KWOK nodes with the trace's CPU and memory, and cards
described as GPU Feature Discovery labels (``nvidia.com/gpu.product|memory|count``, read by
allocator/picture/inventory.py) with the card totals as allocatable ``gpu-core``/``gpu-memory``. The
pods of :func:`bench.openb.trace.workload_sequence` (CPU-only pods included) are created in
that order as bare Pods, each asking for the trace's request the way a user writes it (the
mapping of :func:`bench.openb.trace.gpu_request`): a share of one card as
``elasticgpu.io/gpu-percent`` (the same percent of compute and memory), whole cards as
``elasticgpu.io/gpu-core: 100·k``, allowed models as the ``elasticgpu.io/gpu-model``
annotation; CPU and memory as requests. Everything else is the product as shipped: the
webhook normalises, kube-scheduler runs manifests/scheduler/kube-scheduler-config.yaml (its
GPU entry and its entry scoring CPU-only pods; ``--no-score-cpu-only-pods`` deletes the
second, ``--percentage-of-nodes-to-score P`` replaces its 100), the allocator runs with its
default flags.

Pods go in until the arrived GPU request reaches 100% of the cluster's cards (the pod that
crosses it included); the result is the share of the cards allocated then, read from the API
(the allocation records of the bound pods, through kubectl_tessera.report).

Fidelity with the simulator (bench/openb/replay.py: one pod at a time, a pod that fits
nowhere is dropped, no departures): at most ``--in-flight`` pods (default 1) are between
creation and their outcome. A pod is done when it is bound, or when the scheduler marks it
``Unschedulable`` — then it is deleted at once, so it never takes room later that the
simulator would not give it. With 1 in flight every pod sees the cluster its predecessors
left, exactly as in the simulator; more in flight is faster, and as pods are created in order
by one thread and kube-scheduler takes them first in first out, the order is kept, but a pod
may be scored before its predecessor's bind has reached the allocator.

Every number printed is measured; the last line is
``allocated NN.NN% of GPUs at 100% arrived (...)``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from bench.openb.trace import (
    MILLI,
    TRACES,
    TraceError,
    TraceNode,
    TracePod,
    load_nodes,
    load_pods,
    workload_sequence,
)
from devcluster import DevClusterError
from devcluster.nodes import Card, GpuNodeSpec, Inventory
from devcluster.workloads import unschedulable_message
from kubectl_tessera.report import card_usage, overcommitments
from tessera.vocabulary import WHOLE_CARD_PERCENT, Vocabulary, decode_allocation

logger = logging.getLogger("bench.openb.live")

NAMESPACE: Final = "openb"
#: The node lifecycle controller's grace period for the live replay's nodes: their 1,213
#: Leases are renewed every 10 s (~120 writes a second on a 2-core machine that also runs the
#: replay), and 120 s leaves a dozen missed renewals before a node is tainted.
NODE_GRACE_SECONDS: Final = 120
#: No outcome (bound or unschedulable) for this long: the run stops with an error.
STALL_SECONDS: Final = 300.0
#: How often the run checks that every node is still Ready and untainted.
NODE_CHECK_SECONDS: Final = 60.0


class LiveReplayError(Exception):
    """The live replay cannot go on (an API error, a stall, a broken invariant)."""


# ---------------------------------------------------------------------------- pure parts


def node_spec(node: TraceNode) -> GpuNodeSpec:
    """A trace node as a fake GPU node: its CPU, memory and cards, GFD labels."""
    return GpuNodeSpec(node.name, tuple(Card(c.model, c.memory_mib) for c in node.cards),
                       inventory=Inventory.GFD, cpu=f"{node.cpu_milli}m",
                       memory=f"{node.memory_mib}Mi")


def pod_manifest(pod: TracePod, name: str, vocabulary: Vocabulary) -> dict[str, Any]:
    """A trace pod as a user writes it (the request of :func:`bench.openb.trace.gpu_request`).

    A share of one card: ``gpu-percent`` (the same percent of compute and memory of whichever
    card is chosen); whole cards: ``gpu-core: 100·k``; allowed models: the model annotation."""
    domain = vocabulary.domain
    limits: dict[str, str] = {}
    annotations: dict[str, str] = {}
    if pod.num_gpu == 1 and pod.gpu_milli < MILLI:
        limits[f"{domain}/gpu-percent"] = str(pod.gpu_milli // 10)
    elif pod.num_gpu >= 1:
        limits[vocabulary.core_resource] = str(WHOLE_CARD_PERCENT * pod.num_gpu)
    models = [m for m in pod.gpu_spec.split("|") if m]
    if pod.num_gpu and models:
        annotations[vocabulary.model_annotation] = "|".join(dict.fromkeys(models))
    resources: dict[str, Any] = {"requests": {"cpu": f"{pod.cpu_milli}m",
                                              "memory": f"{pod.memory_mib}Mi"}}
    if limits:
        resources["limits"] = limits
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations,
                     "labels": {"app.kubernetes.io/part-of": "openb-live"}},
        "spec": {
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                            "resources": resources}],
            # KWOK deletes a pod once it is terminating; nothing to wait for.
            "terminationGracePeriodSeconds": 0,
        },
    }


def arrivals(sequence: Sequence[TracePod], capacity_milli: int,
             max_pods: int | None = None) -> list[TracePod]:
    """The pods that arrive until the GPU request reaches 100% of capacity (the crossing pod
    included), at most ``max_pods``."""
    out: list[TracePod] = []
    arrived = 0
    for pod in sequence:
        if arrived >= capacity_milli or (max_pods is not None and len(out) >= max_pods):
            break
        out.append(pod)
        arrived += pod.gpu_request_milli
    return out


def pod_name(index: int) -> str:
    return f"p{index:06d}"


@dataclass
class Outcomes:
    """What became of each created pod, from the watch (thread-safe)."""

    bound: dict[str, str] = field(default_factory=dict)
    unschedulable: dict[str, str] = field(default_factory=dict)
    changed: threading.Condition = field(default_factory=threading.Condition)
    last_change: float = field(default_factory=time.monotonic)

    def see(self, pod: Mapping[str, Any]) -> None:
        name = str((pod.get("metadata") or {}).get("name") or "")
        node = (pod.get("spec") or {}).get("nodeName")
        with self.changed:
            if node and name not in self.bound:
                self.bound[name] = str(node)
                self.unschedulable.pop(name, None)
            elif not node and name not in self.unschedulable and name not in self.bound:
                message = unschedulable_message(pod)
                if message is None:
                    return
                self.unschedulable[name] = message
            else:
                return
            self.last_change = time.monotonic()
            self.changed.notify_all()

    def settled(self, name: str) -> bool:
        return name in self.bound or name in self.unschedulable


@dataclass(frozen=True)
class Tally:
    """The end state read from the API (pure result of :func:`tally`)."""

    capacity_milli: int
    allocated_milli: int
    gpu_pods_bound: int
    problems: list[str]


def tally(nodes: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]],
          requested: Mapping[str, int], vocabulary: Vocabulary) -> Tally:
    """Allocated milli-GPU from the allocation records of the bound pods, and the invariants:
    no card over-committed, every bound GPU pod carries a record for its node, and each
    record holds exactly the GPU the trace pod asked for (``requested``: pod name ->
    milli-GPU, for the GPU pods)."""
    usage = card_usage(nodes, pods, vocabulary)
    problems = overcommitments(usage)
    capacity = sum(len(cards) for cards in usage.values()) * MILLI
    allocated = sum(u.core_used for cards in usage.values() for u in cards) * 10
    from_records = 0
    bound = 0
    for pod in pods:
        name = str(pod["metadata"]["name"])
        node = (pod.get("spec") or {}).get("nodeName")
        if name not in requested or not node:
            continue
        bound += 1
        text = (pod["metadata"].get("annotations") or {}).get(vocabulary.allocation_annotation)
        if not text:
            problems.append(f"{name}: bound to {node} without an allocation record")
            continue
        record = decode_allocation(text)
        if record.node != node:
            problems.append(f"{name}: record names {record.node}, bound to {node}")
        milli = sum(MILLI * len(c.card_indices) if c.is_whole else c.core_percent * 10
                    for c in record.containers)
        if milli != requested[name]:
            problems.append(f"{name}: record holds {milli} milli-GPU, asked {requested[name]}")
        from_records += milli
    if from_records != allocated:
        problems.append(f"records hold {from_records} milli-GPU, the cards {allocated}")
    return Tally(capacity, allocated, bound, problems)


@dataclass(frozen=True)
class Summary:
    trace: str
    seed: int
    nodes: int
    capacity_milli: int
    arrived_milli: int
    allocated_milli: int
    created: int
    placed: int
    failed: int
    failed_gpu: int
    in_flight: int
    replay_seconds: float
    setup_seconds: float
    nodes_unhealthy: int
    score_cpu_only_pods: bool
    #: kube-scheduler's percentageOfNodesToScore when not the shipped 100
    nodes_to_score: int | None = None

    def line(self) -> str:
        alloc = 100.0 * self.allocated_milli / self.capacity_milli
        arrived = 100.0 * self.arrived_milli / self.capacity_milli
        # what differs from the shipped scheduler configuration, named
        unshipped = "" if self.score_cpu_only_pods else ", CPU-only pods not scored"
        if self.nodes_to_score is not None:
            unshipped += f", percentageOfNodesToScore {self.nodes_to_score}"
        return (f"allocated {alloc:.2f}% of GPUs at 100% arrived ("
                f"{self.trace} seed {self.seed}, {self.nodes} nodes, "
                f"{self.capacity_milli // MILLI} GPUs, arrived {arrived:.2f}%; "
                f"{self.created} pods: {self.placed} placed, {self.failed} failed "
                f"({self.failed_gpu} GPU pods); in flight {self.in_flight}{unshipped}; "
                f"replay {self.replay_seconds:.0f} s, setup {self.setup_seconds:.0f} s; "
                f"nodes ever unhealthy {self.nodes_unhealthy})")


# ---------------------------------------------------------------------------- the cluster


def _raw_json(response: Any) -> Any:
    return json.loads(response.data)


class PodWatch:
    """A raw watch of the namespace's pods feeding :class:`Outcomes` (relists on expiry)."""

    def __init__(self, core: Any, outcomes: Outcomes) -> None:
        self.core = core
        self.outcomes = outcomes
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.rv = self._list()
        self.thread = threading.Thread(target=self._run, name="pod-watch", daemon=True)
        self.thread.start()

    def _list(self) -> str:
        body = _raw_json(self.core.list_namespaced_pod(NAMESPACE, _preload_content=False))
        for pod in body["items"]:
            self.outcomes.see(pod)
        return str(body["metadata"]["resourceVersion"])

    def _run(self) -> None:
        from kubernetes.watch.watch import iter_resp_lines

        try:
            while not self.stop.is_set():
                resp = self.core.list_namespaced_pod(
                    NAMESPACE, watch=True, resource_version=self.rv, timeout_seconds=60,
                    allow_watch_bookmarks=True, _preload_content=False)
                for line in iter_resp_lines(resp):  # type: ignore[no-untyped-call]
                    event = json.loads(line)
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        if obj.get("code") == 410:  # too old: list again
                            self.rv = self._list()
                            break
                        raise LiveReplayError(f"pod watch failed: {obj}")
                    self.rv = (obj.get("metadata") or {}).get("resourceVersion", self.rv)
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        self.outcomes.see(obj)
                    if self.stop.is_set():
                        break
        except BaseException as exc:  # surfaced to the main thread by check()
            if not self.stop.is_set():
                self.error = exc
                with self.outcomes.changed:
                    self.outcomes.changed.notify_all()

    def check(self) -> None:
        if self.error is not None:
            raise LiveReplayError(f"pod watch stopped: {self.error!r}") from self.error


def unhealthy_nodes(core: Any) -> set[str]:
    """Nodes that are not Ready or carry a taint (the node lifecycle controller's)."""
    body = _raw_json(core.list_node(resource_version="0", _preload_content=False))
    out = set()
    for node in body["items"]:
        ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                    for c in (node.get("status") or {}).get("conditions") or [])
        if not ready or (node.get("spec") or {}).get("taints"):
            out.add(node["metadata"]["name"])
    return out


@dataclass
class Run:
    """One live replay on a started dev cluster."""

    core: Any
    vocabulary: Vocabulary
    pods: Sequence[TracePod]
    in_flight: int
    stall_seconds: float = STALL_SECONDS
    unhealthy: set[str] = field(default_factory=set)

    def replay(self) -> Outcomes:
        from kubernetes.client.exceptions import ApiException

        outcomes = Outcomes()
        watch = PodWatch(self.core, outcomes)
        pending: list[str] = []
        next_check = time.monotonic() + NODE_CHECK_SECONDS
        try:
            for i, pod in enumerate(self.pods):
                pending = self._settle(outcomes, watch, pending, self.in_flight - 1)
                name = pod_name(i)
                try:
                    self.core.create_namespaced_pod(
                        NAMESPACE, pod_manifest(pod, name, self.vocabulary))
                except ApiException as exc:
                    raise LiveReplayError(
                        f"creating {name} ({pod.name}) failed: {exc.status} {exc.reason}: "
                        f"{exc.body}") from exc
                pending.append(name)
                if time.monotonic() > next_check:
                    self.unhealthy |= unhealthy_nodes(self.core)
                    next_check = time.monotonic() + NODE_CHECK_SECONDS
                if (i + 1) % 500 == 0:
                    logger.info("%d/%d pods, %d bound, %d unschedulable", i + 1,
                                len(self.pods), len(outcomes.bound), len(outcomes.unschedulable))
            self._settle(outcomes, watch, pending, 0)
            self.unhealthy |= unhealthy_nodes(self.core)
        finally:
            watch.stop.set()
        return outcomes

    def _settle(self, outcomes: Outcomes, watch: PodWatch, pending: list[str],
                keep: int) -> list[str]:
        """Wait until at most ``keep`` pods are unsettled; delete the unschedulable ones."""
        while True:
            with outcomes.changed:
                done = [n for n in pending if outcomes.settled(n)]
                left = [n for n in pending if not outcomes.settled(n)]
                if len(left) > keep:
                    outcomes.changed.wait(timeout=5.0)
            for name in done:
                if name in outcomes.unschedulable:
                    self._delete(name)
            pending = left
            if len(pending) <= keep:
                return pending
            watch.check()
            if time.monotonic() - outcomes.last_change > self.stall_seconds:
                raise LiveReplayError(
                    f"no pod bound or marked unschedulable for {self.stall_seconds:.0f} s; "
                    f"waiting for {pending[:5]} (see the dev cluster's logs)")

    def _delete(self, name: str) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self.core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)
        except ApiException as exc:
            if exc.status != 404:
                raise LiveReplayError(f"deleting {name}: {exc.status} {exc.reason}") from exc


def read_state(core: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    nodes = _raw_json(core.list_node(_preload_content=False))["items"]
    pods = _raw_json(core.list_namespaced_pod(NAMESPACE, _preload_content=False))["items"]
    return nodes, pods


def _select_nodes(nodes: Sequence[TraceNode], every: int) -> list[TraceNode]:
    return list(nodes[::every]) if every > 1 else list(nodes)


@dataclass(frozen=True)
class Settings:
    trace: str = "default"
    seed: int = 42
    nodes_every: int = 1
    max_pods: int | None = None
    in_flight: int = 1
    #: The shipped scheduler configuration scores CPU-only pods; False deletes that entry.
    score_cpu_only_pods: bool = True
    allocator_args: tuple[str, ...] = ()
    stall_seconds: float = STALL_SECONDS
    node_grace_seconds: int = NODE_GRACE_SECONDS
    #: kube-scheduler's percentageOfNodesToScore instead of the shipped 100 (0: adaptive)
    nodes_to_score: int | None = None


@dataclass(frozen=True)
class Result:
    summary: Summary
    tally: Tally


def run(settings: Settings, binaries: Any = None) -> Result:
    """Start a dev cluster with the trace's nodes, replay, read the result, stop."""
    from devcluster.binaries import ensure_binaries
    from devcluster.cluster import DevCluster, Options
    from devcluster.workloads import ensure_namespace

    options = Options(score_cpu_only_pods=settings.score_cpu_only_pods,
                      allocator_args=settings.allocator_args,
                      nodes_to_score=settings.nodes_to_score)  # checked before the trace is read
    trace_nodes = _select_nodes(load_nodes(), settings.nodes_every)
    capacity = MILLI * sum(n.gpus for n in trace_nodes)
    sequence = workload_sequence(load_pods(settings.trace), settings.seed, capacity)
    pods = arrivals(sequence, capacity, settings.max_pods)
    requested = {pod_name(i): p.gpu_request_milli for i, p in enumerate(pods) if p.num_gpu}
    dev = DevCluster(binaries or ensure_binaries(), None, options)
    dev.control_plane.node_monitor_grace_seconds = settings.node_grace_seconds
    started = time.monotonic()
    failed = True
    try:
        logger.info("starting the dev cluster with %d nodes (%d GPUs)", len(trace_nodes),
                    capacity // MILLI)
        dev.start(nodes=[node_spec(n) for n in trace_nodes])
        core = dev.core_v1()
        ensure_namespace(core, NAMESPACE)
        setup = time.monotonic() - started
        logger.info("cluster up in %.0f s; replaying %d pods, %d in flight", setup, len(pods),
                    settings.in_flight)
        live = Run(core, dev.vocabulary, pods, settings.in_flight, settings.stall_seconds)
        t0 = time.monotonic()
        outcomes = live.replay()
        replay_seconds = time.monotonic() - t0
        nodes, final_pods = read_state(core)
        result = tally(nodes, final_pods, requested, dev.vocabulary)
        failed_gpu = sum(1 for n in outcomes.unschedulable if n in requested)
        summary = Summary(
            settings.trace, settings.seed, len(trace_nodes), capacity,
            sum(p.gpu_request_milli for p in pods), result.allocated_milli, len(pods),
            len(outcomes.bound), len(outcomes.unschedulable), failed_gpu, settings.in_flight,
            replay_seconds, setup, len(live.unhealthy), settings.score_cpu_only_pods,
            settings.nodes_to_score)
        failed = False
        return Result(summary, result)
    finally:
        if failed:
            print(f"dev cluster {dev.logs_hint()}", file=sys.stderr)
        dev.stop(keep_files=failed)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.openb.live",
                                     description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--trace", default="default", choices=TRACES)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--nodes-every", type=int, default=1, metavar="K",
                        help="every K-th node of the cluster only (a small run)")
    parser.add_argument("--max-pods", type=int, default=None, metavar="N",
                        help="stop after N pods even before 100%% arrived")
    parser.add_argument("--in-flight", type=int, default=1, metavar="N",
                        help="pods between creation and outcome at once (1: as the simulator)")
    parser.add_argument("--score-cpu-only-pods", action=argparse.BooleanOptionalAction,
                        default=True,
                        help="keep the shipped scheduler configuration's entry that scores "
                             "CPU-only pods (default); --no-score-cpu-only-pods deletes it, as "
                             "docs/deploy.md turns it off")
    parser.add_argument("--allocator-arg", action="append", default=[], metavar="ARG",
                        help="an extra flag for 'tessera allocator' (default: none, as shipped)")
    parser.add_argument("--stall-seconds", type=float, default=STALL_SECONDS)
    parser.add_argument("--percentage-of-nodes-to-score", type=int, default=None, metavar="P",
                        help="kube-scheduler's percentageOfNodesToScore instead of the shipped "
                             "100 (0: its adaptive default; docs/deploy.md says what less "
                             "trades)")
    args = parser.parse_args(argv)
    if args.nodes_every < 1 or args.in_flight < 1 or (args.max_pods or 1) < 1:
        parser.error("--nodes-every, --in-flight and --max-pods must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    settings = Settings(args.trace, args.seed, args.nodes_every, args.max_pods, args.in_flight,
                        args.score_cpu_only_pods, tuple(args.allocator_arg), args.stall_seconds,
                        nodes_to_score=args.percentage_of_nodes_to_score)
    try:
        result = run(settings)
    except (TraceError, DevClusterError, LiveReplayError) as exc:
        print(f"live replay failed: {exc}", file=sys.stderr)
        return 1
    for problem in result.tally.problems[:20]:
        print(f"PROBLEM {problem}")
    print(result.summary.line())
    return 2 if result.tally.problems else 0


if __name__ == "__main__":
    sys.exit(main())
