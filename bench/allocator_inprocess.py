"""In-process latency of the allocator's filter and prioritize for one pod.

Builds N nodes x 8 cards (a realistic mix of partly used nodes), then times
``Allocator.filter`` (:class:`allocator.verbs.filter.Filter`) and ``Allocator.prioritize``
for one pod over all node names, as the extender handlers call them (no HTTP, no JSON: the
benchmark issue measures over HTTP).

Two regimes are reported:
- *cold*: the per-shape caches are dropped before each call (a request shape never seen
  before, or every node changed since) — the worst case;
- *warm*: repeated calls for the same request shape with one node changing between calls
  (one bind per scheduling cycle), which is the steady state of a busy scheduler.

With ``--cpu`` the picture also has node CPU (96 cores a node, every bound pod asking for
2-24 cores, so nodes' free CPU spreads over the policies' thresholds) and a workload mix (200
GPU pods of four shapes filtered first); ``prioritize-cpu-only`` is timed too (a CPU-only pod
of 8 cores, the default policy's ``score_cpu_only``). ``--no-node-resources`` runs the same
with node tracking off (the allocator's ``--node-resources false``). ``--bodies`` also times
what the service's filter verb does with a request body
(:func:`allocator.service.extender.filter_reply`:
decode, the decision with the asked names as strings the allocator has not seen, the reply)
on a JSON body of every node name in a new
shuffled order per call, as kube-scheduler's parallel filter sends them (row ``filter body``,
regime ``warm, fresh names``). The other rows call :meth:`Allocator.filter` with the state's own
name objects, whose hashes are cached and which the names' dict finds by identity, with no body:
a reference for the decision alone (issue 12's before/after), not a deployed filter's cost.
``--metrics`` times instead what the operators' endpoints build: the text of ``/metrics`` on
the first scrape (every node written) and on a later one with one node changed since (the rest
kept, ``allocator/service/node_series.py``), the ``/status`` document and the page's (its first
nodes).

``--measured`` runs each size without and then with dcgm-exporter's figures applied
(:func:`apply_measured`, docs/metrics.md), and adds a row ``interleaved``: the warm filter of
the two pictures, calls alternating, the fairest comparison on a shared machine.

Usage: ``.venv/bin/python bench/allocator_inprocess.py [--nodes 1000 5000] [--repeat 50]
[--policy fgd-cpu] [--cpu] [--no-node-resources] [--bodies] [--metrics] [--clock cpu]``; without
``--cpu``, ``--no-node-resources`` and ``--bodies`` it runs on the code before issue 12 too
(``PYTHONPATH``), for before/after comparisons.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

from allocator.picture.state import ClusterState
from allocator.ranking.fast import FastRanker
from allocator.service import page
from allocator.service.metrics import Metrics
from allocator.verbs.core import Allocator, AllocatorConfig, assemble
from tessera.vocabulary import (
    Allocation,
    ContainerAllocation,
    ContainerRequest,
    PodRequest,
    Vocabulary,
    encode_allocation,
    encode_request,
)

VOCAB = Vocabulary()
CARDS = 8
CARD_MIB = 16384


def node_obj(name: str, cpu: bool = False) -> dict[str, Any]:
    allocatable = {VOCAB.core_resource: str(100 * CARDS),
                   VOCAB.memory_resource: str(CARD_MIB * CARDS)}
    if cpu:
        allocatable |= {"cpu": "96", "memory": "768Gi"}
    return {"metadata": {"name": name, "labels": {VOCAB.node_model_label: "T4"}},
            "status": {"allocatable": allocatable}}


def bound_pod(uid: str, node: str, containers: tuple[ContainerAllocation, ...],
              cpu: int = 0) -> dict[str, Any]:
    # allocated at 1.0 (long before --measured's sample): what the sample shows is theirs
    alloc = Allocation(node=node, containers=containers, allocated_at=1.0, pod_uid=uid)
    return {"metadata": {"uid": uid, "namespace": "bench", "name": uid,
                         "annotations": {VOCAB.allocation_annotation: encode_allocation(alloc)}},
            "spec": {"nodeName": node, "containers": [
                {"name": "main", "resources": {"requests": {"cpu": str(cpu)}}}]},
            "status": {"phase": "Running"}}


def build_state(n: int, rng: random.Random, cpu: bool = False) -> ClusterState:
    state = ClusterState(VOCAB)
    state.replace_nodes(node_obj(f"node-{i:05d}", cpu) for i in range(n))
    pods = []
    for i in range(n):
        # ~half the cards of a node carry shares
        node = f"node-{i:05d}"
        whole_card = i % 4 == 0  # one in four nodes has its last card taken whole
        for card in range(CARDS - 1 if whole_card else CARDS):
            if rng.random() < 0.5:
                core = rng.choice([10, 20, 25, 30, 50])
                pods.append(bound_pod(f"{node}-{card}", node, (
                    ContainerAllocation("main", (card,), core_percent=core,
                                        memory_mib=CARD_MIB * core // 100),),
                    rng.choice([2, 4, 8, 12])))
        if whole_card:
            pods.append(bound_pod(f"{node}-w", node, (ContainerAllocation("main", (7,)),),
                                  rng.choice([8, 16, 24])))
    state.replace_pods(pods)
    if cpu:
        from allocator.picture.requests import pod_usage  # only with --cpu: runs on older code too

        state.resources.replace_pods(map(pod_usage, pods))
    state.mark_synced()
    return state


MIX = [PodRequest((ContainerRequest("main", core_percent=c, memory_mib=m),))
       for c, m in ((25, 4096), (50, 8192))] + [
      PodRequest((ContainerRequest("main", cards=k),)) for k in (1, 2)]


def apply_measured(state: ClusterState, rng: random.Random) -> None:
    """``--measured``: dcgm-exporter's figures for every card, through the allocator's own
    path (:meth:`ClusterState.apply_sample`): used memory as booked, and on one node in ten
    one card also carrying 4-12 GiB of processes Tessera did not place; utilisation drawn per
    card (0-100 %, stepped by the allocator), so that nodes alike by their bookings mostly
    differ by what is measured: the memos' worst case."""
    from allocator.picture.measured import MeasuredCard, MeasuredConfig, Sample

    nodes = {}
    for name in state.node_names():
        view = state.view(name)
        assert view is not None
        foreign = rng.random() < 0.1
        cards = {}
        for cs in view.state.cards:
            used = cs.memory_used_mib
            if foreign and cs.card.index == 0:
                used = min(cs.card.memory_mib, used + rng.choice([4, 8, 12]) * 1024)
            busy = rng.randrange(0, 101) if cs.holders else 0
            cards[cs.card.index] = MeasuredCard(cs.card.index, used, cs.card.memory_mib - used,
                                                busy)
        nodes[name] = cards
    state.apply_sample(Sample(1000.0, nodes), MeasuredConfig(url="http://bench"))


