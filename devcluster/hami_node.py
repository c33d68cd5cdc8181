"""A HAMi node stand-in for the dev cluster: the device plugin's side of HAMi's contract,
written from that contract (Project-HAMi/HAMi v2.10.0; none of its code is copied, none of it
is built here), over fake devices.

- :meth:`HamiNode.register` writes the register annotation as the plugin's ``register.go``
  does (v2.8+ JSON) and the handshake ``hami.io/node-handshake: Reported <time>``.
- :meth:`HamiNode.allocate_next` does what the plugin's ``Allocate``
  (``pkg/device-plugin/nvidiadevice/nvinternal/plugin/server.go``) does for one pod: finds it
  from the node lock, else as the pending pod (``pkg/util/util.go`` ``GetPendingPod``: bound
  here, Pending, with ``bind-time``, ``bind-phase`` allocating or success, ``vgpu-node`` this
  node); takes each container's devices in the flavor's order (``popNextContainerDevices``);
  checks the count against the container's ``nvidia.com/gpu`` (the plugin's "device number
  not matched"); computes ``NVIDIA_VISIBLE_DEVICES``, ``CUDA_DEVICE_MEMORY_LIMIT_<i>``
  (``<MiB>m``) and ``CUDA_DEVICE_SM_LIMIT``; erases the consumed entries from
  ``vgpu-devices-to-allocate``; sets ``bind-phase: success`` (``failed`` when anything does
  not match); releases the lock if the pod holds it.

Between the two stands kubelet's device manager (devcluster/kubelet_devices.py): it chooses
the device IDs of each container, reusing an init container's for the next container
(``devicesToReuse``). With ``preferred_allocation`` (HAMi's ``enableGetPreferredAllocation``)
kubelet asks the plugin's GetPreferredAllocation and Allocate moves each container onto the
cards of the IDs kubelet gave it (``alignContainerDevicesWithAllocatedIDs``); without it,
Allocate follows the annotation alone.

What the container would have seen is recorded on the pod under :data:`ENVS_ANNOTATION` (JSON,
container name -> environment) so tests can check the cards and shares Tessera chose.
"""

from __future__ import annotations

import json
import logging
import random
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from allocator.errors import ApiError, Conflict, NotFound
from allocator.hami.codec import (
    BIND_ALLOCATING,
    BIND_FAILED,
    BIND_SUCCESS,
    HAMI,
    VOLCANO_VGPU,
    DeviceShare,
    Flavor,
    HamiFormatError,
    decode_pod_devices,
    encode_pod_devices,
    parse_lock,
)
from allocator.hami.register import RegisteredDevice, encode_register_json, encode_register_text
from allocator.ports import Obj
from devcluster.kubelet_devices import KubeletDevices, NoDevices, physical_card, slice_ids
from devcluster.plugin_client import PluginApi

logger = logging.getLogger(__name__)

ENVS_ANNOTATION = "devcluster.tessera.dev/hami-envs"
HANDSHAKE = "hami.io/node-handshake"
GPU_RESOURCE = "nvidia.com/gpu"


def device_uuid(node: str, index: int) -> str:
    """A stable, node-unique UUID for a fake card."""
    return f"GPU-{zlib.crc32(node.encode()):08x}-0000-4000-8000-{index:012d}"


def fake_devices(node: str, count: int = 8, memory_mib: int = 81920, split: int = 10,
                 model: str = "NVIDIA-H100-80GB-HBM3") -> tuple[RegisteredDevice, ...]:
    return tuple(RegisteredDevice(device_uuid(node, i), i, split, memory_mib, 100, model)
                 for i in range(count))


def register_annotations(node: str, cards: Sequence[tuple[str, int]], flavor: Flavor,
                         split: int = 10) -> dict[str, str]:
    """The annotation the plugin registers for ``cards`` ((model, MiB) each), as a node
    agent writes it when it starts (devcluster/nodes.py puts it on a new node)."""
    devices = [RegisteredDevice(device_uuid(node, i), i, split, memory, 100, f"NVIDIA-{model}")
               for i, (model, memory) in enumerate(cards)]
    text = (encode_register_json(devices) if flavor is HAMI
            else encode_register_text(devices, flavor))
    return {flavor.register_key: text}


