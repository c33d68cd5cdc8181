"""Which node agent serves which agent profile: one entry per profile, built once by the app
factory (:func:`agent_for`).

A new agent: its module (a :class:`~allocator.agents.port.NodeAgent` or a writer for
:class:`~allocator.agents.port.PlainAgent`) and one line here; its writer's entry in
:data:`allocator.agents.WRITERS` names the pod keys it owns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Final

from allocator.agents import aliyun_writer, writer
from allocator.agents.hami import HamiAgent
from allocator.agents.port import NodeAgent, PlainAgent
from allocator.hami.codec import FLAVORS
from allocator.ports import KubeApi
from tessera.agent_profiles import AgentProfile
from tessera.dialects import DialectConfig


@dataclass(frozen=True)
class AgentSetup:
    """What an agent may be built with: the dialect settings (profile, vocabulary, units),
    the API port and the clock."""

    dialects: DialectConfig
    api: KubeApi | None
    clock: Callable[[], float]


def _plain(setup: AgentSetup) -> NodeAgent:
    profile = setup.dialects.agent_profile
    registered = writer(profile)
    return PlainAgent(profile, registered.write) if registered is not None else _bare(profile)


def _bare(profile: AgentProfile) -> NodeAgent:
    """The port's defaults, named for ``profile`` (its binds fail: no writer)."""
    agent = NodeAgent()
    agent.profile = profile
    return agent


def _aliyun(setup: AgentSetup) -> NodeAgent:
    return PlainAgent(AgentProfile.ALIYUN,
                      partial(aliyun_writer, unit_mib=setup.dialects.aliyun_memory_unit_mib))


def _hami(setup: AgentSetup) -> NodeAgent:
    # The hami and volcano-vgpu profiles mean their current flavor; --hami-agent names an
    # older one (the setting the webhook reads too: DialectConfig.hami_agent).
    profile = setup.dialects.agent_profile
    if setup.api is None:
        raise ValueError(f"the {profile.value} agent takes the API (its node locks)")
    flavor = FLAVORS[setup.dialects.hami_agent or str(profile)]
    return HamiAgent(profile, flavor, setup.api, setup.dialects.vocabulary, setup.clock)


#: The agent of each profile.
AGENTS: Final[dict[AgentProfile, Callable[[AgentSetup], NodeAgent]]] = {
    AgentProfile.ELASTIC: _plain,
    AgentProfile.NANO_GPU: _plain,
    AgentProfile.ALIYUN: _aliyun,
    AgentProfile.HAMI: _hami,
    AgentProfile.VOLCANO_VGPU: _hami,
}


def agent_for(setup: AgentSetup) -> NodeAgent:
    """The cluster's node agent (the port's defaults for a profile without an entry)."""
    build = AGENTS.get(setup.dialects.agent_profile)
    return build(setup) if build is not None else _bare(setup.dialects.agent_profile)
