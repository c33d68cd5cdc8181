"""The fast ranker answers as the plain one: on random clusters (cards, models, usage, free
CPU) and random requests, for every policy, every question of the ranking port gives the
same answer, cold and from the memo (allocator/ranking/port.py). Seeded: a failure names its
seed."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from functools import partial
from typing import Any

import pytest
from alloc_harness import make_app
from builders import make_gpu_pod, make_node, request, share, whole
from fake_kube import FakeKube

from allocator.hami.codec import HAMI
from allocator.hami.register import RegisteredDevice, encode_register_json
from allocator.hami.topology import SCORE_KEY
from allocator.ranking.fast import FastRanker
from allocator.ranking.mix import LiveMix
from allocator.ranking.plain import PlainRanker
from allocator.ranking.policies import REGISTRY, get_policy
from allocator.service.app import Runtime
from allocator.verbs.core import AllocatorConfig, node_states
from allocator.verbs.filter import Filter
from allocator.verbs.prioritize import Prioritize
from tessera.agent_profiles import AgentProfile
from tessera.dialects import DialectConfig
from tessera.vocabulary import Allocation, ContainerAllocation, ContainerRequest, PodRequest

POLICIES = sorted(REGISTRY)
SEEDS = range(8)
MODELS = ("T4", "A100")


def _bound(uid: str, node: str, cpu: int, *containers: ContainerAllocation) -> dict[str, Any]:
    alloc = Allocation(node=node, containers=containers, pod_uid=uid)
    pod = make_gpu_pod(uid, request(share(core=10)), namespace="ns", uid=uid, node=node,
                       phase="Running", allocation=alloc)
    pod["spec"]["containers"][0].setdefault("resources", {}).setdefault(
        "requests", {})["cpu"] = str(cpu)
    return pod


def _capped_node(name: str, count: int, memory: int, model: str, split: int,
                 rng: random.Random | None = None) -> dict[str, Any]:
    """A node whose cards HAMi's register annotation describes, at ``split`` shares each,
    the first half on NUMA node 0 and the rest on 1, about one in three in mode mps (by the
    name: the random draws stay those of the clusters before modes); with ``rng``, HAMi's
    pair scores too (random NVLinked pairs, the rest PCIe)."""
    node = make_node(name, count=count, memory_mib=memory, model=model)
    uuids = [f"GPU-{name}-{i}" for i in range(count)]
    modes = ["mps" if (sum(map(ord, name)) + i) % 3 == 2 else "hami-core"
             for i in range(count)]
    node["metadata"]["annotations"][HAMI.register_key] = encode_register_json([
        RegisteredDevice(uuids[i], i, split, memory, 100, f"NVIDIA-{model}",
                         numa=i * 2 // count, mode=modes[i])
        for i in range(count)])
    if rng is not None:
        pair = {(i, j): rng.choice([20, 20, 60, 200]) for i in range(count)
                for j in range(i + 1, count)}
        node["metadata"]["annotations"][SCORE_KEY] = json.dumps([
            {"uuid": uuids[i], "score": {uuids[j]: pair[min(i, j), max(i, j)]
                                         for j in range(count) if j != i}}
            for i in range(count)])
    return node


def _cluster(rng: random.Random, policy: str, hold_seconds: float = 0.0,
             caps: bool = False, topology: bool = False) -> Runtime:
    """12-30 nodes of 1-8 cards of two models and sizes, random usage and free CPU; many
    alike (few sizes), so contents are shared. ``caps``: half the nodes are HAMi's, their
    cards capped at a split count of 1-3 and holding up to that many small shares."""
    fake = FakeKube()
    for i in range(rng.randint(12, 30)):
        node, count = f"n{i}", rng.choice([1, 2, 4, 4, 8])
        memory = rng.choice([16000, 16000, 40000])
        model = rng.choice(MODELS)
        split = 0
        if caps and rng.random() < 0.5:
            split = rng.choice([1, 2, 2, 3])
            fake.add_node(_capped_node(node, count, memory, model, split,
                                       rng if topology else None))
        else:
            fake.add_node(make_node(node, count=count, memory_mib=memory, model=model))
        for card in range(count):
            picks = ["idle", "idle", "whole", 25, 50, 90] + (["few"] * 3 if split else [])
            pick = rng.choice(picks)
            uid = f"{node}-{card}"
            if pick == "whole":
                fake.add_pod(_bound(uid, node, rng.choice([1, 4]),
                                    ContainerAllocation("c", (card,))))
            elif pick == "few":  # up to the split count of small shares
                for k in range(rng.randint(1, split)):
                    fake.add_pod(_bound(f"{uid}-{k}", node, 1, ContainerAllocation(
                        "c", (card,), core_percent=10, memory_mib=1000)))
            elif isinstance(pick, int):
                fake.add_pod(_bound(uid, node, rng.choice([1, 4, 16]), ContainerAllocation(
                    "c", (card,), core_percent=pick, memory_mib=memory * pick // 200)))
    dialects = DialectConfig(agent_profile=AgentProfile.HAMI) if topology else DialectConfig()
    _, rt = make_app(fake, core=AllocatorConfig(default_policy=policy,
                                                hold_seconds=hold_seconds, dialects=dialects))
    rt.allocator.reader.mix = LiveMix(refresh=1)
    for k in range(20):  # a workload mix of GPU pods with several CPU requests
        req = _request(rng)
        pod = make_gpu_pod(f"seen{k}", req, uid=f"seen{k}")
        pod["spec"]["containers"][0].setdefault("resources", {}).setdefault(
            "requests", {})["cpu"] = str(rng.choice([1, 2, 6, 12]))
        rt.allocator.reader.observe(pod, req)
    return rt


def _request(rng: random.Random, policy: str | None = None,
             several: bool = True) -> PodRequest:
    """``several``: some containers ask for a share on each of several cards (HAMi's agent
    only runs them: the verbs under the elastic profile refuse them)."""
    containers: list[ContainerRequest] = []
    for k in range(rng.choice([1, 1, 2])):
        choices = [
            share(f"c{k}", core=rng.choice([10, 30, 50, 75]), mem=rng.choice([1000, 6000])),
            share(f"c{k}", core=rng.choice([20, 50]), pct=rng.choice([25, 50])),
            # a share on each of several distinct cards (HAMi's gpu: n with gpumem)
            share(f"c{k}", core=rng.choice([0, 30]), shares=rng.choice([2, 3]),
                  **rng.choice([{"mem": 3000}, {"mem": 9000}, {"pct": 25}])),
            whole(f"c{k}", cards=rng.choice([1, 1, 2, 4]))]
        containers.append(rng.choice(choices if several else [*choices[:2], choices[3]]))
    models = rng.choice([(), (), ("T4",), ("A100",)])
    # HAMi's card choice: by a part of the type, or by UUID (HAMi's nodes tell theirs).
    uuid = f"GPU-n{rng.randint(0, 12)}-{rng.randint(0, 3)}"
    choice = rng.choice([{}, {}, {}, {"use_types": ("a100",)}, {"nouse_types": ("t4",)},
                         {"use_uuids": (uuid, "GPU-n1-1")}, {"nouse_uuids": (uuid,)},
                         {"use_uuids": ("GPU-unknown",)}])
    return replace(request(*containers, models=models, policy=policy), **choice)


def _rankers(rt: Runtime) -> tuple[FastRanker, PlainRanker]:
    fast = rt.allocator.ranker
    assert isinstance(fast, FastRanker)
    plain = PlainRanker(partial(node_states, rt.state), facts=rt.state.resources.view())
    return fast, plain


@pytest.mark.parametrize("caps", ["uncapped", "split-counts", "topology"])
@pytest.mark.parametrize("policy_name", POLICIES)
@pytest.mark.parametrize("seed", SEEDS)
def test_fit_best_and_scores_equal_the_plain_ranker(policy_name: str, seed: int,
                                                    caps: str) -> None:
    suffix = {"uncapped": "", "split-counts": "-caps", "topology": "-topology"}[caps]
    rng = random.Random(f"{policy_name}-{seed}{suffix}")
    rt = _cluster(rng, policy_name, caps=caps != "uncapped", topology=caps == "topology")
    linked = any(c.card.links for s in node_states(rt.state, rt.state.node_names()) if s
                 for c in s.cards)
    assert linked == (caps == "topology")
    fast, plain = _rankers(rt)
    policy = get_policy(policy_name)
    everyone = rt.state.node_names()
    for i in range(6):
        names = rng.sample(everyone, rng.randint(1, len(everyone)))
        if i % 2:
            names.insert(rng.randrange(len(names) + 1), f"ghost-{i}")
        req = _request(rng, policy_name)
        ctx = rt.allocator.reader.context(req, make_gpu_pod(f"p{i}", req, uid=f"u{i}"))
        for explain in (False, True):
            for _ in range(2):  # cold, then from the memo
                got = fast.fit(req, names, explain_when_some_fit=explain)
                want = plain.fit(req, names, explain_when_some_fit=explain)
                assert (got.nodes.name_list(), got.explained, got.failed, got.unresolvable,
                        got.short) == (want.nodes.name_list(), want.explained, want.failed,
                                       want.unresolvable, want.short), (seed, i, names)
        assert fast.scores(req, policy, ctx, names) == plain.scores(req, policy, ctx, names)
        fitting = fast.fit(req, names, explain_when_some_fit=False)
        if not fitting.explained and len(fitting.nodes) > 1:
            plain_fitting = plain.fit(req, names, explain_when_some_fit=False).nodes
            assert (fast.best(req, policy, ctx, fitting.nodes)
                    == plain.best(req, policy, ctx, plain_fitting)), (seed, i)


@pytest.mark.parametrize("policy_name", POLICIES)
@pytest.mark.parametrize("seed", SEEDS)
def test_cpu_only_scores_equal_the_plain_ranker(policy_name: str, seed: int) -> None:
    rng = random.Random(f"cpu-{policy_name}-{seed}")
    rt = _cluster(rng, policy_name)
    fast, plain = _rankers(rt)
    policy = get_policy(policy_name)
    workload = rt.allocator.reader.workload()
    names = [*rt.state.node_names(), "ghost"]
    rng.shuffle(names)
    for cpu in (0, 500, 4000, 30000):
        assert (fast.scores_cpu_only(policy, workload, cpu, names)
                == plain.scores_cpu_only(policy, workload, cpu, names)), cpu


@pytest.mark.parametrize("policy_name", POLICIES)
@pytest.mark.parametrize("seed", SEEDS)
def test_best_known_is_the_best_of_the_asked_nodes(policy_name: str, seed: int) -> None:
    """Filter-best's shortcut over every known node answers as ranking the asked ones."""
    rng = random.Random(f"known-{policy_name}-{seed}")
    rt = _cluster(rng, policy_name)
    fast, plain = _rankers(rt)
    policy = get_policy(policy_name)
    everyone = rt.state.node_names()
    for i in range(6):
        names = rng.sample(everyone, max(1, len(everyone) - rng.randint(0, 4)))
        req = _request(rng, policy_name)
        ctx = rt.allocator.reader.context(req, make_gpu_pod(f"p{i}", req, uid=f"u{i}"))
        # Nodes to avoid (HAMi's nodes with an Allocate pending) are not asked, and ranked
        # as if they were not there.
        avoid = set(rng.sample(names, rng.randint(0, min(3, len(names) - 1))))
        names = [name for name in names if name not in avoid]
        known = fast.best_known(req, policy, names, lambda ctx=ctx: ctx,  # type: ignore[misc]
                                avoid)
        assert plain.best_known(req, policy, names, lambda ctx=ctx: ctx) is None  # type: ignore[misc]
        if known is None:
            continue
        assert not avoid.intersection(known)
        fitting = plain.fit(req, names, explain_when_some_fit=False).nodes
        assert known == plain.best(req, policy, ctx, fitting), (seed, i, avoid)


