"""The live workload mix and node CPU in prioritize, and the prioritize-cpu-only verb.

Shared answers (per content and CPU bucket, allocator/ranking/content_memo.py) must equal a plain
per-node computation with each node's real free CPU, node by node."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from alloc_harness import make_app
from builders import VOCAB, make_gpu_pod, make_node, request, share, whole
from fake_kube import FakeKube
from flask import Flask

from allocator.ranking.fit import Unfit, place
from allocator.ranking.mix import LiveMix
from allocator.ranking.policies import (
    NO_WORKLOAD,
    REGISTRY,
    Policy,
    PolicyContext,
    chooser,
    get_policy,
    scaled,
)
from allocator.service.app import Runtime
from allocator.verbs.core import Allocator, AllocatorConfig
from tessera.vocabulary import (
    Allocation,
    ContainerAllocation,
    PodRequest,
)

SHAPES = [request(share(core=25, mem=4000)), request(share(core=50, mem=8000)),
          request(whole()), request(whole(cards=2))]


def _with_cpu(pod: dict[str, Any], cpu: str) -> dict[str, Any]:
    pod["spec"]["containers"][0].setdefault("resources", {}).setdefault(
        "requests", {})["cpu"] = cpu
    return pod


def _cpu_pod(uid: str, node: str, cpu: str) -> dict[str, Any]:
    return {"metadata": {"uid": uid, "name": uid, "namespace": "ns"},
            "spec": {"nodeName": node, "containers": [
                {"name": "a", "resources": {"requests": {"cpu": cpu}}}]},
            "status": {"phase": "Running"}}


def _gpu_bound(uid: str, node: str, cpu: str, *containers: ContainerAllocation
               ) -> dict[str, Any]:
    alloc = Allocation(node=node, containers=containers, pod_uid=uid)
    return _with_cpu(make_gpu_pod(uid, SHAPES[0], namespace="ns", uid=uid, node=node,
                                  phase="Running", allocation=alloc), cpu)


def _cluster(seed: int, policy: str = "binpack") -> tuple[Flask, Runtime]:
    """24 nodes of 4 cards in few card usages, with free CPU spread between 0 and 64 cores."""
    rng = random.Random(seed)
    fake = FakeKube()
    for i in range(24):
        fake.add_node(make_node(f"n{i}", count=4, memory_mib=16000))
    for i in range(24):
        node = f"n{i}"
        for card in range(4):
            pick = rng.choice(["idle", "idle", "whole", 30, 60])
            uid = f"{node}-{card}"
            if pick == "whole":
                fake.add_pod(_gpu_bound(uid, node, "2", ContainerAllocation("c", (card,))))
            elif isinstance(pick, int):
                fake.add_pod(_gpu_bound(uid, node, "1", ContainerAllocation(
                    "c", (card,), core_percent=pick, memory_mib=160 * pick)))
        fake.add_pod(_cpu_pod(f"{node}-cpu", node, str(rng.choice([0, 8, 30, 50, 60]))))
    # No holds: these tests compare filter with prioritize and with the plain per-node
    # computation on one picture; a filter's hold would change the picture between them
    # (holds: test_holds.py).
    app, rt = make_app(fake, core=AllocatorConfig(default_policy=policy, hold_seconds=0))
    rt.allocator.reader.mix = LiveMix(refresh=1)  # publish every observation below
    # a mix of GPU pods with different CPU requests (each observed once, by uid)
    for k in range(40):
        req = SHAPES[k % len(SHAPES)]
        rt.allocator.reader.observe(_with_cpu(make_gpu_pod(f"seen{k}", req), str(4 * (k % 5) + 2)),
                             req)
    return app, rt


def _expected(alloc: Allocator, policy: Policy, req: PodRequest, pod: dict[str, Any],
              names: list[str]) -> list[int]:
    """Placed and scored node by node with the node's real free CPU: no sharing."""
    ctx = alloc.reader.context(req, pod)
    raw: list[float | None] = []
    for name in names:
        view = alloc.state.view(name)
        placed = None if view is None else place(req, view.state, chooser(policy, ctx))
        raw.append(None if view is None or placed is None or isinstance(placed, Unfit)
                   else policy.score(view.state, placed.after, ctx))
    return scaled(raw)


@pytest.mark.parametrize("policy_name", ["fgd", "fgd-ff", "fgd-cpu", "binpack"])
@pytest.mark.parametrize("req", SHAPES)
@pytest.mark.parametrize("seed", [1, 2])
def test_cpu_aware_prioritize_equals_the_per_node_answer(policy_name: str, req: PodRequest,
                                                        seed: int) -> None:
    _, rt = _cluster(seed)
    alloc = rt.allocator
    policy = get_policy(policy_name)
    assert alloc.reader.workload() is not NO_WORKLOAD
    names = [*alloc.state.node_names(), "ghost"]
    pod = _with_cpu(make_gpu_pod("p", PodRequest(req.containers, policy=policy_name),
                                 uid="u-p"), "6")
    for _ in range(2):  # cold, then from the shared memo
        assert alloc.scores(pod, names) == _expected(alloc, policy, req, pod, names)


