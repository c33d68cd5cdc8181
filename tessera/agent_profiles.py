"""The node agent a cluster runs, and what it asks of Tessera (pure).

Tessera decides which cards a pod gets; a node agent (a device plugin) hands them to the
containers. Each agent finds its pods differently, so the pod's shape must follow the agent:
an **agent profile** per cluster, chosen at install (``--agent-profile`` /
``TESSERA_AGENT_PROFILE``, one setting for the webhook and the allocator; with ``hami``, an
older HAMi release that behaves differently is named by ``--hami-agent`` /
``TESSERA_HAMI_AGENT``, set alike on both too: :data:`HAMI_AGENTS`), decides

- which resources the webhook leaves on each GPU container (what that agent's device plugin
  registers, so kubelet calls it): :meth:`NodeAgent.container_resources`;
- what is refused at admission because that agent cannot run it, in a message that names the
  agent: :meth:`NodeAgent.refusals`;
- how the request is placed so the agent's behaviour is right (an init container on the card its
  app container will reuse): :meth:`NodeAgent.placement_request`;
- which resources the kube-scheduler extender manages: :meth:`NodeAgent.managed_resources`;
- what its nodes advertise, for the allocator's inventory: :meth:`NodeAgent.capacity`.

The keys written at bind (annotations the agent reads) are the allocator's
(``allocator.agents``, one writer per profile). docs/agents.md says per agent what works.

Upstream sources (every resource name below was read there):

- elastic: elastic-ai/elastic-gpu-agent ``v0.4.1``: ``pkg/plugins/base.go``
  (``NewGPUSharePlugin`` registers ``v1alpha1.ResourceGPUCore`` and ``ResourceGPUMemory``,
  ``elasticgpu.io/gpu-core`` and ``elasticgpu.io/gpu-memory`` in the vendored
  ``elasticgpu.io/elastic-gpu/api/v1alpha1/types.go``), ``pkg/plugins/gpushare.go`` (100 core
  devices per card, one memory device per MiB; ``PreStartContainer`` finds the container by
  its device list through kubelet's pod-resources, ``pkg/kube/locator.go``, and reads
  ``elasticgpu.io/container-<name>``, hardcoded in ``pkg/common/const.go``).
- nano-gpu: nano-gpu-agent 0.3, whose history elastic-ai/elastic-gpu-agent continues (tag
  ``v0.2.0``): ``pkg/common/const.go`` ``ResourceName = "nano-gpu/gpu-percent"``,
  ``pkg/plugins/server.go`` (100 devices per card; ``PreStartContainer`` locates the container
  as above and ``strconv.Atoi``s one card index).
- aliyun: AliyunContainerService/gpushare-device-plugin ``v0.3.0`` (and master ``45fb8b8``):
  ``pkg/gpu/nvidia/const.go`` (``aliyun.com/gpu-mem``, ``aliyun.com/gpu-count``),
  ``pkg/gpu/nvidia/allocate.go`` (``Allocate`` takes the devices of one container request and
  looks for the pending pod whose ``getGPUMemoryFromPodResource``, the sum of its *app*
  containers' ``aliyun.com/gpu-mem`` limits, ``podutils.go``, equals that count),
  ``pkg/gpu/nvidia/podmanager.go`` (``aliyun.com/gpu-count`` patched into node capacity).
- hami: Project-HAMi/HAMi ``v2.10.0``: ``charts/hami/values.yaml`` and
  ``charts/hami/templates/scheduler/device-configmap.yaml`` (``resourceCountName``
  ``nvidia.com/gpu``, ``resourceMemoryName`` ``nvidia.com/gpumem``,
  ``resourceMemoryPercentageName`` ``nvidia.com/gpumem-percentage``, ``resourceCoreName``
  ``nvidia.com/gpucores``), ``charts/hami/templates/_helpers.tpl``
  (``hami-vgpu.scheduler.managedResources``: all four with ``ignoredByScheduler: true``),
  ``pkg/device/nvidia/device.go`` (``GenerateResourceRequests``: a count without memory keys is
  100% of the card's memory; ``defaultExclusiveCoreIfNeeded``: such a count gets
  ``gpucores: 100``). The device plugin registers only the count (cards x split count).
- volcano-vgpu: Project-HAMi/volcano-vgpu-device-plugin ``v1.12.0``: ``doc/config.md`` (the four
  names), ``pkg/plugin/server.go`` ``apiDevices`` (registers ``vgpu-number`` as cards x split
  count, ``vgpu-memory`` as each card's MiB / ``GPUMemoryFactor``, default 1, and
  ``vgpu-cores`` as 100 x ``DeviceCoresScaling``, default 1, per card).

Which containers HAMi's and Volcano's plugins give devices to: the plugin's ``Allocate`` takes
the next container's entry of the pod's device annotation (``GetNextDeviceRequest``). In
volcano-vgpu-device-plugin ``v1.12.0`` (``pkg/util/util.go``; unchanged on its master of
2026-08) and HAMi up to ``v2.8.3`` (``pkg/device-plugin/nvidiadevice/nvinternal/plugin/
util.go``) it returns ``p.Spec.Containers[idx]``: entries are app containers only, and a GPU
init container is handed an app container's devices, or none. HAMi ``v2.9.0`` (commit
``0658b5c``, "support device allocation for multi-container with init containers", #1650)
lists init containers first (the same file, and ``Resourcereqs`` in ``pkg/device/devices.go``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Final

from tessera.vocabulary import (
    DEFAULT_DOMAIN,
    WHOLE_CARD_PERCENT,
    ConfigError,
    ContainerRequest,
    PodRequest,
    RequestError,
    Vocabulary,
)


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


@dataclass(frozen=True)
class NodeAgent:
    """The cluster's agent profile with what shaping pods for it depends on."""

    profile: AgentProfile = DEFAULT_PROFILE
    vocabulary: Vocabulary = field(default_factory=Vocabulary)
    #: MiB per unit of ``aliyun.com/gpu-mem`` (the gpushare plugin's ``--memory-unit``).
    aliyun_unit_mib: int = MIB_PER_GIB
    #: With the hami profile, an older release of HAMi (a key of :data:`HAMI_AGENTS`); "" for
    #: the release :data:`AGENTS` names.
    hami_agent: str = ""

    def __post_init__(self) -> None:
        if problem := hami_agent_problem(self.profile, self.hami_agent):
            raise ConfigError(problem)

    @property
    def agent(self) -> Agent:
        return HAMI_AGENTS[self.hami_agent] if self.hami_agent else AGENTS[self.profile]

    @property
    def name(self) -> str:
        """The agent's name, as refusals say it."""
        return self.agent.name

    @property
    def pod_resources(self) -> tuple[str, ...]:
        """Every resource this profile may leave on a GPU container."""
        return _POD_RESOURCES[self.profile](self)

    def container_resources(self, c: ContainerRequest) -> dict[str, str]:
        """The resources (request == limit) the webhook writes on a container asking for
        ``c`` (``c`` as parsed, init containers included: each keeps the devices kubelet must
        give it)."""
        return {k: str(v) for k, v in _SHAPES[self.profile](self, c).items()}

    def refusals(self, request: PodRequest) -> tuple[str, ...]:
        """Why this agent cannot run ``request`` (empty: it can), each naming the agent."""
        return tuple(_REFUSALS[self.profile](self, request))

    def placement_request(self, request: PodRequest) -> PodRequest:
        """``request`` as the allocator places it for this agent (the canonical annotation):
        the init containers the agent serves from an app container's card folded into it,
        memory in the unit the agent hands out, the memory a share without one gets."""
        return _PLACEMENT[self.profile](self, request)

    def admit(self, request: PodRequest) -> PodRequest:
        """``request`` as placed for this agent; :class:`RequestError` naming the agent when
        it cannot run it (what the webhook and the allocator both apply)."""
        refused = self.refusals(request)
        if refused:
            raise RequestError(
                f"agent profile {self.profile.value} ({self.name}): " + "; ".join(refused))
        return self.placement_request(request)

    def managed_resources(self) -> tuple[ManagedResource, ...]:
        """The extender's ``managedResources``: every resource the shaped pods carry."""
        return tuple(ManagedResource(name) for name in self.pod_resources)

    @property
    def capacity(self) -> Capacity | None:
        """How this profile's nodes advertise cards in allocatable (None: they do not, in a
        form cards can be counted from; HAMi's count is cards x split count, and its nodes
        are read from HAMi's register annotation)."""
        return _CAPACITY[self.profile](self)

    def domain_problem(self) -> str:
        """What is wrong with the vocabulary's domain for this agent (``""``: nothing)."""
        if self.profile is AgentProfile.ELASTIC and self.vocabulary.domain != DEFAULT_DOMAIN:
            return (
                f"agent profile elastic: elastic-gpu-agent reads only {DEFAULT_DOMAIN} "
                f"resources and annotations (hardcoded in its pkg/common/const.go), so with "
                f"domain {self.vocabulary.domain} it would serve no pod; keep the default "
                f"domain or choose the profile of the agent your nodes run"
            )
        return ""


