"""Mapping openb pods to Tessera requests, and the workload sequence of one run: the machinery
on the synthetic trace, the facts the benchmarks rest on on the real one."""

from __future__ import annotations

from pathlib import Path

import pytest
from openb_synthetic import CARDS, NODES

from bench.openb.trace import (
    MILLI,
    TRACES,
    TracePod,
    gpu_request,
    load_nodes,
    load_pods,
    typical_pods,
    workload_sequence,
)
from tessera.vocabulary import ContainerRequest, PodRequest


@pytest.mark.parametrize(
    ("shape", "expected"),
    [
        ((0, 0, ""), None),
        ((1, 470, ""), PodRequest((ContainerRequest("main", core_percent=47,
                                                    memory_percent=47),))),
        ((1, 1000, ""), PodRequest((ContainerRequest("main", cards=1),))),
        ((8, 1000, ""), PodRequest((ContainerRequest("main", cards=8),))),
        ((1, 1000, "V100M16|V100M32|V100M32"),
         PodRequest((ContainerRequest("main", cards=1),), models=("V100M16", "V100M32"))),
    ],
)
def test_a_trace_pod_becomes_a_share_of_core_and_memory_alike_or_whole_cards(
        shape: tuple[int, int, str], expected: PodRequest | None) -> None:
    assert gpu_request(shape) == expected


def test_the_cluster_is_the_papers_6212_gpus_on_1213_nodes(openb_trace: Path) -> None:
    nodes = load_nodes(openb_trace)
    assert (len(nodes), sum(n.gpus for n in nodes)) == (1213, 6212)


def test_every_family_the_benchmarks_replay_loads_and_reaches_130_percent_of_6212_gpus(
        openb_trace: Path) -> None:
    capacity = 6212 * MILLI
    for family in TRACES:
        total = sum(p.gpu_request_milli
                    for p in workload_sequence(load_pods(family, openb_trace), 42, capacity))
        assert 1.29 * capacity < total <= 1.3 * capacity, family


@pytest.mark.parametrize("trace", ["default", "multigpu50"])
def test_the_sequence_stops_just_below_130_percent_and_is_reproducible(
        synthetic_openb: Path, trace: str) -> None:
    assert len(load_nodes()) == NODES
    pods = load_pods(trace)
    capacity = CARDS * MILLI
    seq = workload_sequence(pods, 42, capacity)
    total = sum(p.gpu_request_milli for p in seq)
    assert 1.29 * capacity < total <= 1.3 * capacity
    assert seq == workload_sequence(pods, 42, capacity)
    assert seq != workload_sequence(pods, 43, capacity)


def test_typical_pods_cover_95_percent_most_popular_first_with_weights_summing_to_one() -> None:
    pods = [TracePod(f"p{i}", 1000, 0, 1, 500, "") for i in range(90)]
    pods += [TracePod(f"q{i}", 2000, 0, 1, 1000, "") for i in range(8)]
    pods += [TracePod(f"r{i}", 3000, 0, 2, 1000, "") for i in range(2)]
    typical = typical_pods(pods)
    assert [t.shape for t in typical] == [(1, 500, ""), (1, 1000, "")]
    assert sum(t.weight for t in typical) == pytest.approx(1.0)
