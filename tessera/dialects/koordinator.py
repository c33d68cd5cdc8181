"""Koordinator's keys (pure): ``koordinator.sh/gpu``, ``gpu-core``, ``gpu-memory`` (bytes),
``gpu-memory-ratio`` and ``gpu.shared``, in the combinations Koordinator accepts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Final

from tessera.agent_profiles import NVIDIA_GPU_KEY
from tessera.dialects.base import MAX_CARDS, ContainerResources
from tessera.vocabulary import WHOLE_CARD_PERCENT, ContainerRequest, RequestError

if TYPE_CHECKING:
    from tessera.dialects.config import DialectConfig

# Koordinator. Source: koordinator-sh/koordinator v1.8.0 apis/extension/device_share.go
# (resource names) and pkg/scheduler/plugins/deviceshare/utils.go (combinations, see
# koordinator). gpu-memory is bytes (docs/proposals/scheduling/
# 20220629-fine-grained-device-scheduling.md: "the memory capacity of the GPU in bytes").
KOORD_GPU_KEY: Final = "koordinator.sh/gpu"
KOORD_SHARED_KEY: Final = "koordinator.sh/gpu.shared"
KOORD_CORE_KEY: Final = "koordinator.sh/gpu-core"
KOORD_MEMORY_KEY: Final = "koordinator.sh/gpu-memory"
KOORD_RATIO_KEY: Final = "koordinator.sh/gpu-memory-ratio"
KOORD_KEYS: Final = (KOORD_GPU_KEY, KOORD_SHARED_KEY, KOORD_CORE_KEY, KOORD_MEMORY_KEY,
                     KOORD_RATIO_KEY)


#: The key sets Koordinator accepts for a GPU: pkg/scheduler/plugins/deviceshare/utils.go
#: ValidDeviceResourceCombinations (its NVIDIA-card entries; the others are Huawei NPU keys).
_KOORD_COMBINATIONS: Final = frozenset(frozenset(keys) for keys in (
    (KOORD_GPU_KEY,),
    (KOORD_MEMORY_KEY,),
    (KOORD_RATIO_KEY,),
    (KOORD_CORE_KEY, KOORD_MEMORY_KEY),
    (KOORD_CORE_KEY, KOORD_RATIO_KEY),
    (KOORD_SHARED_KEY, KOORD_MEMORY_KEY),
    (KOORD_SHARED_KEY, KOORD_RATIO_KEY),
    (KOORD_SHARED_KEY, KOORD_CORE_KEY, KOORD_MEMORY_KEY),
    (KOORD_SHARED_KEY, KOORD_CORE_KEY, KOORD_RATIO_KEY),
))


def koordinator(c: ContainerResources, _cfg: DialectConfig) -> ContainerRequest | None:
    """Koordinator semantics, read per container (pkg/scheduler/plugins/deviceshare: utils.go
    ValidateDeviceRequest and ResourceCombinationsMapper, devicehandler_gpu.go
    calcDesiredRequestsAndCountForGPU). Zero values are dropped first (quotav1.RemoveZeros).

    ``gpu`` g is core g and memory ratio g. Without ``gpu.shared`` a core or ratio above 100
    must be a multiple of 100 and the ratio sets the number of cards (ratio/100); with
    ``gpu.shared`` s the request is split over s cards, so core and ratio must be multiples of
    s and at most 100 per card. A ratio without a core is read as the percent form (the same
    share of compute): upstream reserves no compute for it, but a share with only a percent of
    memory has no canonical resource kube-scheduler could route to the allocator.
    """
    percent = "a percent of one card: 1-100, or 100·k for k cards"
    gpu, core, ratio = (
        c.integer(key, low=0, high=MAX_CARDS * WHOLE_CARD_PERCENT, valid=percent) or 0
        for key in (KOORD_GPU_KEY, KOORD_CORE_KEY, KOORD_RATIO_KEY)
    )
    shared = c.integer(
        KOORD_SHARED_KEY, low=0, high=MAX_CARDS,
        valid="the number of cards the request is split over, a whole number >= 1",
    ) or 0
    memory = c.mebibytes(KOORD_MEMORY_KEY) or 0
    values = {KOORD_GPU_KEY: gpu, KOORD_SHARED_KEY: shared, KOORD_CORE_KEY: core,
              KOORD_MEMORY_KEY: memory, KOORD_RATIO_KEY: ratio}
    given = [key for key in KOORD_KEYS if values[key]]
    if not given:
        return None
    where = f"container {c.name!r}"
    written = " + ".join(given)
    _koord_check_combination(c, given, where, written)
    if gpu:
        core = ratio = gpu
    count = _koord_count(where, values, core, ratio, shared)
    card_ratio = ratio // count
    card_core = core // count if core else card_ratio
    if card_core == card_ratio == WHOLE_CARD_PERCENT and not memory:
        return ContainerRequest(c.name, cards=count, init=c.init)
    _koord_check_share(where, core, card_core, memory)
    return ContainerRequest(
        c.name,
        core_percent=card_core,
        # Bytes split evenly over the cards (devicehandler_gpu.go:91-94), in MiB rounded up.
        memory_mib=-(-memory // count),
        memory_percent=0 if memory else card_ratio,
        init=c.init,
        # The same share on each of ``count`` cards (devicehandler_gpu.go:53-96); the agents
        # that cannot run it refuse it (tessera/agent_profiles/refusals.py).
        shares=count,
    )


def _koord_check_combination(c: ContainerResources, given: Sequence[str], where: str,
                             written: str) -> None:
    if c.has(NVIDIA_GPU_KEY) or frozenset(given) not in _KOORD_COMBINATIONS:
        also = f"{NVIDIA_GPU_KEY} + " if c.has(NVIDIA_GPU_KEY) else ""
        raise RequestError(
            f"{where}: {also}{written} is not a combination Koordinator accepts; write "
            f"{KOORD_GPU_KEY} alone, {KOORD_MEMORY_KEY} or {KOORD_RATIO_KEY} alone, or "
            f"{KOORD_CORE_KEY} with one of those two (each optionally with {KOORD_SHARED_KEY})"
        )


def _koord_count(where: str, values: Mapping[str, int], core: int, ratio: int,
                 shared: int) -> int:
    """The number of cards the request is split over (checking the values split evenly)."""
    if shared:
        for key, value in ((KOORD_CORE_KEY, core), (KOORD_RATIO_KEY, ratio)):
            if value and (value % shared or value // shared > WHOLE_CARD_PERCENT):
                raise RequestError(
                    f"{where}: {key}={value} with {KOORD_SHARED_KEY}={shared} is invalid; it is "
                    f"split evenly over {shared} card(s), so it must be a multiple of {shared} "
                    f"and at most {shared * WHOLE_CARD_PERCENT}"
                )
        return shared
    for key in (KOORD_GPU_KEY, KOORD_CORE_KEY, KOORD_RATIO_KEY):
        value = values[key]
        if value > WHOLE_CARD_PERCENT and value % WHOLE_CARD_PERCENT:
            raise RequestError(
                f"{where}: {key}={value} is invalid; 1-100 is a share of one card, above 100 "
                f"only multiples of 100 (k cards)"
            )
    return ratio // WHOLE_CARD_PERCENT if ratio > WHOLE_CARD_PERCENT else 1


def _koord_check_share(where: str, core: int, card_core: int, memory: int) -> None:
    """A share (on each of its cards) takes 1-99% of a card's compute."""
    if card_core >= WHOLE_CARD_PERCENT:
        memory_key = KOORD_MEMORY_KEY if memory else KOORD_RATIO_KEY
        how_much = (
            "all of one card's compute but only part of its memory"
            if card_core == WHOLE_CARD_PERCENT
            # Koordinator takes the number of cards from the memory key: the core lands on one.
            else f"more compute than one card has, on the one card {memory_key} describes"
        )
        raise RequestError(
            f"{where}: {KOORD_CORE_KEY}={core} with {memory_key} asks for {how_much}; a share "
            f"takes 1-99% of one card's compute: lower {KOORD_CORE_KEY}, or ask for whole cards "
            f"with {KOORD_GPU_KEY}=100·k"
        )
