"""The test builders, for every test directory: pods, nodes, node states, requests.

- :func:`make_pod`: a pod as its owner writes it (a container asking in any dialect);
- :func:`make_gpu_pod`: a GPU pod as the API server returns it after admission (canonical
  request annotation and resources), bound with an allocation record when given one;
- :func:`make_node`: a Node object with GPU resources;
- :func:`request`, :func:`share`, :func:`whole`, :func:`node_state`, :func:`cards`: the
  allocator's own values;
- :func:`write_tls_pair`: a serving certificate and key written where a service reads them;
- :class:`NullApi`: the allocator's API port for code that must never call it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, NoReturn, TypeVar

from allocator.ports import KubeApi, Obj, WatchEvent
from allocator.ranking.cards import Card, CardState, NodeState
from tessera.agent_profiles import AgentProfile
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
          init: bool = False, shares: int = 1) -> ContainerRequest:
    return ContainerRequest(name, core_percent=core, memory_mib=mem, memory_percent=pct,
                            init=init, shares=shares)


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


_T = TypeVar("_T")


class NullApiCalled(AssertionError):
    """Code under test called the API it was told it would not need."""


class NullApi:
    """The allocator's API port (:class:`allocator.ports.KubeApi`) for decisions that must not
    reach the API server: every call fails the test with the method's name."""

    def _called(self, method: str) -> NoReturn:
        raise NullApiCalled(f"the API was called ({method}) where none was expected")

    def list_nodes(self) -> tuple[list[Obj], str]:
        self._called("list_nodes")

    def watch_nodes(self, resource_version: str, timeout_seconds: int) -> Iterator[WatchEvent]:
        self._called("watch_nodes")

    def get_node(self, name: str) -> Obj | None:
        self._called("get_node")

    def list_pods(self, label_selector: str) -> tuple[list[Obj], str]:
        self._called("list_pods")

    def watch_pods(self, label_selector: str, resource_version: str,
                   timeout_seconds: int) -> Iterator[WatchEvent]:
        self._called("watch_pods")

    def list_pods_by_field(self, field_selector: str,
                           reduce: Callable[[Obj], _T]) -> tuple[list[_T], str]:
        self._called("list_pods_by_field")

    def watch_pods_by_field(self, field_selector: str, resource_version: str,
                            timeout_seconds: int) -> Iterator[WatchEvent]:
        self._called("watch_pods_by_field")

    def get_pod(self, namespace: str, name: str) -> Obj:
        self._called("get_pod")

    def patch_pod(self, namespace: str, name: str, patch: Obj) -> Obj:
        self._called("patch_pod")

    def patch_pod_status(self, namespace: str, name: str, patch: Obj) -> Obj:
        self._called("patch_pod_status")

    def list_pod_disruption_budgets(self) -> list[Obj]:
        self._called("list_pod_disruption_budgets")

    def create_eviction(self, namespace: str, name: str) -> None:
        self._called("create_eviction")

    def bind_pod(self, namespace: str, name: str, uid: str, node: str,
                 annotations: Mapping[str, str] | None = None) -> None:
        self._called("bind_pod")

    def get_lease(self, namespace: str, name: str) -> Obj | None:
        self._called("get_lease")

    def create_event(self, namespace: str, event: Obj) -> Obj:
        self._called("create_event")

    def patch_event(self, namespace: str, name: str, patch: Obj) -> Obj:
        self._called("patch_event")

    def create_lease(self, namespace: str, lease: Obj) -> Obj:
        self._called("create_lease")

    def replace_lease(self, namespace: str, name: str, lease: Obj) -> Obj:
        self._called("replace_lease")


_: KubeApi = NullApi()  # mypy: the fake implements the whole port


#: Every agent a cluster can be installed for: its label (the profile, or the older HAMi
#: release ``--hami-agent`` names) -> (agent profile, hami agent setting).
AGENT_SETUPS: dict[str, tuple[AgentProfile, str]] = {
    **{p.value: (p, "") for p in AgentProfile},
    "hami-v2.8": (AgentProfile.HAMI, "hami-v2.8"),
}

#: The seed pods (examples/pods) each agent setup refuses (it runs all others), and a word of
#: the reason (tests/webhook/test_agent_profile_shapes.py, tests/e2e/test_profile_clusters.py).
REFUSED_SEEDS: dict[str, dict[str, str]] = {
    "elastic": {},
    "nano-gpu": {
        "aliyun-gpu-mem.yaml": "compute percent only",
        "elastic-share-256mib.yaml": "compute percent only",
        "elastic-two-cards.yaml": "one card",
    },
    "aliyun": {
        "elastic-two-cards.yaml": "no whole card",
        "genius-one-card.yaml": "no whole card",
        "fraction-share.yaml": "init container",
        "percent-share.yaml": "memory only",
    },
    "hami": {},
    # Their plugins map the pod's device entries to app containers only.
    "hami-v2.8": {"fraction-share.yaml": "app containers only"},
    "volcano-vgpu": {"fraction-share.yaml": "app containers only"},
}