def waiting_on(pod: Mapping[str, Any], node: str, flavor: Flavor) -> bool:
    """``pod`` is bound to ``node`` and waits for the plugin's Allocate."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    spec = pod.get("spec") or {}
    return (spec.get("nodeName") == node
            and (pod.get("status") or {}).get("phase", "Pending") == "Pending"
            and flavor.bind_time_key in annotations
            and annotations.get(flavor.bind_phase_key) == BIND_ALLOCATING
            and annotations.get(flavor.node_key) == node
            and bool(annotations.get(flavor.to_allocate_key, "").replace(";", "")))


class AllocateFailed(Exception):
    """What the plugin would answer kubelet with, after setting bind-phase failed."""


@dataclass
class HamiNode:
    api: PluginApi
    node: str
    devices: tuple[RegisteredDevice, ...]
    flavor: Flavor = HAMI
    #: HAMi's ``enableGetPreferredAllocation`` (device-plugin config, default false): kubelet
    #: asks the plugin's GetPreferredAllocation, and Allocate moves each container onto the
    #: cards of the device IDs kubelet chose (v2.10.0 ``server.go:807-814``).
    preferred_allocation: bool = False
    #: kubelet's set order (devcluster/kubelet_devices.py): None sorted, else shuffled by it.
    kubelet_rng: random.Random | None = None
    #: Make the API requests v2.10.0's Allocate makes for a pod, in its order (with ``api``
    #: rate-limited as its client is, devcluster/plugin_client.py, Allocate takes as long):
    #: the pod's erased entries and its ``success`` are two patches with a read between
    #: (``patchErasedAnnotation``, ``podAllocationTrySuccess``, ``plugin/util.go:371-393``),
    #: and the release reads the node twice (``ReleaseNodeLock``, ``nodelock.go:175-232``).
    hami_requests: bool = False
    #: How long each Allocate took, from finding its pod to the lock's release.
    allocate_seconds: list[float] = field(default_factory=list, init=False)
    kubelet: KubeletDevices = field(init=False)

    def __post_init__(self) -> None:
        self.kubelet = KubeletDevices(
            tuple(i for d in self.devices for i in slice_ids(d.uuid, max(d.split_count, 1))),
            preferred=self.preferred_allocation, rng=self.kubelet_rng)

    def register(self, now: str = "") -> None:
        text = (encode_register_json(self.devices) if self.flavor is HAMI
                else encode_register_text(self.devices, self.flavor))
        annotations = {self.flavor.register_key: text}
        if self.flavor is HAMI:
            annotations[HANDSHAKE] = f"Reported {now}".strip()
        self.api.patch_node(self.node, {"metadata": {"annotations": annotations}})

    # ------------------------------------------------------------------ Allocate
    def _from_lock(self) -> Obj | None:
        if not self.flavor.lock_key:
            return None
        node = self.api.get_node(self.node) or {}
        value = ((node.get("metadata") or {}).get("annotations") or {}).get(self.flavor.lock_key)
        if not value:
            return None
        lock = parse_lock(value)
        if not lock.namespace:
            return None
        try:
            return self.api.get_pod(lock.namespace, lock.name)
        except NotFound:
            return None

    def pending_pod(self) -> Obj | None:
        """The pod the plugin's Allocate would serve next on this node, or None."""
        pod = self._from_lock()
        if pod is not None and self._waiting(pod):
            return pod
        # GetPendingPod lists the node's pods (spec.nodeName=<node>).
        pods, _rv = self.api.list_pods_by_field(f"spec.nodeName={self.node}", lambda p: p)
        waiting = [p for p in pods if self._waiting(p)]
        waiting.sort(key=lambda p: (p["metadata"].get("annotations") or {}).get(
            self.flavor.bind_time_key, ""))
        return waiting[0] if waiting else None

    def waiting(self, pod: Mapping[str, Any]) -> bool:
        """The pod is bound here and waits for Allocate."""
        return waiting_on(pod, self.node, self.flavor)

    def _waiting(self, pod: Mapping[str, Any]) -> bool:
        return waiting_on(pod, self.node, self.flavor)

    def allocate_next(self) -> str | None:
        """Serve one pending pod; its ``namespace/name``, or None when none waits."""
        started = time.perf_counter()
        pod = self.pending_pod()
        if pod is None:
            return None
        served = self.allocate(pod)
        self.allocate_seconds.append(time.perf_counter() - started)
        return served

    def allocate(self, pod: Mapping[str, Any]) -> str:
        """Allocate for ``pod`` (one waiting on this node); its ``namespace/name``."""
        if self.flavor is VOLCANO_VGPU:
            from devcluster.volcano_plugin import volcano_allocate  # it builds on this module

            return volcano_allocate(self, pod)
        meta = pod["metadata"]
        who = f"{meta['namespace']}/{meta['name']}"
        try:
            envs, rest = self._allocate(pod)
        except (AllocateFailed, HamiFormatError) as exc:
            logger.warning("allocate %s failed: %s", who, exc)
            self._finish(pod, {self.flavor.bind_phase_key: BIND_FAILED})
            return who
        self._finish(pod, {self.flavor.bind_phase_key: BIND_SUCCESS,
                           self.flavor.to_allocate_key: rest,
                           ENVS_ANNOTATION: json.dumps(envs, sort_keys=True)})
        return who

    def _containers(self, pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        spec = pod.get("spec") or {}
        inits = list(spec.get("initContainers") or []) if self.flavor.init_containers else []
        return inits + list(spec.get("containers") or [])

    def _allocate(self, pod: Mapping[str, Any]) -> tuple[dict[str, dict[str, str]], str]:
        annotations = pod["metadata"].get("annotations") or {}
        entries = list(decode_pod_devices(annotations[self.flavor.to_allocate_key],
                                          self.flavor))
        containers = self._containers(pod)
        inits = len((pod.get("spec") or {}).get("initContainers") or []
                    ) if self.flavor.init_containers else 0
        known = {d.uuid for d in self.devices}
        envs: dict[str, dict[str, str]] = {}
        for position, shares in enumerate(entries):
            if not shares:
                continue
            if position >= len(containers):
                raise AllocateFailed(f"entry {position} has no container")
            container = containers[position]
            limits = (container.get("resources") or {}).get("limits") or {}
            asked = limits.get(GPU_RESOURCE)
            if asked is None or int(str(asked)) != len(shares):
                raise AllocateFailed(f"device number not matched: {container.get('name')} "
                                     f"asks {asked} {GPU_RESOURCE}, got {len(shares)} devices")
            unknown = [s.uuid for s in shares if s.uuid not in known]
            if unknown:
                raise AllocateFailed(f"unknown device {unknown[0]}")
            shares = self._as_kubelet_gives(pod, position < inits, shares,
                                            container.get("restartPolicy") == "Always")
            env = {"NVIDIA_VISIBLE_DEVICES": ",".join(s.uuid for s in shares),
                   "CUDA_DEVICE_SM_LIMIT": str(shares[0].cores)}
            for i, s in enumerate(shares):
                env[f"CUDA_DEVICE_MEMORY_LIMIT_{i}"] = f"{s.memory_mib}m"
            envs[str(container.get("name"))] = env
            entries[position] = ()
        return envs, encode_pod_devices(entries, self.flavor)

    def _as_kubelet_gives(self, pod: Mapping[str, Any], init: bool,
                          shares: tuple[DeviceShare, ...], restartable: bool = False
                          ) -> tuple[DeviceShare, ...]:
        """The container's shares after kubelet chose its device IDs: with
        ``preferred_allocation``, on the cards of those IDs (HAMi v2.10.0 ``server.go:733``
        ``alignContainerDevicesWithAllocatedIDs``: the i-th share takes the i-th ID's card);
        else as the annotation says (Allocate ignores the IDs)."""
        uid = str(pod["metadata"].get("uid", ""))
        try:
            ids = self.kubelet.allocate(uid, init, len(shares), [s.uuid for s in shares],
                                        restartable)
        except NoDevices as exc:
            raise AllocateFailed(str(exc)) from exc
        if not self.preferred_allocation:
            return shares
        return tuple(replace(s, uuid=physical_card(i)) for s, i in zip(shares, ids, strict=True))

    def _finish(self, pod: Mapping[str, Any], annotations: Mapping[str, str]) -> None:
        meta = pod["metadata"]
        ns, name, changes = meta["namespace"], meta["name"], dict(annotations)
        if self.hami_requests and self.flavor.to_allocate_key in changes:
            self.api.patch_pod(ns, name, {"metadata": {"uid": meta.get("uid"), "annotations": {
                self.flavor.to_allocate_key: changes.pop(self.flavor.to_allocate_key)}}})
            self.api.get_pod(ns, name)
        self.api.patch_pod(ns, name, {"metadata": {"uid": meta.get("uid"),
                                                   "annotations": changes}})
        self.release(ns, name)

    def release(self, namespace: str, name: str) -> None:
        """The plugin's release: only the pod's own lock (or a legacy one), with the node's
        resourceVersion as precondition, retried on conflict. volcano-vgpu's plugin releases
        none of Tessera's (allocator/hami/codec.py)."""
        if not self.flavor.lock_key or self.flavor is VOLCANO_VGPU:
            return
        if self.hami_requests:
            self.api.get_node(self.node)  # the owner check's read, before the retried one
        for _attempt in range(5):
            node = self.api.get_node(self.node) or {}
            meta = node.get("metadata") or {}
            value = (meta.get("annotations") or {}).get(self.flavor.lock_key)
            if value is None:
                return
            try:
                lock = parse_lock(value)
            except HamiFormatError:
                return
            if lock.namespace and not lock.held_by(namespace, name):
                return
            try:
                self.api.patch_node(self.node, {"metadata": {
                    "annotations": {self.flavor.lock_key: None},
                    "resourceVersion": meta.get("resourceVersion")}})
                return
            except Conflict:
                continue
            except ApiError as exc:
                logger.warning("node %s: release failed: %s", self.node, exc)
                return

    def drain(self, limit: int = 10_000) -> list[str]:
        """Serve every waiting pod (bounded); who was served, in order."""
        served: list[str] = []
        for _ in range(limit):
            who = self.allocate_next()
            if who is None:
                break
            served.append(who)
        return served


def node_envs(pod: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """What the stand-in gave each container of ``pod`` ({} before its Allocate)."""
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(ENVS_ANNOTATION)
    return json.loads(text) if text else {}


def visible(envs: Mapping[str, Mapping[str, str]]) -> Sequence[str]:
    return sorted(u for env in envs.values() for u in env["NVIDIA_VISIBLE_DEVICES"].split(","))
