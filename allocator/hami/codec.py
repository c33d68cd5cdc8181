"""HAMi's wire formats, read and written (pure: no API, no clock; times are passed in).

Every key and format below was read in HAMi's source at tag ``v2.10.0`` (Project-HAMi/HAMi)
and in Project-HAMi/volcano-vgpu-device-plugin at tag ``v1.12.0``; none of their code is
copied. Where a format changed between versions, the version that changed it is named.

**Node register annotation** (the device plugin writes it, the scheduler reads it):

- key ``hami.io/node-nvidia-register`` (``pkg/device/nvidia/device.go``, ``RegisterAnnos``);
- since ``v2.8.0`` a JSON list of ``DeviceInfo`` (``pkg/device/devices.go``,
  ``MarshalNodeDevices``; the plugin's ``pkg/device-plugin/nvidiadevice/nvinternal/plugin/
  register.go`` switched from ``EncodeNodeDevices`` to it in ``v2.8.0``) with the keys
  ``id, index, count, devmem, devcore, type, numa, mode, health``, each ``omitempty`` (an absent
  ``health`` is false, an absent ``index`` or ``numa`` is 0);
- up to ``v2.7.x`` text: per device ``id,count,devmem,devcore,type,numa,health[,index,mode]:``
  (``EncodeNodeDevices`` / ``DecodeNodeDevices``: 7 or 9 fields; 7 means index 0 and mode
  ``hami-core``);
- volcano-vgpu-device-plugin: key ``volcano.sh/node-vgpu-register``, text
  ``id,count,devmem,type,health,mode:`` (``pkg/util/util.go``, ``EncodeNodeDevices``; no core
  count, no NUMA, no index).

``count`` is the split count (the most tasks a card takes), ``devmem`` MiB, ``devcore`` the
card's core units (100 a card), ``type`` ``NVIDIA-<model>``.

**Pod device annotations** (``hami.io/vgpu-devices-to-allocate`` which the plugin consumes,
``hami.io/vgpu-devices-allocated`` which stays: ``pkg/device/nvidia/device.go``,
``InRequestDevices`` / ``SupportDevices``): per device ``UUID,NVIDIA,<memory MiB>,<cores>:``,
then ``;`` closing each container (``EncodeContainerDevices``, ``EncodePodSingleDevice``: every
container ends with ``;``, one with no device is just ``;``). Which containers: since
``v2.9.0`` init containers first then app containers (``Resourcereqs``; the plugin's
``popNextContainerDevices`` maps entry ``i < len(initContainers)`` to an init container); up to
``v2.8.x`` app containers only (``GetNextDeviceRequest`` indexes ``Spec.Containers``).
volcano-vgpu uses ``volcano.sh/devices-to-allocate`` and ``volcano.sh/vgpu-ids-new``, app
containers only, joined by ``;`` with no closing one (``EncodePodDevices``).

**Node lock** ``hami.io/mutex.lock`` (``pkg/util/nodelock/nodelock.go``): the value is
``<RFC 3339 time>,<namespace>,<pod name>`` (``GenerateNodeLockKeyByPod``), or a bare RFC 3339
time (the legacy form ``ParseNodeLock`` still reads). A lock older than ``NodeLockTimeout``
(five minutes; ``HAMI_NODELOCK_EXPIRE`` changes it) or whose pod is gone is released by the
next locker.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Final

#: ``pkg/util/types.go`` (v2.10.0) and volcano-vgpu ``pkg/util/types.go`` (v1.12.0).
BIND_ALLOCATING: Final = "allocating"
BIND_SUCCESS: Final = "success"
BIND_FAILED: Final = "failed"
#: The device type HAMi's NVIDIA backend writes in each pod entry (``NvidiaGPUDevice``).
NVIDIA: Final = "NVIDIA"
#: Cores of a whole card (``util.DeviceLimit``).
CARD_CORES: Final = 100
#: ``nodelock.NodeLockTimeout`` default, seconds.
LOCK_EXPIRY_SECONDS: Final = 300.0

#: Bounds on what a node annotation may claim (anyone who can annotate a node writes these).
MAX_DEVICES: Final = 1024
MAX_FIELD: Final = 2**31 - 1  # HAMi parses these as int32
MAX_ANNOTATION_CHARS: Final = 256 * 1024


class HamiFormatError(ValueError):
    """An annotation that does not follow HAMi's format."""