@pytest.mark.parametrize("caps", [False, True], ids=["uncapped", "split-counts"])
@pytest.mark.parametrize("policy_name", ["fgd-cpu", "binpack", "random"])
def test_the_verbs_answer_alike_over_either_ranker(policy_name: str, caps: bool) -> None:
    """Filter (with its holds, pod after pod) and prioritize over the plain ranker answer as
    over the fast one, on two copies of one cluster."""
    fast_rt = _cluster(random.Random(f"verbs-{policy_name}"), policy_name, hold_seconds=15,
                       caps=caps)
    plain_rt = _cluster(random.Random(f"verbs-{policy_name}"), policy_name, hold_seconds=15,
                        caps=caps)
    a = plain_rt.allocator
    plain = PlainRanker(partial(node_states, plain_rt.state), facts=a.state.resources.view())
    plain_rt.allocator = replace(  # the same reader (its mix), the verbs over the plain ranker
        a, ranker=plain,
        filter=Filter(a.reader, a.state, plain, a.agent, a.requeue, a.filter.hooks),
        prioritizer=Prioritize(a.reader, plain))
    rng = random.Random(policy_name)
    everyone = fast_rt.state.node_names()
    assert everyone == plain_rt.state.node_names()
    for i in range(30):
        names = rng.sample(everyone, rng.randint(1, len(everyone)))
        req = _request(rng, policy_name, several=False)
        pod = make_gpu_pod(f"p{i}", req, uid=f"u{i}")
        assert fast_rt.allocator.filter(pod, names) == plain_rt.allocator.filter(pod, names), i
        assert fast_rt.allocator.scores(pod, names) == plain_rt.allocator.scores(pod, names), i
    assert fast_rt.state.comparable() == plain_rt.state.comparable()  # the same holds