def hami_agent_problem(profile: AgentProfile, name: str) -> str:
    """Why ``--hami-agent`` cannot be ``name`` with ``profile`` (``""``: it can)."""
    if not name or (profile is AgentProfile.HAMI and name in HAMI_AGENTS):
        return ""
    known = ", ".join(f"{key} ({agent.name})" for key, agent in HAMI_AGENTS.items())
    return (f"{HAMI_AGENT_ENV}={name!r}: an older HAMi release, with {PROFILE_ENV}=hami "
            f"(not {profile.value}); known: {known}; unset for HAMi v2.9 or later")


def shape_markers(vocabulary: Vocabulary) -> tuple[str, ...]:
    """Resources every shaped GPU pod carries one of, under any profile: each profile's
    resources but the vGPU counts (``nvidia.com/gpu`` alone is also what NVIDIA's own
    plugin serves; every HAMi or Volcano shape also carries cores or memory). The pod-keys
    policy lets Tessera's request keys be created on pods that carry one
    (manifests/base/pod-keys-policy.yaml; tests/deploy checks the list)."""
    counts = {HAMI_RESOURCES.count, VOLCANO_RESOURCES.count}
    return tuple(dict.fromkeys(
        name for profile in AgentProfile
        for name in NodeAgent(profile, vocabulary).pod_resources if name not in counts))


