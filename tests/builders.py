"""The test builders, for every test directory: pods, nodes, node states, requests.

- :func:`make_pod`: a pod as its owner writes it (a container asking in any dialect);
- :func:`make_gpu_pod`: a GPU pod as the API server returns it after admission (canonical
  request annotation and resources), bound with an allocation record when given one;
- :func:`make_node`: a Node object with GPU resources;
- :func:`request`, :func:`share`, :func:`whole`, :func:`node_state`, :func:`cards`: the
  allocator's own values;
- :func:`write_tls_pair`: a serving certificate and key written where a service reads them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from allocator.ranking.fit import Card, CardState, NodeState
from tessera.vocabulary import (
    Allocation,
    ContainerRequest,
    PodRequest,
    Vocabulary,
    encode_allocation,
    encode_request,
)

VOCAB = Vocabulary()


def share(name: str = "main", core: int = 0, mem: int = 0, pct: int = 0,
          init: bool = False) -> ContainerRequest:
    return ContainerRequest(name, core_percent=core, memory_mib=mem, memory_percent=pct,
                            init=init)


def whole(name: str = "main", cards: int = 1, init: bool = False) -> ContainerRequest:
    return ContainerRequest(name, cards=cards, init=init)


def request(*containers: ContainerRequest, models: tuple[str, ...] = (),
            min_mem: int = 0, policy: str | None = None) -> PodRequest:
    return PodRequest(tuple(containers), models=models, min_card_memory_mib=min_mem,
                      policy=policy)


def cards(*memory: int, model: str = "T4") -> tuple[Card, ...]:
    return tuple(Card(i, model, m) for i, m in enumerate(memory))


def node_state(name: str = "n1", *usage: tuple[int, int] | str, memory: int = 16000,
               model: str = "T4", count: int | None = None) -> NodeState:
    """A node of identical cards; ``usage`` per card: (core %, MiB) used, or "whole"."""
    n = count if count is not None else max(len(usage), 1)
    states = []
    for i in range(n):
        card = Card(i, model, memory)
        u = usage[i] if i < len(usage) else (0, 0)
        if u == "whole":
            states.append(CardState(card, 100, memory, True, (("other", "c"),)))
        elif isinstance(u, tuple) and u != (0, 0):
            states.append(CardState(card, u[0], u[1], False, (("other", "c"),)))
        else:
            states.append(CardState(card))
    return NodeState(name, tuple(states))


def make_node(name: str = "n1", count: int = 8, memory_mib: int = 16384,
              model: str | None = None, cards_annotation: list[dict[str, Any]] | None = None,
              gfd: tuple[str, int, int] | None = None, rv: str = "1") -> dict[str, Any]:
    annotations: dict[str, str] = {}
    labels: dict[str, str] = {}
    if cards_annotation is not None:
        annotations[VOCAB.node_cards_annotation] = json.dumps(cards_annotation)
    if model:
        labels[VOCAB.node_model_label] = model
    if gfd:
        labels["nvidia.com/gpu.product"] = gfd[0]
        labels["nvidia.com/gpu.count"] = str(gfd[1])
        labels["nvidia.com/gpu.memory"] = str(gfd[2])
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": annotations,
                     "resourceVersion": rv},
        "status": {
            "allocatable": {
                VOCAB.core_resource: str(100 * count),
                VOCAB.memory_resource: str(memory_mib * count),
                "cpu": "64",
            }
        },
    }


def make_gpu_pod(name: str = "p1", req: PodRequest | None = None, namespace: str = "default",
             uid: str | None = None, node: str | None = None,
             allocation: Allocation | None = None, phase: str = "Pending",
             rv: str = "1", extra_annotations: dict[str, str] | None = None,
             ) -> dict[str, Any]:
    """A pod as the API server returns it, carrying the canonical request annotation."""
    req = req or request(share(core=25, mem=1024))
    annotations = {VOCAB.request_annotation: encode_request(req)}
    if allocation is not None:
        annotations[VOCAB.allocation_annotation] = encode_allocation(allocation)
    annotations.update(extra_annotations or {})
    containers = []
    init_containers = []
    for c in req.containers:
        limits = {VOCAB.core_resource: str(c.core_resource_value)}
        if c.memory_mib:
            limits[VOCAB.memory_resource] = str(c.memory_mib)
        spec = {"name": c.name, "image": "busybox",
                "resources": {"limits": limits, "requests": dict(limits)}}
        (init_containers if c.init else containers).append(spec)
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or f"uid-{name}",
            "resourceVersion": rv,
            "labels": {VOCAB.gpu_pod_label: "true"},
            "annotations": annotations,
        },
        "spec": {"containers": containers, "schedulerName": "default-scheduler"},
        "status": {"phase": phase},
    }
    if init_containers:
        pod["spec"]["initContainers"] = init_containers
    if node:
        pod["spec"]["nodeName"] = node
    return pod


def make_pod(
    limits: dict[str, Any] | None = None,
    *,
    name: str = "p",
    namespace: str | None = "default",
    requests: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    containers: list[dict[str, Any]] | None = None,
    init_containers: list[dict[str, Any]] | None = None,
    security_context: dict[str, Any] | None = None,
    init: bool = False,
) -> dict[str, Any]:
    """A pod as its owner writes it: container ``main`` asking with ``limits`` and
    ``requests`` (any dialect), or the ``containers`` given. ``init`` makes ``main`` an init
    container followed by a plain app container ``after``; ``namespace`` None leaves the
    namespace to the API call."""
    main: dict[str, Any] = {"name": "main", "image": "busybox"}
    resources = {part: value for part, value in (("limits", limits), ("requests", requests))
                 if value is not None}
    if resources:
        main["resources"] = resources
    if security_context is not None:
        main["securityContext"] = security_context
    spec: dict[str, Any] = {"containers": containers if containers is not None else [main]}
    if init:
        after: dict[str, Any] = {"name": "after", "image": "busybox"}
        if security_context is not None:
            after["securityContext"] = security_context
        spec = {"initContainers": [main], "containers": [after]}
    if init_containers:
        spec["initContainers"] = init_containers
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    if labels:
        metadata["labels"] = labels
    if annotations:
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def write_tls_pair(directory: Path, name: str) -> tuple[Path, Path, bytes]:
    """``tls.crt`` and ``tls.key`` in ``directory`` for a new CA named after ``name``, each
    replaced in one step (a rename), as a renewal writes them; and the certificate's PEM."""
    from certs.builder import build_ca, build_leaf

    ca = build_ca(f"ca-{name}")
    leaf = build_leaf(ca, name, ["localhost"], ["127.0.0.1"])
    cert, key = directory / "tls.crt", directory / "tls.key"
    for path, data in ((cert, leaf.cert_pem), (key, leaf.key_pem)):
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
    return cert, key, leaf.cert_pem