def feed_mix(allocator: Allocator, names: list[str], rng: random.Random) -> None:
    """200 GPU pods of the mix's shapes, each filtered once (what the allocator learns from)."""
    for i in range(200):
        pod = pod_obj(MIX[i % len(MIX)], f"mix-{i}")
        pod["spec"]["containers"][0]["resources"] = {
            "requests": {"cpu": str(rng.choice([4, 8, 12, 16]))}}
        allocator.filter(pod, names)


def cpu_only_pod() -> dict[str, Any]:
    return {"metadata": {"name": "cpu", "namespace": "bench", "uid": "cpu"},
            "spec": {"containers": [{"name": "main", "resources": {"requests": {"cpu": "8"}}}]}}


def pod_obj(request: PodRequest, uid: str) -> dict[str, Any]:
    return {"metadata": {"name": uid, "namespace": "bench", "uid": uid,
                         "annotations": {VOCAB.request_annotation: encode_request(request)}},
            "spec": {"containers": [{"name": c.name} for c in request.containers]}}


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


#: The clock calls are timed with: wall time, or with ``--clock cpu`` this process's CPU time
#: (``time.process_time``), which other programs on a busy machine do not inflate.
CLOCK: list[Callable[[], float]] = [time.perf_counter]


def measure(fn: Callable[[], object], repeat: int, before: Callable[[], None]) -> list[float]:
    clock = CLOCK[0]
    out = []
    for _ in range(repeat):
        before()
        t0 = clock()
        fn()
        out.append((clock() - t0) * 1000)
    return out


