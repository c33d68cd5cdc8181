"""The allocator in the hami profile with the HAMi node stand-in (devcluster/hami_node.py)
over the fake API: what each container would see is exactly what Tessera chose, binds of one
node queue behind HAMi's lock instead of failing, and a failed Allocate frees the cards."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from alloc_harness import synced_allocator
from builders import VOCAB, make_gpu_pod, make_node, request, share, whole
from fake_kube import FakeKube

from allocator.errors import BindError
from allocator.hami.codec import HAMI, parse_lock
from devcluster.hami_node import HamiNode, fake_devices, node_envs, visible
from tessera.agent_profiles import AgentProfile, NodeAgent
from tessera.dialects import DialectConfig
from tessera.vocabulary import decode_allocation

HAMI_PROFILE = DialectConfig(agent_profile=AgentProfile.HAMI)
HAMI_AGENT = NodeAgent(AgentProfile.HAMI)


def _cluster(cards: int = 8) -> tuple[FakeKube, HamiNode]:
    fake = FakeKube()
    fake.add_node(make_node("n1", count=cards))
    standin = HamiNode(fake, "n1", fake_devices("n1", cards, memory_mib=81920))
    standin.register("2026-11-27T21:00:00Z")
    return fake, standin


def _pod(fake: FakeKube, name: str, req: Any, gpus: dict[str, int]) -> None:
    """A pod as the hami profile's webhook shapes it: HAMi's keys on each GPU container, the
    device count as ``gpus`` says (a test may make it differ from the placement)."""
    pod = make_gpu_pod(name, req, uid=name)
    asked = {c.name: c for c in req.containers}
    for c in pod["spec"]["containers"] + pod["spec"].get("initContainers", []):
        if c["name"] in gpus:
            limits = HAMI_AGENT.container_resources(asked[c["name"]])
            c["resources"] = {"limits": {**limits, "nvidia.com/gpu": str(gpus[c["name"]])}}
    fake.add_pod(pod)


def test_what_the_containers_see_is_what_tessera_chose() -> None:
    fake, standin = _cluster()
    _pod(fake, "p", request(share("main", core=30, mem=4096), whole("big", cards=2)),
         {"main": 1, "big": 2})
    alloc = synced_allocator(fake, dialects=HAMI_PROFILE)
    alloc.bind("default", "p", "p", "n1")
    assert standin.allocate_next() == "default/p"
    pod = fake.pods[("default", "p")]
    annotations = pod["metadata"]["annotations"]
    assert annotations[HAMI.bind_phase_key] == "success"
    assert HAMI.lock_key not in fake.nodes["n1"]["metadata"]["annotations"]
    assert annotations[HAMI.to_allocate_key] == ";;"  # consumed, entries kept
    chosen = decode_allocation(annotations[VOCAB.allocation_annotation])
    uuid = {d.index: d.uuid for d in standin.devices}
    envs = node_envs(pod)
    for c in chosen.containers:
        env = envs[c.name]
        assert env["NVIDIA_VISIBLE_DEVICES"].split(",") == [uuid[i] for i in c.card_indices]
        if c.is_whole:
            assert env["CUDA_DEVICE_SM_LIMIT"] == "100"
            assert all(env[f"CUDA_DEVICE_MEMORY_LIMIT_{i}"] == "81920m"
                       for i in range(len(c.card_indices)))
        else:
            assert (env["CUDA_DEVICE_SM_LIMIT"], env["CUDA_DEVICE_MEMORY_LIMIT_0"]) == (
                "30", "4096m")


def test_a_count_mismatch_fails_allocate_and_the_cards_come_back() -> None:
    fake, standin = _cluster()
    _pod(fake, "p", request(share("main", core=30, mem=4096)), {"main": 2})  # asks 2, got 1
    alloc = synced_allocator(fake, dialects=HAMI_PROFILE)
    alloc.bind("default", "p", "p", "n1")
    standin.allocate_next()
    pod = fake.pods[("default", "p")]
    assert pod["metadata"]["annotations"][HAMI.bind_phase_key] == "failed"
    assert HAMI.lock_key not in fake.nodes["n1"]["metadata"]["annotations"]
    alloc.state.apply_pod(pod)
    assert alloc.state.record("p") is None


def test_forty_concurrent_binds_on_one_node_queue_behind_the_lock_and_all_allocate() -> None:
    fake, standin = _cluster(8)
    for i in range(40):
        _pod(fake, f"p{i}", request(share("main", core=20, mem=8192)), {"main": 1})
    alloc = synced_allocator(fake, dialects=HAMI_PROFILE)
    stop = threading.Event()
    served: list[str] = []

    def plugin() -> None:
        while not stop.is_set():
            who = standin.allocate_next()
            if who is None:
                stop.wait(0.002)
            else:
                served.append(who)

    errors: list[BaseException] = []

    def bind(i: int) -> None:
        # As kube-scheduler does: a bind refused because too many wait is tried again.
        for _attempt in range(200):
            try:
                alloc.bind("default", f"p{i}", f"p{i}", "n1")
                return
            except BindError as exc:
                if "try again" not in str(exc):
                    errors.append(exc)
                    return
                time.sleep(0.02)
        errors.append(TimeoutError(f"p{i} never bound"))

    agent = threading.Thread(target=plugin)
    agent.start()
    binders = [threading.Thread(target=bind, args=(i,)) for i in range(40)]
    for t in binders:
        t.start()
    for t in binders:
        t.join(60)
    deadline = threading.Event()
    for _ in range(500):
        if len(served) == 40:
            break
        deadline.wait(0.01)
    stop.set()
    agent.join(5)
    assert errors == []
    assert sorted(served) == sorted(f"default/p{i}" for i in range(40))
    # 40 x 20% cores on 8 cards: exactly five per card, nothing over-committed.
    per_card: dict[str, int] = {}
    for i in range(40):
        pod = fake.pods[("default", f"p{i}")]
        assert pod["metadata"]["annotations"][HAMI.bind_phase_key] == "success"
        for uuid in visible(node_envs(pod)):
            per_card[uuid] = per_card.get(uuid, 0) + 20
    assert sorted(per_card.values()) == [100] * 8
    lock = fake.nodes["n1"]["metadata"]["annotations"].get(HAMI.lock_key)
    assert lock is None or parse_lock(lock).namespace == "default"


def test_a_hami_profile_node_is_created_with_the_plugins_register_annotation() -> None:
    from allocator.hami.codec import VOLCANO_VGPU
    from allocator.hami.writer import read_devices
    from devcluster.nodes import node_object, uniform
    from tessera.agent_profiles import AgentProfile, NodeAgent
    for profile, flavor in ((AgentProfile.HAMI, HAMI), (AgentProfile.VOLCANO_VGPU, VOLCANO_VGPU)):
        node = node_object(uniform("n1", 4, "Tesla-T4", 15360), VOCAB, NodeAgent(profile, VOCAB))
        devices = read_devices(node["metadata"]["annotations"], flavor)
        assert devices is not None and not devices.problem
        assert [(d.index, d.model, d.memory_mib) for d in devices.devices] == [
            (i, "Tesla-T4", 15360) for i in range(4)]
        # The stand-in's own devices for such a node are the same cards (same UUIDs).
        assert [d.uuid for d in devices.devices] == [
            d.uuid for d in fake_devices("n1", 4, memory_mib=15360)]
    plain = node_object(uniform("n1", 4, "Tesla-T4", 15360), VOCAB)
    assert HAMI.register_key not in plain["metadata"]["annotations"]


def _init_pod_placed_apart(fake: FakeKube, standin: HamiNode) -> dict[str, Any]:
    """What the hami profile wrote before init containers were placed on their app
    container's cards: 'prep' on card 1, 'main' on card 0, waiting for Allocate."""
    pod = make_gpu_pod("p", request(share("prep", core=10, mem=1024, init=True),
                                    share("main", core=30, mem=2048)), uid="p", node="n1")
    for c in pod["spec"]["containers"] + pod["spec"]["initContainers"]:
        c["resources"]["limits"]["nvidia.com/gpu"] = "1"
    u0, u1 = standin.devices[0].uuid, standin.devices[1].uuid
    entries = f"{u1},NVIDIA,1024,10:;{u0},NVIDIA,2048,30:;"
    pod["metadata"]["annotations"].update({
        HAMI.to_allocate_key: entries, HAMI.allocated_key: entries, HAMI.node_key: "n1",
        HAMI.bind_time_key: "1", HAMI.bind_phase_key: "allocating"})
    fake.add_pod(pod)
    return pod


