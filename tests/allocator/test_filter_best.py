"""Filter answers with the nodes the policy scores best (``filter_best``, the default): exactly
the fitting nodes prioritize would give the top score, never a node the pod does not fit, and
every reason when no node fits."""

from __future__ import annotations

import random

import numpy as np
import numpy.typing as npt
import pytest
from builders import VOCAB, NullApi, make_gpu_pod, make_node, request, share, whole
from test_content_sharing import REQUESTS, _cluster

from allocator.picture.state import ClusterState
from allocator.ranking import fast as fast_ranking
from allocator.ranking.every_node import TriesAfterMisses, asked_among
from allocator.ranking.fast import FastRanker, Ranking
from allocator.ranking.policies import MAX_SCORE, REGISTRY
from allocator.service.config import Settings
from allocator.verbs.core import Allocator, AllocatorConfig, assemble
from allocator.verbs.filter import FilterOutcome
from tessera.vocabulary import ConfigError, PodRequest


def _allocators(state: ClusterState, policy: str) -> tuple[Allocator, Allocator]:
    """(filter_best on, off) over the same state."""
    best = assemble(state, api=NullApi(),
                     config=AllocatorConfig(default_policy=policy, seed=3))
    every = assemble(state, api=NullApi(),
                      config=AllocatorConfig(default_policy=policy, seed=3, filter_best=False))
    return best, every


@pytest.mark.parametrize("req", REQUESTS)
@pytest.mark.parametrize("policy", sorted(REGISTRY))
def test_filter_keeps_exactly_the_fitting_nodes_prioritize_scores_best(
        req: PodRequest, policy: str) -> None:
    state = _cluster(5)
    best, every = _allocators(state, policy)
    names = [*state.node_names(), "ghost"]
    pod = make_gpu_pod("p", req, namespace="ns", uid="u")
    fitting = every.filter(pod, names).nodes
    scores = dict(every.prioritize(pod, fitting))
    expected = [n for n in fitting if scores[n] == MAX_SCORE]
    for _ in range(2):  # cold, then from the shared memos
        out = best.filter(pod, names)
        assert out.nodes == expected
        assert out.failed == {} and out.unresolvable == {}
    assert expected, "some node fits every request of this cluster"
    if len(fitting) > 1 and len(set(scores.values())) > 1:
        assert len(expected) < len(fitting)


@pytest.mark.parametrize("policy", ["fgd-ff", "fgd-cpu"])
def test_a_first_fit_order_leaves_one_node_of_many_alike(policy: str) -> None:
    state = ClusterState(VOCAB)
    state.replace_nodes(make_node(f"n{i}", count=4) for i in range(50))
    state.mark_synced()
    best, _ = _allocators(state, policy)
    out = best.filter(make_gpu_pod("p", request(whole(cards=1)), uid="u"), state.node_names())
    assert len(out.nodes) == 1


def test_alike_nodes_without_an_order_all_stay_for_the_scheduler_to_choose() -> None:
    state = ClusterState(VOCAB)
    state.replace_nodes(make_node(f"n{i}", count=4) for i in range(20))
    state.mark_synced()
    best, _ = _allocators(state, "binpack")
    names = state.node_names()
    assert best.filter(make_gpu_pod("p", request(whole(cards=1)), uid="u"), names).nodes == names


def test_when_no_node_fits_every_reason_is_given_as_without_filter_best() -> None:
    state = ClusterState(VOCAB)
    state.replace_nodes([make_node("a", count=1), make_node("b", count=1)])
    state.mark_synced()
    best, every = _allocators(state, "fgd-cpu")
    pod = make_gpu_pod("p", request(whole(cards=2)), uid="u")
    out = best.filter(pod, ["a", "b", "ghost"])
    assert out.nodes == []
    assert out == every.filter(pod, ["a", "b", "ghost"])
    assert set(out.failed) | set(out.unresolvable) == {"a", "b", "ghost"}


def test_one_fitting_node_is_the_answer_and_the_others_need_no_reason() -> None:
    state = ClusterState(VOCAB)
    state.replace_nodes([make_node("a", count=1), make_node("b", count=4),
                         make_node("c", count=2)])
    state.mark_synced()
    best, every = _allocators(state, "fgd-cpu")
    pod = make_gpu_pod("p", request(whole(cards=3)), uid="u")
    assert best.filter(pod, ["a", "b", "c", "ghost"]) == FilterOutcome(["b"], {}, {})
    out = every.filter(pod, ["a", "b", "c", "ghost"])
    assert out.nodes == ["b"]
    assert set(out.failed) | set(out.unresolvable) == {"a", "c", "ghost"}


def test_a_pod_without_gpu_request_passes_every_node() -> None:
    state = _cluster(1)
    best, _ = _allocators(state, "fgd-cpu")
    pod = make_gpu_pod("p", request(share(core=30, mem=1000)), uid="u")
    pod["metadata"]["annotations"] = {}
    pod["spec"]["containers"][0]["resources"] = {}
    names = state.node_names()
    assert best.filter(pod, names).nodes == names


@pytest.mark.parametrize(("env", "on"), [({}, True), ({"TESSERA_FILTER_BEST": "false"}, False),
                                         ({"TESSERA_FILTER_BEST": "true"}, True)])
def test_filter_best_is_on_by_default_and_can_be_turned_off(env: dict[str, str],
                                                            on: bool) -> None:
    assert Settings.from_env(env).core.filter_best is on


