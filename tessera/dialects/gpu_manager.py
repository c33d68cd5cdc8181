"""tkestack gpu-manager's keys (pure): ``tencent.com/vcuda-core`` and
``tencent.com/vcuda-memory`` (256 MiB blocks)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from tessera.dialects.base import MAX_CARDS, MAX_MEMORY_MIB
from tessera.vocabulary import WHOLE_CARD_PERCENT, ContainerRequest, RequestError

if TYPE_CHECKING:
    from tessera.dialects.base import ContainerResources
    from tessera.dialects.config import DialectConfig

# tkestack gpu-manager. Source: tkestack/gpu-manager v1.1.5 pkg/types/types.go (VCoreAnnotation,
# VMemoryAnnotation, MemoryBlockSize = 268435456 bytes) and
# pkg/services/allocator/nvidia/allocator.go allocateOne (rules, see gpu_manager).
VCUDA_CORE_KEY: Final = "tencent.com/vcuda-core"
VCUDA_MEMORY_KEY: Final = "tencent.com/vcuda-memory"
VCUDA_MEMORY_BLOCK_MIB: Final = 256


def gpu_manager(c: ContainerResources, _cfg: DialectConfig) -> ContainerRequest | None:
    """tkestack gpu-manager semantics (pkg/services/allocator/nvidia/allocator.go allocateOne):
    core and memory 0 = no GPU ("Zero request"); core > 100 must be a multiple of 100; core >= 100
    is whole cards and the memory request is not looked at (the evaluators get memory 0); below
    100 is a share, and "cores or memory is zero is not permitted in share mode"."""
    core = c.integer(
        VCUDA_CORE_KEY, low=0, high=MAX_CARDS * WHOLE_CARD_PERCENT,
        valid="vcuda-core is a percent of one card: 1-99 for a share, 100·k for k whole cards",
    ) or 0
    blocks = c.integer(
        VCUDA_MEMORY_KEY, low=0, high=MAX_MEMORY_MIB // VCUDA_MEMORY_BLOCK_MIB,
        valid=f"vcuda-memory is a whole number of {VCUDA_MEMORY_BLOCK_MIB} MiB blocks >= 0",
        unit_hint=f"a count of {VCUDA_MEMORY_BLOCK_MIB} MiB blocks, e.g. 16 for 4 GiB",
    ) or 0
    if core == 0 and blocks == 0:
        return None
    if core >= WHOLE_CARD_PERCENT:
        if core % WHOLE_CARD_PERCENT:
            raise RequestError(
                f"container {c.name!r}: {VCUDA_CORE_KEY}={core} is invalid; gpu-manager takes "
                f"1-99 for a share of one card and 100·k for k whole cards (100, 200, ...)"
            )
        return ContainerRequest(c.name, cards=core // WHOLE_CARD_PERCENT, init=c.init)
    if core == 0 or blocks == 0:
        missing, given = (
            (VCUDA_CORE_KEY, f"{VCUDA_MEMORY_KEY}={blocks}") if core == 0
            else (VCUDA_MEMORY_KEY, f"{VCUDA_CORE_KEY}={core}")
        )
        raise RequestError(
            f"container {c.name!r}: {given} without {missing} is not a share gpu-manager "
            f"accepts; a share needs both (compute 1-99 and memory in "
            f"{VCUDA_MEMORY_BLOCK_MIB} MiB blocks)"
        )
    return ContainerRequest(
        c.name, core_percent=core, memory_mib=blocks * VCUDA_MEMORY_BLOCK_MIB, init=c.init
    )
