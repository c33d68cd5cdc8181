"""A node's cards as a device plugin in HAMi's format registers them (pure): HAMi's
``hami.io/node-nvidia-register`` or volcano-vgpu's ``volcano.sh/node-vgpu-register``, what the
plugin itself serves, unhealthy, cordoned and MIG-mode cards left out (the last with the reason
on /status: :mod:`allocator.hami.writer`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from allocator.hami.codec import HAMI, VOLCANO_VGPU
from allocator.hami.writer import bind_failed_for_any, cards_of, read_devices
from allocator.picture.inventory import Inventory

#: Node annotations of HAMi's protocol that no card is read from and that change on every
#: bind or heartbeat: the node locks (HAMi's, volcano-vgpu's) and HAMi's handshake (v2.10.0
#: ``pkg/device/nvidia/device.go:41``). A node event changing only these reads no card again.
NOT_CARDS: Final = frozenset({HAMI.lock_key, VOLCANO_VGPU.lock_key, "hami.io/node-handshake"})


def registered_cards(annotations: Mapping[str, str]) -> Inventory | None:
    """The cards of the first register annotation found (HAMi's, then volcano-vgpu's); an
    inventory with only its problem when it cannot be read; None without one."""
    for flavor in (HAMI, VOLCANO_VGPU):
        devices = read_devices(annotations, flavor)
        if devices is not None:
            if not devices.problem:
                return Inventory(cards_of(devices), "hami", devices.note)
            return Inventory((), "none", devices.problem)
    return None


def allocate_failed(annotations: Mapping[str, str]) -> bool:
    """HAMi's or volcano-vgpu's plugin failed this pod's Allocate: it holds no card."""
    return bind_failed_for_any(annotations)