@dataclass(frozen=True)
class Flavor:
    """Which agent, at which version: the keys and container order its plugin reads."""

    name: str
    register_key: str
    to_allocate_key: str
    allocated_key: str
    node_key: str
    time_key: str
    bind_phase_key: str
    bind_time_key: str
    #: The node lock annotation Tessera takes before the Binding ("" = the plugin reads none).
    lock_key: str
    #: Init containers have entries (first, in spec order) before the app containers.
    init_containers: bool
    #: Each container's entry ends with ``;`` (HAMi) instead of ``;`` joining them (volcano).
    closing_separator: bool
    #: The plugin removes the lock after Allocate (HAMi); else the pod's final bind-phase is
    #: the only sign the node is free again.
    plugin_releases_lock: bool = True


HAMI: Final = Flavor(
    name="hami", register_key="hami.io/node-nvidia-register",
    to_allocate_key="hami.io/vgpu-devices-to-allocate",
    allocated_key="hami.io/vgpu-devices-allocated",
    node_key="hami.io/vgpu-node", time_key="hami.io/vgpu-time",
    bind_phase_key="hami.io/bind-phase", bind_time_key="hami.io/bind-time",
    lock_key="hami.io/mutex.lock", init_containers=True, closing_separator=True)
#: HAMi up to v2.8.x: app containers only.
HAMI_V28: Final = replace(HAMI, name="hami-v2.8", init_containers=False)
VOLCANO_VGPU: Final = Flavor(
    name="volcano-vgpu", register_key="volcano.sh/node-vgpu-register",
    to_allocate_key="volcano.sh/devices-to-allocate",
    allocated_key="volcano.sh/vgpu-ids-new",
    node_key="volcano.sh/vgpu-node", time_key="volcano.sh/vgpu-time",
    bind_phase_key="volcano.sh/bind-phase", bind_time_key="volcano.sh/bind-time",
    # The plugin (v1.12.0 pkg/plugin/server.go) finds its pod as the oldest by vgpu-time with
    # the device count asked, so two pods of one node must not wait for Allocate at once:
    # Tessera takes volcano's lock key (pkg/util/types.go NodeLockTime) as HAMi's. The plugin
    # never releases it (it releases an annotation named "hamivgpu"): the next bind takes it
    # over once its pod's bind-phase is success or failed (allocator.hami.lock).
    lock_key="volcano.sh/mutex.lock", init_containers=False, closing_separator=False,
    plugin_releases_lock=False)
FLAVORS: Final = {f.name: f for f in (HAMI, HAMI_V28, VOLCANO_VGPU)}


# ----------------------------------------------------------------------------- node register


@dataclass(frozen=True)
class RegisteredDevice:
    """One card as the device plugin registered it."""

    uuid: str
    index: int
    split_count: int
    memory_mib: int
    cores: int
    type: str
    numa: int = 0
    mode: str = "hami-core"
    healthy: bool = True

    @property
    def model(self) -> str:
        """``NVIDIA-<model>`` without the vendor prefix the plugin adds."""
        return self.type.removeprefix("NVIDIA-")


