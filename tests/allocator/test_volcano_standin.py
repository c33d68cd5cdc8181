"""The stand-in as Volcano's vGPU plugin (devcluster/volcano_plugin.py) over the fake API:
it serves the oldest pod of the node by ``volcano.sh/vgpu-time`` holding the count asked,
whichever pod kubelet starts (volcano-vgpu-device-plugin v1.12.0 pkg/util/util.go:58-118)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from builders import make_gpu_pod, make_node, request, share
from fake_kube import FakeKube

from allocator.hami.codec import VOLCANO_VGPU
from allocator.ports import Obj
from devcluster.hami_node import HamiNode, fake_devices, node_envs
from devcluster.volcano_plugin import SERVED_TIME, pending_pod

T = TypeVar("T")


class EveryPodKube(FakeKube):
    """The plugin lists every pod of the cluster (an empty field selector)."""

    def list_pods_by_field(self, field_selector: str,
                           reduce: Callable[[Obj], T]) -> tuple[list[T], str]:
        if field_selector:
            return super().list_pods_by_field(field_selector, reduce)
        with self.lock:
            return [reduce(dict(p)) for p in self.pods.values()], str(self.rv)


def _waiting(fake: FakeKube, standin: HamiNode, name: str, card: int, at: str,
             cores: int = 30) -> dict[str, Any]:
    pod = make_gpu_pod(name, request(share("main", core=cores, mem=1024)), uid=name, node="n1")
    pod["spec"]["containers"][0]["resources"]["limits"]["volcano.sh/vgpu-number"] = "1"
    entry = f"{standin.devices[card].uuid},NVIDIA,1024,{cores}:"
    pod["metadata"]["annotations"].update({
        VOLCANO_VGPU.to_allocate_key: entry, VOLCANO_VGPU.allocated_key: entry,
        VOLCANO_VGPU.node_key: "n1", VOLCANO_VGPU.time_key: at,
        VOLCANO_VGPU.bind_time_key: at, VOLCANO_VGPU.bind_phase_key: "allocating"})
    fake.add_pod(pod)
    return pod


def _standin() -> tuple[FakeKube, HamiNode]:
    fake = EveryPodKube()
    fake.add_node(make_node("n1", count=2))
    return fake, HamiNode(fake, "n1", fake_devices("n1", 2), VOLCANO_VGPU)


def test_the_oldest_pod_by_vgpu_time_is_served_whichever_pod_kubelet_starts() -> None:
    fake, standin = _standin()
    _waiting(fake, standin, "old", card=0, at="100")
    newer = _waiting(fake, standin, "new", card=1, at="200")
    assert (pending_pod(standin, 1) or {})["metadata"]["name"] == "old"
    standin.allocate(newer)  # kubelet starts 'new' first: it gets 'old''s card
    got = node_envs(fake.pods[("default", "new")])
    assert got["main"]["NVIDIA_VISIBLE_DEVICES"] == standin.devices[0].uuid
    old = fake.pods[("default", "old")]["metadata"]["annotations"]
    assert old[VOLCANO_VGPU.bind_phase_key] == "success"
    assert old[VOLCANO_VGPU.time_key] == SERVED_TIME
    assert old[VOLCANO_VGPU.to_allocate_key] == ""
    # 'old' is no longer pending: the next call serves 'new', on its own card.
    assert (pending_pod(standin, 1) or {})["metadata"]["name"] == "new"


def test_one_pod_waiting_at_a_time_runs_on_its_own_card() -> None:
    fake, standin = _standin()
    pod = _waiting(fake, standin, "only", card=1, at="100")
    _waiting(fake, standin, "two-cards", card=0, at="50")  # asks another count: not served
    fake.pods[("default", "two-cards")]["metadata"]["annotations"][
        VOLCANO_VGPU.to_allocate_key] = (f"{standin.devices[0].uuid},NVIDIA,1024,30:"
                                         f"{standin.devices[1].uuid},NVIDIA,1024,30:")
    standin.allocate(pod)
    assert node_envs(fake.pods[("default", "only")])["main"]["NVIDIA_VISIBLE_DEVICES"] == (
        standin.devices[1].uuid)
    # The plugin never touches Volcano's own lock key.
    assert VOLCANO_VGPU.lock_key not in fake.nodes["n1"]["metadata"]["annotations"]
