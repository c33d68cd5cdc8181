"""The live replay's pure parts: the pods say what the trace asks, the oracle can fail."""

from __future__ import annotations

import re
from typing import Any

import pytest

from bench.openb.live import (
    Settings,
    Summary,
    arrivals,
    node_spec,
    parse_args,
    pod_manifest,
    pod_name,
    run,
    tally,
)
from bench.openb.trace import MILLI, TraceNode, TracePod, gpu_request
from devcluster import DevClusterError
from devcluster.nodes import node_object
from kubectl_tessera.report import node_cards
from tessera.dialects import DialectConfig, parse_pod
from tessera.vocabulary import (
    Allocation,
    ContainerAllocation,
    Vocabulary,
    encode_allocation,
)

VOCAB = Vocabulary()
LINE = re.compile(r"^allocated \d{1,3}\.\d\d% of GPUs at 100% arrived \(.+\)$")


def trace_pod(num: int, milli: int, spec: str = "", cpu: int = 4000) -> TracePod:
    return TracePod("openb-pod-x", cpu, 8192, num, milli, spec)


@pytest.mark.parametrize("pod", [
    trace_pod(1, 460), trace_pod(1, 50), trace_pod(1, 1000), trace_pod(2, 1000),
    trace_pod(8, 1000), trace_pod(1, 250, "T4|P100"), trace_pod(4, 1000, "V100M32"),
], ids=str)
def test_each_pod_asks_through_the_webhooks_dialects_for_exactly_the_trace_request(
    pod: TracePod,
) -> None:
    manifest = pod_manifest(pod, "p", VOCAB)
    assert parse_pod(manifest, DialectConfig()) == gpu_request(pod.shape)
    requests = manifest["spec"]["containers"][0]["resources"]["requests"]
    assert requests == {"cpu": f"{pod.cpu_milli}m", "memory": "8192Mi"}


def test_a_cpu_only_pod_asks_for_no_gpu() -> None:
    manifest = pod_manifest(trace_pod(0, 0), "p", VOCAB)
    assert parse_pod(manifest, DialectConfig()) is None
    assert "limits" not in manifest["spec"]["containers"][0]["resources"]


def test_a_node_carries_the_trace_cpu_memory_and_cards_as_gfd_labels() -> None:
    spec = node_spec(TraceNode("openb-node-0007", 96000, 786432, 8, "G2"))
    node = node_object(spec, VOCAB)
    assert node["status"]["allocatable"]["cpu"] == "96000m"
    assert node["status"]["allocatable"]["memory"] == "786432Mi"
    assert node["status"]["allocatable"][VOCAB.core_resource] == "800"
    assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == "G2"
    assert [c.model for c in node_cards(node, VOCAB)] == ["G2"] * 8


def test_arrivals_stop_with_the_pod_that_reaches_full_capacity() -> None:
    seq = [trace_pod(1, 1000), trace_pod(0, 0), trace_pod(1, 500), trace_pod(1, 1000),
           trace_pod(1, 1000)]
    assert arrivals(seq, 2000) == seq[:4]
    assert arrivals(seq, 2500) == seq[:4]
    assert arrivals(seq, 2000, max_pods=2) == seq[:2]


def _node(name: str, cards: int) -> dict[str, Any]:
    spec = node_spec(TraceNode(name, 64000, 262144, cards, "T4"))
    return node_object(spec, VOCAB)


def _pod(name: str, node: str | None, containers: tuple[ContainerAllocation, ...],
         record_node: str | None = None) -> dict[str, Any]:
    record = encode_allocation(Allocation(record_node or node or "", containers))
    return {"metadata": {"name": name, "namespace": "openb",
                         "annotations": {VOCAB.allocation_annotation: record}},
            "spec": {"nodeName": node}, "status": {"phase": "Running"}}


