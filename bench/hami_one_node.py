"""40 pods on one 8-card node with HAMi's device plugin: how long until all run.

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

Usage: ``.venv/bin/python -m bench.hami_one_node [--pods 40] [--repeat 3]``
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from allocator.kube.client import KubeClient
from devcluster.binaries import ensure_binaries
from devcluster.cluster import DevCluster
from devcluster.hami_node import node_envs, visible
from devcluster.nodes import delete_nodes, uniform
from devcluster.options import Options
from devcluster.workloads import container, ensure_namespace, make_pod, wait_for
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
    per_card: dict[str, int] = {}
    for p in core.list_namespaced_pod(namespace).items:
        for uuid in visible(node_envs(api.get_pod(namespace, p.metadata.name))):
            per_card[uuid] = per_card.get(uuid, 0) + core_share
    core.delete_namespace(namespace)
    delete_nodes(core, [node_name])
    return {"run": run, "pods": pods, "seconds": round(elapsed, 2),
            "allocated_by_standin": fleet.served - served_before,
            "max_card_cores": max(per_card.values())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=40)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    dev = DevCluster(ensure_binaries(), None, Options(agent_profile=AgentProfile.HAMI))
    try:
        dev.start()
        api = KubeClient.from_config(str(dev.kubeconfig))
        rows = [one_run(dev, api, run, args.pods) for run in range(args.repeat)]
    finally:
        dev.stop()
    for row in rows:
        print(row)
    print(f"median {statistics.median(r['seconds'] for r in rows):.2f} s for {args.pods} pods "
          f"on one {CARDS}-card node (shared machine)")


if __name__ == "__main__":
    main()
