"""The GPU request vocabulary: names, units, keys, the parsed request and its codec.

This is the one place where Tessera's resource names, label and annotation keys and the
canonical request type are defined. The webhook writes them, the allocator reads them, the
benchmarks replay through them. Nothing here does I/O.

Units live in names: ``core_percent`` is percent of one card's compute, ``memory_mib`` is MiB.

The package: the names, units and exceptions (:mod:`.names`), the request and allocation
records (:mod:`.records`) and their annotation codec (:mod:`.codec`); this module names them.
"""

from __future__ import annotations

from tessera.vocabulary.codec import (
    CODEC_VERSION,
    MAX_TIMESTAMP,
    decode_allocation,
    decode_request,
    encode_allocation,
    encode_request,
)
from tessera.vocabulary.names import (
    DEFAULT_DOMAIN,
    GFD_COUNT_LABEL,
    GFD_MEMORY_LABEL,
    GFD_PRODUCT_LABEL,
    WHOLE_CARD_PERCENT,
    CodecError,
    ConfigError,
    Mode,
    RequestError,
    TesseraError,
    Vocabulary,
)
from tessera.vocabulary.records import (
    Allocation,
    ContainerAllocation,
    ContainerRequest,
    PodRequest,
)

__all__ = [
    "CODEC_VERSION",
    "DEFAULT_DOMAIN",
    "GFD_COUNT_LABEL",
    "GFD_MEMORY_LABEL",
    "GFD_PRODUCT_LABEL",
    "MAX_TIMESTAMP",
    "WHOLE_CARD_PERCENT",
    "Allocation",
    "CodecError",
    "ConfigError",
    "ContainerAllocation",
    "ContainerRequest",
    "Mode",
    "PodRequest",
    "RequestError",
    "TesseraError",
    "Vocabulary",
    "decode_allocation",
    "decode_request",
    "encode_allocation",
    "encode_request",
]