# ----------------------------------------------------------------------------- shapes


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
        values = {keys.count: 1, keys.cores: c.core_percent, keys.memory: c.memory_mib,
                  keys.memory_percent: c.memory_percent}
        return {k: v for k, v in values.items() if v}

    return shape


_SHAPES: Final[Mapping[AgentProfile, Callable[[NodeAgent, ContainerRequest],
                                              dict[str, int]]]] = {
    AgentProfile.ELASTIC: _elastic_shape,
    AgentProfile.NANO_GPU: _nano_shape,
    AgentProfile.ALIYUN: _aliyun_shape,
    AgentProfile.HAMI: _vgpu_shape(HAMI_RESOURCES),
    AgentProfile.VOLCANO_VGPU: _vgpu_shape(VOLCANO_RESOURCES),
}

_POD_RESOURCES: Final[Mapping[AgentProfile, Callable[[NodeAgent], tuple[str, ...]]]] = {
    AgentProfile.ELASTIC: lambda a: a.vocabulary.managed_resources,
    AgentProfile.NANO_GPU: lambda _a: (NANO_PERCENT_KEY,),
    AgentProfile.ALIYUN: lambda _a: (ALIYUN_MEMORY_KEY,),
    AgentProfile.HAMI: lambda _a: HAMI_RESOURCES.all,
    AgentProfile.VOLCANO_VGPU: lambda _a: VOLCANO_RESOURCES.all,
}

