"""kubelet's device manager for one device plugin resource on one node, as the HAMi node
stand-in needs it (pure; a model written from kubernetes ``v1.34.4``
``pkg/kubelet/cm/devicemanager/manager.go``, none of its code copied).

What matters for where a container runs:

- the plugin registers ``split`` devices per card, ``<card UUID>-<i>`` (HAMi v2.10.0
  ``pkg/device-plugin/nvidiadevice/nvinternal/rm/devices.go:209``);
- kubelet allocates a pod's containers one by one, init containers first (``Allocate``,
  manager.go:362-396); an init container's devices go into the pod's ``devicesToReuse``
  (manager.go:381), a restartable one's (a sidecar's, manager.go:380-387) and an app
  container's are taken out of it (manager.go:394);
- each container takes from ``devicesToReuse`` first (``devicesToAllocate``,
  manager.go:657, through the ``allocateRemainingFrom`` closure defined above it:
  ``for device := range devices.Difference(allocated)`` until it has as many as it asks, so
  a container asking fewer than are reusable gets a subset of them), then, when the plugin
  registered ``GetPreferredAllocationAvailable``, from what the plugin prefers among the free
  devices, with the reused ones as ``mustInclude`` (manager.go:676-705,
  ``callGetPreferredAllocationIfAvailable`` manager.go:1006), then from any free device
  (manager.go:712-717).

kubelet iterates Go sets (maps), in no fixed order; the model takes devices in sorted order,
one of the orders kubelet may take, or, given a ``random.Random``, in a shuffled order as Go's
map iteration is (which subset of the reusable devices a container gets is then random).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field


class NoDevices(Exception):
    """kubelet's "requested number of devices unavailable" (the pod fails admission)."""


def slice_ids(card_uuid: str, split: int) -> tuple[str, ...]:
    """The device IDs HAMi's plugin registers for one card."""
    return tuple(f"{card_uuid}-{i}" for i in range(split))


def physical_card(device_id: str) -> str:
    """The card a registered device ID belongs to: ``<UUID>-<i>`` less its suffix (HAMi
    v2.10.0 ``server.go:715`` ``physicalDeviceID``: a UUID has five dashes, a slice six)."""
    head, _, tail = device_id.rpartition("-")
    return head if device_id.count("-") == 6 and tail.isdigit() else device_id


def hami_preferred(available: Sequence[str], required: Sequence[str],
                   desired_cards: Sequence[str], size: int) -> list[str] | None:
    """What HAMi's ``GetPreferredAllocation`` answers for one container (v2.10.0
    ``server.go:631-713``): the required devices, then one free slice on each annotated card
    a required device does not already stand for; None (an error, kubelet then picks alone)
    when a card has no free slice or the count does not come out at ``size``."""
    if len(desired_cards) < size:
        return None
    selected = list(required)
    covered: dict[str, int] = {}
    for device in required:
        covered[physical_card(device)] = covered.get(physical_card(device), 0) + 1
    free: dict[str, list[str]] = {}
    for device in available:
        if device not in required:
            free.setdefault(physical_card(device), []).append(device)
    for card in desired_cards[:size]:
        if covered.get(card, 0) > 0:
            covered[card] -= 1
            continue
        candidates = free.get(card) or []
        if not candidates:
            return None
        selected.append(candidates.pop(0))
    return selected if len(selected) == size else None


@dataclass
class KubeletDevices:
    """The device manager's view of one resource on one node."""

    devices: tuple[str, ...]
    #: The plugin registered ``GetPreferredAllocationAvailable`` (HAMi: its
    #: ``enableGetPreferredAllocation``, server.go:587).
    preferred: bool = False
    #: Go's map order (shuffled) when given; else sorted order.
    rng: random.Random | None = None
    in_use: dict[str, set[str]] = field(default_factory=dict)  # pod uid -> devices
    reuse: dict[str, set[str]] = field(default_factory=dict)  # devicesToReuse

    def _in_set_order(self, devices: Iterable[str]) -> list[str]:
        ordered = sorted(devices)
        if self.rng is not None:
            self.rng.shuffle(ordered)
        return ordered

    def allocate(self, pod_uid: str, init: bool, count: int,
                 desired_cards: Sequence[str], restartable: bool = False) -> list[str]:
        """The devices kubelet gives one container asking ``count``; ``desired_cards``: the
        cards the plugin's annotation names for it (what its GetPreferredAllocation reads);
        ``restartable``: an init container with ``restartPolicy: Always`` (a sidecar)."""
        # kubelet keeps devicesToReuse for the pod being admitted only (manager.go:363-371).
        self.reuse = {pod_uid: self.reuse.get(pod_uid, set())}
        reusable = self.reuse[pod_uid]
        taken = self._in_set_order(reusable)[:count]
        if len(taken) < count:
            busy = set().union(*self.in_use.values()) if self.in_use else set()
            free = self._in_set_order(d for d in self.devices if d not in busy and d not in taken)
            if len(free) < count - len(taken):
                raise NoDevices(f"requested {count}, available {len(free) + len(taken)}")
            if self.preferred:
                chosen = hami_preferred(free + taken, taken, desired_cards, count) or []
                taken += [d for d in chosen if d in free and d not in taken][:count - len(taken)]
            taken += [d for d in free if d not in taken][:count - len(taken)]
        self.in_use.setdefault(pod_uid, set()).update(taken)
        if init and not restartable:
            reusable.update(taken)
        else:
            reusable.difference_update(taken)
        return taken

    def forget(self, pod_uid: str) -> None:
        """The pod is gone: its devices are free again."""
        self.in_use.pop(pod_uid, None)
        self.reuse.pop(pod_uid, None)
