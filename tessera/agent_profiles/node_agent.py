"""The cluster's agent profile with what shaping pods for it depends on (pure): each question
answered by the profile's line of a table (:mod:`.shapes`, :mod:`.refusals`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from tessera.agent_profiles.profiles import (
    AGENTS,
    DEFAULT_PROFILE,
    HAMI_AGENTS,
    HAMI_PRIORITY_KEY,
    HAMI_RESOURCES,
    MIB_PER_GIB,
    VOLCANO_RESOURCES,
    Agent,
    AgentProfile,
    Capacity,
    ManagedResource,
    hami_agent_problem,
)
from tessera.agent_profiles.refusals import REFUSALS
from tessera.agent_profiles.shapes import CAPACITY, PLACEMENT, POD_RESOURCES, SHAPES
from tessera.vocabulary import (
    DEFAULT_DOMAIN,
    ConfigError,
    ContainerRequest,
    PodRequest,
    RequestError,
    Vocabulary,
)


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
        return POD_RESOURCES[self.profile](self)

    def container_resources(self, c: ContainerRequest) -> dict[str, str]:
        """The resources (request == limit) the webhook writes on a container asking for
        ``c`` (``c`` as parsed, init containers included: each keeps the devices kubelet must
        give it)."""
        return {k: str(v) for k, v in SHAPES[self.profile](self, c).items()}

    def refusals(self, request: PodRequest) -> tuple[str, ...]:
        """Why this agent cannot run ``request`` (empty: it can), each naming the agent."""
        return tuple(REFUSALS[self.profile](self, request))

    def placement_request(self, request: PodRequest) -> PodRequest:
        """``request`` as the allocator places it for this agent (the canonical annotation):
        the init containers the agent serves from an app container's card folded into it,
        memory in the unit the agent hands out, the memory a share without one gets."""
        return PLACEMENT[self.profile](self, request)

    def admit(self, request: PodRequest) -> PodRequest:
        """``request`` as placed for this agent; :class:`RequestError` naming the agent when
        it cannot run it (what the webhook and the allocator both apply)."""
        refused = self.refusals(request)
        if refused:
            raise RequestError(
                f"agent profile {self.profile.value} ({self.name}): " + "; ".join(refused))
        return self.placement_request(request)

    def managed_resources(self) -> tuple[ManagedResource, ...]:
        """The extender's ``managedResources``: every resource the shaped pods carry and,
        for HAMi, its task priority as HAMi's chart lists it: the webhook takes it out, and a
        pod admitted without the webhook keeps it, which no node advertises."""
        extra = (HAMI_PRIORITY_KEY,) if self.profile is AgentProfile.HAMI else ()
        return tuple(ManagedResource(name) for name in (*self.pod_resources, *extra))

    @property
    def capacity(self) -> Capacity | None:
        """How this profile's nodes advertise cards in allocatable (None: they do not, in a
        form cards can be counted from; HAMi's count is cards x split count, and its nodes
        are read from HAMi's register annotation)."""
        return CAPACITY[self.profile](self)

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
