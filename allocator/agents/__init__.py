"""What the node agents read: pod annotations and labels written at bind (pure).

Every agent below trusts these keys and never re-checks capacity (CONTRACTS.md §3): a wrong
index is a double allocation nothing downstream catches, so each writer refuses (returns
nothing) rather than write something its agent would misread. The clock is passed in.

Upstream sources of the keys:

- elastic: elastic-ai/elastic-gpu-scheduler ``pkg/utils`` constants ``EGPUAssumed =
  "elasticgpu.io/assumed"``, ``AnnotationEGPUContainer = "elasticgpu.io/container-%s"``; the
  agent (elastic-ai/elastic-gpu-agent) parses the value as comma-separated card indices. The
  domain follows :class:`Vocabulary` so a non-default domain stays consistent. Annotations
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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from allocator.ranking.fit import Card
from tessera.vocabulary import Allocation, Vocabulary

ELASTIC: Final = "elastic"
NANO_GPU: Final = "nano-gpu"
ALIYUN: Final = "aliyun"
DIALECTS: Final = (ELASTIC, NANO_GPU, ALIYUN)

NANO_CONTAINER = "nano-gpu/container-{}"
NANO_ASSUME = "nano-gpu/assume"
ALIYUN_IDX = "ALIYUN_COM_GPU_MEM_IDX"
ALIYUN_DEV = "ALIYUN_COM_GPU_MEM_DEV"
ALIYUN_POD = "ALIYUN_COM_GPU_MEM_POD"
ALIYUN_ASSIGNED = "ALIYUN_COM_GPU_MEM_ASSIGNED"
ALIYUN_ASSUME_TIME = "ALIYUN_COM_GPU_MEM_ASSUME_TIME"


@dataclass(frozen=True)
class AgentMetadata:
    """Annotations and labels to write on the pod, and dialects that could not express it."""

    annotations: dict[str, str] = field(default_factory=dict)
    #: Only for agents that select pods by label (nano-gpu); each costs a PATCH per bind.
    labels: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)  # dialect -> why


def elastic_keys(vocabulary: Vocabulary) -> tuple[str, str]:
    """(container annotation prefix, assumed annotation key)."""
    return f"{vocabulary.domain}/container-", f"{vocabulary.domain}/assumed"


def _elastic(allocation: Allocation, vocabulary: Vocabulary, out: AgentMetadata) -> None:
    prefix, assumed = elastic_keys(vocabulary)
    for c in allocation.containers:
        out.annotations[prefix + c.name] = ",".join(str(i) for i in c.card_indices)
    out.annotations[assumed] = "true"


def _nano(allocation: Allocation, out: AgentMetadata) -> None:
    if any(len(c.card_indices) != 1 for c in allocation.containers):
        out.skipped[NANO_GPU] = "nano-gpu-agent takes one card per container"
        return
    for c in allocation.containers:
        out.annotations[NANO_CONTAINER.format(c.name)] = str(c.card_indices[0])
    out.annotations[NANO_ASSUME] = "true"
    out.labels[NANO_ASSUME] = "true"


def _aliyun(allocation: Allocation, cards: Sequence[Card], unit_mib: int,
            now_ns: int, out: AgentMetadata) -> None:
    indices = allocation.card_indices()
    if len(indices) != 1 or any(c.is_whole for c in allocation.containers):
        out.skipped[ALIYUN] = "gpushare serves a whole pod from one shared card"
        return
    card = next((c for c in cards if c.index == indices[0]), None)
    if card is None:
        out.skipped[ALIYUN] = f"card {indices[0]} unknown"
        return
    pod_mib = sum(c.memory_mib for c in allocation.containers)
    out.annotations.update({
        ALIYUN_IDX: str(card.index),
        ALIYUN_DEV: str(card.memory_mib // unit_mib),
        # Rounded up so the plugin's match by pod total never undercounts (its unit is
        # coarser than ours).
        ALIYUN_POD: str(-(-pod_mib // unit_mib)),
        ALIYUN_ASSIGNED: "false",
        ALIYUN_ASSUME_TIME: str(now_ns),
    })


def agent_metadata(
    allocation: Allocation,
    dialects: Sequence[str],
    vocabulary: Vocabulary,
    cards: Sequence[Card],
    now_ns: int,
    aliyun_unit_mib: int = 1024,
) -> AgentMetadata:
    """Annotations and labels for the configured node-agent dialects."""
    out = AgentMetadata()
    for dialect in dialects:
        if dialect == ELASTIC:
            _elastic(allocation, vocabulary, out)
        elif dialect == NANO_GPU:
            _nano(allocation, out)
        elif dialect == ALIYUN:
            _aliyun(allocation, cards, aliyun_unit_mib, now_ns, out)
        else:
            raise ValueError(f"unknown agent dialect {dialect!r} (known: {DIALECTS})")
    return out


def all_agent_keys(
    annotations: Mapping[str, str], vocabulary: Vocabulary
) -> tuple[str, ...]:
    """Every agent key present in ``annotations`` (to clear stale ones on rollback)."""
    prefix, assumed = elastic_keys(vocabulary)
    fixed = {assumed, NANO_ASSUME, ALIYUN_IDX, ALIYUN_DEV, ALIYUN_POD, ALIYUN_ASSIGNED,
             ALIYUN_ASSUME_TIME}
    return tuple(
        k for k in annotations
        if k in fixed or k.startswith(prefix) or k.startswith("nano-gpu/container-")
    )