def test_a_bad_filter_best_switch_is_refused() -> None:
    with pytest.raises(ConfigError, match="TESSERA_FILTER_BEST"):
        Settings.from_env({"TESSERA_FILTER_BEST": "maybe"})


def test_a_name_bias_can_lift_a_node_over_a_higher_shared_score() -> None:
    """Ranking.best reads the biases of every node within the bias bound of the highest
    shared score, not only of the nodes that have it."""
    shared = np.array([1.0, 0.99, 0.99, 0.5])
    bias = np.array([0.0, 0.001, 0.03, 0.039])
    read: list[int] = []

    def biases(positions: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        read.extend(positions.tolist())
        return bias[positions]

    ranking = Ranking(shared, biases, bias_bound=0.04)
    assert ranking.best(["a", "b", "c", "d"]) == ["c"]
    assert sorted(read) == [0, 1, 2]  # d's shared score is beyond the bound: never read
    assert ranking.raw(["a", "b", "c", "d"]) == pytest.approx([1.0, 0.991, 1.02, 0.539])
    assert ranking.scaled(["a", "b", "c", "d"])[2] == MAX_SCORE
    # without a bias, every node of the highest shared score
    assert Ranking(shared).best(["a", "b", "c", "d"]) == ["a"]


@pytest.mark.parametrize("policy", sorted(REGISTRY))
def test_ranking_every_node_answers_as_ranking_only_the_asked_ones(
        policy: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Filter ranks every node it knows and keeps the best that were asked
    (``FastRanker.best_known``): the answer is the one of ranking only the asked
    nodes, for asked lists of every kind (all, most, about half, shuffled, with strangers),
    pod after pod, each pod's hold taken as the answer leaves it."""
    rng = random.Random(policy)
    fast_state, asked_state = _cluster(7), _cluster(7)  # the same cluster, twice
    fast = assemble(fast_state, api=NullApi(),
                     config=AllocatorConfig(default_policy=policy, seed=3))
    reference = assemble(asked_state, api=NullApi(),
                          config=AllocatorConfig(default_policy=policy, seed=3))
    monkeypatch.setattr(reference.ranker, "best_known", lambda *_args: None)
    assert isinstance(fast.ranker, FastRanker)
    fast.ranker.every_node_tries = TriesAfterMisses(most_skipped=0)  # tried on every call
    narrowed: list[int] = []
    real_asked_among = fast_ranking.asked_among

    def counted(candidates: list[str], names: list[str]) -> list[str]:
        narrowed.append(len(candidates))
        return real_asked_among(candidates, names)

    monkeypatch.setattr(fast_ranking, "asked_among", counted)
    everyone = fast_state.node_names()
    for i in range(60):
        names = rng.sample(everyone, rng.choice([len(everyone), 35, 25, 20]))
        if i % 3 == 0:
            names.insert(rng.randrange(len(names) + 1), f"ghost-{i}")
        pod = make_gpu_pod(f"p{i}", REQUESTS[i % len(REQUESTS)], namespace="ns", uid=f"u{i}")
        assert fast.filter(pod, names) == reference.filter(pod, names), (i, names)
    if policy != "random":  # random ranks by name, node by node: never narrowed this way
        assert len(narrowed) >= 30, narrowed


def test_the_best_are_found_among_the_asked_names_in_their_order() -> None:
    names = ["d", "a", "c", "b", "a"]
    assert asked_among(["c", "a"], names) == ["a", "c"]  # scanned: a few candidates
    assert asked_among(["x"], names) == []
    many = ["b", "x", "c", "y", "a", "z"]  # more than a scan's worth: through a set
    assert asked_among(many, names) == ["a", "c", "b", "a"]


def test_after_misses_the_shortcut_is_skipped_for_longer_each_time_and_a_hit_resets() -> None:
    tries = TriesAfterMisses(most_skipped=4)

    def run(calls: int) -> str:
        return "".join("t" if tries.should_try() else "." for _ in range(calls))

    assert run(3) == "ttt"  # every call while nothing missed
    outcomes = []
    for _ in range(5):
        tries.miss()
        outcomes.append(run(5))
    assert outcomes == [".tttt", "..ttt", "....t", "....t", "....t"]
    tries.hit()
    tries.miss()
    assert run(3) == ".tt"  # back to skipping one


def test_filter_stops_ranking_every_node_while_the_best_are_never_asked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    state = ClusterState(VOCAB)
    state.replace_nodes([make_node("big", count=8), make_node("small", count=2)])
    state.mark_synced()
    best, _ = _allocators(state, "fgd-cpu")
    assert isinstance(best.ranker, FastRanker)
    columns = best.ranker.columns
    ranked_all: list[int] = []
    every_node = columns.every_node

    def counted() -> object:
        ranked_all.append(1)
        return every_node()

    monkeypatch.setattr(columns, "every_node", counted)
    for i in range(10):  # "small" alone is asked while "big" fits the pod better
        pod = make_gpu_pod(f"p{i}", request(whole(cards=2)), uid=f"u{i}")
        assert best.filter(pod, ["small"]).nodes == ["small"]
        state.release_hold(f"u{i}")
    # tried at calls 1, 3, 6 (skipping 1, then 2, then 4 calls); a plain lookup otherwise
    assert len(ranked_all) == 3
