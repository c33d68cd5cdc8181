"""Builders for the plugin's tests: Node and Pod objects as the API server returns them."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from kubectl_tessera.picture import Picture, build_picture
from tessera.dialects import DialectConfig
from tessera.vocabulary import (
    Allocation,
    ContainerAllocation,
    ContainerRequest,
    PodRequest,
    Vocabulary,
    encode_allocation,
    encode_request,
)

VOCAB = Vocabulary()
CONFIG = DialectConfig()
MIB = 16384


def gpu_node(name: str, count: int = 2, memory_mib: int = MIB, model: str = "T4",
             labels: Mapping[str, str] | None = None,
             annotations: Mapping[str, str] | None = None,
             unschedulable: bool = False) -> dict[str, Any]:
    """A node described by the even split of its allocatable totals."""
    return {
        "metadata": {"name": name,
                     "labels": {VOCAB.node_model_label: model, **(labels or {})},
                     "annotations": dict(annotations or {})},
        "spec": {"unschedulable": True} if unschedulable else {},
        "status": {"allocatable": {VOCAB.core_resource: str(100 * count),
                                   VOCAB.memory_resource: str(memory_mib * count)}},
    }


def shares(core: int, memory_mib: int = 1000) -> PodRequest:
    return PodRequest((ContainerRequest("main", core_percent=core, memory_mib=memory_mib),))


def wholes(cards: int, models: tuple[str, ...] = ()) -> PodRequest:
    return PodRequest((ContainerRequest("main", cards=cards),), models=models)


def gpu_pod(name: str, request: PodRequest, *, node: str = "", cards: Sequence[int] = (),
            at: float = 0.0, namespace: str = "default", phase: str | None = None,
            node_selector: Mapping[str, str] | None = None, owner: str = "ReplicaSet/rs",
            allocation_text: str | None = None, created: str = "2026-01-01T00:00:00Z",
            ) -> dict[str, Any]:
    """A GPU pod; with ``node`` and ``cards``, bound with an allocation record that gives
    each container of ``request`` those cards (its share on each, or the cards whole)."""
    uid = f"uid-{name}"
    annotations = {VOCAB.request_annotation: encode_request(request)}
    if node and cards:
        containers = tuple(
            ContainerAllocation(c.name, tuple(cards), core_percent=c.core_percent,
                                memory_mib=c.memory_mib, init=c.init)
            for c in request.containers)
        annotations[VOCAB.allocation_annotation] = encode_allocation(
            Allocation(node, containers, at, uid))
    if allocation_text is not None:
        annotations[VOCAB.allocation_annotation] = allocation_text
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid,
                            "creationTimestamp": created,
                            "labels": {VOCAB.gpu_pod_label: "true"},
                            "annotations": annotations}
    if owner:
        kind, owner_name = owner.split("/")
        meta["ownerReferences"] = [{"kind": kind, "name": owner_name, "controller": True}]
    spec: dict[str, Any] = {"containers": [{"name": c.name} for c in request.containers]}
    if node:
        spec["nodeName"] = node
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    return {"metadata": meta, "spec": spec,
            "status": {"phase": phase or ("Running" if node else "Pending")}}


def scenario() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Two nodes of two 16 GiB T4 cards, every card busy, and two Pending pods:

    n1 #0: a (50%)    n1 #1: b (50%)
    n2 #0: c (50%)    n2 #1: d (whole)
    pending: e (two whole cards), f (one whole A100)
    """
    nodes = [gpu_node("n1"), gpu_node("n2")]
    pods = [
        gpu_pod("a", shares(50), node="n1", cards=[0], at=1.0),
        gpu_pod("b", shares(50), node="n1", cards=[1], at=2.0),
        gpu_pod("c", shares(50), node="n2", cards=[0], at=3.0),
        gpu_pod("d", wholes(1), node="n2", cards=[1], at=4.0),
        gpu_pod("e", wholes(2), created="2026-01-02T00:00:00Z"),
        gpu_pod("f", wholes(1, models=("A100",)), created="2026-01-03T00:00:00Z"),
    ]
    return nodes, pods


def picture_of(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> Picture:
    return build_picture(nodes, pods, CONFIG)


def garbled_cards_annotation() -> dict[str, str]:
    return {VOCAB.node_cards_annotation: json.dumps([{"index": "zero"}])}
