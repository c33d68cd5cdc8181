"""HAMi's card-choosing annotations against the real API server (dev cluster, ``hami`` agent
profile): the webhook writes a pod's ``nvidia.com/use-gpuuuid`` / ``nouse-gputype`` into its
request record, the allocator binds it to the one card they allow, and the HAMi node stand-in
hands the container exactly that card (docs/hami.md, "HAMi's pod annotations")."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from test_hami import (  # noqa: F401  (fixtures)
    MIB,
    NOBODY,
    _allocator,
    _gpu,
    _pod,
    api,
    cluster,
    core_v1,
    namespace,
)

from allocator.kube.client import KubeClient
from devcluster.cluster import DevCluster
from devcluster.hami_node import HamiNode, fake_devices, node_envs
from devcluster.nodes import delete_nodes, uniform
from devcluster.workloads import container, make_pod, wait_for
from tessera.vocabulary import decode_allocation, decode_request

pytestmark = pytest.mark.e2e


@pytest.fixture
def four_cards(cluster: DevCluster, core_v1: Any, namespace: str, api: KubeClient  # noqa: F811
               ) -> Iterator[HamiNode]:
    name = f"{namespace}-pick"
    cluster.add_nodes([uniform(name, 4, "H100", MIB)])
    node = HamiNode(api, name, fake_devices(name, 4, memory_mib=MIB))
    node.register("2026-11-28T23:00:00Z")
    yield node
    delete_nodes(core_v1, [name])


def test_a_pod_naming_a_card_by_uuid_gets_that_card(cluster: DevCluster, core_v1: Any,  # noqa: F811
                                                    namespace: str, api: KubeClient,  # noqa: F811
                                                    four_cards: HamiNode) -> None:
    uuid = {d.index: d.uuid for d in four_cards.devices}
    pod = make_pod("named", [container("main", _gpu(core=10, mem=1024))])
    pod["spec"]["schedulerName"] = NOBODY
    # Card 2 by UUID: two named, the other avoided (both apply, as in HAMi v2.10.0).
    pod["metadata"].setdefault("annotations", {}).update({
        "nvidia.com/use-gpuuuid": f"{uuid[1]}, {uuid[2]}", "nvidia.com/nouse-gpuuuid": uuid[1]})
    core_v1.create_namespaced_pod(namespace, pod)
    record = decode_request(_pod(core_v1, namespace, "named")["metadata"]["annotations"][
        cluster.vocabulary.request_annotation])
    # The webhook wrote the card choice into the request record.
    assert (record.use_uuids, record.nouse_uuids) == ((uuid[1], uuid[2]), (uuid[1],))
    _allocator(cluster, api).bind(namespace, "named", "", four_cards.node)
    assert four_cards.allocate_next() == f"{namespace}/named"
    wait_for("named Running", lambda: _pod(core_v1, namespace, "named")["status"].get(
        "phase") == "Running", timeout=60)
    placed = _pod(core_v1, namespace, "named")
    chosen = decode_allocation(placed["metadata"]["annotations"][
        cluster.vocabulary.allocation_annotation]).containers[0].card_indices
    assert chosen == (2,)
    assert node_envs(placed)["main"]["NVIDIA_VISIBLE_DEVICES"] == uuid[2]
