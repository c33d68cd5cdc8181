"""The GPU request vocabulary: names, units, keys, the parsed request and its codec.

This is the one place where Tessera's resource names, label and annotation keys and the
canonical request type are defined. The webhook writes them, the allocator reads them, the
benchmarks replay through them. Nothing here does I/O.

Units live in names: ``core_percent`` is percent of one card's compute, ``memory_mib`` is MiB.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

#: Default vocabulary domain. ``elasticgpu.io`` is what elastic-gpu-scheduler and its node
#: agent use, so seed pods and the elastic agent work unchanged.
DEFAULT_DOMAIN: Final = "elasticgpu.io"

#: core percent of one whole card; ``gpu-core: 200`` means two whole cards.
WHOLE_CARD_PERCENT: Final = 100

#: Largest Unix time a record may carry (year 5138): bounds a field anyone can write.
MAX_TIMESTAMP: Final = 10**11

#: Version of the JSON records below; decoders refuse versions they do not know.
CODEC_VERSION: Final = 1


class TesseraError(Exception):
    """Root of Tessera's own exceptions."""


class RequestError(TesseraError):
    """A GPU request that cannot be honoured as written. The message is shown to the user."""


class CodecError(TesseraError):
    """A stored record (annotation) that does not decode."""


class ConfigError(TesseraError):
    """Configuration (flags, environment) that cannot be used. Reported at start."""


class Mode(StrEnum):
    """Value of the mode label: how a pod uses cards."""

    SHARED = "shared"  # every GPU container takes a share of one card
    WHOLE = "whole"  # every GPU container takes whole cards
    MIXED = "mixed"  # some of each


@dataclass(frozen=True)
class Vocabulary:
    """Every key Tessera reads or writes, derived from one configurable domain."""

    domain: str = DEFAULT_DOMAIN

    @property
    def core_resource(self) -> str:
        """Extended resource: percent of one card's compute (100·k = k whole cards)."""
        return f"{self.domain}/gpu-core"

    @property
    def memory_resource(self) -> str:
        """Extended resource: GPU memory in MiB, for shares."""
        return f"{self.domain}/gpu-memory"

    @property
    def managed_resources(self) -> tuple[str, str]:
        return (self.core_resource, self.memory_resource)

    @property
    def request_annotation(self) -> str:
        """Pod annotation: the encoded :class:`PodRequest` (written by the webhook)."""
        return f"{self.domain}/gpu-request"

    @property
    def allocation_annotation(self) -> str:
        """Pod annotation: the encoded :class:`Allocation` (written by the allocator at bind)."""
        return f"{self.domain}/gpu-allocation"

    @property
    def requeue_annotation(self) -> str:
        """Pod annotation: set by the allocator on a pod it refused for lack of room, when
        room it fits in is released (a new value makes kube-scheduler schedule it again)."""
        return f"{self.domain}/requeued-at"

    @property
    def gpu_pod_label(self) -> str:
        """Pod label ``"true"`` on every GPU pod; the allocator watches by this selector."""
        return f"{self.domain}/gpu-pod"

    @property
    def mode_label(self) -> str:
        """Pod label holding a :class:`Mode`."""
        return f"{self.domain}/gpu-mode"

    @property
    def model_annotation(self) -> str:
        """Pod annotation: allowed GPU models, ``|``- or ``,``-separated."""
        return f"{self.domain}/gpu-model"

    @property
    def policy_annotation(self) -> str:
        """Pod annotation: placement policy name, overriding the cluster default."""
        return f"{self.domain}/gpu-policy"

    @property
    def mixed_models_annotation(self) -> str:
        """Pod annotation: ``"true"`` lets a multi-card container take cards of different
        models (by default its cards are all of one model)."""
        return f"{self.domain}/gpu-mixed-models"

    @property
    def node_cards_annotation(self) -> str:
        """Node annotation: JSON list of ``{"index", "model", "memoryMiB"}``, one per card."""
        return f"{self.domain}/gpu-cards"

    @property
    def node_model_label(self) -> str:
        """Node label: GPU model of every card on the node (when all cards are alike)."""
        return f"{self.domain}/gpu-model"

    @property
    def gpu_pod_selector(self) -> str:
        return f"{self.gpu_pod_label}=true"


# NVIDIA GPU Feature Discovery node labels (CONTRACTS.md §1).
GFD_PRODUCT_LABEL: Final = "nvidia.com/gpu.product"
GFD_MEMORY_LABEL: Final = "nvidia.com/gpu.memory"  # MiB per card
GFD_COUNT_LABEL: Final = "nvidia.com/gpu.count"


