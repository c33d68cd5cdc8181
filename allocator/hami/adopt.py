"""Switching a running HAMi cluster from hami-scheduler to Tessera: its pods' cards counted.

hami-scheduler records a pod's cards only in ``hami.io/vgpu-devices-allocated``; Tessera's
picture is built from its own allocation record on GPU-labelled pods. At start, before the
first list, every live bound pod that carries HAMi's record and not Tessera's is given both
(read from the HAMi record against the node's register annotation): one merge patch per
pod, the UID as precondition. Nothing of HAMi's is changed, so switching back is harmless.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from allocator.errors import ApiError
from allocator.hami.codec import Flavor
from allocator.hami.writer import NodeDevices, allocation_of, read_devices
from allocator.picture.requests import BOUND_ACTIVE_PODS
from allocator.ports import KubeApi, Obj
from tessera.vocabulary import Allocation, Vocabulary, encode_allocation

logger = logging.getLogger(__name__)



def _keep(flavor: Flavor, vocabulary: Vocabulary) -> Callable[[Obj], Obj | None]:
    def keep(pod: Obj) -> Obj | None:
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        theirs = flavor.allocated_key in annotations
        return pod if theirs and vocabulary.allocation_annotation not in annotations else None
    return keep


def adopt_placed_pods(api: KubeApi, vocabulary: Vocabulary, flavor: Flavor) -> int:
    """Record the cards of the pods another HAMi scheduler placed; how many were adopted.
    Never raises for one pod: what cannot be read is logged and left."""
    found, _rv = api.list_pods_by_field(BOUND_ACTIVE_PODS, _keep(flavor, vocabulary))
    nodes: dict[str, NodeDevices | None] = {}
    adopted = 0
    for pod in found:
        if pod is None:
            continue
        meta: Mapping[str, Any] = pod.get("metadata") or {}
        who = f"{meta.get('namespace')}/{meta.get('name')}"
        node = (pod.get("spec") or {}).get("nodeName") or ""
        if node not in nodes:
            try:
                obj = api.get_node(node) or {}
            except ApiError as exc:
                logger.warning("adopting HAMi pods: node %s unreadable: %s", node, exc)
                obj = {}
            nodes[node] = read_devices((obj.get("metadata") or {}).get("annotations") or {},
                                       flavor)
        devices = nodes[node]
        if devices is None or devices.problem:
            logger.warning("pod %s: node %s has no readable HAMi register; its cards are "
                           "not counted", who, node)
            continue
        allocation = allocation_of(pod, devices, flavor)
        if not isinstance(allocation, Allocation):
            if allocation:
                logger.warning("pod %s: %s; its cards are not counted", who, allocation)
            continue
        patch = {"metadata": {"uid": meta.get("uid"),
                              "labels": {vocabulary.gpu_pod_label: "true"},
                              "annotations": {
                                  vocabulary.allocation_annotation: encode_allocation(allocation)}}}
        try:
            api.patch_pod(meta.get("namespace", ""), meta.get("name", ""), patch)
        except ApiError as exc:
            logger.warning("pod %s: recording its HAMi cards failed: %s", who, exc)
            continue
        adopted += 1
    if adopted:
        logger.info("adopted %d pods placed by another HAMi scheduler", adopted)
    return adopted