@pytest.mark.parametrize("policy_name", ["fgd", "fgd-ff", "fgd-cpu", "binpack"])
@pytest.mark.parametrize("req", SHAPES)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_filter_best_is_prioritizes_top_with_node_cpu(policy_name: str, req: PodRequest,
                                                     seed: int) -> None:
    """filter-best picks the best from shared scores plus name biases, reading the biases
    of the nodes within the policy's bias bound only; it must be prioritize's top."""
    _, rt = _cluster(seed)
    alloc = rt.allocator
    names = alloc.state.node_names()
    pod = _with_cpu(make_gpu_pod("p", PodRequest(req.containers, policy=policy_name),
                                 uid="u-p"), "6")
    alloc.filter(pod, names)  # counts the pod in the mix: the scores move
    scores = _expected(alloc, get_policy(policy_name), req, pod, names)
    top = [n for n, s in zip(names, scores, strict=True) if s == 10]
    assert top, "some node fits every shape of this cluster"
    for _ in range(2):  # then from the shared memos
        assert alloc.filter(pod, names).nodes == top


@pytest.mark.parametrize("policy_name", sorted(REGISTRY))
def test_a_name_bias_stays_inside_its_declared_bound(policy_name: str) -> None:
    policy = get_policy(policy_name)
    bias = policy.name_bias()
    if bias is None:
        assert policy.name_bias_bound == 0.0
        return
    values = [bias(f"node-{i}") for i in range(2000)]
    assert all(0.0 <= v < policy.name_bias_bound for v in values)
    assert max(values) > 0.9 * policy.name_bias_bound  # the bound is not loose either


def test_fgd_scores_are_not_flat_once_the_mix_is_known() -> None:
    _, rt = _cluster(1)
    names = rt.state.node_names()
    pod = _with_cpu(make_gpu_pod("p", PodRequest(SHAPES[0].containers, policy="fgd")), "6")
    assert len(set(rt.allocator.scores(pod, names))) > 2


def test_a_pod_counts_in_the_mix_once_however_often_it_is_filtered() -> None:
    fake = FakeKube()
    fake.add_node(make_node("n1"))
    _, rt = make_app(fake)
    pod = _with_cpu(make_gpu_pod("p", SHAPES[0]), "3")
    for _ in range(3):
        rt.allocator.filter(pod, ["n1"])
    assert rt.allocator.reader.mix.observations == 1
    workload = rt.allocator.reader.workload()
    assert workload.cpu_milli == (3000,)
    assert rt.allocator.reader.context(SHAPES[0], pod).workload is workload


def test_the_gpu_pods_bound_at_start_seed_the_mix_oldest_first() -> None:
    fake = FakeKube()
    fake.add_node(make_node("n1"))
    _, rt = make_app(fake)
    pods = []
    for i, req in enumerate([SHAPES[2], SHAPES[0], SHAPES[0]]):
        pod = make_gpu_pod(f"b{i}", req, node="n1", phase="Running")
        pod["metadata"]["creationTimestamp"] = f"2026-01-0{3 - i}T00:00:00Z"
        pods.append(pod)
    broken = make_gpu_pod("broken", node="n1")
    broken["metadata"]["annotations"][VOCAB.request_annotation] = "{"
    rt.allocator.reader.seed_mix([*pods, broken])
    rt.allocator.reader.seed_mix(pods)  # a relist: nothing counted twice
    assert rt.allocator.reader.mix.observations == 3
    typical = dict((r.containers[0].cards, w) for r, w in rt.allocator.reader.workload().typical)
    assert typical[0] > typical[1]


# ---------------------------------------------------------------------- prioritize-cpu-only
def _cpu_only(cpu: str = "8") -> dict[str, Any]:
    return {"metadata": {"name": "c", "namespace": "ns", "uid": "u-c"},
            "spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": cpu}}}]}}


@pytest.mark.parametrize("policy_name", ["fgd", "fgd-ff", "fgd-cpu"])
def test_cpu_only_pods_are_scored_by_the_default_policys_cpu_only_score(
        policy_name: str) -> None:
    _, rt = _cluster(3, policy_name)
    alloc = rt.allocator
    policy = get_policy(policy_name)
    names = [*alloc.state.node_names(), "ghost"]
    workload = alloc.reader.workload()
    expected_raw: list[float | None] = []
    for name in names:
        view = alloc.state.view(name)
        free = alloc.state.resources.free_cpu.get(name)
        expected_raw.append(None if view is None or free is None else policy.score_cpu_only(
            view.state, free, free - 8000, workload))
    for _ in range(2):
        scores = alloc.scores_cpu_only(_cpu_only(), names)
        assert scores == scaled(expected_raw)
    assert len(set(scores)) > 2


