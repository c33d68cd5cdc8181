"""Independent checks of what Tessera wrote on pods, from API objects alone (pure).

The e2e tests use these as an oracle that shares no code with the allocator's fitting: the
agent annotation keys are the wire contract (CONTRACTS.md §3, elastic-gpu-agent), written
out literally here on purpose.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kubectl_tessera.report import CardInfo, CardUsage
from tessera.quantity import QuantityError, parse_quantity
from tessera.vocabulary import (
    WHOLE_CARD_PERCENT,
    Allocation,
    CodecError,
    ContainerAllocation,
    ContainerRequest,
    PodRequest,
    Vocabulary,
    decode_allocation,
    decode_request,
)


def _containers(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    spec = pod.get("spec") or {}
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]


def _same_quantity(raw: object, expected: str) -> bool:
    try:
        return raw is not None and parse_quantity(raw).value == parse_quantity(expected).value
    except QuantityError:
        return False


def admission_problems(pod: Mapping[str, Any], vocabulary: Vocabulary) -> list[str]:
    """What is wrong with the webhook's normalised output on this pod (empty = fine)."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    problems = []
    if labels.get(vocabulary.gpu_pod_label) != "true":
        label = vocabulary.gpu_pod_label
        problems.append(f"label {label} is {labels.get(label)!r}")
    try:
        request = decode_request(annotations[vocabulary.request_annotation])
    except (KeyError, CodecError) as exc:
        return [*problems, f"request annotation: {exc!r}"]
    if labels.get(vocabulary.mode_label) != request.mode.value:
        problems.append(f"mode label {labels.get(vocabulary.mode_label)!r} != {request.mode.value}")
    by_name = {c["name"]: c for c in _containers(pod)}
    for req in request.containers:
        ctr = by_name.get(req.name)
        if ctr is None:
            problems.append(f"request names unknown container {req.name!r}")
            continue
        resources = ctr.get("resources") or {}
        limits = resources.get("limits") or {}
        requests = resources.get("requests") or {}
        expected = {}
        if req.core_resource_value:
            expected[vocabulary.core_resource] = str(req.core_resource_value)
        if req.memory_mib:
            expected[vocabulary.memory_resource] = str(req.memory_mib)
        for key, value in expected.items():
            # Compared as quantities: the API server stores its canonical form ("3000" -> "3k").
            if not (_same_quantity(limits.get(key), value)
                    and _same_quantity(requests.get(key), value)):
                problems.append(
                    f"container {req.name}: {key} limit {limits.get(key)!r} / request "
                    f"{requests.get(key)!r}, want {value!r} for both"
                )
    return problems


def allocation_problems(
    pod: Mapping[str, Any], cards: Sequence[CardInfo], vocabulary: Vocabulary
) -> list[str]:
    """What is inconsistent between the pod's request, its allocation record, its binding and
    the agent annotations (empty = fine). ``cards``: the inventory of the pod's node.

    Each property is one named check below; the problems come in the order they list."""
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    node = (pod.get("spec") or {}).get("nodeName")
    try:
        request = decode_request(annotations[vocabulary.request_annotation])
        allocation = decode_allocation(annotations[vocabulary.allocation_annotation])
    except (KeyError, CodecError) as exc:
        return [f"annotations: {exc!r}"]
    problems = [
        *record_matches_binding(allocation, node, meta.get("uid")),
        *same_containers(request, allocation),
    ]
    by_index = {c.index: c for c in cards}
    wanted = {c.name: c for c in request.containers}
    got = {c.name: c for c in allocation.containers}
    for name in set(wanted) & set(got):
        problems += container_problems(
            wanted[name], got[name], request, by_index, node, annotations, vocabulary
        )
    problems += assumed_annotation(annotations, vocabulary)
    return problems


def record_matches_binding(allocation: Allocation, node: object, uid: object) -> list[str]:
    """The allocation record names the node the pod is bound to and, when it names a pod uid,
    this pod's uid."""
    problems = []
    if allocation.node != node:
        problems.append(f"record says node {allocation.node!r}, pod is bound to {node!r}")
    if allocation.pod_uid and allocation.pod_uid != uid:
        problems.append(f"record is for uid {allocation.pod_uid}, pod is {uid}")
    return problems


def same_containers(request: PodRequest, allocation: Allocation) -> list[str]:
    """The record allocates exactly the containers the request asks for."""
    wanted = {c.name for c in request.containers}
    got = {c.name for c in allocation.containers}
    if wanted != got:
        return [f"containers requested {sorted(wanted)} but allocated {sorted(got)}"]
    return []


