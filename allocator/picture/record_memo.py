"""Allocation records already decoded, kept by their text (a speed trick of its own, below
:func:`allocator.picture.records.read_record`).

A bound GPU pod's allocation annotation is written once, in its Binding, and every later
event of the pod carries the same text: its status as the kubelet (or kwok) moves it, and with
a node agent that writes on the pod (a device plugin's bind phase, its emptied device entries)
each of those writes too. The record decoded is immutable (frozen dataclasses in
tuples), so a text decoded once is kept for the pod's next events; texts that fail to decode
are not kept (decoded again, each within the annotation's length cap).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Final

from tessera.vocabulary import Allocation, decode_allocation

#: Distinct allocation texts kept: the pods of the most recent events.
KEPT_TEXTS: Final = 4096


@lru_cache(maxsize=KEPT_TEXTS)
def allocation_of_text(text: str) -> Allocation:
    """:func:`~tessera.vocabulary.decode_allocation`, kept by ``text``."""
    return decode_allocation(text)
