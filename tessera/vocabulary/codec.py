"""The request and allocation records as annotations (pure): one encode/decode pair each,
round-trip tested; decoders validate fully and raise :class:`CodecError`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from tessera.vocabulary.names import CodecError, RequestError
from tessera.vocabulary.records import Allocation, ContainerAllocation, ContainerRequest, PodRequest

#: Largest Unix time a record may carry (year 5138): bounds a field anyone can write.
MAX_TIMESTAMP: Final = 10**11

#: Version of the JSON records below; decoders refuse versions they do not know.
CODEC_VERSION: Final = 1


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


#: HAMi's card choice in the request record, by its field.
_CARD_CHOICE_KEYS: Final = (("useTypes", "use_types"), ("nouseTypes", "nouse_types"),
                            ("useUUIDs", "use_uuids"), ("nouseUUIDs", "nouse_uuids"),
                            ("cardModes", "card_modes"))


def _card_choice(request: PodRequest) -> dict[str, tuple[str, ...]]:
    return {key: getattr(request, attr) for key, attr in _CARD_CHOICE_KEYS}


def _decode_card_choice(raw: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
    choice = {}
    for key, attr in _CARD_CHOICE_KEYS:
        values = _list_field(raw, key)
        if not all(isinstance(v, str) and v for v in values):
            raise CodecError(f"{key} must be non-empty strings")
        choice[attr] = tuple(values)
    return choice


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
                # Absent for one share: records written before the count read as one.
                **({"shares": c.shares} if c.shares != 1 else {}),
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
    if request.one_numa_node:
        doc["oneNumaNode"] = True
    # Absent when empty: records written before HAMi's card choice read as before.
    for key, values in _card_choice(request).items():
        if values:
            doc[key] = list(values)
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
                    shares=_int_field(item, "shares", default=1),
                )
            )
        models = _list_field(raw, "models")
        if not all(isinstance(m, str) and m for m in models):
            raise CodecError("models must be non-empty strings")
        policy = raw.get("policy")
        if policy is not None and not isinstance(policy, str):
            raise CodecError("policy must be a string")
        mixed = raw.get("mixedModels", False)
        one_numa = raw.get("oneNumaNode", False)
        if not isinstance(mixed, bool) or not isinstance(one_numa, bool):
            raise CodecError("mixedModels and oneNumaNode must be true or false")
        return PodRequest(
            containers=tuple(containers),
            models=tuple(models),
            min_card_memory_mib=_int_field(raw, "minCardMemoryMiB"),
            policy=policy or None,
            mixed_models=mixed,
            one_numa_node=one_numa,
            **_decode_card_choice(raw),
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
