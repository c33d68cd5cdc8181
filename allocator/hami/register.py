"""HAMi's node register annotation, read and written (pure): the cards a node's device plugin
registered. Read in HAMi's source at tag ``v2.10.0`` (Project-HAMi/HAMi) and in
Project-HAMi/volcano-vgpu-device-plugin at tag ``v1.12.0``; none of their code is copied. The
flavors, field bounds and the pod's annotations are :mod:`allocator.hami.codec`.

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
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from allocator.hami.codec import (
    CARD_CORES,
    HAMI,
    MAX_ANNOTATION_CHARS,
    MAX_DEVICES,
    VOLCANO_VGPU,
    Flavor,
    HamiFormatError,
    bounded_int,
    checked_uuid,
    text_bool,
    text_int,
)


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
            uuid=checked_uuid(uuid),
            index=bounded_int(item.get("index", 0), f"device {uuid}: index"),
            split_count=bounded_int(item.get("count", 0), f"device {uuid}: count"),
            memory_mib=bounded_int(item.get("devmem", 0), f"device {uuid}: devmem"),
            cores=bounded_int(item.get("devcore", 0), f"device {uuid}: devcore"),
            type=dtype, numa=bounded_int(item.get("numa", 0), f"device {uuid}: numa"),
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
        uuid = checked_uuid(items[0])
        out.append(RegisteredDevice(
            uuid=uuid, split_count=text_int(items[1], f"device {uuid}: count"),
            memory_mib=text_int(items[2], f"device {uuid}: devmem"),
            cores=text_int(items[3], f"device {uuid}: devcore"), type=items[4],
            numa=text_int(items[5], f"device {uuid}: numa"),
            healthy=text_bool(items[6], f"device {uuid}: health"),
            index=text_int(items[7], f"device {uuid}: index") if len(items) == 9 else 0,
            mode=items[8] if len(items) == 9 else "hami-core"))
    return out


def _parse_register_volcano(text: str) -> list[RegisteredDevice]:
    out = []
    for position, items in enumerate(_segments(text)):
        if len(items) not in (5, 6):
            raise HamiFormatError(f"device entry has {len(items)} fields, expected 5 or 6")
        uuid = checked_uuid(items[0])
        out.append(RegisteredDevice(
            uuid=uuid, index=position,
            split_count=text_int(items[1], f"device {uuid}: count"),
            memory_mib=text_int(items[2], f"device {uuid}: devmem"),
            cores=CARD_CORES, type=items[3],
            healthy=text_bool(items[4], f"device {uuid}: health"),
            mode=(items[5] if len(items) == 6 else "") or "hami-core"))
    return out


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
