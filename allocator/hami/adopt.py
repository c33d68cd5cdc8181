"""Switching a running HAMi cluster from hami-scheduler to Tessera: its pods' cards counted,
and every placed pod findable by HAMi's vGPU monitor.

hami-scheduler records a pod's cards only in ``hami.io/vgpu-devices-allocated``; Tessera's
picture is built from its own allocation record on GPU-labelled pods. At start, before the
first list, one list of the live bound pods carrying HAMi's record finds

- those without Tessera's record (hami-scheduler placed them): each is given Tessera's record
  and GPU-pod label, read from the HAMi record against the node's register annotation;
- those with Tessera's record and without the label ``hami.io/vgpu-node`` (Tessera bound them
  before its bind wrote that label): each is given the label, the node's name, as
  hami-scheduler's pod patch copies it (Project-HAMi/HAMi v2.10.0 ``pkg/util/util.go:189-191``),
  because ``cmd/vGPUmonitor`` lists a node's pods by it (``metrics.go:389``).

One merge patch per pod, the UID as precondition; nothing else of the pod is changed (an
adopted pod missing the label gets it in the same patch), so switching back is harmless.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from allocator.errors import ApiError
from allocator.hami.codec import Flavor
from allocator.hami.writer import NodeDevices, allocation_of, read_devices
from allocator.picture.requests import BOUND_ACTIVE_PODS
from allocator.ports import KubeApi, Obj
from tessera.vocabulary import Allocation, Vocabulary, encode_allocation

logger = logging.getLogger(__name__)

#: A label value (k8s.io/apimachinery validation ``IsValidLabelValue``): a node name longer
#: than 63 characters cannot be one, and its pod cannot carry the monitor's label.
_LABEL_VALUE: Final = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


@dataclass(frozen=True)
class Adoption:
    """What the start did: pods another HAMi scheduler placed, now counted, and pods given
    the monitor's label."""

    adopted: int = 0
    labelled: int = 0


def _meta(pod: Obj) -> Mapping[str, Any]:
    meta = pod.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _missing_label(pod: Obj, flavor: Flavor) -> dict[str, str]:
    """The monitor's label when the pod lacks it (empty: it has it, the flavor has none, or
    the node's name cannot be a label value)."""
    node = (pod.get("spec") or {}).get("nodeName") or ""
    if not flavor.node_label or flavor.node_key in (_meta(pod).get("labels") or {}):
        return {}
    if len(node) > 63 or not _LABEL_VALUE.fullmatch(node):
        return {}
    return {flavor.node_key: node}


def _keep(flavor: Flavor, vocabulary: Vocabulary) -> Callable[[Obj], Obj | None]:
    def keep(pod: Obj) -> Obj | None:
        annotations = _meta(pod).get("annotations") or {}
        if flavor.allocated_key not in annotations:
            return None
        ours = vocabulary.allocation_annotation in annotations
        return pod if not ours or _missing_label(pod, flavor) else None
    return keep


class _Registers:
    """Each node's register annotation, read once."""

    def __init__(self, api: KubeApi, flavor: Flavor) -> None:
        self.api, self.flavor = api, flavor
        self.read: dict[str, NodeDevices | None] = {}

    def __call__(self, node: str) -> NodeDevices | None:
        if node not in self.read:
            try:
                obj = self.api.get_node(node) or {}
            except ApiError as exc:
                logger.warning("adopting HAMi pods: node %s unreadable: %s", node, exc)
                obj = {}
            self.read[node] = read_devices(_meta(obj).get("annotations") or {}, self.flavor)
        return self.read[node]


def _adoption_patch(pod: Obj, registers: _Registers, vocabulary: Vocabulary,
                    who: str) -> dict[str, Any] | None:
    """Tessera's record and labels for a pod another scheduler placed (None: unreadable)."""
    node = (pod.get("spec") or {}).get("nodeName") or ""
    devices = registers(node)
    if devices is None or devices.problem:
        logger.warning("pod %s: node %s has no readable HAMi register; its cards are "
                       "not counted", who, node)
        return None
    allocation = allocation_of(pod, devices, registers.flavor)
    if not isinstance(allocation, Allocation):
        if allocation:
            logger.warning("pod %s: %s; its cards are not counted", who, allocation)
        return None
    return {"labels": {vocabulary.gpu_pod_label: "true",
                       **_missing_label(pod, registers.flavor)},
            "annotations": {vocabulary.allocation_annotation: encode_allocation(allocation)}}


def adopt_placed_pods(api: KubeApi, vocabulary: Vocabulary, flavor: Flavor) -> Adoption:
    """Record the cards of the pods another HAMi scheduler placed, and label the pods Tessera
    placed that lack the monitor's label. Never raises for one pod: what cannot be read or
    written is logged and left."""
    found, _rv = api.list_pods_by_field(BOUND_ACTIVE_PODS, _keep(flavor, vocabulary))
    registers = _Registers(api, flavor)
    adopted = labelled = 0
    for pod in found:
        if pod is None:
            continue
        meta = _meta(pod)
        who = f"{meta.get('namespace')}/{meta.get('name')}"
        ours = vocabulary.allocation_annotation in (meta.get("annotations") or {})
        change = ({"labels": _missing_label(pod, flavor)} if ours
                  else _adoption_patch(pod, registers, vocabulary, who))
        if change is None:
            continue
        try:
            api.patch_pod(meta.get("namespace", ""), meta.get("name", ""),
                          {"metadata": {"uid": meta.get("uid"), **change}})
        except ApiError as exc:
            logger.warning("pod %s: %s failed: %s", who,
                           "labelling it for HAMi's monitor" if ours
                           else "recording its HAMi cards", exc)
            continue
        if ours:
            labelled += 1
        else:
            adopted += 1
    if adopted or labelled:
        logger.info("adopted %d pods placed by another HAMi scheduler; labelled %d pods for "
                    "HAMi's vGPU monitor", adopted, labelled)
    return Adoption(adopted, labelled)