_CAPACITY: Final[Mapping[AgentProfile, Callable[[NodeAgent], Capacity | None]]] = {
    AgentProfile.ELASTIC: lambda a: Capacity(a.vocabulary.core_resource, WHOLE_CARD_PERCENT,
                                             a.vocabulary.memory_resource),
    AgentProfile.NANO_GPU: lambda _a: Capacity(NANO_PERCENT_KEY, WHOLE_CARD_PERCENT, None),
    AgentProfile.ALIYUN: lambda a: Capacity(ALIYUN_COUNT_KEY, 1, ALIYUN_MEMORY_KEY,
                                            a.aliyun_unit_mib),
    AgentProfile.HAMI: lambda _a: None,
    AgentProfile.VOLCANO_VGPU: lambda _a: Capacity(VOLCANO_RESOURCES.cores, WHOLE_CARD_PERCENT,
                                                   VOLCANO_RESOURCES.memory),
}


# ----------------------------------------------------------------------------- refusals


def _gpu_app_containers(request: PodRequest) -> list[ContainerRequest]:
    return [c for c in request.containers if not c.init]


def _inherited_init_refusals(a: NodeAgent, request: PodRequest) -> list[str]:
    """elastic-gpu-agent and nano-gpu-agent find a container by its device list in kubelet's
    pod-resources, which lists app containers only; kubelet hands an init container's devices
    on to the first app container asking for the same resource (devicesToReuse). So an init
    container is served with that app container's cards, and only when it asks for exactly
    the same: otherwise no listed container has its devices and ``PreStartContainer`` fails
    ("not such pod with the same devices list"), and the pod never starts."""
    inits = [c for c in request.containers if c.init]
    if not inits:
        return []
    apps = _gpu_app_containers(request)
    if not apps:
        return [
            f"init container {c.name!r} asks for {c.describe()} but no app container asks for "
            f"a GPU; {a.name} finds a container by devices kubelet lists for app containers "
            f"only, so it cannot start this init container: give the GPU to an app container"
            for c in inits
        ]
    first = apps[0]
    return [
        f"init container {c.name!r} asks for {c.describe()} but {first.name!r}, the app "
        f"container kubelet hands its devices to, asks for {first.describe()}; {a.name} "
        f"serves an init container with that app container's cards, so it must ask for "
        f"exactly the same"
        for c in inits if replace(c, name=first.name, init=False) != first
    ]


def _elastic_refusals(a: NodeAgent, request: PodRequest) -> list[str]:
    return _inherited_init_refusals(a, request)


def _nano_refusals(a: NodeAgent, request: PodRequest) -> list[str]:
    problems = [
        f"container {c.name!r} asks for {c.describe()}; {a.name} gives a container one card "
        f"(it reads one card index): ask for one card or a share of one"
        for c in request.containers if c.cards > 1
    ] + [
        f"container {c.name!r} asks for {c.describe()} without compute; {a.name} hands out "
        f"compute percent only ({NANO_PERCENT_KEY}): add a compute share"
        for c in request.containers if not c.is_whole and not c.core_percent
    ]
    return problems + _inherited_init_refusals(a, request)


def _aliyun_refusals(a: NodeAgent, request: PodRequest) -> list[str]:
    problems = [
        f"init container {c.name!r} asks for {c.describe()}; {a.name} finds a pod by the "
        f"{ALIYUN_MEMORY_KEY} of its app containers, so an init container would get another "
        f"pod's card or none: give the GPU to an app container"
        for c in request.containers if c.init
    ] + [
        f"container {c.name!r} asks for {c.describe()}; {a.name} shares cards by memory "
        f"only ({ALIYUN_MEMORY_KEY}) and serves no whole card"
        + ("" if c.is_whole else ": ask for GPU memory in MiB or GiB")
        for c in request.containers if c.is_whole or not c.memory_mib
    ]
    apps = _gpu_app_containers(request)
    if len(apps) > 1:
        problems.append(
            f"containers {', '.join(repr(c.name) for c in apps)} all ask for a GPU; {a.name} "
            f"serves one GPU container per pod (it matches a pod by its total "
            f"{ALIYUN_MEMORY_KEY} against one container's): keep one"
        )
    return problems