def test_gpu_pods_and_policies_without_a_cpu_only_score_get_zero_everywhere() -> None:
    _, rt = _cluster(1, "fgd-cpu")
    names = rt.state.node_names()
    assert rt.allocator.scores_cpu_only(make_gpu_pod("g", SHAPES[0]), names) == [0] * len(names)
    _, rt = _cluster(1, "binpack")
    assert rt.allocator.scores_cpu_only(_cpu_only(), names) == [0] * len(names)


def test_the_cpu_only_verb_speaks_prioritizes_wire_format() -> None:
    app, rt = _cluster(1, "fgd-cpu")
    names = rt.state.node_names()
    reply = app.test_client().post("/scheduler/prioritize-cpu-only",
                                   json={"Pod": _cpu_only(), "Nodes": None, "NodeNames": names})
    assert reply.status_code == 200
    body = reply.get_json()
    scores = rt.allocator.scores_cpu_only(_cpu_only(), names)
    low = min(scores)
    # Like prioritize: each score less the lowest, only the nodes left above zero.
    assert max(scores) > low
    assert {e["Host"]: e["Score"] for e in body} == {
        n: s - low for n, s in zip(names, scores, strict=True) if s > low}
    assert all(0 < e["Score"] <= 10 for e in body)


@pytest.mark.parametrize("body", [
    b"[" * 100_000, b"", b'"x"',
    json.dumps({"Pod": {"metadata": {}, "spec": "x"}, "NodeNames": ["n1"]}).encode(),
    json.dumps({"Pod": _cpu_only("lots"), "NodeNames": ["n1"]}).encode(),
    json.dumps({"Pod": {"metadata": {"uid": ["x"]}}, "NodeNames": ["n1"]}).encode(),
    json.dumps({"Pod": {"metadata": {}, "spec": {"containers": "x"}},
                "NodeNames": ["n1"]}).encode(),
], ids=["brackets", "empty", "string", "spec-string", "bad-cpu", "uid-list", "containers"])
def test_a_hostile_cpu_only_body_gets_a_priority_list_never_a_500(body: bytes) -> None:
    app, _ = _cluster(1, "fgd-cpu")
    reply = app.test_client().post("/scheduler/prioritize-cpu-only", data=body,
                                   content_type="application/json")
    assert reply.status_code == 200
    entries = reply.get_json()
    assert isinstance(entries, list)
    assert all(set(e) == {"Host", "Score"} and 0 <= e["Score"] <= 10 for e in entries)


def test_policy_context_defaults_keep_working_without_facts() -> None:
    ctx = PolicyContext(SHAPES[0])
    assert dict(ctx.node_facts) == {} and ctx.workload is NO_WORKLOAD
    assert get_policy("binpack").cpu_thresholds((1000,), 64000) == ()


@pytest.mark.parametrize("policy_name", ["fgd-cpu", "fgd-ff", "binpack"])
def test_answers_kept_per_node_slot_follow_every_change(policy_name: str) -> None:
    """Nodes that go, come (taking freed slots), take and release cards and CPU: after each
    change filter and prioritize still equal the plain per-node computation (the kept
    answers of a slot are only ever read for the key they answer)."""
    _, rt = _cluster(7, policy_name)
    alloc = rt.allocator
    state = alloc.state
    rng = random.Random(7)
    pods = [_with_cpu(make_gpu_pod(f"p{k}", PodRequest(req.containers, policy=policy_name),
                                   uid=f"u-p{k}"), str(2 + 4 * k))
            for k, req in enumerate(SHAPES)]
    for pod in pods:
        alloc.filter(pod, state.node_names())  # counted in the mix once, before comparing
    fresh = 0
    for step in range(60):
        names = state.node_names()
        change = rng.choice(["remove", "add", "bind", "cpu"])
        if change == "remove" and len(names) > 4:
            state.remove_node(rng.choice(names))
        elif change == "add":
            fresh += 1
            node = make_node(f"new{fresh}", count=4, memory_mib=16000)
            node["status"]["allocatable"]["cpu"] = str(rng.choice([32, 64]))
            state.apply_node(node)
        elif change == "bind" and names:
            node = rng.choice(names)
            card = rng.randrange(4)
            state.apply_pod(_gpu_bound(f"s{step}", node, "1", ContainerAllocation(
                "c", (card,), core_percent=10, memory_mib=100)))
        elif names:
            state.resources.apply_pod(_cpu_pod(f"c{step}", rng.choice(names),
                                               str(rng.choice([1, 6, 20]))))
        names = [*state.node_names(), "ghost"]
        rng.shuffle(names)
        for pod in pods:
            req = alloc.reader.pod_request(pod)
            assert req is not None
            expected = _expected(alloc, get_policy(policy_name), req, pod, names)
            assert alloc.scores(pod, names) == expected, step
            top = [n for n, s in zip(names, expected, strict=True) if s == 10]
            assert alloc.filter(pod, names).nodes == top, step
