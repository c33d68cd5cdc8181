"""What card-aware preemption's decision costs at scale (allocator/preemption/, in process).

N nodes of 4 cards, two 50% shares on every card, priorities 0-4 and a start time per node:
every node is a candidate. Two fleets: *distinct* (priorities drawn per pod, so nearly every
node differs: the full reprieve walk on every node, the worst case) and *alike* (five patterns
of priorities: nodes alike are worked out once, allocator/preemption/alike.py).
Measured: the CPU time (``time.process_time``) of ``choose_preemption`` and the fit checks it
made, for a whole card, two whole cards and a 60% share at priority 10; then N nodes that the
pre-check rules out (one card of lower priority, three of equal priority, two whole cards
asked).

Usage: ``.venv/bin/python -m bench.preemption_core [--nodes 1000]``
"""

from __future__ import annotations

import argparse
import random
import time
from unittest import mock

import allocator.preemption.victims as victims_module
from allocator.preemption import GpuPod, NodeOffer, NodeVictims, Preemptor, choose_preemption
from allocator.ranking.cards import Card, CardState, NodeState, apply_placement
from allocator.ranking.fit import fits
from tessera.vocabulary import Allocation, ContainerAllocation, ContainerRequest, PodRequest

CARDS = 4


def _pod(uid: str, card: int, core: int, priority: int, started: float) -> GpuPod:
    container = ContainerAllocation("main", (card,), core_percent=core,
                                    memory_mib=4000 if core else 0)
    return GpuPod(uid, "bench", uid, Allocation("", (container,), pod_uid=uid), priority,
                  started)


def _offer(name: str, pods: list[GpuPod]) -> NodeOffer:
    state = NodeState(name, tuple(CardState(Card(i, "A100", 40960)) for i in range(CARDS)))
    for pod in pods:
        state = apply_placement(state, pod.containers, pod.uid)
    return NodeOffer(state, tuple(pods))


def full_of_shares(count: int, distinct: bool) -> list[NodeOffer]:
    """Alike: priorities in one of 5 patterns, one start time a node. Distinct: priorities
    drawn per pod (seeded), so nearly every node differs (the memo of alike nodes misses)."""
    draw = random.Random(47)
    return [_offer(f"n{n}", [
        _pod(f"n{n}-{c}-{k}", c, 50, draw.randrange(5) if distinct else (n + c + k) % 5,
             float(n)) for c in range(CARDS) for k in range(2)]) for n in range(count)]


def ruled_out(count: int) -> list[NodeOffer]:
    return [_offer(f"m{n}", [_pod(f"m{n}-{c}", c, 0, 1 if c == 0 else 10, 0.0)
                             for c in range(CARDS)]) for n in range(count)]


def measure(label: str, request: PodRequest, nodes: list[NodeOffer]) -> None:
    preemptor = Preemptor("preemptor", request, 10)
    start = time.process_time()
    result = choose_preemption(preemptor, nodes)
    spent = time.process_time() - start
    # Counted in a second run, by a spy around the core's own fit (it slows every call).
    with mock.patch.object(victims_module, "fits", wraps=fits) as spy:
        choose_preemption(preemptor, nodes)
    calls = [spy.call_count]
    what = (f"{result.node}: {len(result.victims)} victims"
            if isinstance(result, NodeVictims) else "no preemption")
    print(f"{label:<28} {spent * 1000:8.0f} ms CPU {calls[0]:7d} fit checks   {what}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    nodes = parser.parse_args().nodes
    asks = [("whole card", PodRequest((ContainerRequest("c", cards=1),))),
            ("two whole cards", PodRequest((ContainerRequest("c", cards=2),))),
            ("60% share", PodRequest((ContainerRequest("c", core_percent=60,
                                                       memory_mib=2000),)))]
    for fleet, distinct in (("distinct", True), ("alike", False)):
        full = full_of_shares(nodes, distinct)
        for label, request in asks:
            measure(f"{label}, {fleet}", request, full)
    measure("ruled out by the pre-check", PodRequest((ContainerRequest("c", cards=2),)),
            ruled_out(nodes))


if __name__ == "__main__":
    main()
