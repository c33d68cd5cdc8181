"""What a pod looks like to each profile's agent (pure): the resources the webhook writes on a
GPU container, every resource a profile may leave there, how its nodes advertise cards, and
the request as the allocator places it for the agent. One line per profile in each table."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Final

from tessera.agent_profiles.profiles import (
    ALIYUN_COUNT_KEY,
    ALIYUN_MEMORY_KEY,
    HAMI_RESOURCES,
    NANO_PERCENT_KEY,
    VOLCANO_RESOURCES,
    AgentProfile,
    Capacity,
    VgpuResources,
)
from tessera.vocabulary import WHOLE_CARD_PERCENT, ContainerRequest, PodRequest

if TYPE_CHECKING:
    from tessera.agent_profiles.node_agent import NodeAgent


def _elastic_shape(a: NodeAgent, c: ContainerRequest) -> dict[str, int]:
    values = {a.vocabulary.core_resource: c.core_resource_value}
    if c.memory_mib:
        values[a.vocabulary.memory_resource] = c.memory_mib
    return {k: v for k, v in values.items() if v}


def _nano_shape(_a: NodeAgent, c: ContainerRequest) -> dict[str, int]:
    # One card at most (refused otherwise): 100 devices of nano-gpu/gpu-percent per card.
    return {NANO_PERCENT_KEY: c.core_resource_value}


def _aliyun_shape(a: NodeAgent, c: ContainerRequest) -> dict[str, int]:
    return {ALIYUN_MEMORY_KEY: -(-c.memory_mib // a.aliyun_unit_mib)} if c.memory_mib else {}


def _vgpu_shape(keys: VgpuResources) -> Callable[[NodeAgent, ContainerRequest],
                                                 dict[str, int]]:
    def shape(_a: NodeAgent, c: ContainerRequest) -> dict[str, int]:
        if c.is_whole:
            # As HAMi's own webhook writes a whole card (defaultExclusiveCoreIfNeeded).
            return {keys.count: c.cards, keys.cores: WHOLE_CARD_PERCENT}
        values = {keys.count: c.shares, keys.cores: c.core_percent, keys.memory: c.memory_mib,
                  keys.memory_percent: c.memory_percent}
        return {k: v for k, v in values.items() if v}

    return shape


SHAPES: Final[Mapping[AgentProfile, Callable[[NodeAgent, ContainerRequest],
                                              dict[str, int]]]] = {
    AgentProfile.ELASTIC: _elastic_shape,
    AgentProfile.NANO_GPU: _nano_shape,
    AgentProfile.ALIYUN: _aliyun_shape,
    AgentProfile.HAMI: _vgpu_shape(HAMI_RESOURCES),
    AgentProfile.VOLCANO_VGPU: _vgpu_shape(VOLCANO_RESOURCES),
}

POD_RESOURCES: Final[Mapping[AgentProfile, Callable[[NodeAgent], tuple[str, ...]]]] = {
    AgentProfile.ELASTIC: lambda a: a.vocabulary.managed_resources,
    AgentProfile.NANO_GPU: lambda _a: (NANO_PERCENT_KEY,),
    AgentProfile.ALIYUN: lambda _a: (ALIYUN_MEMORY_KEY,),
    AgentProfile.HAMI: lambda _a: HAMI_RESOURCES.all,
    AgentProfile.VOLCANO_VGPU: lambda _a: VOLCANO_RESOURCES.all,
}

CAPACITY: Final[Mapping[AgentProfile, Callable[[NodeAgent], Capacity | None]]] = {
    AgentProfile.ELASTIC: lambda a: Capacity(a.vocabulary.core_resource, WHOLE_CARD_PERCENT,
                                             a.vocabulary.memory_resource),
    AgentProfile.NANO_GPU: lambda _a: Capacity(NANO_PERCENT_KEY, WHOLE_CARD_PERCENT, None),
    AgentProfile.ALIYUN: lambda a: Capacity(ALIYUN_COUNT_KEY, 1, ALIYUN_MEMORY_KEY,
                                            a.aliyun_unit_mib),
    AgentProfile.HAMI: lambda _a: None,
    AgentProfile.VOLCANO_VGPU: lambda _a: Capacity(VOLCANO_RESOURCES.cores, WHOLE_CARD_PERCENT,
                                                   VOLCANO_RESOURCES.memory),
}


def _fold_init_containers(_a: NodeAgent, request: PodRequest) -> PodRequest:
    """Without the GPU init containers: each runs on the cards of the app container kubelet
    hands its devices to, under that container's share, which is where the agent serves it
    (:func:`.refusals.inherited_init_refusals`: it asks for the same; for HAMi,
    :func:`.refusals.init_share_fits`: at most as many devices, each share no larger, and the
    bind lists it on the first of that container's cards with its own share, read from the
    pod). Reserving other cards, or more room, for it would leave them idle: it runs to
    completion before the app containers start."""
    apps = tuple(c for c in request.containers if not c.init)
    return replace(request, containers=apps) if apps else request


def _aliyun_placement(a: NodeAgent, request: PodRequest) -> PodRequest:
    """Memory rounded up to the plugin's unit: the share it hands out (and cGPU enforces)."""
    unit = a.aliyun_unit_mib
    return replace(request, containers=tuple(
        replace(c, memory_mib=-(-c.memory_mib // unit) * unit) for c in request.containers))


def _vgpu_placement(_a: NodeAgent, request: PodRequest) -> PodRequest:
    """A share without memory gets all of the card's memory, as HAMi's and Volcano's plugins
    give it (``GenerateResourceRequests``: no memory key is 100%): so it is reserved."""
    return replace(request, containers=tuple(
        replace(c, memory_percent=100)
        if not c.is_whole and not c.memory_mib and not c.memory_percent else c
        for c in request.containers))


PLACEMENT: Final[Mapping[AgentProfile, Callable[[NodeAgent, PodRequest], PodRequest]]] = {
    AgentProfile.ELASTIC: _fold_init_containers,
    AgentProfile.NANO_GPU: _fold_init_containers,
    AgentProfile.ALIYUN: _aliyun_placement,
    AgentProfile.HAMI: lambda a, r: _vgpu_placement(a, _fold_init_containers(a, r)),
    AgentProfile.VOLCANO_VGPU: _vgpu_placement,
}
