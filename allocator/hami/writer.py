"""Tessera's allocation in HAMi's terms and back (pure).

- :func:`read_devices` / :func:`cards_of`: a node's cards from the plugin's register
  annotation. An unhealthy card (``health`` false) or one listed in HAMi's live cordon
  annotation ``hami.io/device-cordon`` (comma-separated UUIDs; ``pkg/device/nvidia/device.go``
  ``DeviceCordonAnnotation``, v2.10.0) takes no new pod: it is left out of the cards. So is
  a card registered in ``mig`` mode, with the reason (:func:`mig_note`).
- :func:`bind_annotations`: what the bind writes on the pod for the plugin's ``Allocate``
  (the keys of :class:`~allocator.hami.codec.Flavor`, as hami-scheduler's ``Filter`` and
  ``Bind`` write them in ``pkg/scheduler/scheduler.go``: node, time, both device keys,
  ``bind-phase: allocating``, ``bind-time``; times in unix seconds).
- :func:`bind_labels`: the node label HAMi's vGPU monitor lists a node's pods by.
- :func:`allocation_of`: a pod's cards read back from ``vgpu-devices-allocated``, so pods a
  hami-scheduler placed count too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from allocator.hami.codec import (
    BIND_ALLOCATING,
    BIND_FAILED,
    CARD_CORES,
    HAMI,
    VOLCANO_VGPU,
    DeviceShare,
    Flavor,
    HamiFormatError,
    decode_pod_devices,
    encode_pod_devices,
)
from allocator.hami.register import RegisteredDevice
from allocator.hami.register_memo import devices_of_register
from allocator.ranking.cards import Card
from allocator.ranking.search import share_memory_mib
from tessera.agent_profiles import HAMI_RESOURCES, AgentProfile
from tessera.agent_profiles.refusals import device_count
from tessera.dialects.base import ContainerResources
from tessera.dialects.hami import vgpu
from tessera.vocabulary import Allocation, ContainerAllocation, RequestError

CORDON_ANNOTATION: Final = "hami.io/device-cordon"
#: The register's ``mode`` of a card the plugin hands out as MIG slices (HAMi v2.10.0
#: ``pkg/device/nvidia/device.go:61``; volcano-vgpu-device-plugin v1.12.0 alike,
#: ``pkg/plugin/server.go:414``).
MIG_MODE: Final = "mig"


@dataclass(frozen=True)
class NodeDevices:
    """A node's registered devices, which of them take new pods, and any problem reading."""

    devices: tuple[RegisteredDevice, ...]
    usable: frozenset[str]  # UUIDs
    problem: str = ""
    #: Why registered cards were left out that the plugin itself would use ("": none).
    note: str = ""

    def by_index(self) -> dict[int, RegisteredDevice]:
        return {d.index: d for d in self.devices}

    def by_uuid(self) -> dict[str, RegisteredDevice]:
        return {d.uuid: d for d in self.devices}


def read_devices(annotations: Mapping[str, str], flavor: Flavor = HAMI) -> NodeDevices | None:
    """The node's devices; None when the plugin registered none (not a HAMi node)."""
    text = annotations.get(flavor.register_key)
    if text is None:
        return None
    try:
        devices = devices_of_register(text, flavor)
    except HamiFormatError as exc:
        return NodeDevices((), frozenset(), f"annotation {flavor.register_key} ignored: {exc}")
    cordoned = {u.strip() for u in annotations.get(CORDON_ANNOTATION, "").split(",")}
    usable = frozenset(d.uuid for d in devices if d.healthy and d.uuid not in cordoned
                       and d.split_count > 0 and d.mode != MIG_MODE)
    return NodeDevices(devices, usable, note=mig_note(devices))


def mig_note(devices: Sequence[RegisteredDevice]) -> str:
    """Why the node's cards registered in ``mig`` mode take no pod from Tessera (``""``: it
    has none). The plugin's node runs in one mode (``operatingmode`` of its node
    configuration, HAMi v2.10.0 ``plugin/server.go:130-150``, written as each card's ``mode``,
    ``plugin/register.go:187``); in ``mig`` mode its ``Allocate`` hands out a MIG instance
    cut to the memory asked (``server.go:820``, ``device.go:602-612`` ``CustomFilterRule`` and
    ``:645-650`` ``AddResourceUsage`` choose the MIG profile and placement) and sets no
    HAMi-core limit (``server.go:832``). Tessera places HAMi-core shares, which such a card
    cannot run. ``mps`` and ``hami-core`` cards are alike to HAMi's plugin (it branches on
    ``mig`` only) and to hami-scheduler without ``nvidia.com/vgpu-mode``: ordinary cards."""
    mig = sorted(d.index for d in devices if d.mode == MIG_MODE)
    if not mig:
        return ""
    return (f"cards {', '.join(map(str, mig))} left out: registered in {MIG_MODE} mode (the "
            f"plugin hands out MIG instances there; Tessera places HAMi-core shares only)")


