"""Filter and prioritize share results between alike nodes: the answers must equal a plain
per-node computation (unfit_reason / place + score, min-max scaled), node by node."""

from __future__ import annotations

import random
from typing import Any

import pytest
from builders import VOCAB, NullApi, make_gpu_pod, make_node, request, share, whole

from allocator.errors import event_safe
from allocator.picture.state import ClusterState
from allocator.ranking.fit import Unfit, place, unfit_reason
from allocator.ranking.policies import MAX_SCORE, PolicyContext, chooser, get_policy, scaled
from allocator.verbs.core import AllocatorConfig, assemble
from tessera.vocabulary import (
    Allocation,
    ContainerAllocation,
    PodRequest,
    encode_allocation,
)


def _bound(uid: str, node: str, *containers: ContainerAllocation) -> dict[str, Any]:
    alloc = Allocation(node=node, containers=containers, pod_uid=uid)
    return {"metadata": {"uid": uid, "namespace": "ns", "name": uid,
                         "annotations": {VOCAB.allocation_annotation: encode_allocation(alloc)}},
            "spec": {"nodeName": node}, "status": {"phase": "Running"}}


def _cluster(seed: int) -> ClusterState:
    """40 nodes of 4 cards in few distinct usages (many alike, some with shuffled cards)."""
    rng = random.Random(seed)
    state = ClusterState(VOCAB)
    state.replace_nodes(make_node(f"n{i}", count=4, memory_mib=16000) for i in range(40))
    pods = []
    for i in range(40):
        for card in range(4):
            pick = rng.choice(["idle", "idle", "whole", 30, 60, 90])
            uid = f"n{i}-{card}"
            if pick == "whole":
                pods.append(_bound(uid, f"n{i}", ContainerAllocation("c", (card,))))
            elif isinstance(pick, int):
                pods.append(_bound(uid, f"n{i}", ContainerAllocation(
                    "c", (card,), core_percent=pick, memory_mib=160 * pick)))
    state.replace_pods(pods)
    state.mark_synced()
    return state


REQUESTS = [
    request(share(core=30, mem=4000)),
    request(share(core=50, pct=50)),
    request(whole(cards=2)),
    request(whole(cards=1), share("side", core=40, mem=1000)),
    request(share(core=90, mem=15000)),
]


@pytest.mark.parametrize("req", REQUESTS)
@pytest.mark.parametrize("seed", [1, 2])
def test_filter_equals_the_per_node_answer(req: PodRequest, seed: int) -> None:
    state = _cluster(seed)
    alloc = assemble(state, api=NullApi(),
                      config=AllocatorConfig(filter_best=False))
    names = [*state.node_names(), "ghost"]
    for _ in range(2):  # cold, then from the shared cache
        out = alloc.filter(make_gpu_pod("p", req, namespace="ns", uid="u"), names)
        for name in state.node_names():
            view = state.view(name)
            assert view is not None
            why = unfit_reason(req, view.state)
            if why is None:
                assert name in out.nodes
            else:
                where = out.failed if why.resolvable else out.unresolvable
                assert where[name] == event_safe(why.reason)
        assert "ghost" in out.failed


@pytest.mark.parametrize("req", REQUESTS)
@pytest.mark.parametrize("policy", ["binpack", "spread", "fgd", "fgd-ff"])
def test_prioritize_equals_the_per_node_scores(req: PodRequest, policy: str) -> None:
    state = _cluster(3)
    alloc = assemble(state, api=NullApi(),
                      config=AllocatorConfig(default_policy=policy))
    names = [*state.node_names(), "ghost"]
    pol = get_policy(policy)
    ctx = PolicyContext(req, pod_key="ns/p/u")
    raw: dict[str, float] = {}
    for name in state.node_names():
        view = state.view(name)
        assert view is not None
        placed = place(req, view.state, chooser(pol, ctx))
        if not isinstance(placed, Unfit):
            raw[name] = pol.score(view.state, placed.after, ctx)
    expected = dict(zip(names, scaled([raw.get(n) for n in names]), strict=True))
    for _ in range(2):
        pod = make_gpu_pod("p", req, namespace="ns", uid="u")
        assert dict(alloc.prioritize(pod, names)) == expected


