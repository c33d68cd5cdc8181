"""Aliyun gpushare's key (pure): ``aliyun.com/gpu-mem``, memory in the configured unit.

ALIYUN_MEMORY_KEY (:mod:`tessera.agent_profiles`): AliyunContainerService/gpushare-device-plugin
pkg/gpu/nvidia/const.go; unit from cmd/nvidia/main.go (--memory-unit, default GiB)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tessera.agent_profiles import ALIYUN_MEMORY_KEY, MIB_PER_GIB
from tessera.dialects.base import MAX_MEMORY_MIB
from tessera.vocabulary import ContainerRequest

if TYPE_CHECKING:
    from tessera.dialects.base import ContainerResources
    from tessera.dialects.config import DialectConfig


def aliyun(c: ContainerResources, cfg: DialectConfig) -> ContainerRequest | None:
    unit = cfg.aliyun_memory_unit_mib
    unit_name = "GiB" if unit == MIB_PER_GIB else "MiB"
    value = c.integer(
        ALIYUN_MEMORY_KEY, low=0, high=MAX_MEMORY_MIB // unit,
        valid=f"GPU memory is a whole number of {unit_name} >= 0 (the configured unit)",
        unit_hint="a count of the configured unit, GiB by default, e.g. 5",
    )
    if not value:
        return None
    return ContainerRequest(c.name, memory_mib=value * unit, init=c.init)
