"""``kubectl tessera`` through the real kubectl on the dev cluster, against placements the
allocator really made (read back from the API with the report oracle)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from devcluster.cluster import DevCluster
from devcluster.nodes import GpuNodeSpec, uniform
from devcluster.workloads import (
    container,
    get_object,
    list_objects,
    make_pod,
    unschedulable_message,
    wait_for,
)
from kubectl_tessera.report import card_usage

pytestmark = pytest.mark.e2e

#: The venv's bin holds the kubectl-tessera script the package installs.
VENV_BIN = Path(sys.executable).parent


def kubectl(cluster: DevCluster, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig),
           "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}", "NO_COLOR": "1"}
    return subprocess.run([str(cluster.binaries.kubectl), *args], env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def tessera(cluster: DevCluster, *args: str) -> Any:
    """``kubectl tessera ARGS -o json``, decoded (the command must succeed)."""
    done = kubectl(cluster, "tessera", *args, "-o", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def share_pod(name: str, selector: dict[str, str]) -> dict[str, Any]:
    # spread, so that the two halves land on different nodes: a fragmented cluster.
    return make_pod(name, [container(limits={"elasticgpu.io/gpu-core": "50",
                                             "elasticgpu.io/gpu-memory": "1000"})],
                    annotations={"elasticgpu.io/gpu-policy": "spread"},
                    node_selector=selector)


def test_kubectl_tessera_inspects_explains_replays_and_plans_on_known_placements(
        cluster: DevCluster, core_v1: Any, namespace: str,
        pool: Any) -> None:
    specs: list[GpuNodeSpec] = [uniform(f"{namespace}-{x}", 2, "Tesla-T4", 15360)
                                for x in ("x", "y")]
    selector = pool(specs)
    only_pool = ["-l", ",".join(f"{k}={v}" for k, v in selector.items())]

    def bound(name: str) -> dict[str, Any] | None:
        pod = get_object(core_v1.read_namespaced_pod, name, namespace)
        return pod if pod["spec"].get("nodeName") else None

    for name in ("a", "b"):
        core_v1.create_namespaced_pod(namespace, share_pod(name, selector))
        wait_for(f"{name} bound", lambda name=name: bound(name), timeout=60)
    big = make_pod("big", [container(limits={"elasticgpu.io/gpu-core": "200"})],
                   node_selector=selector)
    core_v1.create_namespaced_pod(namespace, big)
    message = wait_for("big found unschedulable", lambda: unschedulable_message(
        get_object(core_v1.read_namespaced_pod, "big", namespace)), timeout=60)

    pods = {p["metadata"]["name"]: p for p in list_objects(core_v1.list_namespaced_pod,
                                                           namespace)}
    node_of = {n: pods[n]["spec"]["nodeName"] for n in ("a", "b")}
    assert node_of["a"] != node_of["b"]  # the policy spread them

    # kubectl finds the plugin on PATH.
    listed = kubectl(cluster, "plugin", "list")
    assert "kubectl-tessera" in listed.stdout, listed.stdout + listed.stderr

    # inspect: the same cards and holders as the records on the pods say.
    label = ",".join(f"{k}={v}" for k, v in selector.items())
    oracle = card_usage(list_objects(core_v1.list_node, label_selector=label),
                        list(pods.values()), cluster.vocabulary)
    doc = tessera(cluster, "inspect", *only_pool)
    seen = {n["name"]: [(c["index"], c["coreUsedPercent"], c["memoryUsedMiB"],
                         [f"{p['namespace']}/{p['name']}" for p in c["pods"]])
                        for c in n["cards"]] for n in doc["nodes"]}
    expected = {node: [(u.card.index, u.core_used, u.memory_used, [h.pod for h in u.holdings])
                       for u in sorted(usage, key=lambda u: u.card.index)]
                for node, usage in oracle.items()}
    assert seen == expected
    assert seen[node_of["a"]][0] == (0, 50, 1000, [f"{namespace}/a"])
    table = kubectl(cluster, "tessera", "inspect", node_of["a"])
    assert table.returncode == 0, table.stderr
    assert f"{namespace}/a [main] 50% core, 1000 MiB" in table.stdout

    # why: the Pending pod gets the allocator's filter reason for each node.
    why = tessera(cluster, "why", f"{namespace}/big", *only_pool)
    assert [(v["node"], v["outcome"], v["reason"]) for v in why["verdicts"]] == [
        (s.name, "no-room", "needs 2 whole cards (1 free)") for s in specs]
    assert why["scheduler_message"] == message
    why_a = tessera(cluster, "why", "a", "-n", namespace, *only_pool)
    assert why_a["node"] == node_of["a"]
    assert [c["cards"] for c in why_a["cards"]] == [[0]]

    # what-if: binpack would have put both halves on one card and had room for big.
    replay = tessera(cluster, "what-if", "--policy", "binpack", "--policy", "spread",
                     *only_pool)
    assert replay["now"]["unplaced"] == [f"{namespace}/big"]
    binpack, spread = replay["outcomes"]
    assert (binpack["unplaced"], binpack["idle_cards"]) == ([], 1)
    assert (spread["unplaced"], spread["idle_cards"]) == ([f"{namespace}/big"], 2)
    # HAMi's own policies, joined by a comma: hami-binpack sends b to the node a already
    # uses, onto a's card (it scores highest with b): room for big; hami-spread sends b to
    # the unused node: none.
    replay = tessera(cluster, "what-if", "--policy", "hami-binpack,hami-spread", *only_pool)
    assert [(o["policy"], o["unplaced"], o["idle_cards"]) for o in replay["outcomes"]] == [
        ("hami-binpack", [], 1), ("hami-spread", [f"{namespace}/big"], 2)]

    # defrag-plan: a third idle card takes one move, a half onto the other half's card.
    plan = tessera(cluster, "defrag-plan", "--cards", "3", *only_pool)
    assert plan["feasible"] and plan["exact"]
    (move,) = plan["moves"]
    moved = move["pod"].split("/")[1]
    other = "b" if moved == "a" else "a"
    assert (move["from_node"], move["to_node"], move["to_cards"]) == (
        node_of[moved], node_of[other], [0])
    # --on-one-node: the room big needs, two idle cards together, is also one move away.
    plan = tessera(cluster, "defrag-plan", "--cards", "2", "--on-one-node", *only_pool)
    (move,) = plan["moves"]
    on_x = "a" if node_of["a"] == specs[0].name else "b"
    assert plan["node"] == specs[0].name  # both nodes need one move: the first by name
    assert (move["pod"], move["to_node"], move["to_cards"]) == (
        f"{namespace}/{on_x}", specs[1].name, [0])
    assert bound("a") and bound("b")  # a dry run: nothing was evicted

    # Bad input through kubectl: one line, a non-zero exit.
    ghost = kubectl(cluster, "tessera", "why", "ghost", "-n", namespace)
    assert ghost.returncode == 2
    assert ghost.stderr.strip() == f"error: pod {namespace}/ghost not found"
