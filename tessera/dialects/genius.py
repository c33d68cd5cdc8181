"""Genius's pod labels (pure): ``genius/gpu-number`` whole cards, the memory each must have
(each or in total), and the card models allowed."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from tessera.dialects.base import MAX_CARDS, unique
from tessera.vocabulary import RequestError

# Genius pod labels. Source: the Genius scheduler-framework plugin, pkg/filter (PodFitsGPUNumber,
# PodFitsMemoryEach, PodFitsMemoryTotal, PodFitsModel). Memory values are compared with
# ObserverWard's per-card memory metrics, which Genius stores as MemorySizeMB ("in MB").
GENIUS_NUMBER_LABEL: Final = "genius/gpu-number"
GENIUS_MEMORY_EACH_LABEL: Final = "genius/gpu-memory-each"
GENIUS_MEMORY_LABEL: Final = "genius/gpu-memory"  # the name CONTRACTS.md uses; alias of -each
GENIUS_MEMORY_TOTAL_LABEL: Final = "genius/gpu-memory-total"
GENIUS_MODEL_LABEL: Final = "genius/gpu-model"
GENIUS_OLD_MODEL_LABEL: Final = "genius/model"  # an earlier Genius revision's name
GENIUS_LABELS: Final = (
    GENIUS_NUMBER_LABEL,
    GENIUS_MEMORY_EACH_LABEL,
    GENIUS_MEMORY_LABEL,
    GENIUS_MEMORY_TOTAL_LABEL,
    GENIUS_MODEL_LABEL,
    GENIUS_OLD_MODEL_LABEL,
)


def _label_int(labels: Mapping[str, Any], key: str, valid: str) -> int | None:
    raw = labels.get(key)
    if raw is None:
        return None
    text = str(raw).strip()
    if not (text.isascii() and text.isdigit()) or len(text) > 9:  # "²".isdigit() is True
        raise RequestError(f"pod label {key}={raw!r} is invalid; {valid}")
    return int(text)


@dataclass(frozen=True)
class GeniusRequest:
    cards: int
    min_card_memory_mib: int
    models: tuple[str, ...]


def genius_request(labels: Mapping[str, Any]) -> GeniusRequest | None:
    present = [k for k in GENIUS_LABELS if k in labels]
    if not present:
        return None
    number = _label_int(labels, GENIUS_NUMBER_LABEL, "the number of whole cards, e.g. \"1\"")
    if not number:
        raise RequestError(
            f"pod labels {', '.join(present)} need {GENIUS_NUMBER_LABEL} (whole cards, >= 1)"
        )
    if number > MAX_CARDS:
        raise RequestError(f"pod label {GENIUS_NUMBER_LABEL}={number} is more cards than possible")
    each = 0
    for key in (GENIUS_MEMORY_EACH_LABEL, GENIUS_MEMORY_LABEL):
        value = _label_int(labels, key, "free memory each card must have, in MiB, e.g. \"8000\"")
        each = max(each, value or 0)
    total = _label_int(labels, GENIUS_MEMORY_TOTAL_LABEL, "total memory in MiB, e.g. \"16000\"")
    if total:
        # Genius compares the total with the node's total free memory; with whole cards that
        # nobody else uses the closest per-card form is an even split, rounded up.
        each = max(each, -(-total // number))
    models = unique(
        str(labels[k]).strip() for k in (GENIUS_MODEL_LABEL, GENIUS_OLD_MODEL_LABEL)
        if k in labels and str(labels[k]).strip()
    )
    return GeniusRequest(number, each, models)
