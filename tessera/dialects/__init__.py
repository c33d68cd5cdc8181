"""Every way a pod may ask for GPU, normalised into one :class:`PodRequest` (pure).

Used by the webhook at admission and by the allocator for pods that arrived without it
(:func:`read_pod_request`). The dialects, their units and the upstream files they were read
from are listed in docs/dialects.md; the short version:

===========  ========================================================  ========================
dialect      keys (container limits/requests unless noted)             unit
===========  ========================================================  ========================
elastic      ``<domain>/gpu-core``, ``<domain>/gpu-memory`` and the    core: % of a card, 100·k
             same under ``elasticgpu.io`` and ``elasticgpu.com``        = k cards; memory: MiB
percent      ``<domain>/gpu-percent``, ``nano-gpu/gpu-percent``         % of one card (1-100)
fraction     ``<domain>/gpu``                                           cards (0.25 share, 2)
nano-gpu     ``nano-gpu.io/gpu-core``, ``nano-gpu.io/gpu-memory``       as elastic; memory GiB
aliyun       ``aliyun.com/gpu-mem``                                     GiB (configurable)
genius       pod labels ``genius/gpu-number``,                          cards; MiB
             ``genius/gpu-memory-each`` (alias ``genius/gpu-memory``),
             ``genius/gpu-memory-total``, ``genius/gpu-model``
             (alias ``genius/model``)
volcano      ``volcano.sh/vgpu-number``, ``volcano.sh/vgpu-memory``,    vGPUs; MiB; %; %
             ``volcano.sh/vgpu-memory-percentage``,
             ``volcano.sh/vgpu-cores``
gpu-manager  ``tencent.com/vcuda-core``, ``tencent.com/vcuda-memory``   % of a card, 100·k = k
                                                                        cards; 256 MiB blocks
koordinator  ``koordinator.sh/gpu``, ``koordinator.sh/gpu-core``,       % of a card (100·k = k
             ``koordinator.sh/gpu-memory``,                             cards); bytes; %; cards
             ``koordinator.sh/gpu-memory-ratio``,
             ``koordinator.sh/gpu.shared``
hami         ``nvidia.com/gpu``, ``nvidia.com/gpumem``,                 vGPUs; MiB; %; %
(opt-in)     ``nvidia.com/gpumem-percentage``, ``nvidia.com/gpucores``
kai          pod annotations ``gpu-fraction``, ``gpu-memory``,          share of one card; MiB;
(opt-in)     ``gpu-fraction-num-devices``,                              cards; container name
             ``gpu-fraction-container-name``
===========  ========================================================  ========================

Every dialect found in one container must describe the same request; otherwise the pod is
refused with a message naming the container and both keys.

One module per family (:mod:`.elastic`, :mod:`.nano_gpu`, :mod:`.aliyun`, :mod:`.genius`,
:mod:`.volcano`, :mod:`.gpu_manager`, :mod:`.koordinator`, :mod:`.hami`, :mod:`.kai`), as the
placement policies are; what they share in :mod:`.base`, the list of container key families in
:mod:`.families`, the configuration in :mod:`.config` and a whole pod's reading in :mod:`.pod`.
This module names what the services import.
"""

from __future__ import annotations

from tessera.agent_profiles import HAMI_PRIORITY_KEY
from tessera.dialects.base import (
    BYTES_PER_MIB,
    DEFAULT_DIALECTS,
    MAX_CARDS,
    MAX_MEMORY_MIB,
    MEMORY_UNITS,
    OPT_IN_DIALECTS,
    ContainerResources,
    Dialect,
)
from tessera.dialects.config import PROFILE_DIALECT, REMOVED_AGENT_ENV, DialectConfig
from tessera.dialects.elastic import ELASTIC_DOMAINS
from tessera.dialects.genius import (
    GENIUS_LABELS,
    GENIUS_MEMORY_EACH_LABEL,
    GENIUS_MEMORY_LABEL,
    GENIUS_MEMORY_TOTAL_LABEL,
    GENIUS_MODEL_LABEL,
    GENIUS_NUMBER_LABEL,
    GENIUS_OLD_MODEL_LABEL,
)
from tessera.dialects.gpu_manager import VCUDA_CORE_KEY, VCUDA_MEMORY_BLOCK_MIB, VCUDA_MEMORY_KEY
from tessera.dialects.hami import HAMI_KEYS, HAMI_TASK_PRIORITY_ENV
from tessera.dialects.kai import (
    KAI_ANNOTATIONS,
    KAI_CONTAINER_ANNOTATION,
    KAI_DEVICES_ANNOTATION,
    KAI_FRACTION_ANNOTATION,
    KAI_MEMORY_ANNOTATION,
)
from tessera.dialects.koordinator import (
    KOORD_CORE_KEY,
    KOORD_GPU_KEY,
    KOORD_KEYS,
    KOORD_MEMORY_KEY,
    KOORD_RATIO_KEY,
    KOORD_SHARED_KEY,
)
from tessera.dialects.nano_gpu import NANO_CORE_KEY, NANO_MEMORY_KEY
from tessera.dialects.pod import asks_for_gpu, parse_pod, read_pod_request
from tessera.dialects.volcano import VOLCANO_KEYS

__all__ = [
    "BYTES_PER_MIB",
    "DEFAULT_DIALECTS",
    "ELASTIC_DOMAINS",
    "GENIUS_LABELS",
    "GENIUS_MEMORY_EACH_LABEL",
    "GENIUS_MEMORY_LABEL",
    "GENIUS_MEMORY_TOTAL_LABEL",
    "GENIUS_MODEL_LABEL",
    "GENIUS_NUMBER_LABEL",
    "GENIUS_OLD_MODEL_LABEL",
    "HAMI_KEYS",
    "HAMI_PRIORITY_KEY",
    "HAMI_TASK_PRIORITY_ENV",
    "KAI_ANNOTATIONS",
    "KAI_CONTAINER_ANNOTATION",
    "KAI_DEVICES_ANNOTATION",
    "KAI_FRACTION_ANNOTATION",
    "KAI_MEMORY_ANNOTATION",
    "KOORD_CORE_KEY",
    "KOORD_GPU_KEY",
    "KOORD_KEYS",
    "KOORD_MEMORY_KEY",
    "KOORD_RATIO_KEY",
    "KOORD_SHARED_KEY",
    "MAX_CARDS",
    "MAX_MEMORY_MIB",
    "MEMORY_UNITS",
    "NANO_CORE_KEY",
    "NANO_MEMORY_KEY",
    "OPT_IN_DIALECTS",
    "PROFILE_DIALECT",
    "REMOVED_AGENT_ENV",
    "VCUDA_CORE_KEY",
    "VCUDA_MEMORY_BLOCK_MIB",
    "VCUDA_MEMORY_KEY",
    "VOLCANO_KEYS",
    "ContainerResources",
    "Dialect",
    "DialectConfig",
    "asks_for_gpu",
    "parse_pod",
    "read_pod_request",
]
