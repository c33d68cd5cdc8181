"""The openb replay's deployed mode: kube-scheduler's integer plugin scores, the extender's
scaled and weighted scores, the live workload mix."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from allocator.ranking.policies import REGISTRY
from bench.openb.replay import Deployed, Replay
from bench.openb.run import (
    SHIPPED,
    SMALL_NODES,
    Task,
    build_parser,
    deployed_label,
    pick_nodes,
    run_task,
    tasks_for,
)
from bench.openb.trace import MILLI, TraceNode, TracePod, load_nodes, load_pods, typical_pods


def _node(name: str, cpu_milli: int, memory_mib: int) -> TraceNode:
    return TraceNode(name, cpu_milli, memory_mib, 1, "T4")


def _replay(nodes: list[TraceNode], policy: str = "binpack",
            deployed: Deployed | None = None) -> Replay:
    return Replay(nodes, REGISTRY[policy], [], deployed=deployed or Deployed(live_mix=False))


def test_kube_scores_are_least_allocated_plus_balanced_allocation_in_integers() -> None:
    # One node, 4 cores and 8 GiB; 1 core and 2 GiB already requested; the pod asks 1 core,
    # 1 GiB. LeastAllocated: cpu (4000-2000)*100/4000 = 50, memory (8-3)*100/8 = 62 (62.5
    # truncated), (50+62)/2 = 56. BalancedAllocation: fractions 0.5 and 0.375,
    # int((1 - 0.0625) * 100) = 93. Sum 149.
    replay = _replay([_node("n", 4000, 8192)])
    replay.cpu_nonzero[0] = 1000
    replay.memory_nonzero[0] = 2048 * 1024 * 1024
    cpu_free = np.array([3000])
    mem_free = np.array([8192 - 2048])
    pod = TracePod("p", 1000, 1024, 0, 0, "")
    assert replay.kube_scores(np.array([0]), pod, cpu_free, mem_free).tolist() == [149]


def test_a_pod_without_requests_counts_kube_schedulers_defaults_and_skips_balance() -> None:
    # 100m of 1000m and 200 MiB of 1000 MiB: LeastAllocated (90 + 80) / 2 = 85, no balance.
    replay = _replay([_node("n", 1000, 1000)])
    pod = TracePod("p", 0, 0, 0, 0, "")
    scores = replay.kube_scores(np.array([0]), pod, np.array([1000]), np.array([1000]))
    assert scores.tolist() == [85]


def test_extender_scores_are_scaled_weighted_and_multiplied_by_ten() -> None:
    replay = _replay([_node("a", 1000, 1000)], deployed=Deployed(
        extender="prioritize", extender_weight=3, live_mix=False))
    values = np.array([0.0, 1.0, 0.5, 1.0])
    assert replay.extender_scores(values, 3).tolist() == [0, 300, 150, 300]


def test_best_alone_leaves_the_top_score_to_the_best_node_only() -> None:
    replay = _replay([_node("a", 1000, 1000)], deployed=Deployed(scaling="best-alone",
                                                                 live_mix=False))
    values = np.array([0.0, 1.0, 0.99])
    assert replay.extender_scores(values, 1).tolist() == [0, 100, 90]


def test_the_live_mix_drops_the_memo_when_it_publishes_a_new_workload(
        synthetic_openb: Path) -> None:
    nodes = pick_nodes(load_nodes(), SMALL_NODES)
    pods = load_pods("default")
    replay = Replay(nodes, REGISTRY["fgd-ff"], typical_pods(pods),
                    deployed=Deployed(mix_refresh=50))
    seq = [p for p in pods if p.num_gpu][:200]
    result = replay.run(seq, 42)
    assert result.problems == []
    # 200 GPU pods, a workload published on the first and then every 50th: 4 workloads,
    # plus the empty one the run starts with.
    assert replay.classes.resets == 5
    assert len(replay.workload.typical) > 1


def test_with_a_weight_kube_scheduler_cannot_outvote_gpu_pods_go_where_the_policy_alone_puts_them(
        synthetic_openb: Path) -> None:
    # kube-scheduler's two plugins add at most 200 points; best-alone leaves the best node
    # alone at 10, worth 2,500 points at weight 25, 250 more than any other node: the choice
    # is the policy's own (fgd-ff's fixed order makes its best node unique).
    nodes = pick_nodes(load_nodes(), SMALL_NODES)
    pods = load_pods("default")
    seq = [p for p in pods if p.num_gpu][:300]
    placed: list[list[int]] = []  # per node: the CPU its pods took, i.e. where they went
    for deployed in (None, Deployed(extender="prioritize", extender_weight=25,
                                    scaling="best-alone", live_mix=False)):
        replay = Replay(nodes, REGISTRY["fgd-ff"], typical_pods(pods), cpu_pods="least",
                        ties="random", deployed=deployed)
        res = replay.run(seq, 42)
        assert res.problems == []
        placed.append(replay.cpu_nonzero.tolist())
    assert placed[0] == placed[1]
    assert sum(1 for taken in placed[1] if taken) > 10


def test_filter_best_places_as_prioritize_with_a_weight_kube_scheduler_cannot_outvote(
        synthetic_openb: Path) -> None:
    # The extender's filter passing only the policy's best node(s) is what prioritize says
    # when its margin is out of kube-scheduler's reach (best-alone, weight 1,000: 10,000
    # points against at most 200): the same pods on the same nodes, CPU-only pods included.
    nodes = pick_nodes(load_nodes(), SMALL_NODES)
    pods = load_pods("default")
    placed: list[list[int]] = []
    for deployed in (Deployed(extender="filter-best", live_mix=False),
                     Deployed(extender="prioritize", extender_weight=1000,
                              scaling="best-alone", live_mix=False)):
        replay = Replay(nodes, REGISTRY["fgd-cpu"], typical_pods(pods), deployed=deployed)
        res = replay.run(pods[:400], 42)
        assert res.problems == []
        placed.append(replay.cpu_nonzero.tolist())
    assert placed[0] == placed[1]
    assert sum(1 for taken in placed[0] if taken) > 10


def test_the_deployed_profile_is_labelled_by_what_differs_from_the_shipped_settings() -> None:
    assert SHIPPED.extender == "filter-best" and SHIPPED.cpu_only_weight == 10
    assert deployed_label(SHIPPED) == "deployed"
    assert deployed_label(Deployed(extender="prioritize",
                                   extender_weight=SHIPPED.extender_weight + 1)).startswith(
        f"deployed-w{SHIPPED.extender_weight + 1}-")
    assert deployed_label(Deployed(cpu_only_weight=0)) == "deployed-filter-best-live-cpu0"


def test_a_deployed_task_runs_and_passes_the_invariants(synthetic_openb: Path) -> None:
    [result] = run_task(Task("default", "fgd-cpu", (42,), "deployed", SMALL_NODES,
                             max_pods=400, deployed=Deployed(cpu_only_weight=1)))
    assert result.pods == 400
    assert result.problems == ()
    assert result.placed > 350
    assert result.capacity_gpus * MILLI > 0


def test_per_pod_policies_are_not_modelled_in_deployed_mode() -> None:
    with pytest.raises(ValueError, match="per-pod"):
        Replay([_node("a", 1000, 1000)], REGISTRY["random"], [], deployed=Deployed())


@pytest.mark.parametrize("policy", ["hami-binpack", "hami-spread"])
def test_hamis_policies_run_on_cards_capped_at_a_split_count(synthetic_openb: Path,
                                                              policy: str) -> None:
    [result] = run_task(Task("default", policy, (42,), "deployed-split2", SMALL_NODES,
                             max_pods=400, deployed=Deployed(), split_count=2))
    # The replay's invariant check rebuilds every node from its records and reports a card
    # over its split count as a problem.
    assert result.problems == ()
    assert result.placed > 300


def test_split_count_caps_every_card_and_names_the_profile() -> None:
    node = TraceNode("a", 1000, 1000, 2, "T4", split_count=10)
    assert [c.max_shares for c in node.cards] == [10, 10]
    assert [c.max_shares for c in _node("b", 1000, 1000).cards] == [None]
    args = build_parser().parse_args(["--profile", "deployed", "--split-count", "10",
                                      "--policies", "hami-binpack"])
    [task] = tasks_for(args)
    assert (task.profile, task.split_count) == ("deployed-split10", 10)