def test_random_ranks_only_feasible_nodes_reproducibly_and_differently_per_pod() -> None:
    state = _cluster(4)
    alloc = assemble(state, api=NullApi(),
                      config=AllocatorConfig(default_policy="random", seed=5,
                                             filter_best=False))
    req = request(whole(cards=2))
    names = state.node_names()
    pod = make_gpu_pod("p", req, namespace="ns", uid="u")
    first = dict(alloc.prioritize(pod, names))
    other = dict(alloc.prioritize(make_gpu_pod("p", req, namespace="ns", uid="v"), names))
    assert first == dict(alloc.prioritize(pod, names))
    assert first != other
    feasible = set(alloc.filter(pod, names).nodes)
    assert {n for n, s in first.items() if s > 0} <= feasible
    assert max(first.values()) == MAX_SCORE


def test_a_node_change_is_seen_by_the_next_filter() -> None:
    state = ClusterState(VOCAB)
    state.replace_nodes([make_node("a", count=1), make_node("b", count=1)])
    state.mark_synced()
    alloc = assemble(state, api=NullApi(),
                      config=AllocatorConfig(filter_best=False))
    req = request(whole(cards=1))
    pod = make_gpu_pod("p", req, namespace="ns", uid="u")
    assert alloc.filter(pod, ["a", "b"]).nodes == ["a", "b"]
    state.apply_pod(_bound("x", "a", ContainerAllocation("c", (0,))))
    out = alloc.filter(make_gpu_pod("p", req, namespace="ns", uid="u"), ["a", "b"])
    assert out.nodes == ["b"] and out.failed == {"a": "needs 1 whole card (0 free)"}


@pytest.mark.parametrize(
    ("pod_name_in_bind", "reads"),
    [("p", 0), ("someone-else", 1)],
)
def test_bind_reuses_the_pod_filter_just_saw_and_only_for_that_pod(
    pod_name_in_bind: str, reads: int
) -> None:
    from alloc_harness import synced_allocator
    from fake_kube import FakeKube

    fake = FakeKube()
    fake.add_node(make_node("n1", count=2))
    fake.add_pod(make_gpu_pod("p", request(share(core=30, mem=2048)), uid="u-1"))
    fake.add_pod(make_gpu_pod("someone-else", request(share(core=30, mem=2048)), uid="u-1"))
    alloc = synced_allocator(fake)
    pod = fake.get_pod("default", "p")
    fake.calls.clear()
    assert alloc.filter(pod, ["n1"]).nodes == ["n1"]
    out = alloc.bind("default", pod_name_in_bind, "u-1", "n1")
    assert out.outcome == "bound"
    assert [c for c in fake.calls if c[0] == "get_pod"] == [("get_pod", pod_name_in_bind)] * reads
    assert fake.pods[("default", pod_name_in_bind)]["spec"]["nodeName"] == "n1"


@pytest.mark.parametrize(
    ("names", "scores"),
    [([], []), (["n1"], [3]), (["a", 'b"x', "ü", "c\\d"], [10, 0, 5, 10]),
     ([f"node-{i}" for i in range(50)], [i % 11 for i in range(50)]), (["odd"], [11])],
)
def test_the_prioritize_reply_text_is_what_json_dumps_writes(
    names: list[str], scores: list[int]
) -> None:
    import json

    from allocator.service.extender import encode_priorities

    expected = json.dumps([{"Host": n, "Score": s} for n, s in zip(names, scores, strict=True)],
                          separators=(",", ":"))
    assert encode_priorities(names, scores) == expected