@pytest.mark.parametrize("choice", [{"use_uuids": ("GPU-a-1",)},
                                    {"nouse_uuids": ("GPU-b-0", "GPU-b-1")}])
def test_alike_nodes_are_told_apart_by_the_uuids_a_pod_names(
        choice: dict[str, tuple[str, ...]]) -> None:
    # Two HAMi nodes alike but for their cards' UUIDs: a content shared between them would
    # answer for one what is true of the other.
    fake = FakeKube()
    for name in ("a", "b"):
        fake.add_node(_capped_node(name, 2, 16000, "T4", 2))
    _, rt = make_app(fake, core=AllocatorConfig(
        default_policy="binpack", dialects=DialectConfig(agent_profile=AgentProfile.HAMI)))
    fast, plain = _rankers(rt)
    req = replace(request(share(core=10)), **choice)
    for _ in range(2):  # cold, then from the memo
        got = fast.fit(req, ["a", "b"], explain_when_some_fit=True)
        want = plain.fit(req, ["a", "b"], explain_when_some_fit=True)
        assert got.nodes.name_list() == want.nodes.name_list() == ["a"]
        assert (got.explained, got.unresolvable) == (want.explained, want.unresolvable)
        key = "nvidia.com/use-gpuuuid" if "use_uuids" in choice else "nvidia.com/nouse-gpuuuid"
        assert got.unresolvable == {"b": f"no card allowed by pod annotation {key} (node has T4)"}
    anyone = fast.fit(request(share(core=10)), ["a", "b"], explain_when_some_fit=True)
    assert anyone.nodes.name_list() == ["a", "b"]