def test_the_tally_reads_the_allocation_from_the_records_of_bound_pods() -> None:
    nodes = [_node("a", 2), _node("b", 1)]
    pods = [_pod("p1", "a", (ContainerAllocation("main", (0,)),)),
            _pod("p2", "a", (ContainerAllocation("main", (1,), 46, 7360),)),
            _pod("p3", "b", (ContainerAllocation("main", (0,), 54, 8640),)),
            {"metadata": {"name": "cpu"}, "spec": {"nodeName": "b"}}]
    result = tally(nodes, pods, {"p1": 1000, "p2": 460, "p3": 540}, VOCAB)
    assert result.problems == []
    assert (result.capacity_milli, result.allocated_milli, result.gpu_pods_bound) == (
        3000, 2000, 3)


def test_the_tally_reports_an_overcommitted_card_a_wrong_record_and_a_missing_one() -> None:
    nodes = [_node("a", 1)]
    pods = [_pod("p1", "a", (ContainerAllocation("main", (0,), 60, 9600),)),
            _pod("p2", "a", (ContainerAllocation("main", (0,), 60, 9600),)),
            _pod("p3", "a", (ContainerAllocation("main", (0,), 10, 1600),), record_node="b"),
            {"metadata": {"name": "p4"}, "spec": {"nodeName": "a"}}]
    problems = tally(nodes, pods, {"p1": 600, "p2": 500, "p3": 100, "p4": 1000},
                     VOCAB).problems
    text = "\n".join(problems)
    assert "core 130% > 100%" in text
    assert "p2: record holds 600 milli-GPU, asked 500" in text
    assert "p3: record names b, bound to a" in text
    assert "p4: bound to a without an allocation record" in text


def test_the_last_line_has_the_agreed_form() -> None:
    summary = Summary("default", 42, 1213, 6_212_000, 6_212_070, 5_900_000, 8313, 8000, 313,
                      290, 1, 900.0, 120.0, 0, False)
    line = summary.line()
    assert LINE.match(line), line
    assert line.startswith("allocated 94.98% of GPUs at 100% arrived (default seed 42")
    assert "313 failed (290 GPU pods)" in line


@pytest.mark.parametrize(("argv", "scored"), [
    ([], True), (["--score-cpu-only-pods"], True), (["--no-score-cpu-only-pods"], False)])
def test_the_replay_runs_the_shipped_cpu_only_entry_unless_told_to_delete_it(
    argv: list[str], scored: bool
) -> None:
    assert parse_args(argv).score_cpu_only_pods is scored
    summary = Summary("default", 42, 31, 147_000, 147_000, 140_000, 200, 190, 10, 10, 1, 60.0,
                      20.0, 0, scored)
    # The line names the setting only when it differs from the shipped configuration.
    assert ("CPU-only pods not scored" in summary.line()) is not scored


@pytest.mark.parametrize(("argv", "nodes_to_score"), [
    ([], None), (["--percentage-of-nodes-to-score", "0"], 0),
    (["--percentage-of-nodes-to-score", "100"], 100)])
def test_the_replay_runs_the_shipped_share_of_nodes_unless_told_another(
    argv: list[str], nodes_to_score: int | None
) -> None:
    assert parse_args(argv).percentage_of_nodes_to_score == nodes_to_score
    summary = Summary("default", 42, 31, 147_000, 147_000, 140_000, 200, 190, 10, 10, 1, 60.0,
                      20.0, 0, True, nodes_to_score)
    line = summary.line()
    assert LINE.match(line), line
    # Named only when told: a run of another share is not a run of the shipped path.
    assert ("percentageOfNodesToScore" in line) is (nodes_to_score is not None)
    if nodes_to_score is not None:
        assert f"percentageOfNodesToScore {nodes_to_score};" in line


@pytest.mark.parametrize("value", [-1, 101])
def test_a_share_of_nodes_kube_scheduler_would_refuse_is_refused_before_any_cluster(
    value: int
) -> None:
    # No binaries given and none needed: refused before the trace is read or a process starts.
    with pytest.raises(DevClusterError, match="0-100"):
        run(Settings(nodes_to_score=value))


def test_pod_names_sort_in_arrival_order() -> None:
    assert sorted(pod_name(i) for i in (10, 2, 100_000)) == [
        pod_name(2), pod_name(10), pod_name(100_000)]
    assert MILLI == 1000
