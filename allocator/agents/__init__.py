"""What the node agents read: pod annotations and labels written at bind (pure).

One writer per agent profile (:class:`tessera.agent_profiles.AgentProfile`), registered in
:data:`WRITERS`; the allocator writes only what the cluster's agent reads. Every agent below
trusts these keys and never re-checks capacity (CONTRACTS.md §3): a wrong index is a double
allocation nothing downstream catches, so each writer refuses (says why in ``skipped``) rather
than write something its agent would misread, and the bind then fails: nothing is bound that
its node's agent cannot start. The admission webhook refuses such pods first
(:meth:`tessera.agent_profiles.NodeAgent.refusals`); the writers' own checks hold for pods
admitted without it. The clock is passed in.

Adding an agent: a writer ``(BindContext) -> AgentMetadata`` and the test of an annotation key
it owns, as one :class:`AgentWriter` entry of :data:`WRITERS`, and its entry in
:data:`allocator.agents.profiles.AGENTS` (an agent that needs more than a writer is a
:class:`allocator.agents.port.NodeAgent` of its own: :mod:`allocator.agents.port`).

Upstream sources of the keys:

- elastic: elastic-ai/elastic-gpu-scheduler ``pkg/utils`` constants ``EGPUAssumed =
  "elasticgpu.io/assumed"``, ``AnnotationEGPUContainer = "elasticgpu.io/container-%s"``; the
  agent (elastic-ai/elastic-gpu-agent) parses the value as comma-separated card indices. The
  domain follows :class:`Vocabulary`; the agent reads only ``elasticgpu.io``, so the elastic
  profile refuses another domain at start (``NodeAgent.domain_problem``). Annotations
  only: the agent reads ``pod.Annotations`` (``pkg/plugins/gpushare.go``, and the GC in
  ``pkg/plugins/base.go``) from a pod informer selected by field ``spec.nodeName``
  (``pkg/kube/sitter.go``, ``nodeNameFilter``); no version of it that speaks these keys
  selects by label. The scheduler wrote the label too (``pkg/scheduler/pod.go``) only to list
  its own pods by it (``pkg/scheduler/scheduler.go``); Tessera replaces that scheduler, so
  the label is not written: a bind of a webhook-admitted pod is then one API write, the
  Binding.
- nano-gpu 0.3: nano-gpu scheduler/agent constants ``AnnotationGPUContainerOn =
  "nano-gpu/container-%s"`` and ``GPUAssume = "nano-gpu/assume"`` used as annotation and label;
  a single index. The label is needed: nano-gpu-agent 0.3 (nano-gpu/nano-gpu-agent, whose
  history elastic-ai/elastic-gpu-agent continues; tag ``v0.2.0`` and commit ``adacffa``
  "update nano-gpu-agent image version to 0.3.0") builds its pod informer with
  ``labelFilter(NanoGPUAssumedLabel)`` (``pkg/kube/sitter.go``; it is the last
  ``WithTweakListOptions``, so it replaces the node-name filter) and ``PreStartContainer``
  finds the pod through that informer's lister (``pkg/plugins/server.go``).
- Aliyun gpushare: AliyunContainerService/gpushare-scheduler-extender ``pkg/utils/const.go``
  and ``pkg/utils/pod.go`` (``PatchPodAnnotationSpec``): ``ALIYUN_COM_GPU_MEM_IDX`` (card),
  ``ALIYUN_COM_GPU_MEM_DEV`` (card total), ``ALIYUN_COM_GPU_MEM_POD`` (pod total, both in the
  plugin's unit), ``ALIYUN_COM_GPU_MEM_ASSIGNED = "false"``, ``ALIYUN_COM_GPU_MEM_ASSUME_TIME``
  (unix nanoseconds). The device plugin serves the whole pod from one card.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from allocator.ranking.cards import Card
from tessera.agent_profiles import MIB_PER_GIB, AgentProfile
from tessera.vocabulary import Allocation, Vocabulary

NANO_CONTAINER = "nano-gpu/container-{}"
NANO_ASSUME = "nano-gpu/assume"
ALIYUN_IDX = "ALIYUN_COM_GPU_MEM_IDX"
ALIYUN_DEV = "ALIYUN_COM_GPU_MEM_DEV"
ALIYUN_POD = "ALIYUN_COM_GPU_MEM_POD"
ALIYUN_ASSIGNED = "ALIYUN_COM_GPU_MEM_ASSIGNED"
ALIYUN_ASSUME_TIME = "ALIYUN_COM_GPU_MEM_ASSUME_TIME"
_ALIYUN_KEYS: Final = frozenset({ALIYUN_IDX, ALIYUN_DEV, ALIYUN_POD, ALIYUN_ASSIGNED,
                                 ALIYUN_ASSUME_TIME})


@dataclass(frozen=True)
class AgentMetadata:
    """Annotations and labels to write on the pod, and why the agent could not be served."""

    annotations: dict[str, str] = field(default_factory=dict)
    #: Only for agents that select pods by label (nano-gpu, HAMi's vGPU monitor); each costs
    #: a PATCH per bind.
    labels: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)  # agent profile -> why


@dataclass(frozen=True)
class BindContext:
    """What a writer may use: the decision, the pod as bound, the node's cards, the clock."""

    allocation: Allocation
    #: The pod object (its containers, in spec order, init containers first).
    pod: Mapping[str, Any]
    #: The node's cards, as its inventory describes them.
    cards: Sequence[Card]
    vocabulary: Vocabulary
    #: Unix nanoseconds at bind.
    now_ns: int