def _hami_init_refusals(a: NodeAgent, request: PodRequest) -> list[str]:
    """HAMi's plugin since v2.9.0 gives every container its entry of the pod's device
    annotation, init containers included; but with its ``enableGetPreferredAllocation`` it
    moves each container onto the cards of the device IDs kubelet chose
    (``alignContainerDevicesWithAllocatedIDs``), and kubelet gives the first app container
    the init containers' devices first (``devicesToReuse``). Placed on the first GPU app
    container's cards and asking for exactly what it asks, an init container lands on its
    record under either setting (docs/hami.md, "Init containers")."""
    inits = [c for c in request.containers if c.init]
    apps = _gpu_app_containers(request)
    if not inits:
        return []
    if not apps:
        return [
            f"init container {c.name!r} asks for {c.describe()} but no app container asks for "
            f"a GPU; with enableGetPreferredAllocation kubelet hands an init container's "
            f"devices on to the next one and {a.name} follows them: give the GPU to an app "
            f"container"
            for c in inits
        ]
    first = apps[0]
    return [
        f"init container {c.name!r} asks for {c.describe()} but {first.name!r}, the app "
        f"container kubelet hands its devices to, asks for {first.describe()}; {a.name} "
        f"(with enableGetPreferredAllocation) runs that container on the init container's "
        f"cards, so it must ask for exactly the same"
        for c in inits if replace(c, name=first.name, init=False) != first
    ]


def _vgpu_refusals(a: NodeAgent, request: PodRequest) -> list[str]:
    """HAMi's plugin since v2.9.0 gives every container its entry of the pod's device
    annotation, init containers included (:func:`_hami_init_refusals`); earlier releases and
    volcano-vgpu's map the entries to app containers only (module docstring), so a GPU init
    container would run on an app container's devices, or on none."""
    if not a.agent.app_containers_only:
        return _hami_init_refusals(a, request)
    upgrade = (" (or run HAMi v2.9.0 or later, without "
               f"{HAMI_AGENT_FLAG})") if a.profile is AgentProfile.HAMI else ""
    return [
        f"init container {c.name!r} asks for {c.describe()}; {a.name} gives devices to app "
        f"containers only (GetNextDeviceRequest maps the pod's device annotation to "
        f"spec.containers), so an init container gets none of its own: give the GPU to an "
        f"app container{upgrade}"
        for c in request.containers if c.init
    ]


_REFUSALS: Final[Mapping[AgentProfile, Callable[[NodeAgent, PodRequest], list[str]]]] = {
    AgentProfile.ELASTIC: _elastic_refusals,
    AgentProfile.NANO_GPU: _nano_refusals,
    AgentProfile.ALIYUN: _aliyun_refusals,
    AgentProfile.HAMI: _vgpu_refusals,
    AgentProfile.VOLCANO_VGPU: _vgpu_refusals,
}


# ----------------------------------------------------------------------------- placement


def _fold_init_containers(_a: NodeAgent, request: PodRequest) -> PodRequest:
    """Without the GPU init containers: each runs on the cards of the app container kubelet
    hands its devices to (:func:`_inherited_init_refusals`, :func:`_hami_init_refusals` make
    sure it asks for the same), which is where the agent serves it (HAMi: the bind lists it
    with that container's cards); reserving other cards for it would leave them idle."""
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


_PLACEMENT: Final[Mapping[AgentProfile, Callable[[NodeAgent, PodRequest], PodRequest]]] = {
    AgentProfile.ELASTIC: _fold_init_containers,
    AgentProfile.NANO_GPU: _fold_init_containers,
    AgentProfile.ALIYUN: _aliyun_placement,
    AgentProfile.HAMI: lambda a, r: _vgpu_placement(a, _fold_init_containers(a, r)),
    AgentProfile.VOLCANO_VGPU: _vgpu_placement,
}
