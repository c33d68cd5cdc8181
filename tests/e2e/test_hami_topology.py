"""HAMi's pair scores against the real API server (dev cluster, ``hami`` agent profile): a node
annotated with ``hami.io/node-nvidia-score`` as HAMi's device plugin writes it with
``ENABLE_TOPOLOGY_SCORE=true``, and 2-card pods bound one after another each land on an
NVLinked pair; the HAMi node stand-in allocates them, and the cards each container sees are
the pair (docs/hami.md, "Topology")."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from test_hami import (  # noqa: F401  (fixtures)
    MIB,
    _allocated_and_running,
    _allocator,
    _create,
    _gpu,
    _pod,
    api,
    cluster,
    core_v1,
    namespace,
)

from allocator.hami.topology import SCORE_KEY
from allocator.kube.client import KubeClient
from devcluster.cluster import DevCluster
from devcluster.hami_node import HamiNode, fake_devices, node_envs
from devcluster.nodes import delete_nodes, uniform
from devcluster.workloads import container

pytestmark = pytest.mark.e2e

#: NVLinked pairs away from the lowest-index order a plain placement takes (0-1, 2-3, ...).
NVLINKED = ((0, 5), (1, 4), (2, 7), (3, 6))
NVLINK, PCIE = 200, 20


def _scores(devices: list[Any]) -> str:
    linked = {frozenset(p) for p in NVLINKED}
    return json.dumps([
        {"uuid": a.uuid, "score": {b.uuid: NVLINK if frozenset((a.index, b.index)) in linked
                                   else PCIE for b in devices if b is not a}}
        for a in devices])


@pytest.fixture
def linked_node(cluster: DevCluster, core_v1: Any, namespace: str, api: KubeClient  # noqa: F811
                ) -> Iterator[HamiNode]:
    name = f"{namespace}-nv"
    cluster.add_nodes([uniform(name, 8, "H100", MIB)])
    devices = fake_devices(name, 8, memory_mib=MIB)
    node = HamiNode(api, name, devices)
    node.register("2026-11-28T23:00:00Z")
    api.patch_node(name, {"metadata": {"annotations": {SCORE_KEY: _scores(list(devices))}}})
    yield node
    delete_nodes(core_v1, [name])


def test_two_card_pods_land_on_nvlinked_pairs(cluster: DevCluster, core_v1: Any,  # noqa: F811
                                              namespace: str, api: KubeClient,  # noqa: F811
                                              linked_node: HamiNode) -> None:
    names = [f"pair{i}" for i in range(len(NVLINKED))]
    for name in names:
        _create(core_v1, namespace, name, [container("main", _gpu(cards=2))])
    uuid = {d.index: d.uuid for d in linked_node.devices}
    got = []
    for name in names:
        alloc = _allocator(cluster, api)  # the picture as a restarted allocator reads it
        alloc.bind(namespace, name, "", linked_node.node)
        pod, placed = _allocated_and_running(cluster, core_v1, namespace, name, linked_node)
        chosen = placed.containers[0].card_indices
        seen = node_envs(pod)["main"]["NVIDIA_VISIBLE_DEVICES"].split(",")
        assert sorted(seen) == sorted(uuid[i] for i in chosen)
        got.append(tuple(sorted(chosen)))
    assert sorted(got) == sorted(NVLINKED), got