@pytest.mark.parametrize(("preferred", "main_card"), [(False, 0), (True, 1)],
                         ids=["hami-default", "enableGetPreferredAllocation"])
def test_with_preferred_allocation_the_app_container_follows_the_init_containers_devices(
        preferred: bool, main_card: int) -> None:
    # The measured fault the hami profile's init placement avoids: kubelet reuses the init
    # container's devices for 'main' (devicesToReuse) and HAMi's Allocate aligns 'main' to
    # them (alignContainerDevicesWithAllocatedIDs), off the card the annotation names.
    fake = FakeKube()
    fake.add_node(make_node("n1", count=2))
    standin = HamiNode(fake, "n1", fake_devices("n1", 2), preferred_allocation=preferred)
    _init_pod_placed_apart(fake, standin)
    assert standin.allocate_next() == "default/p"
    envs = node_envs(fake.pods[("default", "p")])
    assert envs["prep"]["NVIDIA_VISIBLE_DEVICES"] == standin.devices[1].uuid
    assert envs["main"]["NVIDIA_VISIBLE_DEVICES"] == standin.devices[main_card].uuid
    assert envs["main"]["CUDA_DEVICE_MEMORY_LIMIT_0"] == "2048m"  # its own share still


@pytest.mark.parametrize("preferred", [False, True],
                         ids=["hami-default", "enableGetPreferredAllocation"])
