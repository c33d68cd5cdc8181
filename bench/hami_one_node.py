"""40 pods on one 8-card node with HAMi's device plugin: how long until all run, against the
plugin's own limit, and which Events they cost.

HAMi's users report 15-30 minutes for this with hami-scheduler: its bind fails whenever the
node lock is held (by the previous pod, until the plugin's Allocate releases it), and
kube-scheduler retries the pod only after its backoff. Tessera's bind waits for the lock
instead (allocator/hami/lock.py).

The dev cluster runs the ``hami`` agent profile (webhook and allocator), the real
kube-scheduler with Tessera's extender, and the HAMi node stand-in (devcluster/hami_node.py,
in this process) as the node's device plugin; KWOK runs a pod only after the stand-in's
``bind-phase: success``. Each pod asks HAMi's own dialect for a fifth of a card
(``nvidia.com/gpu: 1``, ``nvidia.com/gpucores: 20``, ``nvidia.com/gpumem: 8192`` of 81,920
MiB), so the 40 fill the 8 cards exactly. Timed: from the first pod's create to the last
pod Running (creates included), per repeat on a fresh namespace.

The plugin's own limit: it allocates one pod at a time per node, so no scheduler can run the
pods faster than the sum of its Allocate times. With ``--qps 5`` (the default) the stand-in's
client is rate-limited as HAMi v2.10.0's plugin's is (5 requests/s, burst 10:
devcluster/plugin_client.py) and it makes the plugin's requests, so each Allocate takes as
long as the plugin's; ``limit_s`` is the sum of the Allocate times of this run's pods (pods x
their mean), ``vs_limit`` the time to all Running over it. ``--qps 0``: the unlimited
stand-in. ``events`` counts the namespace's Events by type and reason (an aggregated Event
by its count); ``bind_failures`` the Warning Events whose message says a bind failed.

Usage: ``.venv/bin/python -m bench.hami_one_node [--pods 40] [--repeat 3] [--qps 5]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

from allocator.kube.client import KubeClient
from devcluster.binaries import ensure_binaries
from devcluster.cluster import DevCluster
from devcluster.hami_node import node_envs, visible
from devcluster.nodes import delete_nodes, uniform
from devcluster.options import Options
from devcluster.plugin_client import ClientRate
from devcluster.workloads import (
    container,
    ensure_namespace,
    events_by_reason,
    make_pod,
    wait_for,
)
from tessera.agent_profiles import AgentProfile

CARDS = 8
MIB = 81920


def one_run(dev: DevCluster, api: KubeClient, run: int, pods: int) -> dict[str, Any]:
    core = dev.core_v1()
    namespace, node_name = f"hami-bench-{run}", f"hami-bench-node-{run}"
    ensure_namespace(core, namespace)
    dev.add_nodes([uniform(node_name, CARDS, "H100", MIB, labels={"bench": node_name})])
    fleet = dev.hami_fleet
    served_before = fleet.served
    allocates_before = len(fleet.allocate_seconds())
    time.sleep(1.0)  # the allocator's node watch has the new node
    core_share = 100 * CARDS // pods if pods >= CARDS else 100
    started = time.perf_counter()
    for i in range(pods):
        pod = make_pod(f"p{i}", [container("main", {
            "nvidia.com/gpu": "1", "nvidia.com/gpucores": str(core_share),
            "nvidia.com/gpumem": str(MIB * core_share // 100)})])
        pod["spec"]["nodeSelector"] = {"bench": node_name}
        core.create_namespaced_pod(namespace, pod)

    def running() -> bool:
        items = core.list_namespaced_pod(namespace).items
        return sum(1 for p in items if p.status.phase == "Running") == pods

    wait_for(f"{pods} pods Running", running, timeout=600, interval=0.1)
    elapsed = time.perf_counter() - started
    allocate_s = fleet.allocate_seconds()[allocates_before:]
    time.sleep(2.0)  # the last Events written
    events = events_by_reason(core, namespace)
    per_card: dict[str, int] = {}
    for p in core.list_namespaced_pod(namespace).items:
        for uuid in visible(node_envs(api.get_pod(namespace, p.metadata.name))):
            per_card[uuid] = per_card.get(uuid, 0) + core_share
    core.delete_namespace(namespace)
    delete_nodes(core, [node_name])
    limit = sum(allocate_s)
    return {"run": run, "pods": pods, "seconds": round(elapsed, 2),
            "limit_s": round(limit, 2), "vs_limit": round(elapsed / limit, 3) if limit else None,
            "allocate_ms_mean": round(1000 * limit / len(allocate_s), 1) if allocate_s else None,
            "allocated_by_standin": fleet.served - served_before,
            "max_card_cores": max(per_card.values()),
            "events": events["by_reason"], "bind_failures": events["bind_failures"]}



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=40)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--qps", type=float, default=5.0,
                        help="the stand-in's client rate (HAMi's plugin: 5; 0: unlimited)")
    args = parser.parse_args()
    rate = ClientRate(args.qps) if args.qps > 0 else None
    dev = DevCluster(ensure_binaries(), None, Options(agent_profile=AgentProfile.HAMI,
                                                      hami_client_rate=rate))
    try:
        dev.start()
        api = KubeClient.from_config(str(dev.kubeconfig))
        rows = [one_run(dev, api, run, args.pods) for run in range(args.repeat)]
    finally:
        dev.stop()
    for row in rows:
        print(row)
    print(f"load average at the end: {os.getloadavg()}")
    print(f"median {statistics.median(r['seconds'] for r in rows):.2f} s for {args.pods} pods "
          f"on one {CARDS}-card node (shared machine)")


if __name__ == "__main__":
    main()