def cards_of(node_devices: NodeDevices) -> tuple[Card, ...]:
    """Tessera's cards: the usable devices, by their index, each capped at its split count
    (the most containers it takes; hami-scheduler's ``Fit`` refuses a device whose ``Used``
    reached its ``Count``, Project-HAMi/HAMi v2.10.0 ``pkg/device/nvidia/device.go``)."""
    return tuple(Card(d.index, d.model, d.memory_mib, max_shares=d.split_count, uuid=d.uuid,
                      mode=d.mode, numa=d.numa)
                 for d in node_devices.devices if d.uuid in node_devices.usable)


def _container_order(pod: Mapping[str, Any], flavor: Flavor) -> list[tuple[str, bool]]:
    spec = pod.get("spec") or {}
    inits = [(c.get("name", ""), True) for c in spec.get("initContainers") or []]
    apps = [(c.get("name", ""), False) for c in spec.get("containers") or []]
    return inits + apps if flavor.init_containers else apps


def _first_app_container(allocation: Allocation) -> ContainerAllocation | None:
    return next((c for c in allocation.containers if not c.init), None)


def _gpu_init_containers(pod: Mapping[str, Any], flavor: Flavor) -> dict[str, Mapping[str, Any]]:
    """The init containers that ask for the plugin's device count (kubelet calls its
    ``Allocate`` for them), by name, when the plugin gives init containers devices."""
    if not flavor.init_containers:
        return {}
    inits = (pod.get("spec") or {}).get("initContainers") or []
    return {str(c.get("name", "")): c for c in inits
            if isinstance(c, Mapping) and _asks_devices(c, flavor)}


def _asks_devices(container: Mapping[str, Any], flavor: Flavor) -> bool:
    resources = container.get("resources")
    limits = resources.get("limits") if isinstance(resources, Mapping) else None
    if not isinstance(limits, Mapping):
        return False
    return str(limits.get(flavor.count_resource, "0")).strip() not in ("", "0")


def _share(container: ContainerAllocation, device: RegisteredDevice) -> DeviceShare:
    if container.is_whole:
        return DeviceShare(device.uuid, device.memory_mib, CARD_CORES)
    return DeviceShare(device.uuid, container.memory_mib, container.core_percent)


def _init_entry(spec: Mapping[str, Any], served_by: ContainerAllocation | None,
                by_index: Mapping[int, RegisteredDevice], flavor: Flavor
                ) -> tuple[DeviceShare, ...] | str:
    """A GPU init container's entry: its own share (read from its HAMi resources, as the
    webhook wrote them) on the first k of the first GPU app container's cards, k its device
    count. kubelet hands its devices on to that container (``devicesToReuse``), and with
    ``enableGetPreferredAllocation`` the plugin follows them (docs/hami-plugin.md, "Init
    containers"); a share larger than the app container's on a card would be counted twice."""
    name = str(spec.get("name", ""))
    if served_by is None:
        return f"init container {name!r} asks for a GPU but no app container does"
    resources = spec.get("resources")
    limits, requests = ((resources.get("limits") or {}, resources.get("requests") or {})
                        if isinstance(resources, Mapping) else ({}, {}))
    if not isinstance(limits, Mapping) or not isinstance(requests, Mapping):
        return f"init container {name!r}: resources limits/requests must be maps"
    try:
        asked = vgpu(ContainerResources(name, True, limits, requests), HAMI_RESOURCES,
                     AgentProfile.HAMI)
    except RequestError as exc:
        return str(exc)
    if asked is None:
        return f"init container {name!r} asks for no device"
    count = device_count(asked)
    if count > len(served_by.card_indices):
        return (f"init container {name!r} asks for {count} devices, more than "
                f"{served_by.name!r} has")
    shares = []
    for index in served_by.card_indices[:count]:
        device = by_index.get(index)
        if device is None:
            return f"card {index} is not in the node's {flavor.register_key}"
        app = _share(served_by, device)
        card = Card(device.index, device.model, device.memory_mib)
        own = (DeviceShare(device.uuid, device.memory_mib, CARD_CORES) if asked.is_whole else
               DeviceShare(device.uuid, share_memory_mib(asked, card), asked.core_percent))
        if own.memory_mib > app.memory_mib or own.cores > app.cores:
            return (f"init container {name!r} asks for more of card {index} than "
                    f"{served_by.name!r}")
        shares.append(own)
    return tuple(shares)


def _entry(c: ContainerAllocation, by_index: Mapping[int, RegisteredDevice], flavor: Flavor
           ) -> tuple[DeviceShare, ...] | str:
    shares = []
    for index in c.card_indices:
        device = by_index.get(index)
        if device is None:
            return f"card {index} is not in the node's {flavor.register_key}"
        shares.append(_share(c, device))
    return tuple(shares)


