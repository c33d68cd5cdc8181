"""Volcano's vGPU device plugin in the HAMi node stand-in: how its ``Allocate`` finds the pod
it serves, written from Project-HAMi/volcano-vgpu-device-plugin ``v1.12.0`` (none of its code
copied). Unlike HAMi's plugin it reads no lock and no bind-phase:

- kubelet calls ``Allocate`` once per container (more than one container request is an
  error, ``pkg/plugin/server.go:341-343``) with the container's device IDs; their count is
  the ``gpuAmount`` (``server.go:352``);
- ``GetPendingPod`` (``pkg/util/util.go:58-70``, ``getOldestPod`` ``util.go:80-118``) lists
  every pod of the cluster and keeps those whose ``volcano.sh/vgpu-node`` is this node and
  whose ``volcano.sh/devices-to-allocate`` still holds exactly ``gpuAmount`` devices (all
  containers' together); the one with the smallest ``volcano.sh/vgpu-time`` (a missing or
  unreadable time is the largest, ``util.go:120-135``) is served, whichever pod kubelet is
  starting;
- it takes that pod's next container entry (``GetNextDeviceRequest``, ``util.go:233-250``:
  ``p.Spec.Containers[idx]``, app containers only), checks its count (``server.go:397-401``),
  erases it (``EraseNextDeviceTypeFromAnnotation``, ``util.go:252-280``) and, once nothing
  is left, marks the pod ``bind-phase: success`` with ``vgpu-time`` set to the largest
  uint64 (``PodAllocationSuccess``, ``util.go:295-307``); on an error ``failed`` alike
  (``util.go:309-320``). The lock it releases is named ``hamivgpu`` (``pkg/util/types.go:57``),
  never Volcano's own ``volcano.sh/mutex.lock`` (``types.go:50``), which the stand-in
  therefore leaves alone.

So two pods of one node waiting with the same device count at once can swap devices: the
container kubelet starts gets the older pod's. Tessera's lock on ``volcano.sh/mutex.lock``
keeps one pod of a node waiting at a time (allocator/hami/codec.py); the stand-in records
what the started pod's containers got, so a swap shows as a pod running off its record.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any, Final

from allocator.errors import ApiError
from allocator.hami.codec import (
    BIND_FAILED,
    BIND_SUCCESS,
    VOLCANO_VGPU,
    DeviceShare,
    HamiFormatError,
    decode_pod_devices,
    encode_pod_devices,
)
from devcluster.hami_node import ENVS_ANNOTATION, HamiNode

logger = logging.getLogger(__name__)

#: ``strconv.FormatUint(math.MaxUint64, 10)``: the time a served pod is given.
SERVED_TIME: Final = str(2**64 - 1)


def _annotations(pod: Mapping[str, Any]) -> Mapping[str, str]:
    return (pod.get("metadata") or {}).get("annotations") or {}


def predicate_time(pod: Mapping[str, Any]) -> int:
    """``getPredicateTimeFromPodAnnotation``: unset or unreadable is the largest."""
    text = _annotations(pod).get(VOLCANO_VGPU.time_key, "")
    return int(text) if text.isdigit() and len(text) <= 20 else 2**64 - 1


def remaining(pod: Mapping[str, Any]) -> list[tuple[DeviceShare, ...]]:
    """The pod's ``devices-to-allocate`` entries (empty when unreadable)."""
    try:
        return list(decode_pod_devices(_annotations(pod).get(VOLCANO_VGPU.to_allocate_key, ""),
                                       VOLCANO_VGPU))
    except HamiFormatError:
        return []


def pending_pod(node: HamiNode, amount: int) -> Mapping[str, Any] | None:
    """``GetPendingPod(node, amount)``: the oldest pod assigned here still holding exactly
    ``amount`` devices to allocate (every phase: the plugin filters on nothing else)."""
    pods, _rv = node.api.list_pods_by_field("", lambda p: p)
    candidates = [p for p in pods
                  if _annotations(p).get(VOLCANO_VGPU.node_key) == node.node
                  and sum(len(e) for e in remaining(p)) == amount]
    return min(candidates, key=predicate_time) if candidates else None


def _asked(container: Mapping[str, Any]) -> int:
    limits = (container.get("resources") or {}).get("limits") or {}
    text = str(limits.get(VOLCANO_VGPU.count_resource, "0"))
    return int(text) if text.isdigit() else 0


def _patch(node: HamiNode, pod: Mapping[str, Any], annotations: Mapping[str, str]) -> None:
    meta = pod["metadata"]
    node.api.patch_pod(meta["namespace"], meta["name"],
                       {"metadata": {"uid": meta.get("uid"), "annotations": dict(annotations)}})


def _serve_one(node: HamiNode, amount: int) -> tuple[DeviceShare, ...] | None:
    """One ``Allocate`` call for a container asking ``amount``: the devices handed out."""
    current = pending_pod(node, amount)
    if current is None:
        logger.warning("volcano stand-in %s: no pending pod with %d devices", node.node, amount)
        return None
    entries = remaining(current)
    position = next(i for i, e in enumerate(entries) if e)
    shares = entries[position]
    if len(shares) != amount:  # "device number not matched"
        _patch(node, current, {VOLCANO_VGPU.bind_phase_key: BIND_FAILED,
                               VOLCANO_VGPU.time_key: SERVED_TIME})
        return None
    entries[position] = ()
    done = not any(entries)
    patch = {VOLCANO_VGPU.to_allocate_key: encode_pod_devices(entries, VOLCANO_VGPU)}
    if done:
        patch |= {VOLCANO_VGPU.bind_phase_key: BIND_SUCCESS, VOLCANO_VGPU.time_key: SERVED_TIME}
    _patch(node, current, patch)
    return shares


def volcano_allocate(node: HamiNode, started: Mapping[str, Any]) -> str:
    """kubelet starts ``started``: one Allocate per GPU container, each served as the plugin
    serves it; what each container got is recorded on ``started``."""
    meta = started["metadata"]
    envs: dict[str, dict[str, str]] = {}
    for container in (started.get("spec") or {}).get("containers") or []:
        amount = _asked(container)
        if not amount:
            continue
        try:
            shares = _serve_one(node, amount)
        except ApiError as exc:
            logger.warning("volcano stand-in %s: %s", node.node, exc)
            shares = None
        if shares is None:
            break  # kubelet fails the container; the pod does not start
        env = {"NVIDIA_VISIBLE_DEVICES": ",".join(s.uuid for s in shares),
               "CUDA_DEVICE_SM_LIMIT": str(shares[0].cores)}
        env |= {f"CUDA_DEVICE_MEMORY_LIMIT_{i}": f"{s.memory_mib}m"
                for i, s in enumerate(shares)}
        envs[str(container.get("name"))] = env
    if envs:
        _patch(node, started, {ENVS_ANNOTATION: json.dumps(envs, sort_keys=True)})
    return f"{meta['namespace']}/{meta['name']}"
