"""The agent profiles, the resources their device plugins register, the agents by name and
release, and what the extender configuration and the nodes' capacity say of them (pure).
Sources: the package docstring (:mod:`tessera.agent_profiles`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final


class AgentProfile(StrEnum):
    """The node agent a cluster runs (value of ``--agent-profile``)."""

    ELASTIC = "elastic"
    NANO_GPU = "nano-gpu"
    ALIYUN = "aliyun"
    HAMI = "hami"
    VOLCANO_VGPU = "volcano-vgpu"


DEFAULT_PROFILE: Final = AgentProfile.ELASTIC
#: The one setting both services read (the flag ``--agent-profile`` sets it).
PROFILE_ENV: Final = "TESSERA_AGENT_PROFILE"
PROFILE_FLAG: Final = "--agent-profile"
#: With the ``hami`` profile: an older HAMi release (a key of :data:`HAMI_AGENTS`), read by
#: both services like the profile; unset for the release :data:`AGENTS` names.
HAMI_AGENT_ENV: Final = "TESSERA_HAMI_AGENT"
HAMI_AGENT_FLAG: Final = "--hami-agent"

MIB_PER_GIB: Final = 1024

# Resource names the agents' device plugins register (sources in the module docstring). Users
# write them too, which is why tessera.dialects reads them as dialects.
NANO_PERCENT_KEY: Final = "nano-gpu/gpu-percent"
ALIYUN_MEMORY_KEY: Final = "aliyun.com/gpu-mem"
ALIYUN_COUNT_KEY: Final = "aliyun.com/gpu-count"
NVIDIA_GPU_KEY: Final = "nvidia.com/gpu"


@dataclass(frozen=True)
class VgpuResources:
    """HAMi's four request resources, as one system names them (HAMi itself, Volcano's vGPU)."""

    count: str
    memory: str
    memory_percent: str
    cores: str

    @property
    def all(self) -> tuple[str, ...]:
        return (self.count, self.memory, self.memory_percent, self.cores)


HAMI_RESOURCES: Final = VgpuResources(
    NVIDIA_GPU_KEY, "nvidia.com/gpumem", "nvidia.com/gpumem-percentage", "nvidia.com/gpucores"
)
#: HAMi's task priority resource (the chart's ``resourcePriority``, charts/hami/values.yaml:29):
#: no card request but HAMi-core's ``CUDA_TASK_PRIORITY`` (pkg/device/nvidia/device.go:352-358).
#: No node advertises it, so HAMi's chart lists it among the extender's managed resources,
#: ignored by kube-scheduler's fit (charts/hami/templates/_helpers.tpl:202).
HAMI_PRIORITY_KEY: Final = "nvidia.com/priority"
VOLCANO_RESOURCES: Final = VgpuResources(
    "volcano.sh/vgpu-number", "volcano.sh/vgpu-memory", "volcano.sh/vgpu-memory-percentage",
    "volcano.sh/vgpu-cores",
)


@dataclass(frozen=True)
class Agent:
    """What a profile's agent is called, and where its behaviour was read."""

    profile: AgentProfile
    name: str
    source: str
    #: HAMi's and Volcano's plugins: the pod's device annotation lists app containers only,
    #: so a GPU init container gets no device of its own (module docstring).
    app_containers_only: bool = False


AGENTS: Final[Mapping[AgentProfile, Agent]] = {
    AgentProfile.ELASTIC: Agent(AgentProfile.ELASTIC, "elastic-gpu-agent",
                                "elastic-ai/elastic-gpu-agent v0.4.1"),
    AgentProfile.NANO_GPU: Agent(AgentProfile.NANO_GPU, "nano-gpu-agent",
                                 "nano-gpu-agent 0.3 (elastic-ai/elastic-gpu-agent v0.2.0)"),
    AgentProfile.ALIYUN: Agent(AgentProfile.ALIYUN, "gpushare-device-plugin",
                               "AliyunContainerService/gpushare-device-plugin v0.3.0"),
    AgentProfile.HAMI: Agent(AgentProfile.HAMI, "HAMi's device plugin",
                             "Project-HAMi/HAMi v2.10.0"),
    AgentProfile.VOLCANO_VGPU: Agent(AgentProfile.VOLCANO_VGPU, "volcano-vgpu-device-plugin",
                                     "Project-HAMi/volcano-vgpu-device-plugin v1.12.0",
                                     app_containers_only=True),
}

#: Older HAMi releases, by the value of ``--hami-agent`` (the allocator's HAMi flavor of the
#: same name writes what they read: allocator/hami/codec.py).
HAMI_AGENTS: Final[Mapping[str, Agent]] = {
    "hami-v2.8": Agent(AgentProfile.HAMI, "HAMi's device plugin v2.8", "Project-HAMi/HAMi v2.8.3",
                       app_containers_only=True),
}


@dataclass(frozen=True)
class ManagedResource:
    """One ``managedResources`` entry of the kube-scheduler extender configuration."""

    name: str
    #: True: kube-scheduler's own resource fit skips it (the allocator judges per card, and
    #: some of these, HAMi's memory and cores, are never registered on a node).
    ignored_by_scheduler: bool = True


@dataclass(frozen=True)
class Capacity:
    """How a profile's nodes advertise their cards in ``status.allocatable``: ``count`` holds
    ``per_card`` units per card; ``memory`` (when the agent registers it) the node's total, in
    units of ``memory_unit_mib`` MiB."""

    count: str
    per_card: int
    memory: str | None
    memory_unit_mib: int = 1


def hami_agent_problem(profile: AgentProfile, name: str) -> str:
    """Why ``--hami-agent`` cannot be ``name`` with ``profile`` (``""``: it can)."""
    if not name or (profile is AgentProfile.HAMI and name in HAMI_AGENTS):
        return ""
    known = ", ".join(f"{key} ({agent.name})" for key, agent in HAMI_AGENTS.items())
    return (f"{HAMI_AGENT_ENV}={name!r}: an older HAMi release, with {PROFILE_ENV}=hami "
            f"(not {profile.value}); known: {known}; unset for HAMi v2.9 or later")
