"""Pod in, normalised pod out (pure): the rewrite the webhook applies at CREATE.

For every GPU container the dialect keys are removed and the resources the cluster's node agent
serves are set with request == limit (:class:`tessera.agent_profiles.NodeAgent`: kubelet calls
the device plugin that registered them, and API validation refuses non-integer extended
resources or request != limit; see CONTRACTS.md §1). What that agent cannot run is refused with
a message naming it. The pod gets the canonical request annotation (the request as placed for
the agent, the one form the allocator reads), the GPU-pod and mode labels and, when configured,
a schedulerName. Everything else is left as it was.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from tessera.dialects import Dialect, DialectConfig, parse_pod
from tessera.vocabulary import (
    CodecError,
    ContainerRequest,
    PodRequest,
    RequestError,
    decode_request,
    encode_request,
)
from webhook.hami_extras import HamiAdmission, apply_hami_extras, refuse_privileged
from webhook.priority import apply_genius_priority


@dataclass(frozen=True)
class MutationConfig:
    """What the rewrite needs, and nothing of serving (as ``AllocatorConfig`` for the
    allocator's core)."""

    #: How GPU requests are read from pods; carries the vocabulary.
    dialects: DialectConfig = field(default_factory=DialectConfig)
    #: schedulerName written on GPU pods; None leaves the pod's own.
    scheduler_name: str | None = None
    #: Genius's ``genius/priority`` as PriorityClasses of levels 0..N (0: off; priority.py).
    genius_priority_levels: int = 0
    #: HAMi's webhook settings written on GPU pods under the hami profile (hami_extras.py).
    hami: HamiAdmission = field(default_factory=HamiAdmission)


@dataclass(frozen=True)
class Mutation:
    """The outcome for one pod: the pod to admit and the request it carries (None: no GPU)."""

    pod: Mapping[str, Any]
    request: PodRequest | None
    changed: bool


def _owned_metadata(config: MutationConfig) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Annotations and labels only Tessera writes; a pod must not arrive with them forged
    (the allocator trusts the request annotation and rebuilds its cache from the allocation)."""
    v = config.dialects.vocabulary
    return (v.request_annotation, v.allocation_annotation), (v.gpu_pod_label, v.mode_label)


def _strip_owned(pod: dict[str, Any], config: MutationConfig) -> None:
    annotations, labels = _owned_metadata(config)
    meta = pod.get("metadata") or {}
    for field_name, keys in (("annotations", annotations), ("labels", labels)):
        mapping = meta.get(field_name)
        if isinstance(mapping, dict):
            for key in keys:
                mapping.pop(key, None)


def _annotations(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = pod.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    return annotations if isinstance(annotations, Mapping) else {}


def _carries_owned(pod: Mapping[str, Any], config: MutationConfig) -> bool:
    annotations, labels = _owned_metadata(config)
    meta = pod.get("metadata")
    if not isinstance(meta, Mapping):
        return False
    for field_name, keys in (("annotations", annotations), ("labels", labels)):
        mapping = meta.get(field_name)
        if isinstance(mapping, Mapping) and any(k in mapping for k in keys):
            return True
    return False


def _set_resources(
    container: dict[str, Any], values: dict[str, str], remove: frozenset[str]
) -> None:
    resources = container.get("resources")
    if not isinstance(resources, dict):
        resources = container["resources"] = {}
    for part in ("limits", "requests"):
        mapping = resources.get(part)
        if not isinstance(mapping, dict):
            mapping = {}
        for key in remove & mapping.keys():
            del mapping[key]
        mapping.update(values)
        if mapping:
            resources[part] = mapping
        else:
            resources.pop(part, None)


def _recorded(pod: Mapping[str, Any], config: MutationConfig) -> PodRequest | None:
    """The request annotation the pod arrived with, if it decodes (else None: it is ours to
    write, and is stripped and rewritten anyway)."""
    text = _annotations(pod).get(config.dialects.vocabulary.request_annotation)
    if not isinstance(text, str):
        return None
    try:
        return decode_request(text)
    except CodecError:
        return None


#: Dialects in which a user writes compute and a memory percent independently (HAMi
#: ``gpucores`` + ``gpumem-percentage``, Volcano ``vgpu-cores`` + ``vgpu-memory-percentage``,
#: Koordinator ``gpu-core`` + ``gpu-memory-ratio``), and those that give both the same percent
#: (``gpu-percent: 25``, ``gpu: "0.25"``, KAI ``gpu-fraction``).
_ANY_MEMORY_PERCENT = frozenset({Dialect.HAMI, Dialect.VOLCANO, Dialect.KOORDINATOR})
_EQUAL_MEMORY_PERCENT = frozenset({Dialect.PERCENT, Dialect.FRACTION, Dialect.KAI})


def _memory_percent_allowed(core_percent: int, memory_percent: int,
                            config: MutationConfig) -> bool:
    """Whether an enabled dialect lets a user ask for this share."""
    enabled = config.dialects.enabled
    if _ANY_MEMORY_PERCENT & enabled:
        return True
    return memory_percent == core_percent and bool(_EQUAL_MEMORY_PERCENT & enabled)


def _restorable(before: ContainerRequest, now: ContainerRequest, config: MutationConfig) -> bool:
    """Whether the recorded ``before`` is what the container's resources, read as ``now``,
    were shaped from: the same resources, and a memory percent a user could ask for."""
    agent = config.dialects.agent
    return (before.init == now.init
            and agent.container_resources(before) == agent.container_resources(now)
            and (before.memory_percent in (0, now.memory_percent)
                 or _memory_percent_allowed(before.core_percent, before.memory_percent, config)))


def _restore_recorded(placed: PodRequest, recorded: PodRequest | None,
                      config: MutationConfig) -> PodRequest:
    """``placed`` with what the agent's resources cannot carry taken back from the recorded
    request annotation.

    A shape is lossy: ``gpu: "0.25"`` (25% compute and 25% of the chosen card's memory) becomes
    ``gpu-core: 25`` for elastic-gpu-agent (MiB of an unknown card cannot be a resource),
    ``nano-gpu/gpu-percent`` carries no memory, ``aliyun.com/gpu-mem`` no compute. A pod
    admitted again from its own mutated manifest (re-created, restored from a backup,
    ``kubectl debug --copy-to``) would lose them. So its recorded request is taken back,
    container by container, where that request has exactly these resources and asks for
    nothing a user could not write in an enabled dialect.
    """
    if recorded is None or (recorded.models, recorded.min_card_memory_mib, recorded.policy) != (
            placed.models, placed.min_card_memory_mib, placed.policy):
        return placed
    wanted = {c.name: c for c in recorded.containers}
    containers = []
    for c in placed.containers:
        before = wanted.get(c.name)
        containers.append(before if before is not None and _restorable(before, c, config)
                          else c)
    return replace(placed, containers=tuple(containers))


def _check_unique_names(pod: Mapping[str, Any]) -> None:
    """Resources are written by container name: two containers of one name would both get
    the request. Pod validation, which runs after us, refuses such a pod anyway."""
    spec = pod["spec"]  # parse_pod found containers, so there is a spec
    names = [c.get("name") for field_name in ("initContainers", "containers")
             for c in spec.get(field_name) or []]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise RequestError(f"container names repeat: {', '.join(map(str, repeated))}")


def _admitted_request(pod: Mapping[str, Any], config: MutationConfig
                      ) -> tuple[PodRequest, PodRequest] | None:
    """(the request as written, the request as placed for the cluster's agent), or None for
    a pod that asks for no GPU. Raises :class:`RequestError` for what the agent cannot run."""
    parsed = parse_pod(pod, config.dialects)
    if parsed is None:
        return None
    placed = config.dialects.agent.admit(parsed)
    return parsed, _restore_recorded(placed, _recorded(pod, config), config)


def _write_resources(spec: dict[str, Any], parsed: PodRequest, placed: PodRequest,
                     config: MutationConfig) -> None:
    """The agent's resources on every GPU container: as placed, or as written for an init
    container folded into its app container (kubelet must still give it the devices)."""
    agent = config.dialects.agent
    remove = config.dialects.resource_keys | frozenset(agent.pod_resources)
    by_name = {c.name: c for c in parsed.containers} | {c.name: c for c in placed.containers}
    for field_name in ("initContainers", "containers"):
        for container in spec.get(field_name) or []:
            wanted = by_name.get(container["name"])
            if wanted is not None:
                _set_resources(container, agent.container_resources(wanted), remove)


def _child(parent: dict[str, Any], key: str) -> dict[str, Any]:
    value = parent.get(key)
    if not isinstance(value, dict):
        value = parent[key] = {}
    return value


def mutate_pod(pod: Mapping[str, Any], config: MutationConfig) -> Mutation:
    """Normalise ``pod``; raises :class:`tessera.vocabulary.RequestError` for a bad request or
    one the cluster's node agent cannot run. Idempotent: a mutated pod, mutated again, is the
    same pod."""
    admitted = _admitted_request(pod, config)
    if admitted is None:
        if not _carries_owned(pod, config):
            return Mutation(pod, None, changed=False)  # the fast path: nothing to do
        stripped = copy.deepcopy(dict(pod))
        _strip_owned(stripped, config)
        return Mutation(stripped, None, changed=True)
    parsed, placed = admitted
    vocabulary = config.dialects.vocabulary
    _check_unique_names(pod)
    refuse_privileged(pod["spec"], config.dialects.agent)
    new = copy.deepcopy(dict(pod))
    _strip_owned(new, config)
    spec = new["spec"]
    _write_resources(spec, parsed, placed, config)
    if config.dialects.hami:
        apply_hami_extras(spec, config.hami, config.dialects.agent,
                          frozenset(c.name for c in parsed.containers))
    meta = _child(new, "metadata")
    _child(meta, "annotations")[vocabulary.request_annotation] = encode_request(placed)
    labels = _child(meta, "labels")
    labels[vocabulary.gpu_pod_label] = "true"
    labels[vocabulary.mode_label] = placed.mode.value
    if config.scheduler_name:
        spec["schedulerName"] = config.scheduler_name
    apply_genius_priority(new, config.genius_priority_levels)
    return Mutation(new, placed, changed=new != pod)