#: HAMi's vgpu-mode and numa-bind as the request fields they fill.
MODE_AND_NUMA = [{"card_modes": ("mps",)}, {"card_modes": ("hami-core",)},
                 {"card_modes": ("hami-core", "mps")}, {"one_numa_node": True},
                 {"card_modes": ("mps",), "one_numa_node": True}]


@pytest.mark.parametrize("seed", range(4))
def test_pods_choosing_modes_or_one_numa_node_answer_as_the_plain_ranker(seed: int) -> None:
    # Nodes alike but for their cards' modes and NUMA nodes share a content: such a pod is
    # answered node by node, as the plain ranker does.
    rng = random.Random(f"modes-{seed}")
    rt = _cluster(rng, "binpack", caps=True)  # modes and NUMA nodes on the capped ones
    fast, plain = _rankers(rt)
    policy = get_policy("binpack")
    everyone = rt.state.node_names()
    for i in range(6):
        req = replace(_request(rng), **rng.choice(MODE_AND_NUMA))
        ctx = rt.allocator.reader.context(req, make_gpu_pod(f"p{i}", req, uid=f"u{i}"))
        for _ in range(2):  # cold, then (were it memoised) from the memo
            got = fast.fit(req, everyone, explain_when_some_fit=True)
            want = plain.fit(req, everyone, explain_when_some_fit=True)
            assert (got.nodes.name_list(), got.failed, got.unresolvable) == (
                want.nodes.name_list(), want.failed, want.unresolvable), (seed, i)
        assert fast.scores(req, policy, ctx, everyone) == plain.scores(req, policy, ctx,
                                                                       everyone)


