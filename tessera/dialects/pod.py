"""A whole pod's request (pure): every family read on each container, the pod-level ones
(Genius labels, KAI annotations) added, all of a container's readings agreeing; and Tessera's
own pod annotations (allowed models, policy, mixed models)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Final

from tessera.agent_profiles import AgentProfile
from tessera.dialects.base import (
    ContainerResources,
    Dialect,
    annotations_of,
    containers_of,
    labels_of,
    unique,
)
from tessera.dialects.genius import (
    GENIUS_MODEL_LABEL,
    GENIUS_NUMBER_LABEL,
    GeniusRequest,
    genius_request,
)
from tessera.dialects.hami_annotations import hami_card_choice, hami_policy
from tessera.dialects.kai import kai_request
from tessera.vocabulary import (
    CodecError,
    ContainerRequest,
    PodRequest,
    RequestError,
    Vocabulary,
    decode_request,
)

if TYPE_CHECKING:
    from tessera.dialects.config import DialectConfig

_POLICY_NAME: Final = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


def _merge(
    container: str, found: Sequence[tuple[str, ContainerRequest]]
) -> ContainerRequest | None:
    if not found:
        return None
    first_label, first = found[0]
    for label, other in found[1:]:
        if other != first:
            raise RequestError(
                f"container {container!r}: {first_label} asks for {first.describe()} but "
                f"{label} asks for {other.describe()}; write the request once, in one dialect"
            )
    return first


def _split_models(raw: str) -> tuple[str, ...]:
    return unique(m.strip() for m in re.split(r"[|,]", raw) if m.strip())


def _models(
    annotations: Mapping[str, Any], genius: GeniusRequest | None, vocabulary: Vocabulary
) -> tuple[str, ...]:
    key = vocabulary.model_annotation
    allowed: tuple[str, ...] = ()
    if key in annotations:
        allowed = _split_models(str(annotations[key]))
        if not allowed:
            raise RequestError(
                f"pod annotation {key} is empty; list allowed GPU models separated by '|' or ','"
            )
    if genius and genius.models:
        if not allowed:
            return genius.models
        wanted = {m.lower() for m in genius.models}
        both = tuple(m for m in allowed if m.lower() in wanted)
        if not both:
            raise RequestError(
                f"pod annotation {key}={annotations[key]!r} and label {GENIUS_MODEL_LABEL} "
                f"({', '.join(genius.models)}) allow no model in common"
            )
        return both
    return allowed


def _policy(annotations: Mapping[str, Any], vocabulary: Vocabulary) -> str | None:
    key = vocabulary.policy_annotation
    if key not in annotations:
        return None
    value = str(annotations[key]).strip()
    if not _POLICY_NAME.match(value):
        raise RequestError(
            f"pod annotation {key}={annotations[key]!r} is not a policy name "
            f"(lowercase letters, digits and '-', e.g. binpack)"
        )
    return value


def _mixed_models(annotations: Mapping[str, Any], vocabulary: Vocabulary) -> bool:
    key = vocabulary.mixed_models_annotation
    if key not in annotations:
        return False
    value = str(annotations[key]).strip().lower()
    if value not in ("true", "false"):
        raise RequestError(f"pod annotation {key}={annotations[key]!r} must be \"true\" or "
                           f"\"false\"")
    return value == "true"


def asks_for_gpu(pod: Mapping[str, Any], config: DialectConfig) -> bool:
    """Cheap test: does any container carry a key an enabled dialect reads, or the pod a label
    or annotation one reads (Genius, KAI)? The webhook's matchConditions say the same in CEL
    (webhook/registration.py builds them from the same key sets)."""
    keys = config.resource_keys
    try:
        containers = containers_of(pod)
    except RequestError:
        return True  # let parse_pod report it
    for c in containers:
        if not keys.isdisjoint(c.limits) or not keys.isdisjoint(c.requests):
            return True
    return not (
        config.label_keys.isdisjoint(labels_of(pod))
        and config.annotation_keys.isdisjoint(annotations_of(pod))
    )


def parse_pod(pod: Mapping[str, Any], config: DialectConfig) -> PodRequest | None:
    """The pod's GPU request in any dialect, or None when it asks for no GPU.

    Raises :class:`tessera.vocabulary.RequestError` with a message naming the container, the
    key and what would be valid (several problems are joined with ``"; "``).
    """
    if not isinstance(pod, Mapping):
        raise RequestError("a pod must be a JSON object")
    if not asks_for_gpu(pod, config):
        return None
    containers = containers_of(pod)
    annotations = annotations_of(pod)
    problems: list[str] = []
    genius = genius_request(labels_of(pod)) if Dialect.GENIUS in config.enabled else None
    pod_level = _pod_level_requests(annotations, containers, genius, config, problems)
    requests: list[ContainerRequest] = []
    for c in containers:
        try:
            merged = _container_request(c, pod_level, config)
        except RequestError as exc:
            problems.append(str(exc))
            continue
        if merged is not None:
            requests.append(replace(merged, restartable=True) if c.restartable else merged)
    try:
        models = _models(annotations, genius, config.vocabulary)
        policy = _policy(annotations, config.vocabulary)
        policy = hami_policy(annotations, config.vocabulary, policy)  # HAMi's, or refused
        mixed_models = _mixed_models(annotations, config.vocabulary)
    except RequestError as exc:
        problems.append(str(exc))
    try:  # named along with the problems above
        card_choice = hami_card_choice(
            annotations, hami_agent=config.agent_profile is AgentProfile.HAMI,
            agent=config.agent.name)
    except RequestError as exc:
        problems.append(str(exc))
    if problems:
        raise RequestError("; ".join(problems))
    if not requests:
        return None
    return PodRequest(
        containers=tuple(requests),
        models=models,
        min_card_memory_mib=genius.min_card_memory_mib if genius else 0,
        policy=policy,
        mixed_models=mixed_models,
        one_numa_node=card_choice.one_numa_node,
        **card_choice.lists,
    )


def _pod_level_requests(
    annotations: Mapping[str, Any], containers: Sequence[ContainerResources],
    genius: GeniusRequest | None, config: DialectConfig, problems: list[str],
) -> list[tuple[str, ContainerRequest]]:
    """Requests written on the pod rather than a container, as (label, request of one
    container): Genius labels (for the pod's first app container) and KAI's annotations. A
    KAI problem is added to ``problems``."""
    pod_level: list[tuple[str, ContainerRequest]] = []
    genius_target = next((c.name for c in containers if not c.init), None)
    if genius is not None and genius_target is not None:
        pod_level.append(("pod label " + GENIUS_NUMBER_LABEL,
                          ContainerRequest(genius_target, cards=genius.cards)))
    if Dialect.KAI in config.enabled:
        try:
            if (kai := kai_request(annotations, containers)) is not None:
                pod_level.append(kai)
        except RequestError as exc:
            problems.append(str(exc))
    return pod_level


def _container_request(c: ContainerResources, pod_level: Sequence[tuple[str, ContainerRequest]],
                       config: DialectConfig) -> ContainerRequest | None:
    """The one request every dialect found for container ``c`` describes (or None)."""
    found: list[tuple[str, ContainerRequest]] = []
    for source in config.sources:
        present = [k for k in source.keys if c.has(k)]
        if present and (parsed := source.parse(c, config)) is not None:
            found.append((" + ".join(present), parsed))
    found += [(label, r) for label, r in pod_level if r.name == c.name]
    return _merge(c.name, found)


def read_pod_request(pod: Mapping[str, Any], config: DialectConfig) -> PodRequest | None:
    """The allocator's view: the canonical annotation when present, else :func:`parse_pod`;
    either one as placed for the cluster's node agent, which must be able to run it
    (:meth:`tessera.agent_profiles.NodeAgent.admit`: the webhook already did, but a pod may
    have been admitted without it, or by an earlier configuration).

    A present but undecodable annotation is a :class:`RequestError` (never silently re-parsed:
    the annotation is what the webhook promised the pod would get).
    """
    key = config.vocabulary.request_annotation
    annotations = annotations_of(pod)
    if key in annotations:
        try:
            request: PodRequest | None = decode_request(str(annotations[key]))
        except CodecError as exc:
            raise RequestError(f"pod annotation {key}: {exc}") from exc
    else:
        request = parse_pod(pod, config)
    return None if request is None else config.agent.admit(request)