def bind_annotations(allocation: Allocation, pod: Mapping[str, Any], devices: NodeDevices,
                     flavor: Flavor, now_s: float) -> dict[str, str] | str:
    """The annotations the plugin reads for this allocation, or why it cannot express it.

    The allocation holds the app containers (shapes._fold_init_containers); each GPU init
    container's entry is its own share on the first GPU app container's cards
    (:func:`_init_entry`)."""
    by_index = devices.by_index()
    by_name = {(c.name, c.init): c for c in allocation.containers}
    order = _container_order(pod, flavor)
    missing = set(by_name) - set(order)
    if missing:
        name, init = sorted(missing)[0]
        if init and not flavor.init_containers:
            return (f"{flavor.name}'s device plugin gives no device to init container "
                    f"{name!r}")
        return f"container {name!r} is not in the pod"
    containers: list[tuple[DeviceShare, ...]] = []
    served_by = _first_app_container(allocation)
    gpu_inits = _gpu_init_containers(pod, flavor)
    for key in order:
        c = by_name.get(key)
        entry: tuple[DeviceShare, ...] | str = ()
        if c is not None:
            entry = _entry(c, by_index, flavor)
        elif key[1] and key[0] in gpu_inits:
            entry = _init_entry(gpu_inits[key[0]], served_by, by_index, flavor)
        if isinstance(entry, str):
            return entry
        containers.append(entry)
    encoded = encode_pod_devices(containers, flavor)
    stamp = str(int(now_s))
    return {
        flavor.node_key: allocation.node,
        flavor.time_key: stamp,
        flavor.to_allocate_key: encoded,
        flavor.allocated_key: encoded,
        flavor.bind_phase_key: BIND_ALLOCATING,
        flavor.bind_time_key: stamp,
    }


def bind_labels(node: str, flavor: Flavor) -> dict[str, str]:
    """The pod labels the bind writes: ``hami.io/vgpu-node`` = the node, for HAMi.

    hami-scheduler's pod patch copies that annotation into a label of the same key and value
    (Project-HAMi/HAMi v2.10.0 ``pkg/util/util.go:189-191`` ``PatchPodAnnotations``; v2.8.3
    line 169) and ``cmd/vGPUmonitor`` lists a node's pods by it (``metrics.go:389`` and
    ``:532``): without it the monitor reports no per-pod metric. A Binding copies annotations
    only, so this goes in :attr:`AgentMetadata.labels`. volcano-vgpu's monitor lists every pod
    (volcano-vgpu-device-plugin v1.12.0 ``cmd/vgpu-monitor/metrics.go:187``): no label."""
    return {flavor.node_key: node} if flavor.node_label and node else {}


def all_keys(flavor: Flavor) -> tuple[str, ...]:
    """Every pod key the bind writes (to clear stale ones on an unbound pod)."""
    return (flavor.node_key, flavor.time_key, flavor.to_allocate_key, flavor.allocated_key,
            flavor.bind_phase_key, flavor.bind_time_key)


def bind_failed(annotations: Mapping[str, str], flavor: Flavor = HAMI) -> bool:
    """The plugin's Allocate gave up on this pod (``PodAllocationFailed``): its cards are
    free again."""
    return annotations.get(flavor.bind_phase_key) == BIND_FAILED


def bind_failed_for_any(annotations: Mapping[str, str]) -> bool:
    """HAMi's or volcano-vgpu's plugin failed this pod's Allocate: it holds no card."""
    return bind_failed(annotations, HAMI) or bind_failed(annotations, VOLCANO_VGPU)


def allocation_of(pod: Mapping[str, Any], devices: NodeDevices, flavor: Flavor = HAMI
                  ) -> Allocation | str | None:
    """The cards a pod holds according to ``vgpu-devices-allocated``; None when it holds
    none (no key, another node, or its bind failed); why, when the annotation cannot be read.

    A share of a card's whole memory counts as the whole card (hami-scheduler writes
    ``nvidia.com/gpu: 1`` without a memory ask as the card's memory and 0 cores)."""
    meta = pod.get("metadata") or {}
    annotations: Mapping[str, str] = meta.get("annotations") or {}
    node = (pod.get("spec") or {}).get("nodeName") or annotations.get(flavor.node_key, "")
    text = annotations.get(flavor.allocated_key)
    if not text or not node or bind_failed(annotations, flavor):
        return None
    try:
        entries = decode_pod_devices(text, flavor)
    except HamiFormatError as exc:
        return f"{flavor.allocated_key}: {exc}"
    order = _container_order(pod, flavor)
    by_uuid = devices.by_uuid()
    containers = []
    for position, shares in enumerate(entries):
        if not shares:
            continue
        if position >= len(order):
            return f"{flavor.allocated_key} has more entries than the pod has containers"
        name, init = order[position]
        indices, memory, cores, whole = [], 0, 0, True
        for share in shares:
            device = by_uuid.get(share.uuid.split("[")[0])
            if device is None:
                return f"device {share.uuid} is not registered on node {node}"
            indices.append(device.index)
            whole = whole and share.memory_mib >= device.memory_mib
            memory, cores = max(memory, share.memory_mib), max(cores, share.cores)
        containers.append(ContainerAllocation(
            name, tuple(indices), 0 if whole else min(cores, CARD_CORES),
            0 if whole else memory, init))
    if not containers:
        return None
    return Allocation(node, tuple(containers), pod_uid=meta.get("uid", ""))


def shares_of(text: str, flavor: Flavor = HAMI) -> Sequence[tuple[DeviceShare, ...]]:
    """The entries of a device annotation (the node stand-in and the tests read them)."""
    return decode_pod_devices(text, flavor)
