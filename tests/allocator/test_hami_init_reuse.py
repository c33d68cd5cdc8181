"""GPU init containers asking less than their app container, under HAMi (docs/hami-plugin.md, "Init
containers"): kubelet's reuse of their devices as the stand-in models it
(devcluster/kubelet_devices.py, from kubernetes v1.34.4 ``pkg/kubelet/cm/devicemanager/
manager.go``), and the whole path (allocator bind, stand-in kubelet and plugin) under both of
HAMi's ``enableGetPreferredAllocation`` settings and many of kubelet's set orders."""

from __future__ import annotations

import random
from typing import Any

import pytest
from alloc_harness import synced_allocator
from builders import make_gpu_pod, make_node, request, share, whole
from fake_kube import FakeKube

from devcluster.hami_node import HamiNode, fake_devices, node_envs
from devcluster.kubelet_devices import KubeletDevices, physical_card, slice_ids
from tessera.agent_profiles import AgentProfile, NodeAgent
from tessera.dialects import DialectConfig
from tessera.vocabulary import ContainerRequest, decode_allocation

CARDS = tuple(d.uuid for d in fake_devices("n1", 4))
A, B, C, D = CARDS
SEEDS = range(40)


def _kubelet(seed: int | None = None) -> KubeletDevices:
    return KubeletDevices(tuple(i for card in CARDS for i in slice_ids(card, 4)),
                          preferred=True, rng=None if seed is None else random.Random(seed))


def _cards(ids: list[str]) -> list[str]:
    return sorted(physical_card(i) for i in ids)


def test_a_container_asking_fewer_than_are_reusable_gets_a_subset_of_them() -> None:
    # allocateRemainingFrom(reusableDevices) stops at the count asked (manager.go:657); which
    # ones follows Go's map order: over many orders, each of the two is taken.
    seen = set()
    for seed in SEEDS:
        kubelet = _kubelet(seed)
        first = kubelet.allocate("p", True, 2, [A, B])
        assert _cards(first) == [A, B]  # GetPreferredAllocation: a slice on each named card
        second = kubelet.allocate("p", True, 1, [A])
        assert set(second) < set(first)
        seen.add(physical_card(second[0]))
        # The set grows to the largest count only: the app container takes both, then one
        # slice of the card it names that none of them stands for.
        app = kubelet.allocate("p", False, 3, [A, B, C])
        assert set(first) < set(app) and _cards(app) == [A, B, C]
        assert kubelet.reuse["p"] == set()  # later app containers start from nothing
    assert seen == {A, B}


def test_a_container_asking_more_than_are_reusable_takes_them_all_and_the_plugin_adds() -> None:
    kubelet = _kubelet()
    one = kubelet.allocate("p", True, 1, [A])
    two = kubelet.allocate("p", True, 2, [A, B])  # mustInclude the reused slice of A
    assert set(one) < set(two) and _cards(two) == [A, B]
    assert kubelet.reuse["p"] == set(two)


def test_a_sidecars_devices_are_not_handed_on() -> None:
    # A restartable init container keeps its devices (manager.go:380-387): removed from
    # devicesToReuse, so the app container gets devices of its own.
    kubelet = _kubelet()
    side = kubelet.allocate("p", True, 1, [A], restartable=True)
    assert kubelet.reuse["p"] == set()
    app = kubelet.allocate("p", False, 1, [A])
    assert not set(side) & set(app) and _cards(app) == [A]


def test_without_the_plugins_preference_kubelet_takes_any_free_device() -> None:
    kubelet = KubeletDevices(tuple(i for card in CARDS for i in slice_ids(card, 4)))
    assert _cards(kubelet.allocate("p", False, 2, [C, D])) == [A, A]  # sorted: card A's


# --------------------------------------------------------------------------- the whole path

HAMI = NodeAgent(AgentProfile.HAMI)
HAMI_PROFILE = DialectConfig(agent_profile=AgentProfile.HAMI)


def _pod(fake: FakeKube, name: str, *containers: ContainerRequest) -> None:
    """A pod as the hami profile's webhook shapes it: HAMi's keys on each GPU container."""
    pod = make_gpu_pod(name, request(*containers), uid=name)
    asked = {c.name: c for c in containers}
    for c in pod["spec"]["containers"] + pod["spec"].get("initContainers", []):
        c["resources"] = {"limits": HAMI.container_resources(asked[c["name"]])}
    fake.add_pod(pod)


def _limits(env: dict[str, str]) -> tuple[str, str]:
    return env["CUDA_DEVICE_SM_LIMIT"], env["CUDA_DEVICE_MEMORY_LIMIT_0"]


@pytest.mark.parametrize("preferred", [False, True],
                         ids=["hami-default", "enableGetPreferredAllocation"])
def test_init_containers_asking_less_run_under_their_app_containers_record(
        preferred: bool) -> None:
    """Init containers of 2, 1 and 3 whole cards and of a share, before an app container of 3
    whole cards and one of a share; cards 0 and 1 partly taken by another pod, so kubelet's
    first free devices are not the pod's. Under both settings and 40 of kubelet's orders,
    every app container runs on its record and every init container on the first app
    container's recorded cards, with its own share."""
    for seed in range(0, 40, 4 if preferred else 20):
        fake = FakeKube()
        fake.add_node(make_node("n1", count=6))
        standin = HamiNode(fake, "n1", fake_devices("n1", 6, memory_mib=16384),
                           preferred_allocation=preferred, kubelet_rng=random.Random(seed))
        standin.register("2026-11-27T21:00:00Z")
        _pod(fake, "busy", share("main", core=60, mem=4096, shares=2))
        _pod(fake, "p", whole("two", cards=2, init=True), share("one", core=30, mem=1024,
                                                                 init=True),
             whole("three", cards=3, init=True), share("late", core=5, pct=10, init=True),
             whole("main", cards=3), share("side", core=40, mem=8192))
        alloc = synced_allocator(fake, dialects=HAMI_PROFILE)
        for name in ("busy", "p"):
            alloc.bind("default", name, name, "n1")
            assert standin.allocate_next() == f"default/{name}"
        pod: dict[str, Any] = fake.pods[("default", "p")]
        assert pod["metadata"]["annotations"]["hami.io/bind-phase"] == "success"
        chosen = decode_allocation(
            pod["metadata"]["annotations"][HAMI_PROFILE.vocabulary.allocation_annotation])
        assert [c.name for c in chosen.containers] == ["main", "side"]  # apps only
        uuid = {d.index: d.uuid for d in standin.devices}
        record = {c.name: sorted(uuid[i] for i in c.card_indices) for c in chosen.containers}
        envs = node_envs(pod)
        seen = {n: sorted(e["NVIDIA_VISIBLE_DEVICES"].split(",")) for n, e in envs.items()}
        assert {n: seen[n] for n in record} == record, seed
        for name, count in (("two", 2), ("one", 1), ("three", 3), ("late", 1)):
            assert len(seen[name]) == count and set(seen[name]) <= set(record["main"]), seed
        assert _limits(envs["two"]) == _limits(envs["three"]) == ("100", "16384m")
        assert _limits(envs["one"]) == ("30", "1024m")
        assert _limits(envs["late"]) == ("5", "1639m")  # 10% of 16 GiB, rounded up
        assert not set(record["main"]) & set(record["side"])
        busy = decode_allocation(fake.pods[("default", "busy")]["metadata"]["annotations"][
            HAMI_PROFILE.vocabulary.allocation_annotation])
        assert not set(record["main"]) & {uuid[i] for i in busy.containers[0].card_indices}
