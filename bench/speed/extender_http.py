"""The allocator's extender verbs over HTTPS, as kube-scheduler calls them, on a real API.

Setup (the dev-cluster harness, devcluster, without kube-scheduler so that this
client is the only caller): etcd + kube-apiserver v1.34.4 on loopback, ``tessera allocator``
(granian, one worker + threads, mutual TLS, the shipped RBAC and leader election on)
watching it. Fake nodes of 8 cards x 16 GiB are created through the API (1,000, then grown to
5,000); the allocator learns them from its node watch. Timing starts once the node writes of
a growing cluster have settled (kube-controller-manager's TTL controller annotates every node
again as the cluster grows; :func:`bench.speed.common.settle`), as in ``e2e_throughput``, or
after ``--settle-timeout`` seconds (:data:`SETTLE_TIMEOUT_S`) with them still going (it says
which: kube-controller-manager's TTL controller annotates every node again each time the
cluster grows past 100, 500, 1,000 and 2,000 nodes, at its default 20 requests a second;
kubernetes v1.34.4 ``pkg/controller/ttl``).

Per cluster size it measures, with one kept-alive mutual-TLS connection like the scheduler's:

- ``filter`` and ``prioritize`` with ``ExtenderArgs{Pod, NodeNames}`` for **every** node
  (``percentageOfNodesToScore: 100``), the pod being the full Pod JSON the API server returns
  for a pod mutated by Tessera's webhook code (managedFields, defaults, annotations). Regimes:
  *warm* — the same request shape again (a scheduler working through a batch of alike pods);
  *cold* — a request shape the allocator has never seen (a new core/memory pair each call);
  beside the latencies, the allocator's mean time inside each verb (``verb_ms_mean``: the
  rest of a call is serving it, TLS and HTTP on both ends);
- ``bind`` one pod at a time (latency: create the Binding, which carries the annotations,
  over loopback HTTPS to the real API server; a pod the webhook admitted has every label it
  needs, so no PATCH comes first; the pod was sent to filter first, untimed, as in a
  scheduling cycle, so bind does not read it again), then ``--bind-threads`` concurrent binders
  (kube-scheduler binds asynchronously) for sustained binds/s. Beside each bind phase's
  client latencies: the allocator's mean time inside the verb (``verb_ms_mean``, its
  /metrics) and the API server's mean time on the Bindings (``api_ms_mean``, its
  ``apiserver_request_duration_seconds``), so a bind splits into serving, the verb's own work
  and the API write;
- ``filter``/``prioritize`` *warm* again after the binds, when node contents are diverse;
- the floor: the same Binding (with the annotations a bind wrote) created directly, one at a
  time from this Python client, on CPU-only pods (``Binding alone (API)``): the API write
  every bind makes, with no extender in the way (kube-scheduler's own binder sends the same
  request from Go);
- with ``--pause-node-writes``, ``filter``/``prioritize`` *warm* once more with KWOK stopped
  (SIGSTOP) for as long as they are timed (``warm, KWOK paused``; a few seconds, well within
  the nodes' 40-s Leases): a reference, not the target's method. KWOK stands in for every
  node's kubelet on this machine's 2 cores (5,000 Leases renewed every 10 s, and the API
  server and etcd writing them); a cluster's kubelets run on their own machines. The
  difference between the two warm rows is what that stand-in costs the verbs here;
- with ``--floor``, at the largest size, after everything above: the allocator's port served
  by the floor extender (bench/speed/floor_extender.py: filter answers the first node it was
  sent, prioritize 0 for each; no picture, no decision) on the allocator's serving stack, and
  the *warm* filter and prioritize pairs sent again (``warm, floor extender``): what serving
  these calls costs on this machine with no work behind them, the floor under the verbs'
  latencies (a reference);
- ``GET /metrics`` as Prometheus scrapes it (the chart's ServiceMonitor): latency, size and
  the allocator's CPU per scrape. The benchmark reads /metrics for the verbs' times before,
  so these are a periodic scraper's scrapes (the allocator writes again only the nodes that
  changed since the last one); ``bench/allocator_inprocess.py --metrics`` times the first.

Usage: ``.venv/bin/python -m bench.speed.extender_http [--nodes 1000 5000] [--policy binpack]
[--pause-node-writes]``
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import partial
from typing import Any

from bench.speed.cluster import in_parallel
from bench.speed.common import (
    Client,
    Timed,
    api_request_seconds,
    client_context,
    group_cpu_seconds,
    histogram_totals,
    mean_ms_between,
    metrics_text,
    print_table,
    settle,
    summary,
    write_results,
)
from bench.speed.floor_extender import serve_in_allocators_place
from devcluster.binaries import ensure_binaries
from devcluster.cluster import DevCluster
from devcluster.nodes import create_nodes, uniform
from devcluster.options import Options
from devcluster.services import Services
from devcluster.workloads import container, ensure_namespace, make_pod
from tessera.vocabulary import ContainerRequest, PodRequest, encode_request
from webhook.mutation import MutationConfig, mutate_pod

NAMESPACE = "bench"
CARDS, CARD_MIB = 8, 16384
COLUMNS = ["nodes", "verb", "regime", "n", "p50_ms", "p90_ms", "p99_ms", "mean_ms",
           "per_s", "reply_kb", "allocator_cpu_ms", "verb_ms_mean", "api_ms_mean"]
#: The API server's key for the Binding a bind creates (``api_request_seconds``).
BINDING = "POST pods/binding"


def grow_nodes(dev: DevCluster, start: int, stop: int, threads: int) -> None:
    specs = [uniform(f"bench-{i:05d}", CARDS, "T4", CARD_MIB) for i in range(start, stop)]
    agent = dev.options.agent
    in_parallel(dev, specs, lambda core, part: create_nodes(core, part, dev.vocabulary, agent),
                threads)


def gpu_pod(name: str, core: int, mem: int) -> dict[str, Any]:
    raw = make_pod(name, [container("main", limits={
        "elasticgpu.io/gpu-core": str(core), "elasticgpu.io/gpu-memory": str(mem),
        "cpu": "1", "memory": "1Gi"})], labels={"app": "bench", "tier": "training"})
    pod = dict(mutate_pod(raw, MutationConfig()).pod)  # exactly what the webhook would admit
    return pod


def cpu_pod(name: str) -> dict[str, Any]:
    return make_pod(name, [container("main", limits={"cpu": "100m", "memory": "128Mi"})],
                    labels={"app": "bench"})


def create_pods(dev: DevCluster, names: Sequence[str], threads: int,
                make: Callable[[str], dict[str, Any]] = lambda name: gpu_pod(name, 30, 4096)
                ) -> None:
    def work(core: Any, chunk: list[str]) -> None:
        for name in chunk:
            core.create_namespaced_pod(NAMESPACE, make(name))

    in_parallel(dev, names, work, threads)


def read_pod_json(core: Any, name: str) -> dict[str, Any]:
    resp = core.read_namespaced_pod(name, NAMESPACE, _preload_content=False)
    doc: dict[str, Any] = json.loads(resp.data)
    return doc


def with_shape(template: dict[str, Any], core: int, mem: int) -> dict[str, Any]:
    """The template pod asking for another share (annotation and resources agree)."""
    pod = copy.deepcopy(template)
    req = PodRequest((ContainerRequest("main", core_percent=core, memory_mib=mem),))
    pod["metadata"]["annotations"]["elasticgpu.io/gpu-request"] = encode_request(req)
    res = pod["spec"]["containers"][0]["resources"]
    for kind in ("limits", "requests"):
        res[kind]["elasticgpu.io/gpu-core"] = str(core)
        res[kind]["elasticgpu.io/gpu-memory"] = str(mem)
    return pod


def args_body(pod: dict[str, Any], names: Sequence[str]) -> bytes:
    return json.dumps({"Pod": pod, "Nodes": None, "NodeNames": list(names)}).encode()


def wait_known(cli: Client, template: dict[str, Any], names: Sequence[str],
               timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        _, data, _ = cli.post("/scheduler/filter", args_body(template, names))
        reply = json.loads(data)
        unknown = [n for n, why in reply.get("FailedNodes", {}).items() if "unknown" in why]
        if not unknown and not reply.get("Error"):
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"allocator still misses {len(unknown)} nodes: {reply.get('Error')}")
        time.sleep(1.0)


def time_verbs(cli: Client, nodes: int, regime: str, bodies: Sequence[tuple[bytes, bytes]],
               allocator_cpu: Callable[[], float], verb_times: Callable[[], dict[str, Timed]]
               ) -> list[dict[str, Any]]:
    """Per body pair: filter (all nodes) then prioritize (the nodes filter kept); with the
    allocator's CPU per pair (its process group, all threads: TLS, HTTP, the verbs) and its
    mean time inside each verb (from the decoded body to the encoded reply)."""
    samples: dict[str, list[float]] = {"filter": [], "prioritize": [], "filter+prioritize": []}
    sizes: dict[str, int] = {"filter": 0, "prioritize": 0}
    verbs_before = verb_times()  # before the CPU reading: a scrape is not a verb's work
    cpu_before = allocator_cpu()
    for filt, pod_json in bodies:
        status, data, took_f = cli.post("/scheduler/filter", filt)
        reply = json.loads(data)
        assert status == 200 and not reply["Error"], reply.get("Error")
        body = b'{"Pod":' + pod_json + b',"Nodes":null,"NodeNames":' + json.dumps(
            reply["NodeNames"]).encode() + b"}"
        status, pdata, took_p = cli.post("/scheduler/prioritize", body)
        assert status == 200
        samples["filter"].append(took_f * 1000)
        samples["prioritize"].append(took_p * 1000)
        samples["filter+prioritize"].append((took_f + took_p) * 1000)
        sizes["filter"], sizes["prioritize"] = len(data), len(pdata)
    cpu_ms = (allocator_cpu() - cpu_before) * 1000 / max(1, len(bodies))
    verbs_after = verb_times()
    rows = []
    for verb, s in samples.items():
        rows.append({"nodes": nodes, "verb": verb, "regime": regime, **summary(s),
                     "reply_kb": round(sizes.get(verb, 0) / 1024, 1) or None,
                     "allocator_cpu_ms": round(cpu_ms, 2) if verb == "filter+prioritize"
                     else None,
                     "verb_ms_mean": mean_ms_between(verbs_before, verbs_after, verb)})
    return rows


@contextmanager
def stopped(pid: int) -> Iterator[None]:
    """The process group of ``pid`` stopped (SIGSTOP) inside the block, continued after."""
    os.killpg(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.killpg(pid, signal.SIGCONT)


def kwok_pid(dev: DevCluster) -> int:
    (kwok,) = [p for p in dev.control_plane.processes if p.name == "kwok"]
    pid = kwok.pid
    if pid is None:
        raise SystemExit("KWOK is not running")
    return pid


def bind_run(port: int, ctx: Any, pods: Sequence[dict[str, Any]], nodes: Sequence[str],
             threads: int, rng: random.Random) -> tuple[list[float], float, int]:
    """(latencies ms, wall seconds, errors) of binding ``pods`` with ``threads`` binders."""
    jobs = [(p["metadata"]["name"], p["metadata"]["uid"], rng.choice(nodes)) for p in pods]
    by_name = {p["metadata"]["name"]: p for p in pods}
    lat: list[float] = []
    errors = 0
    lock = threading.Lock()

    def work(chunk: list[tuple[str, str, str]]) -> None:
        nonlocal errors
        cli = Client(port, ctx)
        try:
            for name, uid, node in chunk:
                # As in a scheduling cycle, filter has seen the pod (untimed, one node).
                cli.post("/scheduler/filter", args_body(by_name[name], [node]))
                body = json.dumps({"PodName": name, "PodNamespace": NAMESPACE, "PodUID": uid,
                                   "Node": node}).encode()
                status, data, took = cli.post("/scheduler/bind", body)
                ok = status == 200 and not json.loads(data)["Error"]
                with lock:
                    lat.append(took * 1000)
                    errors += 0 if ok else 1
        finally:
            cli.close()

    chunks = [jobs[i::threads] for i in range(threads)]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        for f in [pool.submit(work, c) for c in chunks if c]:
            f.result()
    return lat, time.perf_counter() - t0, errors


def api_bind_run(apiserver_port: int, ctx: Any, names: Sequence[str], nodes: Sequence[str],
                 annotations: dict[str, str], rng: random.Random
                 ) -> tuple[list[float], float, int]:
    """(latencies ms, wall seconds, errors) of creating the Bindings of ``names`` directly,
    one at a time on one kept-alive connection, with ``annotations``: the API write every
    bind makes, with no extender in the way."""
    cli = Client(apiserver_port, ctx)
    lat: list[float] = []
    errors = 0
    t0 = time.perf_counter()
    try:
        for name in names:
            body = json.dumps({
                "apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": name, "namespace": NAMESPACE, "annotations": annotations},
                "target": {"apiVersion": "v1", "kind": "Node", "name": rng.choice(nodes)},
            }).encode()
            status, _, took = cli.post(f"/api/v1/namespaces/{NAMESPACE}/pods/{name}/binding",
                                       body)
            lat.append(took * 1000)
            errors += 0 if status == 201 else 1
    finally:
        cli.close()
    return lat, time.perf_counter() - t0, errors


def added_annotations(bound: dict[str, Any], admitted: dict[str, Any]) -> dict[str, str]:
    """The annotations a bind put on a pod: those it has bound and had not when admitted."""
    before = admitted["metadata"].get("annotations") or {}
    return {k: v for k, v in (bound["metadata"].get("annotations") or {}).items()
            if k not in before}


def time_scrapes(cli: Client, scrapes: int, allocator_cpu: Callable[[], float]
                 ) -> dict[str, Any]:
    """A Prometheus scrape of the allocator's /metrics (the leader's, with its per-card and
    per-pod series), ``scrapes`` times on the kept-alive connection: latency, size and the
    allocator's CPU per scrape."""
    lat: list[float] = []
    size = 0
    cpu0 = allocator_cpu()
    for _ in range(scrapes):
        status, data, took = cli.get("/metrics")
        assert status == 200, status
        lat.append(took * 1000)
        size = len(data)
    cpu = allocator_cpu() - cpu0
    return {**summary(lat), "reply_kb": round(size / 1024, 1),
            "allocator_cpu_ms": round(cpu * 1000 / max(1, scrapes), 2)}