@dataclass(frozen=True)
class AgentWriter:
    """One agent's writer, and the test of the annotation keys it owns (to clear stale
    ones a bind of an earlier configuration left on an unbound pod)."""

    write: Callable[[BindContext], AgentMetadata]
    owns: Callable[[str, Vocabulary], bool]


def elastic_keys(vocabulary: Vocabulary) -> tuple[str, str]:
    """(container annotation prefix, assumed annotation key)."""
    return f"{vocabulary.domain}/container-", f"{vocabulary.domain}/assumed"


def _elastic(ctx: BindContext) -> AgentMetadata:
    out = AgentMetadata()
    prefix, assumed = elastic_keys(ctx.vocabulary)
    for c in ctx.allocation.containers:
        out.annotations[prefix + c.name] = ",".join(str(i) for i in c.card_indices)
    out.annotations[assumed] = "true"
    return out


def _elastic_owns(key: str, vocabulary: Vocabulary) -> bool:
    prefix, assumed = elastic_keys(vocabulary)
    return key == assumed or key.startswith(prefix)


def _nano(ctx: BindContext) -> AgentMetadata:
    out = AgentMetadata()
    if any(len(c.card_indices) != 1 for c in ctx.allocation.containers):
        out.skipped[AgentProfile.NANO_GPU] = "nano-gpu-agent takes one card per container"
        return out
    for c in ctx.allocation.containers:
        out.annotations[NANO_CONTAINER.format(c.name)] = str(c.card_indices[0])
    out.annotations[NANO_ASSUME] = "true"
    out.labels[NANO_ASSUME] = "true"
    return out


def _nano_owns(key: str, _vocabulary: Vocabulary) -> bool:
    return key == NANO_ASSUME or key.startswith(NANO_CONTAINER.format(""))


def _aliyun_problem(ctx: BindContext) -> str:
    containers = ctx.allocation.containers
    if len(containers) != 1 or containers[0].init:
        # The plugin matches one container's request against the pod's app total.
        return "gpushare serves one GPU app container per pod (and no init container)"
    if containers[0].is_whole:
        return "gpushare serves shares of one card, no whole card"
    return ""


def aliyun_writer(ctx: BindContext, unit_mib: int = MIB_PER_GIB) -> AgentMetadata:
    """gpushare's annotations, memory in the plugin's unit of ``unit_mib`` MiB (the unit the
    aliyun agent is built with: ``DialectConfig.aliyun_memory_unit_mib``)."""
    out = AgentMetadata()
    problem = _aliyun_problem(ctx)
    (index, *_) = ctx.allocation.card_indices() or (-1,)
    card = next((c for c in ctx.cards if c.index == index), None)
    if not problem and card is None:
        problem = f"card {index} unknown"
    if problem or card is None:
        out.skipped[AgentProfile.ALIYUN] = problem
        return out
    unit = unit_mib
    pod_mib = sum(c.memory_mib for c in ctx.allocation.containers)
    out.annotations.update({
        ALIYUN_IDX: str(card.index),
        ALIYUN_DEV: str(card.memory_mib // unit),
        # Rounded up, as the webhook rounds the container's aliyun.com/gpu-mem limit, which
        # the plugin compares with this pod total.
        ALIYUN_POD: str(-(-pod_mib // unit)),
        ALIYUN_ASSIGNED: "false",
        ALIYUN_ASSUME_TIME: str(ctx.now_ns),
    })
    return out


def _aliyun_owns(key: str, _vocabulary: Vocabulary) -> bool:
    return key in _ALIYUN_KEYS


#: The writer of each agent profile. A profile without an entry cannot be configured
#: (:func:`writer`); the HAMi and Volcano vGPU writers register here (their agent writes with
#: the node it reads at bind, :class:`allocator.agents.hami.HamiAgent`).
WRITERS: dict[AgentProfile, AgentWriter] = {
    AgentProfile.ELASTIC: AgentWriter(_elastic, _elastic_owns),
    AgentProfile.NANO_GPU: AgentWriter(_nano, _nano_owns),
    AgentProfile.ALIYUN: AgentWriter(aliyun_writer, _aliyun_owns),
}


# HAMi's device plugin and Volcano's vGPU plugin (allocator/agents/hami.py), registered after
# the names it uses exist.
from allocator.agents.hami import HAMI_WRITERS  # noqa: E402

WRITERS.update(HAMI_WRITERS)


def writer(profile: AgentProfile) -> AgentWriter | None:
    """The profile's writer, or None when this build has none."""
    return WRITERS.get(profile)


def agent_metadata(profile: AgentProfile, ctx: BindContext) -> AgentMetadata:
    """Annotations and labels the profile's agent reads for this bind."""
    registered = WRITERS.get(profile)
    if registered is None:
        return AgentMetadata(skipped={profile: "no writer for this agent profile"})
    return registered.write(ctx)


def all_agent_keys(
    annotations: Mapping[str, str], vocabulary: Vocabulary
) -> tuple[str, ...]:
    """Every agent key present in ``annotations`` (to clear stale ones on rollback)."""
    return tuple(k for k in annotations
                 if any(w.owns(k, vocabulary) for w in WRITERS.values()))