@dataclass(frozen=True)
class ContainerRequest:
    """What one container asks for.

    Either *whole cards* (``cards >= 1``; nobody else may use them) or a *share* of exactly one
    card (``cards == 0``) made of compute and memory. Memory is either absolute
    (``memory_mib``) or a percent of the card chosen at bind (``memory_percent``), never both.
    """

    name: str
    cards: int = 0
    core_percent: int = 0
    memory_mib: int = 0
    memory_percent: int = 0
    init: bool = False

    def __post_init__(self) -> None:
        if self.cards < 0:
            raise RequestError(f"container {self.name!r}: card count {self.cards} is negative")
        if self.cards > 0:
            if self.core_percent or self.memory_mib or self.memory_percent:
                raise RequestError(
                    f"container {self.name!r}: a whole-card request carries no share"
                )
            return
        if not 0 <= self.core_percent < WHOLE_CARD_PERCENT:
            raise RequestError(
                f"container {self.name!r}: core {self.core_percent}% of one card is out of "
                f"range 0-99 for a share"
            )
        if self.memory_mib < 0:
            raise RequestError(f"container {self.name!r}: memory {self.memory_mib} MiB < 0")
        if not 0 <= self.memory_percent <= 100:
            raise RequestError(
                f"container {self.name!r}: memory {self.memory_percent}% is out of range 0-100"
            )
        if self.memory_mib and self.memory_percent:
            raise RequestError(
                f"container {self.name!r}: memory given both in MiB and in percent"
            )
        if not (self.core_percent or self.memory_mib or self.memory_percent):
            raise RequestError(f"container {self.name!r}: an empty GPU share")

    @property
    def is_whole(self) -> bool:
        return self.cards > 0

    @property
    def core_resource_value(self) -> int:
        """Value of the canonical core extended resource (request == limit)."""
        return self.cards * WHOLE_CARD_PERCENT if self.is_whole else self.core_percent

    def describe(self) -> str:
        """What the container asks for, in words: ``2 whole cards``, ``50% core and 1000 MiB``,
        ``40% of its memory`` (the one wording of every message about a request)."""
        if self.is_whole:
            return f"{self.cards} whole card{'s' if self.cards > 1 else ''}"
        parts = []
        if self.core_percent:
            parts.append(f"{self.core_percent}% core")
        if self.memory_mib:
            parts.append(f"{self.memory_mib} MiB")
        if self.memory_percent:
            parts.append(f"{self.memory_percent}% of its memory")
        return " and ".join(parts)


@dataclass(frozen=True)
class PodRequest:
    """The parsed GPU request of a whole pod: the canonical form every dialect becomes."""

    containers: tuple[ContainerRequest, ...]
    #: Allowed GPU models (empty = any). Matched case-insensitively against the node's model.
    models: tuple[str, ...] = ()
    #: Minimum memory of each card used (Genius ``gpu-memory``), 0 = any.
    min_card_memory_mib: int = 0
    #: Placement policy chosen by the pod, or None for the cluster default.
    policy: str | None = None
    #: True lets a multi-card container take cards of different models; by default all the
    #: cards of one container are of one model (a job split over an A100 and a T4 runs at
    #: the T4's pace, or not at all).
    mixed_models: bool = False

    def __post_init__(self) -> None:
        if not self.containers:
            raise RequestError("a GPU request needs at least one GPU container")
        names = [c.name for c in self.containers]
        if len(set(names)) != len(names):
            raise RequestError(f"duplicate container names in GPU request: {names}")
        if self.min_card_memory_mib < 0:
            raise RequestError(f"minimum card memory {self.min_card_memory_mib} MiB < 0")

    @property
    def mode(self) -> Mode:
        kinds = {c.is_whole for c in self.containers}
        if kinds == {True}:
            return Mode.WHOLE
        if kinds == {False}:
            return Mode.SHARED
        return Mode.MIXED

    @property
    def whole_cards(self) -> int:
        return sum(c.cards for c in self.containers)

    def allows_model(self, model: str) -> bool:
        return not self.models or model.lower() in {m.lower() for m in self.models}


@dataclass(frozen=True)
class ContainerAllocation:
    """The cards one container got, and the share taken on each (0 core/memory = whole card)."""

    name: str
    card_indices: tuple[int, ...]
    core_percent: int = 0
    memory_mib: int = 0
    init: bool = False

    @property
    def is_whole(self) -> bool:
        return self.core_percent == 0 and self.memory_mib == 0


@dataclass(frozen=True)
class Allocation:
    """The canonical allocation record: the durable truth the allocator's cache is rebuilt from."""

    node: str
    containers: tuple[ContainerAllocation, ...]
    #: Unix time in seconds when the allocation was decided (informational).
    allocated_at: float = 0.0
    pod_uid: str = field(default="")

    def card_indices(self) -> tuple[int, ...]:
        return tuple(sorted({i for c in self.containers for i in c.card_indices}))


# ----------------------------------------------------------------------------- codec
# Compact JSON with stable, explicit key names. Decoders validate fully: an annotation is
# user-writable, so a bad one is reported, never trusted.


def _int_field(raw: Mapping[str, Any], key: str, default: int = 0) -> int:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise CodecError(f"field {key!r} must be an integer, got {value!r}")
    return value


def _str_field(raw: Mapping[str, Any], key: str) -> str:
    value = raw.get(key)
    if not isinstance(value, str) or not value:
        raise CodecError(f"field {key!r} must be a non-empty string, got {value!r}")
    return value