#: How long to wait for the node writes of a grown cluster to stop before timing anyway.
SETTLE_TIMEOUT_S = 300.0


def verb_seconds(allocator: str, context: Any) -> dict[str, Timed]:
    """The allocator's own time in each extender verb so far (``tessera_allocator_verb_seconds``:
    from the decoded body to the encoded reply, the verb's API calls included)."""
    return histogram_totals(metrics_text(allocator, context), "tessera_allocator_verb_seconds",
                            lambda labels: labels.get("verb"))


def timed_binds(run: Callable[[], tuple[list[float], float, int]],
                api_times: Callable[[], dict[str, Timed]],
                verb_times: Callable[[], dict[str, Timed]],
                allocator_cpu: Callable[[], float]) -> dict[str, Any]:
    """One bind phase's row: the client's latencies; beside their mean, the allocator's mean
    time inside the bind verb and the API server's mean time on the Binding it creates (so
    the latency splits into serving, the verb's own work and the API write); the allocator's
    CPU per bind (its one-node filter before each, the watch events and the Event after it
    included). The readings of /metrics stay outside the CPU window."""
    api0, verb0 = api_times(), verb_times()
    cpu0 = allocator_cpu()
    lat, wall, errors = run()
    cpu = allocator_cpu() - cpu0
    api1, verb1 = api_times(), verb_times()
    return {**summary(lat), "per_s": round(len(lat) / wall, 1), "errors": errors,
            "allocator_cpu_ms": round(cpu * 1000 / max(1, len(lat)), 2),
            "verb_ms_mean": mean_ms_between(verb0, verb1, "bind"),
            "api_ms_mean": mean_ms_between(api0, api1, BINDING)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--policy", default="binpack")
    parser.add_argument("--warm", type=int, default=200, help="warm filter+prioritize pairs")
    parser.add_argument("--cold", type=int, default=40, help="never-seen shapes")
    parser.add_argument("--serial-binds", type=int, default=100)
    parser.add_argument("--binds", type=int, default=400, help="concurrent binds")
    parser.add_argument("--bind-threads", type=int, default=8)
    parser.add_argument("--settle-timeout", type=float, default=SETTLE_TIMEOUT_S,
                        help="seconds to wait for node writes to stop before timing anyway")
    parser.add_argument("--scrapes", type=int, default=5, help="GET /metrics, as Prometheus")
    parser.add_argument("--setup-threads", type=int, default=6)
    parser.add_argument("--pause-node-writes", action="store_true",
                        help="also time warm filter/prioritize with KWOK stopped (reference)")
    parser.add_argument("--floor", action="store_true",
                        help="at the end, time warm filter/prioritize on the floor extender "
                             "in the allocator's place (reference)")
    parser.add_argument("--stem", default="speed_extender")
    args = parser.parse_args()
    rng = random.Random(42)

    dev = DevCluster(ensure_binaries(), None, Options(
        webhook=False, allocator_args=(f"--policy={args.policy}",)))
    rows: list[dict[str, Any]] = []
    try:
        # The harness's start() without kube-scheduler: this client is the only caller.
        dev.control_plane.start()
        dev.services = Services(dev.control_plane, dev.options, lambda: dev.api_client)
        dev.services.start()
        pki = dev.control_plane.pki_dir
        ctx = client_context(dev.control_plane.ca_file, pki / "admin.crt", pki / "admin.key")
        port = dev.services.allocator_port
        apiserver = f"127.0.0.1:{dev.control_plane.apiserver_port}"
        allocator_pid = dev.services.allocator.pid
        assert allocator_pid is not None

        def allocator_cpu() -> float:
            return group_cpu_seconds(allocator_pid)

        def verb_times() -> dict[str, Timed]:
            return verb_seconds(f"127.0.0.1:{port}", ctx)

        def api_times() -> dict[str, Timed]:
            return api_request_seconds(apiserver, ctx)

        core = dev.core_v1()
        ensure_namespace(core, NAMESPACE)
        create_pods(dev, ["template"], 1)
        template = read_pod_json(core, "template")
        template_json = json.dumps(template).encode()
        cli = Client(port, ctx)
        have = 0
        pod_seq = 0
        shape_seq = 0
        for n in sorted(args.nodes):
            t0 = time.perf_counter()
            grow_nodes(dev, have, n, args.setup_threads)
            have = n
            names = [f"bench-{i:05d}" for i in range(n)]
            wait_known(cli, template, names)
            known_s = time.perf_counter() - t0
            waited = settle(apiserver, ctx, timeout_s=args.settle_timeout)
            settled = (f"settled after {waited} s more" if waited < args.settle_timeout
                       else f"still going after {waited} s (timed with them)")
            print(f"# {n} nodes created and known to the allocator in {known_s:.0f} s; "
                  f"the node writes of a growing cluster {settled}", flush=True)
            warm = [(args_body(template, names), template_json)] * args.warm
            rows += time_verbs(cli, n, "warm", warm, allocator_cpu, verb_times)
            cold = []
            for _ in range(args.cold):
                shape_seq += 1
                pod = with_shape(template, 1 + shape_seq % 97, 1000 + 7 * shape_seq)
                cold.append((args_body(pod, names), json.dumps(pod).encode()))
            rows += time_verbs(cli, n, "cold", cold, allocator_cpu, verb_times)
            if args.pause_node_writes:
                with stopped(kwok_pid(dev)):
                    rows += time_verbs(cli, n, "warm, KWOK paused", warm, allocator_cpu,
                                       verb_times)
            print_table(rows[-9 if args.pause_node_writes else -6:], COLUMNS)

            pod_names = [f"p{pod_seq + i:05d}" for i in range(args.serial_binds + args.binds)]
            pod_seq += len(pod_names)
            create_pods(dev, pod_names, args.setup_threads)
            pods = [read_pod_json(core, p) for p in pod_names]
            serial, threaded = pods[:args.serial_binds], pods[args.serial_binds:]
            for regime, chunk, threads in (("serial", serial, 1),
                                           (f"{args.bind_threads} threads", threaded,
                                            args.bind_threads)):
                run = partial(bind_run, port, ctx, chunk, names, threads, rng)
                rows.append({"nodes": n, "verb": "bind", "regime": regime,
                             **timed_binds(run, api_times, verb_times, allocator_cpu)})
            rows += time_verbs(cli, n, "warm, after binds", warm[: max(1, args.warm // 2)],
                               allocator_cpu, verb_times)
            # The floor: the same Binding (with the annotations a bind wrote) without the
            # extender, on pods the allocator does not place, after the timed filter rows.
            annotations = added_annotations(read_pod_json(core, serial[0]["metadata"]["name"]),
                                            serial[0])
            floor_names = [f"c{pod_seq + i:05d}" for i in range(args.serial_binds)]
            pod_seq += len(floor_names)
            create_pods(dev, floor_names, args.setup_threads, cpu_pod)
            run = partial(api_bind_run, dev.control_plane.apiserver_port, ctx, floor_names,
                          names, annotations, rng)
            rows.append({"nodes": n, "verb": "Binding alone (API)", "regime": "serial",
                         **timed_binds(run, api_times, verb_times, allocator_cpu)})
            rows.append({"nodes": n, "verb": "GET /metrics", "regime": "scrape",
                         **time_scrapes(cli, args.scrapes, allocator_cpu)})
            print_table(rows[-7:], COLUMNS)
        cli.close()
        if args.floor and args.nodes:
            # The allocator's last size, its warm bodies: the same calls, nothing behind them.
            floor_pid = serve_in_allocators_place(dev)
            cli = Client(port, ctx)
            rows += time_verbs(cli, n, "warm, floor extender", warm,
                               partial(group_cpu_seconds, floor_pid),
                               lambda: {})  # the floor times no verbs of its own
            cli.close()
            print_table(rows[-3:], COLUMNS)
    finally:
        dev.stop()
    print()
    print_table(rows, [*COLUMNS, "errors"])
    write_results(args.stem, rows, {
        "command": "python -m bench.speed.extender_http " + " ".join(sys.argv[1:]),
        "api": "real kube-apiserver v1.34.4 + etcd on loopback (devcluster)",
        "transport": "HTTPS with client certificate (mutual TLS), one kept-alive connection",
        "node": f"{CARDS} cards x {CARD_MIB} MiB, T4, totals-only inventory",
        "pod": "share 30% core / 4096 MiB (warm); a new core/memory pair per call (cold)",
    })


if __name__ == "__main__":
    main()
