"""Preemption in every agent profile (issue 47: "in every agent profile"): on a node of two
cards each shared by two priority-1 pods in the shape that profile's agent runs, a
priority-100 pod asking a card's worth evicts exactly the two pods of one card, and once they
are gone it is held and bound there (under HAMi's and Volcano's node lock too)."""

from __future__ import annotations

from typing import Any

import pytest
from alloc_harness import make_app
from builders import VOCAB, cards, make_gpu_pod, make_node, request, share
from fake_kube import FakeKube
from test_hami_bind import hami_node

from allocator.hami.codec import HAMI, VOLCANO_VGPU
from allocator.service.app import Runtime
from allocator.verbs.config import AllocatorConfig
from devcluster.nodes import advertised
from tessera.agent_profiles import AgentProfile, NodeAgent
from tessera.dialects import DialectConfig
from tessera.vocabulary import ContainerRequest

#: The share each profile's agent runs (nano-gpu: compute only; aliyun: memory only).
SHAPES: dict[AgentProfile, tuple[ContainerRequest, ContainerRequest]] = {
    AgentProfile.ELASTIC: (share(core=50, mem=8000), share(core=75, mem=12000)),
    AgentProfile.NANO_GPU: (share(core=50), share(core=75)),
    AgentProfile.ALIYUN: (share(mem=8000), share(mem=12000)),
    AgentProfile.HAMI: (share(core=50, mem=8000), share(core=75, mem=12000)),
    AgentProfile.VOLCANO_VGPU: (share(core=50, mem=8000), share(core=75, mem=12000)),
}


def _node(profile: AgentProfile) -> dict[str, Any]:
    """n1 with two 16,384 MiB cards, as that profile's device plugin registers them."""
    if profile is AgentProfile.HAMI:
        return hami_node(count=2)
    if profile is AgentProfile.VOLCANO_VGPU:
        return hami_node(count=2, flavor=VOLCANO_VGPU)
    node = make_node("n1", count=2)
    node["status"]["allocatable"] = {
        **advertised(cards(16384, 16384), NodeAgent(profile, VOCAB)), "cpu": "64"}
    return node


def _pod(name: str, req: ContainerRequest, priority: int) -> dict[str, Any]:
    pod = make_gpu_pod(name, request(req), uid=f"u-{name}")
    pod["spec"]["priority"] = priority
    return pod


def _plugin_started(fake: FakeKube, rt: Runtime, profile: AgentProfile, name: str) -> None:
    """The node plugin's Allocate done: under HAMi's and Volcano's lock, ``bind-phase:
    success`` and the lock released, as the plugin does; other agents need nothing."""
    flavor = {AgentProfile.HAMI: HAMI, AgentProfile.VOLCANO_VGPU: VOLCANO_VGPU}.get(profile)
    if flavor is not None:
        fake.pods[("default", name)]["metadata"]["annotations"][flavor.bind_phase_key] = "success"
        fake.nodes["n1"]["metadata"]["annotations"].pop(flavor.lock_key, None)  # released
        rt.state.apply_node(fake.get_node("n1"))
    rt.state.apply_pod(fake.get_pod("default", name))


@pytest.mark.parametrize("profile", list(AgentProfile))
def test_the_pods_of_one_card_are_evicted_and_the_preemptor_binds_there(
        profile: AgentProfile) -> None:
    low, high = SHAPES[profile]
    fake = FakeKube()
    fake.add_node(_node(profile))
    _app, rt = make_app(fake, core=AllocatorConfig(
        preemption=True, dialects=DialectConfig(agent_profile=profile)))
    for name in ("a", "b", "c", "d"):
        fake.add_pod(_pod(name, low, 1))
        assert rt.allocator.bind("default", name, f"u-{name}", "n1").outcome == "bound"
        _plugin_started(fake, rt, profile, name)
    fake.add_pod(_pod("big", high, 100))
    big = fake.get_pod("default", "big")
    assert rt.allocator.filter(big, ["n1"]).nodes == []
    assert rt.preempt is not None
    rt.preempt.worker.drain()
    evicted = sorted(name for call, name in fake.calls if call == "create_eviction")
    cards = {name: rt.state.record(f"u-{name}") for name in evicted}
    assert len(evicted) == 2, evicted
    freed = {i for r in cards.values() if r is not None
             for c in r.allocation.containers for i in c.card_indices}
    assert len(freed) == 1, (evicted, freed)  # both victims on one card: no other goes
    for name in evicted:  # the in-memory API deleted them at the eviction: the watch tells
        rt.state.remove_pod({"metadata": {"uid": f"u-{name}"}})
    rt.preempt.worker.drain()
    assert rt.allocator.filter(big, ["n1"]).nodes == ["n1"]
    assert rt.allocator.bind("default", "big", "u-big", "n1").outcome == "bound"
    record = rt.state.record("u-big")
    assert record is not None
    assert {i for c in record.allocation.containers for i in c.card_indices} == freed
