"""HAMi's card-choosing annotations against the real API server (dev cluster, ``hami`` agent
profile): the webhook writes a pod's ``nvidia.com/use-gpuuuid`` / ``nouse-gputype`` (and
``vgpu-mode``, ``numa-bind``) into its request record, the allocator binds it to the cards
they allow, and the HAMi node stand-in hands the container exactly those cards (docs/hami.md,
"HAMi's pod annotations")."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from test_hami import (  # noqa: F401  (fixtures)
    MIB,
    NOBODY,
    _allocated_and_running,
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
from devcluster.hami_node import HamiNode, fake_devices, node_envs, visible
from devcluster.nodes import delete_nodes, uniform
from devcluster.workloads import container, make_pod, wait_for
from tessera.vocabulary import PodRequest, decode_allocation, decode_request

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


#: Cards 0-1 registered in mps mode, 2-4 in hami-core; NUMA nodes 0, 0, 0, 1, 1.
MODES = ("mps", "mps", "hami-core", "hami-core", "hami-core")
NUMAS = (0, 0, 0, 1, 1)


@pytest.fixture
def mode_cards(cluster: DevCluster, core_v1: Any, namespace: str, api: KubeClient  # noqa: F811
               ) -> Iterator[HamiNode]:
    name = f"{namespace}-modes"
    cluster.add_nodes([uniform(name, len(MODES), "H100", MIB)])
    devices = tuple(replace(d, mode=MODES[d.index], numa=NUMAS[d.index])
                    for d in fake_devices(name, len(MODES), memory_mib=MIB))
    node = HamiNode(api, name, devices)
    node.register("2026-11-29T07:00:00Z")
    yield node
    delete_nodes(core_v1, [name])


def test_vgpu_mode_and_numa_bind_choose_the_cards(cluster: DevCluster, core_v1: Any,  # noqa: F811
                                                  namespace: str, api: KubeClient,  # noqa: F811
                                                  mode_cards: HamiNode) -> None:
    allocator = _allocator(cluster, api)
    records: dict[str, PodRequest] = {}

    def run(name: str, limits: dict[str, str], annotations: dict[str, str]) -> tuple[int, ...]:
        pod = make_pod(name, [container("main", limits)])
        pod["spec"]["schedulerName"] = NOBODY
        pod["metadata"].setdefault("annotations", {}).update(annotations)
        core_v1.create_namespaced_pod(namespace, pod)
        records[name] = decode_request(_pod(core_v1, namespace, name)["metadata"][
            "annotations"][cluster.vocabulary.request_annotation])
        allocator.bind(namespace, name, "", mode_cards.node)
        placed, record = _allocated_and_running(cluster, core_v1, namespace, name, mode_cards)
        cards = record.containers[0].card_indices
        # The stand-in plugin hands the container exactly the cards of the record.
        uuid = {d.index: d.uuid for d in mode_cards.devices}
        assert visible(node_envs(placed)) == sorted(uuid[i] for i in cards)
        return cards

    # Two whole hami-core cards of one NUMA node: 3 and 4 (without numa-bind, 2 and 3 would
    # do).
    bound = run("numa", _gpu(cards=2), {"nvidia.com/numa-bind": "true",
                                        "nvidia.com/vgpu-mode": "hami-core"})
    assert bound == (3, 4) and {NUMAS[i] for i in bound} == {1}
    # The webhook wrote both into the request record.
    assert records["numa"].one_numa_node and records["numa"].card_modes == ("hami-core",)
    # A hami-core share avoids the idle mps cards 0 and 1: the one hami-core card left.
    assert run("core", _gpu(core=10, mem=1024), {"nvidia.com/vgpu-mode": "hami-core"}) == (2,)
    # An mps share lands on an mps card.
    [mps] = run("mps", _gpu(core=10, mem=1024), {"nvidia.com/vgpu-mode": "mps"})
    assert MODES[mps] == "mps" and records["mps"].card_modes == ("mps",)