def _bounded_int(value: object, what: str, low: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise HamiFormatError(f"{what} must be an integer, got {value!r}")
    if not low <= value <= MAX_FIELD:
        raise HamiFormatError(f"{what} {value} is out of range {low}-{MAX_FIELD}")
    return value


def _text_int(text: str, what: str, low: int = 0) -> int:
    stripped = text.strip()
    body = stripped.removeprefix("-")
    if not (body.isascii() and body.isdigit() and len(body) <= 12):
        raise HamiFormatError(f"{what} {text!r} is not an integer")
    return _bounded_int(int(stripped), what, low)


def _text_bool(text: str, what: str) -> bool:
    # Go's strconv.ParseBool
    if text in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if text in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    raise HamiFormatError(f"{what} {text!r} is not a boolean")


def parse_register(text: str, flavor: Flavor = HAMI) -> tuple[RegisteredDevice, ...]:
    """The devices of a register annotation, JSON or text form, in index order.

    Cards whose registered indices repeat (the 7-field text form and JSON without ``index``
    say 0 for every card) are numbered by their position: the plugin addresses cards by UUID,
    so the index is only Tessera's name for the card."""
    if len(text) > MAX_ANNOTATION_CHARS:
        raise HamiFormatError(f"register annotation of {len(text)} characters is too long")
    stripped = text.strip()
    if stripped.startswith("["):
        devices = _parse_register_json(stripped)
    elif flavor is VOLCANO_VGPU:
        devices = _parse_register_volcano(stripped)
    else:
        devices = _parse_register_text(stripped)
    if not devices:
        raise HamiFormatError("register annotation lists no device")
    if len({d.uuid for d in devices}) != len(devices):
        raise HamiFormatError("device UUIDs repeat")
    if len({d.index for d in devices}) != len(devices):
        devices = [replace(d, index=i) for i, d in enumerate(devices)]
    return tuple(sorted(devices, key=lambda d: d.index))


def _parse_register_json(text: str) -> list[RegisteredDevice]:
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise HamiFormatError(f"register annotation is not JSON: {exc}") from None
    if not isinstance(raw, list):
        raise HamiFormatError("register annotation must be a JSON list")
    if len(raw) > MAX_DEVICES:
        raise HamiFormatError(f"{len(raw)} devices is more than {MAX_DEVICES}")
    out = []
    for item in raw:
        if not isinstance(item, dict):
            raise HamiFormatError("each device must be a JSON object")
        uuid, dtype, mode = item.get("id", ""), item.get("type", ""), item.get("mode", "")
        health = item.get("health", False)
        if not isinstance(uuid, str) or not uuid:
            raise HamiFormatError(f"device id {uuid!r} must be a non-empty string")
        if not isinstance(dtype, str) or not isinstance(mode, str):
            raise HamiFormatError(f"device {uuid}: type and mode must be strings")
        if not isinstance(health, bool):
            raise HamiFormatError(f"device {uuid}: health must be a boolean")
        out.append(RegisteredDevice(
            uuid=_checked_uuid(uuid),
            index=_bounded_int(item.get("index", 0), f"device {uuid}: index"),
            split_count=_bounded_int(item.get("count", 0), f"device {uuid}: count"),
            memory_mib=_bounded_int(item.get("devmem", 0), f"device {uuid}: devmem"),
            cores=_bounded_int(item.get("devcore", 0), f"device {uuid}: devcore"),
            type=dtype, numa=_bounded_int(item.get("numa", 0), f"device {uuid}: numa"),
            mode=mode or "hami-core", healthy=health))
    return out


def _segments(text: str) -> list[list[str]]:
    if ":" not in text:
        raise HamiFormatError("register annotation has no device separator ':'")
    parts = [p for p in text.split(":") if p]
    if len(parts) > MAX_DEVICES:
        raise HamiFormatError(f"{len(parts)} devices is more than {MAX_DEVICES}")
    return [p.split(",") for p in parts]


def _parse_register_text(text: str) -> list[RegisteredDevice]:
    out = []
    for items in _segments(text):
        if len(items) not in (7, 9):
            raise HamiFormatError(f"device entry has {len(items)} fields, expected 7 or 9")
        uuid = _checked_uuid(items[0])
        out.append(RegisteredDevice(
            uuid=uuid, split_count=_text_int(items[1], f"device {uuid}: count"),
            memory_mib=_text_int(items[2], f"device {uuid}: devmem"),
            cores=_text_int(items[3], f"device {uuid}: devcore"), type=items[4],
            numa=_text_int(items[5], f"device {uuid}: numa"),
            healthy=_text_bool(items[6], f"device {uuid}: health"),
            index=_text_int(items[7], f"device {uuid}: index") if len(items) == 9 else 0,
            mode=items[8] if len(items) == 9 else "hami-core"))
    return out


def _parse_register_volcano(text: str) -> list[RegisteredDevice]:
    out = []
    for position, items in enumerate(_segments(text)):
        if len(items) not in (5, 6):
            raise HamiFormatError(f"device entry has {len(items)} fields, expected 5 or 6")
        uuid = _checked_uuid(items[0])
        out.append(RegisteredDevice(
            uuid=uuid, index=position,
            split_count=_text_int(items[1], f"device {uuid}: count"),
            memory_mib=_text_int(items[2], f"device {uuid}: devmem"),
            cores=CARD_CORES, type=items[3],
            healthy=_text_bool(items[4], f"device {uuid}: health"),
            mode=(items[5] if len(items) == 6 else "") or "hami-core"))
    return out


def _checked_uuid(uuid: str) -> str:
    # A separator inside a UUID would split the pod annotation the plugin reads back.
    if not uuid or any(c in uuid for c in ",:;\n") or len(uuid) > 256:
        raise HamiFormatError(f"device id {uuid!r} is not a usable UUID")
    return uuid


def encode_register_json(devices: Sequence[RegisteredDevice]) -> str:
    """The v2.8+ form, with ``omitempty`` as Go's encoder applies it."""
    out = []
    for d in devices:
        item: dict[str, Any] = {"id": d.uuid}
        for key, value in (("index", d.index), ("count", d.split_count),
                           ("devmem", d.memory_mib), ("devcore", d.cores), ("type", d.type),
                           ("numa", d.numa), ("mode", d.mode), ("health", d.healthy)):
            if value:
                item[key] = value
        out.append(item)
    return json.dumps(out, separators=(",", ":"))


def encode_register_text(devices: Sequence[RegisteredDevice], flavor: Flavor = HAMI) -> str:
    """The text form: HAMi's 9-field entries, or volcano-vgpu's 6-field ones."""
    def flag(b: bool) -> str:
        return "true" if b else "false"
    if flavor is VOLCANO_VGPU:
        return "".join(f"{d.uuid},{d.split_count},{d.memory_mib},{d.type},{flag(d.healthy)},"
                       f"{d.mode}:" for d in devices)
    return "".join(f"{d.uuid},{d.split_count},{d.memory_mib},{d.cores},{d.type},{d.numa},"
                   f"{flag(d.healthy)},{d.index},{d.mode}:" for d in devices)


# ----------------------------------------------------------------------------- pod devices


@dataclass(frozen=True)
class DeviceShare:
    """One card a container gets: its UUID and the memory (MiB) and cores (of 100) it may use."""

    uuid: str
    memory_mib: int
    cores: int
    type: str = NVIDIA


PodDevices = tuple[tuple[DeviceShare, ...], ...]


def encode_pod_devices(containers: Sequence[Sequence[DeviceShare]], flavor: Flavor = HAMI
                       ) -> str:
    """One entry per container, in the order ``flavor`` expects (the caller orders them)."""
    entries = ["".join(f"{d.uuid},{d.type},{d.memory_mib},{d.cores}:" for d in c)
               for c in containers]
    if flavor.closing_separator:
        return "".join(e + ";" for e in entries)
    return ";".join(entries)


def decode_pod_devices(text: str, flavor: Flavor = HAMI) -> PodDevices:
    """The containers' devices (empty tuples for containers without one); the empty entry
    after HAMi's closing ``;`` is not a container."""
    if len(text) > MAX_ANNOTATION_CHARS:
        raise HamiFormatError(f"pod device annotation of {len(text)} characters is too long")
    if not text:
        return ()
    entries = text.split(";")
    if flavor.closing_separator and entries and entries[-1] == "":
        entries.pop()
    out = []
    for entry in entries:
        shares = []
        for part in entry.split(":"):
            if "," not in part:
                continue  # HAMi skips what has no field separator (the part after ':')
            fields = part.split(",")
            if len(fields) < 4:
                raise HamiFormatError(f"device entry {part!r} has {len(fields)} fields, "
                                      f"expected 4")
            uuid = _checked_uuid(fields[0])
            shares.append(DeviceShare(
                uuid=uuid, type=fields[1],
                memory_mib=_text_int(fields[2], f"device {uuid}: memory"),
                cores=_text_int(fields[3], f"device {uuid}: cores")))
        out.append(tuple(shares))
    return tuple(out)


# ----------------------------------------------------------------------------- node lock


@dataclass(frozen=True)
class NodeLock:
    """The holder of a node's lock: when it was taken, and by which pod (legacy: none)."""

    taken_at: float  # unix seconds
    namespace: str = ""
    name: str = ""

    def expired(self, now: float, expiry_seconds: float = LOCK_EXPIRY_SECONDS) -> bool:
        return now - self.taken_at > expiry_seconds

    def held_by(self, namespace: str, name: str) -> bool:
        return (self.namespace, self.name) == (namespace, name)


def _rfc3339(seconds: float) -> str:
    # Go's time.RFC3339 has whole seconds; HAMi formats its local time, we write UTC ("Z").
    return datetime.fromtimestamp(int(seconds), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_rfc3339(text: str) -> float:
    value = text.strip()
    if len(value) > 40:
        raise HamiFormatError(f"lock time {text[:40]!r}... is too long")
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise HamiFormatError(f"lock time {text!r} is not RFC 3339") from None
    if parsed.tzinfo is None:
        raise HamiFormatError(f"lock time {text!r} has no time zone")
    return parsed.timestamp()


def encode_lock(now: float, namespace: str, name: str) -> str:
    return f"{_rfc3339(now)},{namespace},{name}"


def parse_lock(value: str) -> NodeLock:
    if "," not in value:
        return NodeLock(_parse_rfc3339(value))
    parts = value.split(",")
    if len(parts) != 3:
        raise HamiFormatError(f"lock {value[:80]!r} has {len(parts)} parts, expected 3")
    return NodeLock(_parse_rfc3339(parts[0]), parts[1], parts[2])


# ----------------------------------------------------------------------------- pod state


def bind_phase(annotations: Mapping[str, str], flavor: Flavor = HAMI) -> str:
    return annotations.get(flavor.bind_phase_key, "")
