"""Every family of container keys, each with its parser. Adding a dialect of container keys: a
module with its keys and parser, a name in :class:`~tessera.dialects.base.Dialect`, and its line
below. (The pod-level ones, Genius labels and KAI annotations, are read in :mod:`.pod`.)"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tessera.agent_profiles import ALIYUN_MEMORY_KEY, NANO_PERCENT_KEY
from tessera.dialects.aliyun import aliyun
from tessera.dialects.base import Dialect, Source
from tessera.dialects.elastic import elastic_parser, fraction_parser, percent_parser
from tessera.dialects.gpu_manager import VCUDA_CORE_KEY, VCUDA_MEMORY_KEY, gpu_manager
from tessera.dialects.hami import HAMI_KEYS, vgpu_parser
from tessera.dialects.koordinator import KOORD_KEYS, koordinator
from tessera.dialects.nano_gpu import NANO_CORE_KEY, NANO_MEMORY_KEY, nano_gpu
from tessera.dialects.volcano import VOLCANO_KEYS

if TYPE_CHECKING:
    from tessera.dialects.config import DialectConfig


def sources(cfg: DialectConfig) -> list[Source]:
    """Every family under ``cfg``'s domains, in the order a container's readings are listed
    (and a disagreement names them)."""
    sources: list[Source] = []
    for domain in cfg.elastic_domains:
        core, memory = f"{domain}/gpu-core", f"{domain}/gpu-memory"
        percent, fraction = f"{domain}/gpu-percent", f"{domain}/gpu"
        sources += [
            Source(Dialect.ELASTIC, (core, memory), elastic_parser(core, memory)),
            Source(Dialect.PERCENT, (percent,), percent_parser(percent)),
            Source(Dialect.FRACTION, (fraction,), fraction_parser(fraction)),
        ]
    sources += [
        Source(Dialect.PERCENT, (NANO_PERCENT_KEY,), percent_parser(NANO_PERCENT_KEY)),
        Source(Dialect.NANO_GPU, (NANO_CORE_KEY, NANO_MEMORY_KEY), nano_gpu),
        Source(Dialect.ALIYUN, (ALIYUN_MEMORY_KEY,), aliyun),
        Source(Dialect.VOLCANO, VOLCANO_KEYS.all, vgpu_parser(VOLCANO_KEYS)),
        Source(Dialect.GPU_MANAGER, (VCUDA_CORE_KEY, VCUDA_MEMORY_KEY), gpu_manager),
        Source(Dialect.KOORDINATOR, KOORD_KEYS, koordinator),
        Source(Dialect.HAMI, HAMI_KEYS.all, vgpu_parser(HAMI_KEYS)),
    ]
    return sources
