"""Every way a pod may ask for GPU, normalised into one :class:`PodRequest` (pure).

Used by the webhook at admission and by the allocator for pods that arrived without it.
TO BE WRITTEN (issue 2): see the webhook helper's brief.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tessera.vocabulary import PodRequest, Vocabulary


@dataclass(frozen=True)
class DialectConfig:
    vocabulary: Vocabulary = field(default_factory=Vocabulary)
    #: MiB per unit of ``aliyun.com/gpu-mem`` (GiB by default).
    aliyun_memory_unit_mib: int = 1024
    #: Opt in to HAMi's ``nvidia.com/gpu`` keys (they otherwise belong to NVIDIA's plugin).
    hami: bool = False


def parse_pod(pod: Mapping[str, Any], config: DialectConfig) -> PodRequest | None:
    """The pod's GPU request in any dialect, or None when it asks for no GPU.

    Raises :class:`tessera.vocabulary.RequestError` with a message naming the container, the
    key and what would be valid.
    """
    raise NotImplementedError


def read_pod_request(pod: Mapping[str, Any], config: DialectConfig) -> PodRequest | None:
    """The allocator's view: the canonical annotation when present, else :func:`parse_pod`."""
    raise NotImplementedError