def measure_bodies(allocator: Allocator, pod: dict[str, Any], names: list[str], repeat: int,
                   touch_one_node: Callable[[], None], rng: random.Random) -> list[float]:
    """:func:`allocator.service.extender.filter_reply` on a new body per call (untimed: the names
    in a
    new shuffled order, JSON-encoded), one node changed before each (module doc)."""
    from allocator.service.extender import (
        filter_reply,  # only with --bodies: issue 12's code had none
    )

    order = list(names)
    body = [b""]

    def next_body() -> None:
        touch_one_node()
        rng.shuffle(order)
        body[0] = json.dumps({"Pod": pod, "Nodes": None, "NodeNames": order}).encode()

    def call() -> None:
        reply = filter_reply(allocator, body[0])
        if reply["Error"]:
            raise SystemExit(f"filter answered an error: {reply['Error']}")

    next_body()
    call()  # warm imports and caches once
    return measure(call, repeat, next_body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--policy", default="binpack")
    parser.add_argument("--cpu", action="store_true", help="node CPU and a workload mix")
    parser.add_argument("--no-node-resources", action="store_true")
    parser.add_argument("--bodies", action="store_true",
                        help="also filter_reply on JSON bodies with fresh names (module doc)")
    parser.add_argument("--metrics", action="store_true",
                        help="time /metrics and the /status document instead of the verbs")
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall")
    parser.add_argument("--measured", action="store_true",
                        help="each size twice in one run: without, then with measured figures "
                             "(apply_measured)")
    args = parser.parse_args()
    if args.clock == "cpu":
        CLOCK[0] = time.process_time
    shapes = {
        "share 30%/4GiB": PodRequest((ContainerRequest("main", core_percent=30,
                                                       memory_mib=4096),)),
        "2 whole cards": PodRequest((ContainerRequest("main", cards=2),)),
    }
    print(f"{'nodes':>6} {'pod':<16} {'verb':<11} {'regime':<14} {'median ms':>10} "
          f"{'p99 ms':>8}")
    for n in args.nodes:
        if args.metrics:
            run_metrics(n, args.repeat, args.cpu)
        else:
            for measured in (False, True) if args.measured else (False,):
                run_size(n, shapes, args.repeat, args.policy, args.cpu,
                         not args.no_node_resources, args.bodies, measured)
            if args.measured:
                run_interleaved(n, shapes["share 30%/4GiB"], args.repeat, args.policy, args.cpu)


def run_metrics(n: int, repeat: int, cpu: bool) -> None:
    state = build_state(n, random.Random(42), cpu)
    names = state.node_names()
    rng = random.Random(7)

    def touch_one_node() -> None:
        victim = names[rng.randrange(len(names))]
        with state._lock:
            state._recompute(victim)  # a new state object, as a bind makes

    kept = Metrics(state)
    kept.exposition()
    rows: list[tuple[str, str, Callable[[], object], Callable[[], None]]] = [
        ("/metrics", "first", lambda: Metrics(state).exposition(), lambda: None),
        ("/metrics", "1 node changed", kept.exposition, touch_one_node),
        ("/status", "document", state.snapshot, lambda: None),
        ("/ (page)", "document", lambda: state.snapshot(page.MAX_NODES), lambda: None),
    ]
    for what, regime, fn, before in rows:
        samples = measure(fn, repeat, before)
        print(f"{n:>6} {'':<16} {what:<11} {regime:<14} "
              f"{statistics.median(samples):>10.2f} {percentile(samples, 0.99):>8.2f}",
              flush=True)


def run_interleaved(n: int, request: PodRequest, repeat: int, policy: str, cpu: bool) -> None:
    """``--measured``'s fairest row: the warm filter without and with measured figures, the two
    pictures' calls alternating (in alternating order), so that whatever else the machine does
    weighs on both alike."""
    pictures = {}
    for measured in (False, True):
        rng = random.Random(42)
        state = build_state(n, rng, cpu)
        if measured:
            apply_measured(state, random.Random(43))
        allocator = assemble(state, api=None,  # type: ignore[arg-type]  # no binds here
                              config=AllocatorConfig(default_policy=policy))
        names = state.node_names()
        if cpu:
            feed_mix(allocator, names, rng)
        pictures[measured] = (state, allocator, names)
    pod = pod_obj(request, "bench-interleaved")
    samples: dict[bool, list[float]] = {False: [], True: []}
    rng = random.Random(7)
    clock = CLOCK[0]
    for _state, allocator, names in pictures.values():
        allocator.filter(pod, names)
    for i in range(max(repeat, 200)):  # cheap calls: more of them, for a steady median
        for measured in (False, True) if i % 2 == 0 else (True, False):
            state, allocator, names = pictures[measured]
            victim = names[rng.randrange(len(names))]
            with state._lock:
                state._recompute(victim)
            t0 = clock()
            allocator.filter(pod, names)
            samples[measured].append((clock() - t0) * 1000)
    for measured, found in samples.items():
        label = f"share 30%/4GiB{' +measured' if measured else ''}"
        print(f"{n:>6} {label:<16} {'filter':<11} {'interleaved':<14} "
              f"{statistics.median(found):>10.2f} {percentile(found, 0.99):>8.2f}", flush=True)


def run_size(n: int, shapes: dict[str, PodRequest], repeat: int, policy: str, cpu: bool,
             node_resources: bool, bodies: bool = False, measured: bool = False) -> None:
    rng = random.Random(42)
    state = build_state(n, rng, cpu)
    if measured:
        apply_measured(state, random.Random(43))
    allocator = assemble(state, api=None,  # type: ignore[arg-type]  # no binds here
                          config=AllocatorConfig(default_policy=policy) if node_resources
                          else AllocatorConfig(default_policy=policy, node_resources=False))
    names = state.node_names()
    if cpu:
        feed_mix(allocator, names, rng)

    assert isinstance(allocator.ranker, FastRanker)
    memo = allocator.ranker.contents

    def drop_all_caches() -> None:
        memo.drop_memos()

    def touch_one_node() -> None:
        # one node changes per scheduling cycle (the previous pod's bind)
        victim = names[rng.randrange(len(names))]
        with state._lock:
            state._recompute(victim)

    for label, request in shapes.items():
        pod = pod_obj(request, f"bench-{label}")
        label = f"{label}{' +measured' if measured else ''}"
        verbs: list[tuple[str, Callable[[], object]]] = [
            ("filter", lambda p=pod: allocator.filter(p, names)),  # type: ignore[misc]
            ("prioritize", lambda p=pod: allocator.prioritize(p, names)),  # type: ignore[misc]
        ]
        for verb, fn in verbs:
            fn()  # warm imports and caches once
            for regime, before in (("cold", drop_all_caches), ("warm", touch_one_node)):
                samples = measure(fn, repeat, before)
                print(f"{n:>6} {label:<16} {verb:<11} {regime:<14} "
                      f"{statistics.median(samples):>10.2f} "
                      f"{percentile(samples, 0.99):>8.2f}", flush=True)
        if bodies:
            samples = measure_bodies(allocator, pod, names, repeat, touch_one_node, rng)
            print(f"{n:>6} {label:<16} {'filter body':<11} {'warm, fresh names':<14} "
                  f"{statistics.median(samples):>10.2f} "
                  f"{percentile(samples, 0.99):>8.2f}", flush=True)
    if cpu:
        fn = lambda: allocator.scores_cpu_only(cpu_only_pod(), names)  # noqa: E731
        fn()
        for regime, before in (("cold", drop_all_caches), ("warm", touch_one_node)):
            samples = measure(fn, repeat, before)
            print(f"{n:>6} {'cpu-only 8 cores':<16} {'prio-cpu':<11} {regime:<14} "
                  f"{statistics.median(samples):>10.2f} "
                  f"{percentile(samples, 0.99):>8.2f}", flush=True)


if __name__ == "__main__":
    main()
