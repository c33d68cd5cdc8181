"""nano-gpu's keys (pure): the older core-and-memory form (memory in GiB by default) and
nano-gpu 0.3's percent form, read as elastic's are."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from tessera.agent_profiles import MIB_PER_GIB
from tessera.dialects.elastic import core_memory
from tessera.vocabulary import ContainerRequest

if TYPE_CHECKING:
    from tessera.dialects.base import ContainerResources
    from tessera.dialects.config import DialectConfig

# nano-gpu 0.3 (percent-only). Source: elastic-ai/elastic-gpu-scheduler pkg/types/types.go
# (ResourceGPUPercent = "nano-gpu/gpu-percent", GPUPercentEachCard = 100) and
# elastic-ai/elastic-gpu-agent pkg/common/const.go.
# (NANO_PERCENT_KEY: tessera.agent_profiles, the resource nano-gpu-agent registers.)
# Older nano-gpu (core + memory). Source: nano-gpu-scheduler pkg/types/types.go
# (ResourceGPUCore = "nano-gpu.io/gpu-core", ResourceGPUMemory = "nano-gpu.io/gpu-memory",
# GPUCoreEachCard = 100) and its README example (gpu-core "20" + gpu-memory "1").
NANO_CORE_KEY: Final = "nano-gpu.io/gpu-core"
NANO_MEMORY_KEY: Final = "nano-gpu.io/gpu-memory"


def nano_gpu(c: ContainerResources, cfg: DialectConfig) -> ContainerRequest | None:
    unit = cfg.nano_gpu_memory_unit_mib
    return core_memory(
        c, NANO_CORE_KEY, NANO_MEMORY_KEY, unit, "GiB" if unit == MIB_PER_GIB else "MiB"
    )
