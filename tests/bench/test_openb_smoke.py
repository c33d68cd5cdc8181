"""Smoke test of the openb replay: the --small setting (default trace, seed 42, a 150-node
sample of the cluster, inflated to 130% of that sample's GPUs), for random and fgd."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from allocator.ranking.fit import CardState, NodeState
from allocator.ranking.policies import REGISTRY
from bench.openb.replay import Replay, RunResult
from bench.openb.run import SMALL_NODES, Task, pick_nodes, run_task
from bench.openb.trace import MILLI, load_nodes, load_pods, typical_pods, workload_sequence
from tessera.vocabulary import ContainerAllocation


@pytest.fixture(scope="module")
def small() -> dict[str, RunResult]:
    nodes = pick_nodes(load_nodes(), SMALL_NODES)
    pods = load_pods("default")
    capacity = MILLI * sum(n.gpus for n in nodes)
    seq = workload_sequence(pods, 42, capacity)
    out = {}
    for name in ("random", "fgd"):
        replay = Replay(nodes, REGISTRY[name], typical_pods(pods), trace="default",
                        cpu_pods="policy", ties="ordered")
        out[name] = replay.run(seq, 42)
    return out


@pytest.mark.parametrize("policy", ["random", "fgd"])
def test_allocation_never_decreases_and_never_exceeds_arrivals_or_capacity(
        small: dict[str, RunResult], policy: str) -> None:
    res = small[policy]
    assert (np.diff(res.allocated) >= 0).all()
    assert (res.allocated <= res.arrived).all()
    assert res.allocated[-1] <= res.capacity_milli
    curve = [v for v in res.curve() if not math.isnan(v)]
    assert all(b >= a - 1e-9 for a, b in itertools.pairwise(curve))
    assert max(curve) <= 100.0


@pytest.mark.parametrize("policy", ["random", "fgd"])
def test_the_replay_reaches_130_percent_and_its_end_state_passes_the_fit_invariants(
        small: dict[str, RunResult], policy: str) -> None:
    res = small[policy]
    assert res.arrived[-1] / res.capacity_milli > 1.29
    assert not math.isnan(res.curve()[130])
    assert res.problems == []
    assert res.failed_gpu_pods > 0  # the workload overflows the sample: failures are real


def test_fgd_allocates_clearly_more_than_random_at_full_arrival(
        small: dict[str, RunResult]) -> None:
    assert small["fgd"].curve()[100] >= small["random"].curve()[100] + 2.0


def test_the_invariant_check_reports_an_over_committed_card() -> None:
    nodes = pick_nodes(load_nodes(), 3)
    replay = Replay(nodes, REGISTRY["binpack"], [])
    node = nodes[0]
    card = node.cards[0]
    # Two shares of 60% recorded on one card: the records over-commit it.
    recs = [("a", (ContainerAllocation("main", (card.index,), 60, card.memory_mib * 6 // 10),)),
            ("b", (ContainerAllocation("main", (card.index,), 60, card.memory_mib * 6 // 10),))]
    states = [NodeState(n.name, tuple(CardState(c) for c in n.cards)) for n in nodes]
    states[0] = NodeState(node.name, (CardState(card, 120, card.memory_mib * 12 // 10, False,
                                                (("a", "main"), ("b", "main"))),
                                      *states[0].cards[1:]))
    problems = replay.check(states, [recs, [], []], replay.cpu_cap.copy(),
                            replay.mem_cap.copy(), 1200)
    assert any("over-commit" in p for p in problems)


def test_the_small_task_is_what_the_cli_runs() -> None:
    [result] = run_task(Task("default", "fgd", (42,), "paper", SMALL_NODES, max_pods=400))
    assert result.pods == 400
    assert result.problems == ()
    assert result.curve[10] == pytest.approx(10.0, abs=1.0)
