"""Pod in, normalised pod out (pure): the rewrite the webhook applies at CREATE.

For every GPU container the dialect keys are removed and the canonical extended resources are
set with request == limit (kube-scheduler would otherwise look for the dialect keys on nodes and
API validation refuses non-integer extended resources or request != limit; see
CONTRACTS.md §1). The pod gets the canonical request annotation, the GPU-pod and mode labels and,
when configured, a schedulerName. Everything else is left as it was.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from tessera.dialects import Dialect, DialectConfig, parse_pod
from tessera.vocabulary import (
    CodecError,
    PodRequest,
    RequestError,
    decode_request,
    encode_request,
)
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


def _restore_memory_percent(parsed: PodRequest, recorded: PodRequest | None,
                            config: MutationConfig) -> PodRequest:
    """``parsed`` with the memory percent of shares the canonical resources cannot carry.

    A share in percent (``gpu: "0.25"``: 25% compute and 25% of the chosen card's memory)
    becomes ``gpu-core: 25`` and the request annotation; MiB of an unknown card cannot be a
    resource. A pod admitted again from its own mutated manifest (re-created, restored from
    a backup, ``kubectl debug --copy-to``) would read as compute only. So its recorded
    request is taken back, container by container, where it is exactly ``parsed`` plus a
    memory percent that the enabled dialects would have let the user ask for: a forged
    annotation can claim nothing a user could not write in a dialect.
    """
    if recorded is None or (recorded.models, recorded.min_card_memory_mib, recorded.policy) != (
            parsed.models, parsed.min_card_memory_mib, parsed.policy):
        return parsed
    wanted = {c.name: c for c in recorded.containers}
    containers = []
    for c in parsed.containers:
        before = wanted.get(c.name)
        if (before is not None and not c.is_whole and not c.memory_mib
                and not c.memory_percent and before.memory_percent
                and before == replace(c, memory_percent=before.memory_percent)
                and _memory_percent_allowed(c.core_percent, before.memory_percent, config)):
            c = before
        containers.append(c)
    return replace(parsed, containers=tuple(containers))


def _check_unique_names(pod: Mapping[str, Any]) -> None:
    """Resources are written by container name: two containers of one name would both get
    the request. Pod validation, which runs after us, refuses such a pod anyway."""
    spec = pod["spec"]  # parse_pod found containers, so there is a spec
    names = [c.get("name") for field_name in ("initContainers", "containers")
             for c in spec.get(field_name) or []]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise RequestError(f"container names repeat: {', '.join(map(str, repeated))}")


def mutate_pod(pod: Mapping[str, Any], config: MutationConfig) -> Mutation:
    """Normalise ``pod``; raises :class:`tessera.vocabulary.RequestError` for a bad request.
    Idempotent: a mutated pod, mutated again, is the same pod."""
    request = parse_pod(pod, config.dialects)
    if request is not None:
        request = _restore_memory_percent(request, _recorded(pod, config), config)
    if request is None:
        if not _carries_owned(pod, config):
            return Mutation(pod, None, changed=False)  # the fast path: nothing to do
        stripped = copy.deepcopy(dict(pod))
        _strip_owned(stripped, config)
        return Mutation(stripped, None, changed=True)

    vocabulary = config.dialects.vocabulary
    remove = config.dialects.resource_keys
    _check_unique_names(pod)
    new = copy.deepcopy(dict(pod))
    _strip_owned(new, config)
    by_name = {c.name: c for c in request.containers}
    spec = new["spec"]
    for field_name in ("initContainers", "containers"):
        for container in spec.get(field_name) or []:
            wanted = by_name.get(container["name"])
            if wanted is None:
                continue
            values: dict[str, str] = {}
            if wanted.core_resource_value:
                values[vocabulary.core_resource] = str(wanted.core_resource_value)
            if wanted.memory_mib:
                values[vocabulary.memory_resource] = str(wanted.memory_mib)
            _set_resources(container, values, remove)

    meta = new.get("metadata")
    if not isinstance(meta, dict):
        meta = new["metadata"] = {}
    annotations = meta.get("annotations")
    if not isinstance(annotations, dict):
        annotations = meta["annotations"] = {}
    annotations[vocabulary.request_annotation] = encode_request(request)
    labels = meta.get("labels")
    if not isinstance(labels, dict):
        labels = meta["labels"] = {}
    labels[vocabulary.gpu_pod_label] = "true"
    labels[vocabulary.mode_label] = request.mode.value
    if config.scheduler_name:
        spec["schedulerName"] = config.scheduler_name
    apply_genius_priority(new, config.genius_priority_levels)
    return Mutation(new, request, changed=new != pod)
