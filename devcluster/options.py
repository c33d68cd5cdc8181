"""What a dev cluster runs: which of Tessera's services, with which flags and vocabulary, and
kube-scheduler's configuration changes (:class:`Options`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from devcluster import DevClusterError
from devcluster.plugin_client import ClientRate
from tessera.agent_profiles import (
    DEFAULT_PROFILE,
    HAMI_AGENT_FLAG,
    PROFILE_FLAG,
    AgentProfile,
    NodeAgent,
    hami_agent_problem,
)
from tessera.vocabulary import Vocabulary


@dataclass(frozen=True)
class Options:
    #: Start Tessera's webhook and register it; False = plain control plane.
    webhook: bool = True
    #: Start Tessera's allocator and give kube-scheduler its extender entry.
    allocator: bool = True
    vocabulary: Vocabulary = field(default_factory=Vocabulary)
    #: The node agent the fake nodes stand for: they advertise its resources, both services
    #: run with ``--agent-profile`` and kube-scheduler's extender manages its resources.
    agent_profile: AgentProfile = DEFAULT_PROFILE
    #: With the hami profile, an older HAMi release (``--hami-agent``, both services; the
    #: stand-in then serves as that release's plugin does).
    hami_agent: str = ""
    #: With the hami or volcano-vgpu profile, run the HAMi node stand-in on every node (the
    #: node agents, devcluster/hami_node.py), as KWOK stands in for the kubelets; False for
    #: tests that drive the stand-in themselves.
    hami_standin: bool = True
    #: The stand-in's HAMi ``enableGetPreferredAllocation`` (HAMi's default: false): kubelet
    #: asks the plugin where to put each container and Allocate follows kubelet's device IDs.
    hami_preferred_allocation: bool = False
    #: The stand-in's API client rate (HAMi's plugin: 5 requests/s, burst 10,
    #: devcluster/plugin_client.py); None: not limited (the tests' fast plugin).
    hami_client_rate: ClientRate | None = None
    #: Run the stand-in fleet as this many processes, the nodes sharded among them
    #: (devcluster/hami_fleet.py); 0: a thread of this process (``DevCluster.hami_fleet``).
    hami_standin_processes: int = 0
    #: Extra flags for ``tessera allocator`` (e.g. a placement policy).
    allocator_args: tuple[str, ...] = ()
    #: Card-aware preemption, on as shipped (docs/preemption.md); False runs the allocator
    #: with ``--preemption=false`` and without the permissions it needs, as
    #: manifests/components/no-preemption does.
    preemption: bool = True
    #: Extra flags for ``tessera webhook``.
    webhook_args: tuple[str, ...] = ()
    #: The allocator's RBAC documents (default: manifests/base/allocator-rbac.yaml).
    allocator_rbac: Path | None = None
    #: Keep the shipped configuration's entry that scores CPU-only pods; False deletes it, as
    #: a cluster that turns it off does (docs/deploy.md).
    score_cpu_only_pods: bool = True
    #: kube-scheduler's ``percentageOfNodesToScore`` instead of the shipped 100 (0: its
    #: adaptive default; docs/deploy.md says what less trades); None keeps the shipped value.
    nodes_to_score: int | None = None
    #: Run the webhook and the allocator from this built image (REPOSITORY:TAG) as the chart
    #: deploys them (devcluster/containers.py) instead of as subprocesses; both always run.
    image: str | None = None

    def __post_init__(self) -> None:
        # kube-scheduler refuses a file outside 0-100: refused here, before any process starts
        if self.nodes_to_score is not None and not 0 <= self.nodes_to_score <= 100:
            raise DevClusterError("percentageOfNodesToScore is 0-100 (0: adaptive), not "
                                  f"{self.nodes_to_score}")
        if problem := hami_agent_problem(self.agent_profile, self.hami_agent):
            raise DevClusterError(problem)

    @property
    def agent(self) -> NodeAgent:
        return NodeAgent(self.agent_profile, self.vocabulary, hami_agent=self.hami_agent)

    @property
    def profile_args(self) -> tuple[str, ...]:
        """The flags both services get (nothing for the default: as shipped)."""
        if self.agent_profile is DEFAULT_PROFILE:
            return ()
        older = (f"{HAMI_AGENT_FLAG}={self.hami_agent}",) if self.hami_agent else ()
        return (f"{PROFILE_FLAG}={self.agent_profile.value}", *older)