def container_problems(
    req: ContainerRequest, alloc: ContainerAllocation, request: PodRequest,
    by_index: Mapping[int, CardInfo], node: object, annotations: Mapping[str, Any],
    vocabulary: Vocabulary,
) -> list[str]:
    """Every check of one container's allocation; on cards the node does not have, only that."""
    if unknown := cards_exist(alloc, by_index, node):
        return unknown
    amount = (whole_cards_as_asked(req, alloc) if req.is_whole
              else share_as_asked(req, alloc, by_index))
    return [
        *amount,
        *cards_as_the_pod_allows(alloc, request, by_index),
        *agent_annotation(alloc, annotations, vocabulary),
    ]


def cards_exist(alloc: ContainerAllocation, by_index: Mapping[int, CardInfo],
                node: object) -> list[str]:
    """Every card the container is given exists in the node's inventory."""
    unknown = [i for i in alloc.card_indices if i not in by_index]
    if unknown:
        return [f"{alloc.name}: cards {unknown} do not exist on {node}"]
    return []


def whole_cards_as_asked(req: ContainerRequest, alloc: ContainerAllocation) -> list[str]:
    """A whole-card request gets that many distinct cards, all of each."""
    if len(set(alloc.card_indices)) != req.cards or not alloc.is_whole:
        return [f"{req.name}: wants {req.cards} whole cards, got {alloc}"]
    return []


def share_as_asked(req: ContainerRequest, alloc: ContainerAllocation,
                   by_index: Mapping[int, CardInfo]) -> list[str]:
    """A share is on one card, with the compute asked and the memory asked (a percent of the
    card's memory to within 1 MiB of rounding; MiB exactly)."""
    if len(alloc.card_indices) != 1:
        return [f"{req.name}: a share must be on one card, got {alloc.card_indices}"]
    if req.core_percent != alloc.core_percent:
        return [f"{req.name}: core {alloc.core_percent}% != {req.core_percent}%"]
    want_mem = _share_memory(req, by_index[alloc.card_indices[0]])
    if req.memory_percent and abs(alloc.memory_mib - want_mem) > 1:
        return [f"{req.name}: memory {alloc.memory_mib} MiB, ~{want_mem} wanted"]
    if not req.memory_percent and alloc.memory_mib != want_mem:
        return [f"{req.name}: memory {alloc.memory_mib} MiB != {want_mem}"]
    return []


def cards_as_the_pod_allows(alloc: ContainerAllocation, request: PodRequest,
                            by_index: Mapping[int, CardInfo]) -> list[str]:
    """Every card given is of a model the pod allows and has at least the memory per card the
    pod asks for (Genius)."""
    problems = []
    for index in alloc.card_indices:
        card = by_index[index]
        if not request.allows_model(card.model):
            problems.append(f"{alloc.name}: card {index} is {card.model}, not in {request.models}")
        if card.memory_mib < request.min_card_memory_mib:
            problems.append(f"{alloc.name}: card {index} has {card.memory_mib} MiB < "
                            f"{request.min_card_memory_mib}")
    return problems


def agent_annotation(alloc: ContainerAllocation, annotations: Mapping[str, Any],
                     vocabulary: Vocabulary) -> list[str]:
    """elastic-gpu-agent's annotation names the container's cards: comma-separated indices
    (CONTRACTS.md §3)."""
    key = f"{vocabulary.domain}/container-{alloc.name}"
    expected = ",".join(str(i) for i in alloc.card_indices)
    if annotations.get(key) != expected:
        return [f"agent annotation {key}={annotations.get(key)!r}, want {expected!r}"]
    return []


def assumed_annotation(annotations: Mapping[str, Any], vocabulary: Vocabulary) -> list[str]:
    """The pod carries the agent's ``assumed`` annotation: an annotation only, elastic-gpu-agent
    never selects by label (allocator/agents/)."""
    assumed = f"{vocabulary.domain}/assumed"
    if annotations.get(assumed) != "true":
        return [f"{assumed} annotation missing"]
    return []


def _share_memory(req: ContainerRequest, card: CardInfo) -> int:
    if req.memory_percent:
        return card.memory_mib * req.memory_percent // 100
    return req.memory_mib


def fits_now(request: PodRequest, usage: Mapping[str, list[CardUsage]]) -> str | None:
    """A node where a one-container request would fit on the current usage, else None.

    Only single-container requests are judged (the 200-pod test uses those); anything else
    raises ValueError rather than guess.
    """
    if len(request.containers) != 1:
        raise ValueError("fits_now judges single-container requests only")
    req = request.containers[0]
    for node, cards in usage.items():
        eligible = [
            u for u in cards
            if request.allows_model(u.card.model)
            and u.card.memory_mib >= request.min_card_memory_mib
        ]
        if req.is_whole:
            if sum(1 for u in eligible if not u.holdings) >= req.cards:
                return node
            continue
        for u in eligible:
            if any(h.whole for h in u.holdings):
                continue
            if (u.core_used + req.core_percent <= WHOLE_CARD_PERCENT
                    and u.memory_used + _share_memory(req, u.card) <= u.card.memory_mib):
                return node
    return None
