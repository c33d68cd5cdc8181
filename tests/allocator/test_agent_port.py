"""The node-agent port (allocator/agents/port.py): the profile names its agent, the plain
agent changes nothing in the verbs, and an agent of one's own changes them only through the
port (the verbs know no agent by name)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence

import pytest
from alloc_harness import NOW, sync
from builders import VOCAB, make_gpu_pod, make_node, request, share
from fake_kube import FakeKube

from allocator.agents import AgentMetadata, BindContext
from allocator.agents.hami import HamiAgent
from allocator.agents.port import NodeAgent, PlainAgent, PodsToStart
from allocator.agents.profiles import AGENTS, AgentSetup, agent_for
from allocator.decisions import PodRef
from allocator.picture.state import ClusterState
from allocator.verbs.core import AllocatorConfig, assemble
from tessera.agent_profiles import AgentProfile
from tessera.dialects import DialectConfig


@pytest.mark.parametrize(("profile", "kind"), [
    (AgentProfile.ELASTIC, PlainAgent), (AgentProfile.NANO_GPU, PlainAgent),
    (AgentProfile.ALIYUN, PlainAgent), (AgentProfile.HAMI, HamiAgent),
    (AgentProfile.VOLCANO_VGPU, HamiAgent)])
def test_each_profile_is_served_by_its_agent(profile: AgentProfile, kind: type) -> None:
    agent = agent_for(AgentSetup(DialectConfig(agent_profile=profile), FakeKube(), lambda: NOW))
    assert type(agent) is kind and agent.profile is profile
    assert profile in AGENTS


def test_the_plain_agent_leaves_filter_and_bind_as_they_are() -> None:
    agent = agent_for(AgentSetup(DialectConfig(), FakeKube(), lambda: NOW))
    assert list(agent.nodes_to_avoid(["a", "b"], lambda: Counter({"a": 3}))) == []
    assert agent.answer(["a", "b", "c"]) == ["a", "b", "c"]
    with agent.guard(PodRef("default", "p", "u"), "a"):
        pass
    assert agent.waiting_by_node() == {}


def test_the_aliyun_agent_writes_in_the_unit_it_was_built_with() -> None:
    dialects = DialectConfig(agent_profile=AgentProfile.ALIYUN, aliyun_memory_unit_mib=1)
    fake = FakeKube()
    fake.add_node(make_node("n1", count=1, memory_mib=16384, cards_annotation=[
        {"index": 0, "model": "T4", "memoryMiB": 16384}]))
    fake.add_pod(make_gpu_pod("p", request(share(core=30, mem=3000)), uid="u"))
    alloc = assemble(_synced(fake), fake, AllocatorConfig(dialects=dialects), clock=lambda: NOW)
    alloc.bind("default", "p", "u", "n1")
    annotations = fake.pods[("default", "p")]["metadata"]["annotations"]
    assert (annotations["ALIYUN_COM_GPU_MEM_DEV"], annotations["ALIYUN_COM_GPU_MEM_POD"]) == (
        "16384", "3000")


class FirstOfTies(NodeAgent):
    """An agent of one's own: one annotation, ties answered by the first, n1 tried last."""

    profile = AgentProfile.ELASTIC

    def metadata(self, ctx: BindContext) -> AgentMetadata:
        return AgentMetadata(annotations={"example.com/cards": str(ctx.allocation.card_indices())})

    def nodes_to_avoid(self, names: Sequence[str], pods_to_start: PodsToStart
                       ) -> Iterator[set[str]]:
        yield {"n1"}

    def answer(self, nodes: list[str]) -> list[str]:
        return nodes[:1]


def _synced(fake: FakeKube, agent: NodeAgent | None = None) -> ClusterState:
    state = ClusterState(VOCAB, watch=agent) if agent else ClusterState(VOCAB)
    sync(state, fake)
    return state


def test_an_agent_of_ones_own_changes_the_verbs_through_the_port_alone() -> None:
    fake = FakeKube()
    for name in ("n1", "n2", "n3"):
        fake.add_node(make_node(name, count=2))
    pod = make_gpu_pod("p", request(share(core=30, mem=1000)), uid="u")
    fake.add_pod(pod)
    plain = assemble(_synced(fake), fake, AllocatorConfig(default_policy="spread"),
                     clock=lambda: NOW)
    assert plain.filter(pod, ["n1", "n2", "n3"]).nodes == ["n1", "n2", "n3"]  # alike: tied
    agent = FirstOfTies()
    own = assemble(_synced(fake, agent), fake, AllocatorConfig(default_policy="spread"),
                   clock=lambda: NOW, agent=agent)
    assert own.filter(pod, ["n1", "n2", "n3"]).nodes == ["n2"]  # n1 avoided, the first tie
    own.bind("default", "p", "u", "n2")
    assert fake.pods[("default", "p")]["metadata"]["annotations"]["example.com/cards"] == "(0,)"
