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
from dataclasses import dataclass
from typing import Any

from tessera.dialects import parse_pod
from tessera.vocabulary import PodRequest, encode_request
from webhook.config import WebhookConfig


@dataclass(frozen=True)
class Mutation:
    """The outcome for one pod: the pod to admit and the request it carries (None: no GPU)."""

    pod: Mapping[str, Any]
    request: PodRequest | None
    changed: bool


def _owned_metadata(config: WebhookConfig) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Annotations and labels only Tessera writes; a pod must not arrive with them forged
    (the allocator trusts the request annotation and rebuilds its cache from the allocation)."""
    v = config.dialects.vocabulary
    return (v.request_annotation, v.allocation_annotation), (v.gpu_pod_label, v.mode_label)


def _strip_owned(pod: dict[str, Any], config: WebhookConfig) -> None:
    annotations, labels = _owned_metadata(config)
    meta = pod.get("metadata") or {}
    for field_name, keys in (("annotations", annotations), ("labels", labels)):
        mapping = meta.get(field_name)
        if isinstance(mapping, dict):
            for key in keys:
                mapping.pop(key, None)


def _carries_owned(pod: Mapping[str, Any], config: WebhookConfig) -> bool:
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


def mutate_pod(pod: Mapping[str, Any], config: WebhookConfig) -> Mutation:
    """Normalise ``pod``; raises :class:`tessera.vocabulary.RequestError` for a bad request."""
    request = parse_pod(pod, config.dialects)
    if request is None:
        if not _carries_owned(pod, config):
            return Mutation(pod, None, changed=False)  # the fast path: nothing to do
        stripped = copy.deepcopy(dict(pod))
        _strip_owned(stripped, config)
        return Mutation(stripped, None, changed=True)

    vocabulary = config.dialects.vocabulary
    remove = config.dialects.resource_keys
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
    return Mutation(new, request, changed=new != pod)
