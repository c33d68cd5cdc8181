"""The vocabulary's names (pure): the domain every key derives from, the units, Tessera's own
exceptions, the mode label's values, and the node labels GPU Feature Discovery writes."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final

#: Default vocabulary domain. ``elasticgpu.io`` is what elastic-gpu-scheduler and its node
#: agent use, so seed pods and the elastic agent work unchanged.
DEFAULT_DOMAIN: Final = "elasticgpu.io"

#: core percent of one whole card; ``gpu-core: 200`` means two whole cards.
WHOLE_CARD_PERCENT: Final = 100


class TesseraError(Exception):
    """Root of Tessera's own exceptions."""


class RequestError(TesseraError):
    """A GPU request that cannot be honoured as written. The message is shown to the user."""


class CodecError(TesseraError):
    """A stored record (annotation) that does not decode."""


class ConfigError(TesseraError):
    """Configuration (flags, environment) that cannot be used. Reported at start."""


class Mode(StrEnum):
    """Value of the mode label: how a pod uses cards."""

    SHARED = "shared"  # every GPU container takes a share of one card
    WHOLE = "whole"  # every GPU container takes whole cards
    MIXED = "mixed"  # some of each


@dataclass(frozen=True)
class Vocabulary:
    """Every key Tessera reads or writes, derived from one configurable domain."""

    domain: str = DEFAULT_DOMAIN

    @property
    def core_resource(self) -> str:
        """Extended resource: percent of one card's compute (100·k = k whole cards)."""
        return f"{self.domain}/gpu-core"

    @property
    def memory_resource(self) -> str:
        """Extended resource: GPU memory in MiB, for shares."""
        return f"{self.domain}/gpu-memory"

    @property
    def managed_resources(self) -> tuple[str, str]:
        return (self.core_resource, self.memory_resource)

    @property
    def request_annotation(self) -> str:
        """Pod annotation: the encoded :class:`PodRequest` (written by the webhook)."""
        return f"{self.domain}/gpu-request"

    @property
    def allocation_annotation(self) -> str:
        """Pod annotation: the encoded :class:`Allocation` (written by the allocator at bind)."""
        return f"{self.domain}/gpu-allocation"

    @property
    def requeue_annotation(self) -> str:
        """Pod annotation: set by the allocator on a pod it refused for lack of room, when
        room it fits in is released (a new value makes kube-scheduler schedule it again)."""
        return f"{self.domain}/requeued-at"

    @property
    def preemption_annotation(self) -> str:
        """Pod annotation: set by the allocator on a pod it preempted for, naming the node,
        the cards and until when they are kept for it (JSON)."""
        return f"{self.domain}/preemption"

    @property
    def gpu_pod_label(self) -> str:
        """Pod label ``"true"`` on every GPU pod; the allocator watches by this selector."""
        return f"{self.domain}/gpu-pod"

    @property
    def mode_label(self) -> str:
        """Pod label holding a :class:`Mode`."""
        return f"{self.domain}/gpu-mode"

    @property
    def model_annotation(self) -> str:
        """Pod annotation: allowed GPU models, ``|``- or ``,``-separated."""
        return f"{self.domain}/gpu-model"

    @property
    def policy_annotation(self) -> str:
        """Pod annotation: placement policy name, overriding the cluster default."""
        return f"{self.domain}/gpu-policy"

    @property
    def mixed_models_annotation(self) -> str:
        """Pod annotation: ``"true"`` lets a multi-card container take cards of different
        models (by default its cards are all of one model)."""
        return f"{self.domain}/gpu-mixed-models"

    @property
    def node_cards_annotation(self) -> str:
        """Node annotation: JSON list of ``{"index", "model", "memoryMiB"}``, one per card."""
        return f"{self.domain}/gpu-cards"

    @property
    def node_model_label(self) -> str:
        """Node label: GPU model of every card on the node (when all cards are alike)."""
        return f"{self.domain}/gpu-model"

    @property
    def gpu_pod_selector(self) -> str:
        return f"{self.gpu_pod_label}=true"


# NVIDIA GPU Feature Discovery node labels (CONTRACTS.md §1).
GFD_PRODUCT_LABEL: Final = "nvidia.com/gpu.product"
GFD_MEMORY_LABEL: Final = "nvidia.com/gpu.memory"  # MiB per card
GFD_COUNT_LABEL: Final = "nvidia.com/gpu.count"