def _hami_node(name: str, modes: tuple[str, ...], numas: tuple[int, ...]) -> dict[str, Any]:
    node = make_node(name, count=len(modes), memory_mib=16000, model="T4")
    node["metadata"]["annotations"][HAMI.register_key] = encode_register_json([
        RegisteredDevice(f"GPU-{name}-{i}", i, 4, 16000, 100, "NVIDIA-T4", numa=numa,
                         mode=mode) for i, (mode, numa) in enumerate(zip(modes, numas,
                                                                        strict=True))])
    return node


@pytest.mark.parametrize(("req", "reason"), [
    (replace(request(share(core=10)), card_modes=("mps",)),
     "no card allowed by pod annotation nvidia.com/vgpu-mode (node has T4 in mode hami-core)"),
    (replace(request(whole(cards=2)), one_numa_node=True),
     "needs 2 whole cards on one NUMA node (pod annotation nvidia.com/numa-bind; node has "
     "1 on NUMA 0 and 1 on NUMA 1 and 1 on NUMA 2 and 1 on NUMA 3)"),
])
def test_alike_nodes_are_told_apart_by_the_modes_and_numa_nodes_a_pod_asks(
        req: PodRequest, reason: str) -> None:
    # Two HAMi nodes alike to placement but for their cards' modes and NUMA nodes.
    fake = FakeKube()
    fake.add_node(_hami_node("a", ("hami-core", "mps", "mps", "hami-core"), (0, 0, 1, 1)))
    fake.add_node(_hami_node("b", ("hami-core",) * 4, (0, 1, 2, 3)))
    _, rt = make_app(fake, core=AllocatorConfig(
        default_policy="binpack", dialects=DialectConfig(agent_profile=AgentProfile.HAMI)))
    fast, plain = _rankers(rt)
    for _ in range(2):  # cold, then from the memo
        got = fast.fit(req, ["a", "b"], explain_when_some_fit=True)
        want = plain.fit(req, ["a", "b"], explain_when_some_fit=True)
        assert got.nodes.name_list() == want.nodes.name_list() == ["a"]
        assert got.unresolvable == want.unresolvable == {"b": reason}
    anyone = fast.fit(request(whole(cards=2)), ["a", "b"], explain_when_some_fit=True)
    assert anyone.nodes.name_list() == ["a", "b"]