def test_an_init_container_placed_by_the_hami_profile_runs_where_the_record_says(
        preferred: bool) -> None:
    fake = FakeKube()
    fake.add_node(make_node("n1", count=6))
    standin = HamiNode(fake, "n1", fake_devices("n1", 6), preferred_allocation=preferred)
    standin.register("2026-11-27T21:00:00Z")
    # Cards 0 and 1 partly used, so the pod's cards are not the first ones kubelet sees.
    for i in (0, 1):
        _pod(fake, f"busy{i}", request(share("main", core=60, mem=4096)), {"main": 1})
    # Two 60% shares never fit one card: placed apart (as before), 'main' would move.
    _pod(fake, "p", request(share("prep", core=60, mem=2048, init=True),
                            share("main", core=60, mem=2048), whole("big", cards=2)),
         {"prep": 1, "main": 1, "big": 2})
    alloc = synced_allocator(fake, dialects=HAMI_PROFILE)
    for name in ("busy0", "busy1", "p"):
        alloc.bind("default", name, name, "n1")
        assert standin.allocate_next() == f"default/{name}"
    pod = fake.pods[("default", "p")]
    chosen = decode_allocation(pod["metadata"]["annotations"][VOCAB.allocation_annotation])
    uuid = {d.index: d.uuid for d in standin.devices}
    cards = {c.name: sorted(uuid[i] for i in c.card_indices) for c in chosen.containers}
    envs = node_envs(pod)
    assert {n: sorted(e["NVIDIA_VISIBLE_DEVICES"].split(",")) for n, e in envs.items()} == {
        **cards, "prep": cards["main"]}
