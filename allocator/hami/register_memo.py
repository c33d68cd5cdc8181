"""Register annotations already read, kept by their text (a speed trick of its own, below the
writer that reads them: :func:`allocator.hami.writer.read_devices`).

HAMi's lock is an annotation of the Node, so every bind changes the node twice (lock taken,
lock released) and our node watch reads the node's cards again each time, and every bind reads
them for its writer: the register annotation itself has not changed. Its devices are immutable
(frozen dataclasses in a tuple), so a text read once is kept; texts that fail to parse are not
kept (they are read again, within the annotation's length cap).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Final

from allocator.hami.codec import Flavor
from allocator.hami.register import RegisteredDevice, parse_register

#: Distinct register texts kept: one per node, for clusters up to this size.
KEPT_TEXTS: Final = 8192


@lru_cache(maxsize=KEPT_TEXTS)
def devices_of_register(text: str, flavor: Flavor) -> tuple[RegisteredDevice, ...]:
    """:func:`~allocator.hami.register.parse_register`, kept by ``text`` and ``flavor``."""
    return parse_register(text, flavor)
