"""HAMi's wire formats, read and written (pure: no API, no clock; times are passed in).

Every key and format below was read in HAMi's source at tag ``v2.10.0`` (Project-HAMi/HAMi)
and in Project-HAMi/volcano-vgpu-device-plugin at tag ``v1.12.0``; none of their code is
copied. Where a format changed between versions, the version that changed it is named. The
node register annotation (the cards the plugin registers) is :mod:`allocator.hami.register`;
here are the flavors, the pod's device annotations and the node lock.

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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Final

from tessera.agent_profiles import HAMI_RESOURCES, VOLCANO_RESOURCES

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
    #: The pod also carries ``node_key`` as a label, which HAMi's vGPU monitor lists by.
    node_label: bool = False
    #: The device count each GPU container asks for (the resource the plugin registers).
    count_resource: str = HAMI_RESOURCES.count


HAMI: Final = Flavor(
    name="hami", register_key="hami.io/node-nvidia-register",
    to_allocate_key="hami.io/vgpu-devices-to-allocate",
    allocated_key="hami.io/vgpu-devices-allocated",
    node_key="hami.io/vgpu-node", time_key="hami.io/vgpu-time",
    bind_phase_key="hami.io/bind-phase", bind_time_key="hami.io/bind-time",
    lock_key="hami.io/mutex.lock", init_containers=True, closing_separator=True,
    node_label=True)
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
    plugin_releases_lock=False, count_resource=VOLCANO_RESOURCES.count)
FLAVORS: Final = {f.name: f for f in (HAMI, HAMI_V28, VOLCANO_VGPU)}


# ----------------------------------------------------------------------------- fields
# Checked fields of every annotation here and in allocator.hami.register (anyone who can
# annotate a node or a pod writes them).


def bounded_int(value: object, what: str, low: int = 0) -> int:
    """A JSON integer within ``low``..:data:`MAX_FIELD`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise HamiFormatError(f"{what} must be an integer, got {value!r}")
    if not low <= value <= MAX_FIELD:
        raise HamiFormatError(f"{what} {value} is out of range {low}-{MAX_FIELD}")
    return value


def text_int(text: str, what: str, low: int = 0) -> int:
    """A decimal integer field of a text annotation, bounded as :func:`bounded_int`."""
    stripped = text.strip()
    body = stripped.removeprefix("-")
    if not (body.isascii() and body.isdigit() and len(body) <= 12):
        raise HamiFormatError(f"{what} {text!r} is not an integer")
    return bounded_int(int(stripped), what, low)


def text_bool(text: str, what: str) -> bool:
    """A boolean field as Go's ``strconv.ParseBool`` reads it."""
    if text in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if text in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    raise HamiFormatError(f"{what} {text!r} is not a boolean")


def checked_uuid(uuid: str) -> str:
    """A device UUID that cannot break the annotations it is written into."""
    # A separator inside a UUID would split the pod annotation the plugin reads back.
    if not uuid or any(c in uuid for c in ",:;\n") or len(uuid) > 256:
        raise HamiFormatError(f"device id {uuid!r} is not a usable UUID")
    return uuid


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
            uuid = checked_uuid(fields[0])
            shares.append(DeviceShare(
                uuid=uuid, type=fields[1],
                memory_mib=text_int(fields[2], f"device {uuid}: memory"),
                cores=text_int(fields[3], f"device {uuid}: cores")))
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
