"""HAMi as the node agent: inventory from the register annotation, the bind's annotations and
node lock, bind-phase failed, and pods a hami-scheduler placed read back."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from alloc_harness import NOW, synced_allocator
from builders import VOCAB, make_gpu_pod, make_node, request, share, whole
from fake_kube import FakeKube

from allocator.agents.hami import HamiAgent
from allocator.agents.port import NodeAgent
from allocator.errors import BindError
from allocator.hami.codec import (
    HAMI,
    HAMI_V28,
    VOLCANO_VGPU,
    DeviceShare,
    decode_pod_devices,
    encode_lock,
    parse_lock,
)
from allocator.hami.described import registered_cards
from allocator.hami.lock import LockSettings, NodeLocks, NodeLockTimeout
from allocator.hami.register import RegisteredDevice, encode_register_json, encode_register_text
from allocator.hami.writer import (
    CORDON_ANNOTATION,
    NodeDevices,
    allocation_of,
    bind_annotations,
    bind_labels,
    cards_of,
    read_devices,
    shares_of,
)
from allocator.picture.inventory import read_inventory
from allocator.ranking.cards import NodeState, empty_node
from allocator.ranking.fit import Placement, place
from allocator.ranking.policies import REGISTRY, PolicyContext, chooser
from tessera.agent_profiles import AgentProfile
from tessera.dialects import DialectConfig
from tessera.vocabulary import Allocation, ContainerAllocation

UUIDS = [f"GPU-{i:08d}-aaaa-bbbb-cccc-000000000000" for i in range(4)]

HAMI_PROFILE = DialectConfig(agent_profile=AgentProfile.HAMI)


def _devices(count: int = 4, split: int = 10, unhealthy: tuple[int, ...] = ()
             ) -> tuple[RegisteredDevice, ...]:
    return tuple(RegisteredDevice(UUIDS[i], i, split, 16384, 100, "NVIDIA-Tesla T4",
                                  healthy=i not in unhealthy) for i in range(count))


def hami_node(name: str = "n1", count: int = 4, flavor: Any = HAMI, text: bool = False,
              **kw: Any) -> dict[str, Any]:
    node = make_node(name, count=count)
    devices = _devices(count, **kw)
    node["metadata"]["annotations"][flavor.register_key] = (
        encode_register_text(devices, flavor) if text else encode_register_json(devices))
    return node


# --------------------------------------------------------------------------- inventory


def test_inventory_from_register_leaves_out_unhealthy_and_cordoned_cards() -> None:
    node = hami_node(unhealthy=(1,))
    node["metadata"]["annotations"][CORDON_ANNOTATION] = f"{UUIDS[3]}, other"
    inv = read_inventory(node, VOCAB, own_description=registered_cards)
    assert inv.source == "hami" and not inv.problem
    assert [(c.index, c.model, c.memory_mib) for c in inv.cards] == [
        (0, "Tesla T4", 16384), (2, "Tesla T4", 16384)]


@pytest.mark.parametrize("flavor", [HAMI, VOLCANO_VGPU])
def test_inventory_from_the_text_forms(flavor: Any) -> None:
    inv = read_inventory(hami_node(flavor=flavor, text=True), VOCAB,
                         own_description=registered_cards)
    assert inv.source == "hami" and [c.index for c in inv.cards] == [0, 1, 2, 3]


def test_unreadable_register_is_a_problem_and_the_next_source_is_used() -> None:
    node = make_node("n1", count=2)
    node["metadata"]["annotations"][HAMI.register_key] = "[{broken"
    inv = read_inventory(node, VOCAB, own_description=registered_cards)
    assert inv.source == "allocatable" and "hami.io/node-nvidia-register" in inv.problem


def test_split_count_zero_takes_nothing() -> None:
    devices = read_devices({HAMI.register_key: encode_register_json(_devices(2, split=0))})
    assert devices is not None and cards_of(devices) == ()


# --------------------------------------------------------------------------- writer


def _pod_with_init(prep_core: int = 10) -> dict[str, Any]:
    pod = make_gpu_pod("p", request(share("prep", core=prep_core, mem=1024, init=True),
                                    share("main", core=30, mem=2048)), uid="u")
    pod["spec"]["containers"].append({"name": "side", "image": "busybox"})  # no GPU
    return pod


def _alloc() -> Allocation:
    return Allocation("n1", (ContainerAllocation("prep", (1,), 10, 1024, init=True),
                             ContainerAllocation("main", (0, 2), 30, 2048)))


def _node_devices() -> NodeDevices:
    devices = read_devices({HAMI.register_key: encode_register_json(_devices())})
    assert devices is not None
    return devices


def test_bind_annotations_init_first_for_v29_and_gpu_less_containers_empty() -> None:
    out = bind_annotations(_alloc(), _pod_with_init(), _node_devices(), HAMI, NOW + 0.9)
    assert isinstance(out, dict)
    expected = (f"{UUIDS[1]},NVIDIA,1024,10:;"
                f"{UUIDS[0]},NVIDIA,2048,30:{UUIDS[2]},NVIDIA,2048,30:;;")
    assert out == {
        "hami.io/vgpu-node": "n1", "hami.io/vgpu-time": str(int(NOW)),
        "hami.io/vgpu-devices-to-allocate": expected,
        "hami.io/vgpu-devices-allocated": expected,
        "hami.io/bind-phase": "allocating", "hami.io/bind-time": str(int(NOW)),
    }


def test_a_gpu_init_container_gets_the_first_app_containers_cards_in_the_hami_profile() -> None:
    # The hami profile places a GPU init container on the cards of the first GPU app
    # container (it asks for the same): kubelet hands its devices on to that container
    # (devicesToReuse) and with enableGetPreferredAllocation HAMi's Allocate follows them.
    pod = make_gpu_pod("p", request(share("main", core=30, mem=2048)), uid="u")
    prep = {"name": "prep", "image": "busybox", "resources": {"limits": {
        "nvidia.com/gpu": "1", "nvidia.com/gpucores": "30", "nvidia.com/gpumem": "2048"}}}
    pod["spec"]["initContainers"] = [{"name": "cpu-only", "image": "busybox"}, prep]
    alloc = Allocation("n1", (ContainerAllocation("main", (2,), 30, 2048),))
    out = bind_annotations(alloc, pod, _node_devices(), HAMI, NOW)
    assert isinstance(out, dict)
    main = f"{UUIDS[2]},NVIDIA,2048,30:"
    assert out["hami.io/vgpu-devices-to-allocate"] == f";{main};{main};"


def _init(name: str, limits: dict[str, str]) -> dict[str, Any]:
    return {"name": name, "image": "busybox", "resources": {"limits": limits}}


def test_each_gpu_init_container_gets_its_own_share_on_the_first_of_the_apps_cards() -> None:
    # The looser rule (docs/hami-plugin.md "Init containers"): an init container asking k devices,
    # each no larger than the first GPU app container's, is written on the first k of that
    # container's cards with its OWN share; the allocation holds the app containers only.
    pod = make_gpu_pod("p", request(whole("main", cards=3)), uid="u")
    pod["spec"]["initContainers"] = [
        _init("small", {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "20",
                        "nvidia.com/gpumem": "1000"}),
        _init("cpu-only", {}),
        _init("two", {"nvidia.com/gpu": "2"}),  # HAMi: a count alone is whole cards
        _init("pct", {"nvidia.com/gpu": "2", "nvidia.com/gpucores": "10",
                      "nvidia.com/gpumem-percentage": "25"}),
    ]
    alloc = Allocation("n1", (ContainerAllocation("main", (2, 3, 0)),))
    out = bind_annotations(alloc, pod, _node_devices(), HAMI, NOW)
    assert isinstance(out, dict)
    entries = [[(s.uuid, s.memory_mib, s.cores) for s in e]
               for e in shares_of(out[HAMI.to_allocate_key])]
    assert entries == [
        [(UUIDS[2], 1000, 20)],
        [],
        [(UUIDS[2], 16384, 100), (UUIDS[3], 16384, 100)],
        [(UUIDS[2], 4096, 10), (UUIDS[3], 4096, 10)],  # 25% of a 16 GiB card
        [(UUIDS[2], 16384, 100), (UUIDS[3], 16384, 100), (UUIDS[0], 16384, 100)],
    ]
    assert out[HAMI.allocated_key] == out[HAMI.to_allocate_key]


def test_an_init_container_under_a_share_on_two_cards_takes_the_first() -> None:
    pod = make_gpu_pod("p", request(share("main", core=30, mem=2048, shares=2)), uid="u")
    pod["spec"]["initContainers"] = [_init("prep", {
        "nvidia.com/gpu": "1", "nvidia.com/gpucores": "30", "nvidia.com/gpumem": "512"})]
    alloc = Allocation("n1", (ContainerAllocation("main", (1, 3), 30, 2048),))
    out = bind_annotations(alloc, pod, _node_devices(), HAMI, NOW)
    assert isinstance(out, dict)
    assert out[HAMI.to_allocate_key] == (
        f"{UUIDS[1]},NVIDIA,512,30:;{UUIDS[1]},NVIDIA,2048,30:{UUIDS[3]},NVIDIA,2048,30:;")


@pytest.mark.parametrize(("limits", "why"), [
    ({"nvidia.com/gpu": "3", "nvidia.com/gpucores": "10", "nvidia.com/gpumem": "100"},
     "asks for 3 devices, more than 'main' has"),
    ({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "31", "nvidia.com/gpumem": "100"},
     "asks for more of card 1 than 'main'"),
    ({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "10", "nvidia.com/gpumem": "2049"},
     "asks for more of card 1 than 'main'"),
    ({"nvidia.com/gpu": "1"}, "asks for more of card 1 than 'main'"),  # a whole card
    ({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "ten"}, "nvidia.com/gpucores"),
], ids=["more-devices", "more-cores", "more-memory", "whole-over-share", "unreadable"])
def test_an_init_container_asking_more_than_its_app_container_is_not_bound(
        limits: dict[str, str], why: str) -> None:
    # Admission and filter refuse these (tessera/agent_profiles/refusals.py); a pod whose
    # spec says otherwise at bind is not written (nothing would be counted twice).
    pod = make_gpu_pod("p", request(share("main", core=30, mem=2048, shares=2)), uid="u")
    pod["spec"]["initContainers"] = [_init("prep", limits)]
    alloc = Allocation("n1", (ContainerAllocation("main", (1, 3), 30, 2048),))
    out = bind_annotations(alloc, pod, _node_devices(), HAMI, NOW)
    assert isinstance(out, str) and why in out


def test_a_malformed_init_container_is_not_a_gpu_one_and_crashes_nothing() -> None:
    pod = make_gpu_pod("p", request(share("main", core=30, mem=2048)), uid="u")
    pod["spec"]["initContainers"] = [{"name": "a", "resources": ["nvidia.com/gpu"]},
                                     {"name": "b", "resources": {"limits": "1"}}]
    alloc = Allocation("n1", (ContainerAllocation("main", (1,), 30, 2048),))
    out = bind_annotations(alloc, pod, _node_devices(), HAMI, NOW)
    assert isinstance(out, dict)
    assert out[HAMI.to_allocate_key] == f";;{UUIDS[1]},NVIDIA,2048,30:;"


def test_a_gpu_init_container_without_a_gpu_app_container_is_not_bound() -> None:
    pod = make_gpu_pod("p", request(share("main", core=30, mem=2048)), uid="u")
    pod["spec"]["initContainers"] = [_init("prep", {"nvidia.com/gpu": "1"})]
    alloc = Allocation("n1", ())
    out = bind_annotations(alloc, pod, _node_devices(), HAMI, NOW)
    assert out == "init container 'prep' asks for a GPU but no app container does"


def test_bind_annotations_v28_and_volcano_refuse_a_gpu_init_container() -> None:
    for flavor in (HAMI_V28, VOLCANO_VGPU):
        out = bind_annotations(_alloc(), _pod_with_init(), _node_devices(), flavor, NOW)
        assert isinstance(out, str) and "init container 'prep'" in out


def test_bind_annotations_whole_card_is_its_memory_and_all_cores() -> None:
    pod = make_gpu_pod("p", request(whole("main", cards=2)), uid="u")
    alloc = Allocation("n1", (ContainerAllocation("main", (2, 3)),))
    out = bind_annotations(alloc, pod, _node_devices(), VOLCANO_VGPU, NOW)
    assert isinstance(out, dict)
    assert out["volcano.sh/devices-to-allocate"] == (
        f"{UUIDS[2]},NVIDIA,16384,100:{UUIDS[3]},NVIDIA,16384,100:")
    assert out["volcano.sh/vgpu-ids-new"] == out["volcano.sh/devices-to-allocate"]


def test_bind_annotations_unknown_card_is_refused() -> None:
    pod = make_gpu_pod("p", request(share("main", core=10)), uid="u")
    alloc = Allocation("n1", (ContainerAllocation("main", (7,), 10, 0),))
    assert "card 7" in str(bind_annotations(alloc, pod, _node_devices(), HAMI, NOW))


@pytest.mark.parametrize(("flavor", "labels"), [
    (HAMI, {"hami.io/vgpu-node": "n1"}),  # vGPUmonitor lists a node's pods by it
    (HAMI_V28, {"hami.io/vgpu-node": "n1"}),
    (VOLCANO_VGPU, {}),  # volcano-vgpu's monitor lists every pod
])
def test_bind_labels_carry_the_node_where_hamis_monitor_selects_by_it(
        flavor: Any, labels: dict[str, str]) -> None:
    assert bind_labels("n1", flavor) == labels
    assert bind_labels("", flavor) == {}


# --------------------------------------------------------------------------- read back


def test_allocation_of_reads_hami_schedulers_pods_back() -> None:
    pod = _pod_with_init()
    pod["spec"]["nodeName"] = "n1"
    out = bind_annotations(_alloc(), pod, _node_devices(), HAMI, NOW)
    assert isinstance(out, dict)
    pod["metadata"]["annotations"].update(out)
    back = allocation_of(pod, _node_devices())
    assert isinstance(back, Allocation)
    assert back.containers == _alloc().containers and back.pod_uid == "u"
    # hami-scheduler's whole card: nvidia.com/gpu: 1 alone is all the memory and 0 cores.
    pod["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"] = (
        f";{UUIDS[3]},NVIDIA,16384,0:;;")
    back = allocation_of(pod, _node_devices())
    assert isinstance(back, Allocation)
    assert back.containers == (ContainerAllocation("main", (3,), 0, 0),)
    pod["metadata"]["annotations"]["hami.io/bind-phase"] = "failed"
    assert allocation_of(pod, _node_devices()) is None
    pod["metadata"]["annotations"]["hami.io/bind-phase"] = "success"
    pod["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"] = "GPU-gone,NVIDIA,1,1:;"
    assert "not registered" in str(allocation_of(pod, _node_devices()))


# --------------------------------------------------------------------------- node lock


class _Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


def _locks(fake: FakeKube, clock: _Clock, wait: float = 0.5) -> NodeLocks:
    return NodeLocks(fake, HAMI, LockSettings(wait_seconds=wait, first_poll_seconds=0.001,
                                              max_poll_seconds=0.005), clock=clock)


def _lock_value(fake: FakeKube) -> str | None:
    return (fake.nodes["n1"]["metadata"]["annotations"] or {}).get(HAMI.lock_key)


def test_lock_taken_with_the_resource_version_precondition_and_released() -> None:
    fake, clock = FakeKube(), _Clock()
    fake.add_node(hami_node())
    locks = _locks(fake, clock)
    locks.acquire("n1", "default", "p")
    assert _lock_value(fake) == encode_lock(NOW, "default", "p")
    locks.acquire("n1", "default", "p")  # ours already: taken again at once
    locks.release("n1", "default", "q")  # not ours: left
    assert _lock_value(fake) is not None
    locks.release("n1", "default", "p")
    assert _lock_value(fake) is None


def test_a_held_lock_is_waited_for_and_taken_when_the_plugin_releases_it() -> None:
    fake, clock = FakeKube(), _Clock()
    fake.add_node(hami_node())
    fake.add_pod(make_gpu_pod("other", uid="o", node="n1"))
    _locks(fake, clock).acquire("n1", "default", "other")
    releaser = threading.Timer(0.05, lambda: fake.patch_node(
        "n1", {"metadata": {"annotations": {HAMI.lock_key: None}}}))
    releaser.start()
    _locks(fake, clock, wait=5).acquire("n1", "default", "p")
    releaser.join()
    assert parse_lock(_lock_value(fake) or "").held_by("default", "p")


def test_a_lock_held_for_the_whole_wait_fails_the_bind_and_a_stale_one_is_taken_over() -> None:
    fake, clock = FakeKube(), _Clock()
    fake.add_node(hami_node())
    fake.add_pod(make_gpu_pod("other", uid="o", node="n1"))
    _locks(fake, clock).acquire("n1", "default", "other")
    with pytest.raises(NodeLockTimeout):
        _locks(fake, clock, wait=0.05).acquire("n1", "default", "p")
    clock.now += 301  # HAMi's five minutes
    _locks(fake, clock).acquire("n1", "default", "p")
    assert parse_lock(_lock_value(fake) or "").held_by("default", "p")


@pytest.mark.parametrize("holder", ["gone", "done", "legacy-old", "garbage"])
def test_dangling_finished_and_unreadable_locks_are_taken_over(holder: str) -> None:
    fake, clock = FakeKube(), _Clock()
    node = hami_node()
    # (checked once the lock is older than a moment: younger ones are just waited for)
    value = {"gone": encode_lock(NOW - 3, "default", "nobody"),
             "done": encode_lock(NOW - 3, "default", "other"),
             "legacy-old": "2020-01-01T00:00:00Z", "garbage": "not a lock"}[holder]
    node["metadata"]["annotations"][HAMI.lock_key] = value
    fake.add_node(node)
    fake.add_pod(make_gpu_pod("other", uid="o", node="n1",
                              extra_annotations={HAMI.bind_phase_key: "success"}))
    _locks(fake, clock).acquire("n1", "default", "p")
    assert parse_lock(_lock_value(fake) or "").held_by("default", "p")


def test_a_young_lock_of_a_finished_pod_is_waited_for_not_checked() -> None:
    fake, clock = FakeKube(), _Clock()
    node = hami_node()
    node["metadata"]["annotations"][HAMI.lock_key] = encode_lock(NOW, "default", "other")
    fake.add_node(node)
    fake.add_pod(make_gpu_pod("other", uid="o", node="n1",
                              extra_annotations={HAMI.bind_phase_key: "success"}))
    with pytest.raises(NodeLockTimeout):
        _locks(fake, clock, wait=0.03).acquire("n1", "default", "p")
    assert ("get_pod", "other") not in fake.calls


def test_binds_beyond_the_waiting_cap_fail_at_once() -> None:
    fake, clock = FakeKube(), _Clock()
    fake.add_node(hami_node())
    fake.add_pod(make_gpu_pod("other", uid="o", node="n1"))
    locks = NodeLocks(fake, HAMI, LockSettings(wait_seconds=5, max_waiting=1), clock=clock)
    locks.acquire("n1", "default", "other")
    outcome: list[BaseException] = []

    def wait() -> None:
        try:
            locks.acquire("n1", "default", "p")
        except NodeLockTimeout as exc:
            outcome.append(exc)

    waiter = threading.Thread(target=wait)
    locks.settings = LockSettings(wait_seconds=0.3, max_waiting=1)
    waiter.start()
    time.sleep(0.05)  # the first waiter is parked
    started = time.monotonic()
    with pytest.raises(NodeLockTimeout, match="already wait"):
        locks.acquire("n1", "default", "q")
    assert time.monotonic() - started < 0.2  # refused, not parked
    waiter.join()
    assert outcome and "locked by" in str(outcome[0])


def test_a_fresh_legacy_lock_is_waited_for() -> None:
    fake, clock = FakeKube(), _Clock()
    node = hami_node()
    node["metadata"]["annotations"][HAMI.lock_key] = encode_lock(NOW, "", "").split(",")[0]
    fake.add_node(node)
    with pytest.raises(NodeLockTimeout):
        _locks(fake, clock, wait=0.03).acquire("n1", "default", "p")


# --------------------------------------------------------------------------- bind


def _hami_setup(req: Any = None) -> tuple[FakeKube, Any]:
    fake = FakeKube()
    fake.add_node(hami_node())
    fake.add_pod(make_gpu_pod("p", req or request(share(core=30, mem=2048)), uid="u-1"))
    return fake, synced_allocator(fake, dialects=HAMI_PROFILE)


def test_bind_takes_the_lock_and_the_binding_carries_hamis_annotations() -> None:
    fake, alloc = _hami_setup()
    out = alloc.bind("default", "p", "u-1", "n1")
    assert out.outcome == "bound"
    annotations = fake.pods[("default", "p")]["metadata"]["annotations"]
    [entry] = decode_pod_devices(annotations[HAMI.to_allocate_key])
    assert entry == (DeviceShare(UUIDS[out.cards[0]], 2048, 30),)
    assert annotations[HAMI.bind_phase_key] == "allocating"
    assert annotations[HAMI.node_key] == "n1"
    # A Binding copies no label: the bind's label patch carries HAMi's monitor label.
    assert fake.pods[("default", "p")]["metadata"]["labels"][HAMI.node_key] == "n1"
    # The lock stays for the plugin to release after Allocate.
    assert parse_lock(_lock_value(fake) or "").held_by("default", "p")
    # The node as the watch showed it served the lock and the annotations: no node read.
    assert [c for c in fake.calls if c[0] == "get_node"] == []


def test_a_failed_binding_gives_the_lock_and_the_cards_back() -> None:
    from allocator.errors import ApiError
    fake, alloc = _hami_setup()
    fake.fail("bind_pod", ApiError("boom", 500))
    with pytest.raises(BindError):
        alloc.bind("default", "p", "u-1", "n1")
    assert _lock_value(fake) is None and alloc.state.record("u-1") is None


def test_a_locked_node_fails_the_bind_after_the_wait_and_keeps_nothing() -> None:
    fake, alloc = _hami_setup()
    fake.add_pod(make_gpu_pod("other", uid="o", node="n1"))
    # Locked through the API (a new resourceVersion), after the allocator's watch saw it.
    fake.patch_node("n1", {"metadata": {"annotations": {
        HAMI.lock_key: encode_lock(NOW, "default", "other")}}})
    assert isinstance(alloc.agent, HamiAgent)
    alloc.agent.locks.settings = LockSettings(wait_seconds=0.05, first_poll_seconds=0.001)
    with pytest.raises(BindError, match="locked"):
        alloc.bind("default", "p", "u-1", "n1")
    assert alloc.state.record("u-1") is None
    assert fake.pods[("default", "p")]["spec"].get("nodeName") is None


def test_bind_phase_failed_gives_the_cards_back() -> None:
    fake, alloc = _hami_setup()
    alloc.bind("default", "p", "u-1", "n1")
    pod = fake.pods[("default", "p")]
    alloc.state.apply_pod(pod)
    assert alloc.state.record("u-1") is not None
    pod["metadata"]["annotations"][HAMI.bind_phase_key] = "failed"
    alloc.state.apply_pod(pod)
    assert alloc.state.record("u-1") is None


# --------------------------------------------------------------------------- migration


def test_pods_hami_scheduler_placed_are_adopted_and_nothing_is_allocated_twice() -> None:
    from alloc_harness import sync

    from allocator.hami.adopt import adopt_placed_pods
    from allocator.picture.state import ClusterState
    fake = FakeKube()
    fake.add_node(hami_node(count=2))
    # hami-scheduler's pods: a whole card 0 (nvidia.com/gpu: 1 alone), 60% of card 1.
    for name, entry in (("whole", f"{UUIDS[0]},NVIDIA,16384,0:;"),
                        ("part", f"{UUIDS[1]},NVIDIA,12000,60:;")):
        pod = make_gpu_pod(name, request(share("main", core=10)), uid=name, node="n1",
                           phase="Running", extra_annotations={
                               HAMI.allocated_key: entry, HAMI.node_key: "n1",
                               HAMI.bind_phase_key: "success"})
        del pod["metadata"]["labels"]  # not Tessera's: no GPU-pod label, no record
        fake.add_pod(pod)
    assert adopt_placed_pods(fake, VOCAB, HAMI).adopted == 2
    assert adopt_placed_pods(fake, VOCAB, HAMI).adopted == 0  # once
    state = ClusterState(VOCAB, watch=NodeAgent())  # the register read, as every agent reads it
    sync(state, fake)
    view = state.view("n1")
    assert view is not None
    used = {c.card.index: (c.whole, c.core_used, c.memory_used_mib) for c in view.state.cards}
    assert used == {0: (True, 100, 16384), 1: (False, 60, 12000)}
    # A new pod asking for 50% of a card fits nowhere: card 0 is whole, card 1 has 40% left.
    fake.add_pod(make_gpu_pod("new", request(share("main", core=50, mem=1024)), uid="new"))
    alloc = synced_allocator(fake, dialects=HAMI_PROFILE)
    with pytest.raises(BindError):
        alloc.bind("default", "new", "new", "n1")


@pytest.mark.parametrize(("dialects", "refused", "why"), [
    (HAMI_PROFILE, "agent profile hami (HAMi's device plugin): init container 'prep'",
     "on each no more than 'main' asks"),
    (DialectConfig(agent_profile=AgentProfile.HAMI, hami_agent="hami-v2.8"),
     "agent profile hami (HAMi's device plugin v2.8): init container 'prep'",
     "app containers only"),
    (DialectConfig(agent_profile=AgentProfile.VOLCANO_VGPU),
     "agent profile volcano-vgpu (volcano-vgpu-device-plugin): init container 'prep'",
     "app containers only"),
], ids=["hami", "hami-v2.8", "volcano-vgpu"])
def test_a_gpu_init_container_admitted_without_the_webhook_is_refused_at_filter(
    dialects: DialectConfig, refused: str, why: str,
) -> None:
    # The allocator applies the webhook's refusals too (read_pod_request): such a pod is
    # unresolvable with the agent named at filter, before any card is reserved for it.
    flavor = HAMI if dialects.agent_profile is AgentProfile.HAMI else VOLCANO_VGPU
    fake = FakeKube()
    fake.add_node(hami_node(flavor=flavor, text=flavor is VOLCANO_VGPU))
    pod = _pod_with_init(prep_core=40)  # more cores than 'main': refused by every profile
    fake.add_pod(pod)
    out = synced_allocator(fake, dialects=dialects).filter(pod, ["n1"])
    assert out.nodes == []
    assert out.unresolvable["n1"].startswith(f"invalid GPU request: {refused}")
    assert why in out.unresolvable["n1"]


def test_the_agent_profile_chooses_the_flavor() -> None:
    fake = FakeKube()
    for profile, flavor in ((AgentProfile.HAMI, HAMI), (AgentProfile.VOLCANO_VGPU, VOLCANO_VGPU),
                            (AgentProfile.ELASTIC, None)):
        agent = synced_allocator(fake, dialects=DialectConfig(agent_profile=profile)).agent
        assert (agent.flavor if isinstance(agent, HamiAgent) else None) is flavor
    older = DialectConfig(agent_profile=AgentProfile.HAMI, hami_agent="hami-v2.8")
    agent = synced_allocator(fake, dialects=older).agent
    assert isinstance(agent, HamiAgent) and agent.flavor is HAMI_V28


def test_a_running_pods_forged_failed_phase_frees_nothing() -> None:
    fake, alloc = _hami_setup()
    alloc.bind("default", "p", "u-1", "n1")
    pod = fake.pods[("default", "p")]
    pod["status"]["phase"] = "Running"
    pod["metadata"]["annotations"][HAMI.bind_phase_key] = "failed"
    alloc.state.apply_pod(pod)
    assert alloc.state.record("u-1") is not None


def test_volcano_binds_of_one_node_wait_until_the_plugin_is_done_with_the_previous_pod() -> None:
    fake, clock = FakeKube(), _Clock()
    fake.add_node(hami_node(flavor=VOLCANO_VGPU, text=True))
    fake.add_pod(make_gpu_pod("first", uid="f", node="n1"))
    locks = NodeLocks(fake, VOLCANO_VGPU, LockSettings(wait_seconds=0.05,
                                                       first_poll_seconds=0.001), clock=clock)
    locks.acquire("n1", "default", "first")
    with pytest.raises(NodeLockTimeout):  # first still allocating
        locks.acquire("n1", "default", "second")
    fake.patch_pod("default", "first", {"metadata": {"annotations": {
        VOLCANO_VGPU.bind_phase_key: "success"}}})
    locks.acquire("n1", "default", "second")
    value = fake.nodes["n1"]["metadata"]["annotations"][VOLCANO_VGPU.lock_key]
    assert parse_lock(value).held_by("default", "second")


def test_a_share_on_each_of_two_cards_is_one_entry_per_card_for_its_container() -> None:
    """HAMi's gpu: 2 with gpumem: 3000, placed on two distinct cards, is written as one
    container's two devices (``uuid,type,mem,cores:`` each, as HAMi's EncodeContainerDevices
    joins a container's devices) and reads back as the same allocation."""
    req = request(share("main", mem=3000, shares=2))
    devices = _node_devices()
    node: NodeState = empty_node("n1", cards_of(devices))
    placed = place(req, node, chooser(REGISTRY["fgd"], PolicyContext(req)), pod_uid="u")
    assert isinstance(placed, Placement)
    alloc = placed.allocation("u", NOW)
    (main,) = alloc.containers
    assert len(set(main.card_indices)) == 2
    pod = make_gpu_pod("p", req, uid="u")
    out = bind_annotations(alloc, pod, devices, HAMI, NOW)
    assert isinstance(out, dict)
    a, b = main.card_indices
    assert out["hami.io/vgpu-devices-to-allocate"] == (
        f"{UUIDS[a]},NVIDIA,3000,0:{UUIDS[b]},NVIDIA,3000,0:;")
    pod["metadata"]["annotations"].update(out)
    pod["spec"]["nodeName"] = "n1"
    back = allocation_of(pod, devices)
    assert isinstance(back, Allocation)
    assert back.containers == alloc.containers
