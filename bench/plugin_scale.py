"""How long ``kubectl tessera`` takes on a big cluster, its API reads left out.

Builds N nodes x 8 cards of 16 GiB as Node objects, and 0-3 quarter-card pods per card as
bound Pod objects with allocation records (seeded), then times the plugin's pure steps:
the picture, ``inspect``'s table, ``why`` for one pod, ``what-if`` per policy, and
``defrag-plan`` for three more idle cards than there are.

Usage: ``.venv/bin/python bench/plugin_scale.py [--nodes 100 1000] [--policy binpack ...]``
"""

from __future__ import annotations

import argparse
import random
import time
from typing import Any

from kubectl_tessera import defrag, inspection, whatif, why
from kubectl_tessera.picture import build_picture
from tessera.dialects import DialectConfig
from tessera.vocabulary import (
    Allocation,
    ContainerAllocation,
    ContainerRequest,
    PodRequest,
    Vocabulary,
    encode_allocation,
    encode_request,
)

CARDS = 8
MIB = 16384
VOCAB = Vocabulary()
QUARTER = PodRequest((ContainerRequest("main", core_percent=25, memory_mib=2000),))


def cluster(nodes: int, seed: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rng = random.Random(seed)
    node_objs = [{
        "metadata": {"name": f"n{i:05d}", "labels": {VOCAB.node_model_label: "T4"}},
        "status": {"allocatable": {VOCAB.core_resource: str(100 * CARDS),
                                   VOCAB.memory_resource: str(MIB * CARDS)}},
    } for i in range(nodes)]
    pods: list[dict[str, Any]] = []
    for i in range(nodes):
        for card in range(CARDS):
            for _ in range(rng.choice([0, 1, 2, 3])):
                uid = f"uid-{len(pods)}"
                record = Allocation(f"n{i:05d}", (ContainerAllocation(
                    "main", (card,), core_percent=25, memory_mib=2000),), float(len(pods)), uid)
                pods.append({
                    "metadata": {"name": f"p{len(pods)}", "namespace": "bench", "uid": uid,
                                 "annotations": {
                                     VOCAB.request_annotation: encode_request(QUARTER),
                                     VOCAB.allocation_annotation: encode_allocation(record)}},
                    "spec": {"nodeName": f"n{i:05d}"},
                    "status": {"phase": "Running"},
                })
    return node_objs, pods


def timed(label: str, call: Any) -> Any:
    start = time.perf_counter()
    result = call()
    print(f"  {label:<28}{time.perf_counter() - start:8.2f} s", flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--policy", action="append", default=[])
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    policies = args.policy or ["binpack", "spread", "fgd-ff", "random"]
    for n in args.nodes:
        run(n, args.seed, policies)


def run(n: int, seed: int, policies: list[str]) -> None:
    nodes, pods = cluster(n, seed)
    print(f"{n} nodes x {CARDS} cards, {len(pods)} pods")
    picture = timed("picture", lambda: build_picture(nodes, pods, DialectConfig()))
    timed("inspect (table)", lambda: inspection.render(picture, list(picture.nodes)))
    timed("why (one pod)", lambda: why.explain(picture, picture.pods[0], "binpack"))
    for policy in policies:
        timed(f"what-if --policy {policy}",
              lambda policy=policy: whatif.what_if(picture, [policy], "binpack"))
    idle = sum(node.state.idle_cards for node in picture.nodes)
    plan = timed("defrag-plan --cards idle+3", lambda: defrag.plan(picture, idle + 3, "binpack"))
    print(f"  (plan: {len(plan.moves)} moves, exact={plan.exact})")

if __name__ == "__main__":
    main()