def _load_object(text: str, what: str) -> Mapping[str, Any]:
    try:
        raw = json.loads(text)
    except (TypeError, ValueError) as exc:
        raise CodecError(f"{what} is not JSON: {exc}") from exc
    except RecursionError:
        # json.loads recurses per nesting level; "[[[…" in an annotation is hostile input.
        raise CodecError(f"{what} is not JSON: nested too deeply") from None
    if not isinstance(raw, dict):
        raise CodecError(f"{what} must be a JSON object")
    version = raw.get("v")
    if version != CODEC_VERSION:
        raise CodecError(f"{what} has unsupported version {version!r} (want {CODEC_VERSION})")
    return raw


def _list_field(raw: Mapping[str, Any], key: str) -> list[Any]:
    value = raw.get(key, [])
    if not isinstance(value, list):
        raise CodecError(f"field {key!r} must be a list")
    return value


def encode_request(request: PodRequest) -> str:
    doc: dict[str, Any] = {
        "v": CODEC_VERSION,
        "containers": [
            {
                "name": c.name,
                **({"init": True} if c.init else {}),
                **({"cards": c.cards} if c.cards else {}),
                **({"corePercent": c.core_percent} if c.core_percent else {}),
                **({"memoryMiB": c.memory_mib} if c.memory_mib else {}),
                **({"memoryPercent": c.memory_percent} if c.memory_percent else {}),
            }
            for c in request.containers
        ],
    }
    if request.models:
        doc["models"] = list(request.models)
    if request.min_card_memory_mib:
        doc["minCardMemoryMiB"] = request.min_card_memory_mib
    if request.policy:
        doc["policy"] = request.policy
    if request.mixed_models:
        doc["mixedModels"] = True
    return json.dumps(doc, separators=(",", ":"))


def decode_request(text: str) -> PodRequest:
    raw = _load_object(text, "GPU request annotation")
    try:
        containers = []
        for item in _list_field(raw, "containers"):
            if not isinstance(item, dict):
                raise CodecError("each container must be a JSON object")
            containers.append(
                ContainerRequest(
                    name=_str_field(item, "name"),
                    cards=_int_field(item, "cards"),
                    core_percent=_int_field(item, "corePercent"),
                    memory_mib=_int_field(item, "memoryMiB"),
                    memory_percent=_int_field(item, "memoryPercent"),
                    init=bool(item.get("init", False)),
                )
            )
        models = _list_field(raw, "models")
        if not all(isinstance(m, str) and m for m in models):
            raise CodecError("models must be non-empty strings")
        policy = raw.get("policy")
        if policy is not None and not isinstance(policy, str):
            raise CodecError("policy must be a string")
        mixed = raw.get("mixedModels", False)
        if not isinstance(mixed, bool):
            raise CodecError("mixedModels must be true or false")
        return PodRequest(
            containers=tuple(containers),
            models=tuple(models),
            min_card_memory_mib=_int_field(raw, "minCardMemoryMiB"),
            policy=policy or None,
            mixed_models=mixed,
        )
    except RequestError as exc:
        raise CodecError(f"GPU request annotation is invalid: {exc}") from exc


def encode_allocation(allocation: Allocation) -> str:
    doc = {
        "v": CODEC_VERSION,
        "node": allocation.node,
        "podUID": allocation.pod_uid,
        "at": allocation.allocated_at,
        "containers": [
            {
                "name": c.name,
                **({"init": True} if c.init else {}),
                "cards": list(c.card_indices),
                **({"corePercent": c.core_percent} if c.core_percent else {}),
                **({"memoryMiB": c.memory_mib} if c.memory_mib else {}),
            }
            for c in allocation.containers
        ],
    }
    return json.dumps(doc, separators=(",", ":"))


def decode_allocation(text: str) -> Allocation:
    raw = _load_object(text, "GPU allocation annotation")
    containers = []
    for item in _list_field(raw, "containers"):
        if not isinstance(item, dict):
            raise CodecError("each container must be a JSON object")
        cards = _list_field(item, "cards")
        if not cards or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0
                                for i in cards):
            raise CodecError("cards must be a non-empty list of card indices >= 0")
        containers.append(
            ContainerAllocation(
                name=_str_field(item, "name"),
                card_indices=tuple(cards),
                core_percent=_int_field(item, "corePercent"),
                memory_mib=_int_field(item, "memoryMiB"),
                init=bool(item.get("init", False)),
            )
        )
    at = raw.get("at", 0.0)
    if isinstance(at, bool) or not isinstance(at, int | float):
        raise CodecError("field 'at' must be a number")
    # JSON integers are unbounded (float() of 400 digits overflows) and 1e999 reads as inf.
    if not 0 <= at <= MAX_TIMESTAMP:
        raise CodecError(f"field 'at' must be a Unix time in seconds (0-{MAX_TIMESTAMP})")
    pod_uid = raw.get("podUID", "")
    if not isinstance(pod_uid, str):
        raise CodecError("field 'podUID' must be a string")
    return Allocation(
        node=_str_field(raw, "node"),
        containers=tuple(containers),
        allocated_at=float(at),
        pod_uid=pod_uid,
    )
