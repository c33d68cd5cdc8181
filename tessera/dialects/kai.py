"""NVIDIA KAI-Scheduler's pod annotations (pure, opt-in): ``gpu-fraction``, ``gpu-memory``,
``gpu-fraction-num-devices`` and ``gpu-fraction-container-name``, read as a request of one
container."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from decimal import Decimal
from typing import Any, Final

from tessera.agent_profiles import NVIDIA_GPU_KEY
from tessera.dialects.base import MAX_CARDS, MAX_MEMORY_MIB, ContainerResources
from tessera.vocabulary import WHOLE_CARD_PERCENT, ContainerRequest, RequestError

# NVIDIA KAI-Scheduler pod annotations (no prefix). Source: NVIDIA/KAI-Scheduler v0.13.0
# pkg/common/constants/constants.go; rules in
# pkg/binder/plugins/gpusharing/gpu-request/gpu_request_validator.go (see kai_request).
KAI_FRACTION_ANNOTATION: Final = "gpu-fraction"
KAI_MEMORY_ANNOTATION: Final = "gpu-memory"
KAI_DEVICES_ANNOTATION: Final = "gpu-fraction-num-devices"
KAI_CONTAINER_ANNOTATION: Final = "gpu-fraction-container-name"
#: The KAI annotations that make a pod a GPU pod (or a refused one): the container name alone
#: asks for nothing (KAI's RequestsGPUFraction reads fraction and memory only).
KAI_ANNOTATIONS: Final = (KAI_FRACTION_ANNOTATION, KAI_MEMORY_ANNOTATION, KAI_DEVICES_ANNOTATION)

#: What Go's strconv.ParseUint(s, 10, 64) accepts, kept to 18 digits (ASCII only: ``"²"`` is
#: a digit to Python's ``isdigit`` but not to Go or ``int``).
_GO_UINT: Final = re.compile(r"[0-9]{1,18}")
#: The decimal forms of Go's strconv.ParseFloat (no hex, inf or NaN; exponent kept small).
_GO_DECIMAL: Final = re.compile(
    r"[+-]?(?:[0-9]{1,18}(?:\.[0-9]{0,18})?|\.[0-9]{1,18})(?:[eE][+-]?[0-9]{1,3})?"
)


def _kai_text(annotations: Mapping[str, Any], key: str) -> str | None:
    if key not in annotations:
        return None
    raw = annotations[key]
    if isinstance(raw, str):
        return raw
    raise RequestError(f"pod annotation {key}={raw!r} must be a string")


def _kai_target(annotations: Mapping[str, Any], containers: Sequence[ContainerResources]
                ) -> ContainerResources:
    """The container a KAI share is for: the one ``gpu-fraction-container-name`` names (an init
    or app container), else the first app container (pkg/binder/common/gpu_access.go
    GetFractionContainerRef)."""
    name = _kai_text(annotations, KAI_CONTAINER_ANNOTATION)
    if name is None:
        first = next((c for c in containers if not c.init), None)
        if first is None:
            raise RequestError("pod has no containers for its KAI GPU share")
        return first
    named = next((c for c in containers if c.name == name), None)
    if named is None:
        raise RequestError(
            f"pod annotation {KAI_CONTAINER_ANNOTATION}={name!r} names no container of this pod "
            f"(it has {', '.join(repr(c.name) for c in containers)})"
        )
    return named


def kai_request(
    annotations: Mapping[str, Any], containers: Sequence[ContainerResources]
) -> tuple[str, ContainerRequest] | None:
    """KAI-Scheduler's share annotations as (label, request of the target container).

    Refused as KAI refuses them (gpu_request_validator.go ValidateGpuRequests): a fraction
    outside (0, 1), memory that is not a whole number of MiB > 0, both together, either next to
    an ``nvidia.com/gpu`` limit, a device count without either. KAI's own unit for a fraction is
    a share of the card (its docs/gpu-sharing: half of the card's memory for 0.5; the
    scheduler counts it as 0.5 of the device), which Tessera reads as the percent form: the same
    share of compute and memory.
    """
    if not any(k in annotations for k in KAI_ANNOTATIONS):
        return None
    fraction_text = _kai_text(annotations, KAI_FRACTION_ANNOTATION)
    memory_text = _kai_text(annotations, KAI_MEMORY_ANNOTATION)
    devices_text = _kai_text(annotations, KAI_DEVICES_ANNOTATION)
    target = _kai_target(annotations, containers)
    where = f"container {target.name!r}: pod annotation"
    if fraction_text is None and memory_text is None:
        raise RequestError(
            f"{where} {KAI_DEVICES_ANNOTATION}={devices_text!r} needs {KAI_FRACTION_ANNOTATION} "
            f"or {KAI_MEMORY_ANNOTATION} (the share to take on each card), as in KAI"
        )
    if fraction_text is not None and memory_text is not None:
        raise RequestError(
            f"{where}s {KAI_FRACTION_ANNOTATION} and {KAI_MEMORY_ANNOTATION} cannot be used "
            f"together (KAI refuses both); keep one of them"
        )
    key = KAI_FRACTION_ANNOTATION if fraction_text is not None else KAI_MEMORY_ANNOTATION
    whole = next((c for c in containers if NVIDIA_GPU_KEY in c.limits), None)
    if whole is not None:
        raise RequestError(
            f"container {whole.name!r}: {NVIDIA_GPU_KEY} in limits together with pod annotation "
            f"{key}; KAI refuses a share next to whole GPUs: remove one of them"
        )
    shares = 1 if devices_text is None else _kai_devices(where, devices_text)
    label = f"pod annotation {key}"
    if memory_text is not None:
        share = _kai_memory(where, memory_text, target)
    else:
        assert fraction_text is not None  # one of the two is given (checked above)
        share = _kai_fraction(where, fraction_text, target)
    # KAI's multi-fraction: the same fraction or memory on each of n devices
    # (pkg/scheduler/api/pod_info/pod_info.go:458-465, NewGpuResourceRequirementWithMultiFraction);
    # the agents that cannot run it refuse it (tessera/agent_profiles/refusals.py).
    return label, replace(share, shares=shares)


def _kai_devices(where: str, devices_text: str) -> int:
    if not _GO_UINT.fullmatch(devices_text) or not 0 < int(devices_text) <= MAX_CARDS:
        raise RequestError(
            f"{where} {KAI_DEVICES_ANNOTATION}={devices_text!r} is invalid; it is a whole "
            f"number of cards from 1 to {MAX_CARDS}"
        )
    return int(devices_text)


def _kai_memory(where: str, memory_text: str, target: ContainerResources) -> ContainerRequest:
    if not _GO_UINT.fullmatch(memory_text) or not 0 < int(memory_text) <= MAX_MEMORY_MIB:
        raise RequestError(
            f"{where} {KAI_MEMORY_ANNOTATION}={memory_text!r} is invalid; it is a whole "
            f"number of MiB from 1 to {MAX_MEMORY_MIB}, e.g. \"2000\""
        )
    return ContainerRequest(target.name, memory_mib=int(memory_text), init=target.init)


def _kai_fraction(where: str, fraction_text: str, target: ContainerResources) -> ContainerRequest:
    valid = (
        "it is a share of one card strictly between 0 and 1 (e.g. \"0.5\"), in hundredths "
        "(Tessera counts shares in whole percents: 0.33, not 0.333)"
    )
    percent = (
        Decimal(fraction_text) * WHOLE_CARD_PERCENT
        if _GO_DECIMAL.fullmatch(fraction_text) else Decimal(-1)
    )
    if not 0 < percent < WHOLE_CARD_PERCENT or percent != percent.to_integral_value():
        raise RequestError(
            f"{where} {KAI_FRACTION_ANNOTATION}={fraction_text!r} is invalid; {valid}"
        )
    share = int(percent)
    return ContainerRequest(
        target.name, core_percent=share, memory_percent=share, init=target.init
    )
