"""HAMi's contract against the real API server, on a dev cluster of the ``hami`` agent profile
(its webhook shapes every dialect into the pod HAMi's plugin serves): Tessera's allocator (in
process, over a real client) binds, the HAMi node stand-in (devcluster/hami_node.py)
allocates, KWOK holds each pod Pending until the stand-in's ``bind-phase: success``.

kube-scheduler is left out on purpose (the pods name a scheduler nobody runs): these tests
exercise what crosses the API for HAMi (the lock's resourceVersion precondition, the Binding's
annotations, the plugin's patches, the pod lifecycle), each bind called directly.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from dev_clusters import shared

from allocator.agents.hami import HamiAgent
from allocator.agents.profiles import AgentSetup, agent_for
from allocator.errors import BindError
from allocator.hami.adopt import adopt_placed_pods
from allocator.hami.codec import HAMI, encode_lock, parse_lock
from allocator.hami.lock import LockSettings
from allocator.hami.writer import shares_of
from allocator.kube.client import KubeClient
from allocator.picture.state import ClusterState
from allocator.verbs.core import Allocator, AllocatorConfig, assemble
from devcluster.binaries import Binaries, repo_root
from devcluster.cluster import DevCluster
from devcluster.hami_node import HamiNode, fake_devices, node_envs, visible
from devcluster.nodes import delete_nodes, uniform
from devcluster.options import Options
from devcluster.workloads import (
    container,
    ensure_namespace,
    get_object,
    load_documents,
    make_pod,
    pending_reason,
    quantities_as_strings,
    wait_for,
)
from tessera.agent_profiles import AgentProfile
from tessera.dialects import Dialect, DialectConfig
from tessera.vocabulary import (
    Allocation,
    ContainerAllocation,
    decode_allocation,
    encode_allocation,
)

pytestmark = pytest.mark.e2e

NOBODY = "hami-e2e-bound-directly"  # no scheduler runs under this name
MIB = 81920


def _allocator(cluster: DevCluster, api: KubeClient,
               clock: Callable[[], float] = time.time) -> Allocator:
    config = AllocatorConfig(dialects=DialectConfig(agent_profile=AgentProfile.HAMI),
                             node_resources=False)
    agent = agent_for(AgentSetup(config.dialects, api, clock))
    state = ClusterState(cluster.vocabulary, watch=agent)  # the agent reads HAMi's register
    state.replace_nodes(api.list_nodes()[0])
    state.replace_pods(api.list_pods(cluster.vocabulary.gpu_pod_selector)[0])
    state.mark_synced()
    return assemble(state, api, config, clock=clock, agent=agent)


ALL_DIALECTS = (f"--dialects={','.join(Dialect)}",)
_count = itertools.count()


@pytest.fixture(scope="module")
def cluster(binaries: Binaries, request: pytest.FixtureRequest) -> Iterator[DevCluster]:
    """A dev cluster of its own: webhook and allocator in the hami agent profile; the modules
    that import this fixture and run right after this one (test_hami_card_choice,
    test_hami_topology) keep it."""
    with shared(lambda: DevCluster(binaries, None, Options(
            agent_profile=AgentProfile.HAMI, webhook_args=ALL_DIALECTS,
            allocator_args=ALL_DIALECTS, hami_standin=False)),
            request, "hami dev cluster") as dev:
        yield dev


@pytest.fixture
def core_v1(cluster: DevCluster) -> Any:
    return cluster.core_v1()


@pytest.fixture
def namespace(core_v1: Any) -> Iterator[str]:
    name = f"hami-{next(_count)}"
    ensure_namespace(core_v1, name)
    yield name
    core_v1.delete_namespace(name)


@pytest.fixture
def api(cluster: DevCluster) -> KubeClient:
    """The allocator's own identity (its RBAC, and the pod-keys policy lets only it change
    Tessera's keys); the stand-in uses it too."""
    return KubeClient.from_config(
        str(cluster.control_plane.kubeconfig_path("tessera-allocator")))


@pytest.fixture
def hami_node(cluster: DevCluster, core_v1: Any, namespace: str, api: KubeClient,
              request: pytest.FixtureRequest) -> Iterator[HamiNode]:
    """An 8-card node; parametrized indirectly, the param is HAMi's
    ``enableGetPreferredAllocation`` (default false, as HAMi ships)."""
    name = f"{namespace}-h"
    cluster.add_nodes([uniform(name, 8, "H100", MIB)])
    node = HamiNode(api, name, fake_devices(name, 8, memory_mib=MIB),
                    preferred_allocation=bool(getattr(request, "param", False)))
    node.register("2026-11-27T21:00:00Z")
    yield node
    delete_nodes(core_v1, [name])


@pytest.fixture
def t4_node(cluster: DevCluster, core_v1: Any, namespace: str, api: KubeClient
            ) -> Iterator[HamiNode]:
    """Eight T4s (NVIDIA-Tesla-T4, 15 GiB), the model the examples name."""
    name = f"{namespace}-t4"
    cluster.add_nodes([uniform(name, 8, "Tesla-T4", 15360)])
    node = HamiNode(api, name, fake_devices(name, 8, memory_mib=15360, model="NVIDIA-Tesla-T4"))
    node.register("2026-11-27T21:00:00Z")
    yield node
    delete_nodes(core_v1, [name])


def _gpu(core: int = 0, mem: int = 0, cards: int = 0) -> dict[str, str]:
    """HAMi's own dialect: a vGPU count, MiB and cores."""
    if cards:
        return {"nvidia.com/gpu": str(cards)}
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpucores": str(core)}
    if mem:
        limits["nvidia.com/gpumem"] = str(mem)
    return limits


def _create(core_v1: Any, namespace: str, name: str, containers: list[dict[str, Any]],
            inits: list[dict[str, Any]] = ()) -> None:  # type: ignore[assignment]
    pod = make_pod(name, containers, init_containers=inits)
    pod["spec"]["schedulerName"] = NOBODY
    core_v1.create_namespaced_pod(namespace, pod)


def _serve_allocates(node: HamiNode, stop: threading.Event) -> None:
    """The node's plugin: allocate each pod bound there, until ``stop``."""
    while not stop.is_set():
        try:
            if node.allocate_next() is None:
                stop.wait(0.05)
        except Exception:  # an API hiccup: the real plugin is called again by kubelet
            stop.wait(0.1)


def _pod(core_v1: Any, namespace: str, name: str) -> dict[str, Any]:
    return get_object(core_v1.read_namespaced_pod, name, namespace)


def _allocated_and_running(cluster: DevCluster, core_v1: Any, namespace: str, name: str,
                           node: HamiNode) -> tuple[dict[str, Any], Allocation]:
    """The stand-in's plugin runs Allocate for its next pod, which must be ``name``, and the
    pod then runs: (the pod, its allocation record)."""
    assert node.allocate_next() == f"{namespace}/{name}"
    wait_for(f"{name} Running", lambda: _pod(core_v1, namespace, name)["status"].get(
        "phase") == "Running", timeout=60)
    pod = _pod(core_v1, namespace, name)
    return pod, decode_allocation(pod["metadata"]["annotations"][
        cluster.vocabulary.allocation_annotation])


def _whole_cards_shared(pods: list[dict[str, Any]]) -> list[str]:
    """Cards a whole-card container sees that another pod, or another app container of its
    pod, sees too (an init container runs before its pod's app containers)."""
    seen: dict[str, list[tuple[str, str, bool]]] = {}
    for pod in pods:
        inits = {c["name"] for c in pod["spec"].get("initContainers") or []}
        for name, env in node_envs(pod).items():
            whole = env["CUDA_DEVICE_SM_LIMIT"] == "100"
            for card in env["NVIDIA_VISIBLE_DEVICES"].split(","):
                if name not in inits:
                    seen.setdefault(card, []).append((pod["metadata"]["name"], name, whole))
    return [card for card, holders in seen.items()
            if len(holders) > 1 and any(whole for _pod, _c, whole in holders)]


def _assert_under(init: dict[str, Any], env: dict[str, str], cards: set[str]) -> None:
    """An init container saw as many cards as it asks, all of them the first GPU app
    container's, and its own share on each (HAMi's keys: a count alone is whole cards)."""
    limits = init["resources"]["limits"]
    seen = env["NVIDIA_VISIBLE_DEVICES"].split(",")
    assert len(seen) == int(limits["nvidia.com/gpu"]) and set(seen) <= cards, init["name"]
    whole = "nvidia.com/gpumem" not in limits
    assert env["CUDA_DEVICE_SM_LIMIT"] == ("100" if whole else limits["nvidia.com/gpucores"])
    memory = f"{MIB if whole else limits['nvidia.com/gpumem']}m"
    assert [env[f"CUDA_DEVICE_MEMORY_LIMIT_{i}"] for i in range(len(seen))] == [memory] * len(
        seen), init["name"]


def _over_committed(pods: list[dict[str, Any]]) -> dict[str, tuple[int, int]]:
    """Cards whose app containers, over every pod, see more than 100% of cores or more than
    the card's memory (init containers run before their pod's app containers, under them)."""
    used: dict[str, tuple[int, int]] = {}
    for pod in pods:
        inits = {c["name"] for c in pod["spec"].get("initContainers") or []}
        for name, env in node_envs(pod).items():
            if name in inits:
                continue
            for i, card in enumerate(env["NVIDIA_VISIBLE_DEVICES"].split(",")):
                cores, memory = used.get(card, (0, 0))
                used[card] = (cores + int(env["CUDA_DEVICE_SM_LIMIT"]),
                              memory + int(env[f"CUDA_DEVICE_MEMORY_LIMIT_{i}"].rstrip("m")))
    return {card: u for card, u in used.items() if u[0] > 100 or u[1] > MIB}


@pytest.mark.parametrize("hami_node", [False, True], indirect=True,
                         ids=["hami-default", "enableGetPreferredAllocation"])
def test_each_shape_runs_only_after_allocate_with_exactly_the_chosen_cards(
        cluster: DevCluster, core_v1: Any, namespace: str, api: KubeClient,
        hami_node: HamiNode) -> None:
    shapes = {
        "share": ([container("main", _gpu(core=30, mem=8192))], []),
        "whole2": ([container("main", _gpu(cards=2))], []),
        "sidecar": ([container("main", _gpu(core=50, mem=20480)), container("side")], []),
        # A GPU init container asks what the first GPU app container asks (the hami
        # profile refuses otherwise) and runs on its cards under both plugin settings.
        "init": ([container("main", _gpu(core=20, mem=4096))],
                 [container("prep", _gpu(core=20, mem=4096))]),
        "init-whole": ([container("main", _gpu(cards=2)), container("side", _gpu(core=10,
                                                                               mem=1024))],
                       [container("fetch", _gpu(cards=2)), container("cpu"),
                        container("warm", _gpu(cards=2)), container("one", _gpu(cards=1))]),
        # HAMi's looser rule: init containers asking fewer devices or a smaller share run
        # on the first of the app container's cards with their own share, under its record
        # ('one' above too: kubelet hands it one of the two devices 'warm' left).
        "init-under-whole": ([container("main", _gpu(cards=1))],
                             [container("small", _gpu(core=20, mem=2048))]),
        "init-smaller": ([container("main", {**_gpu(core=10, mem=4096), "nvidia.com/gpu": "2"})],
                         [container("both", {**_gpu(core=10, mem=2048),
                                             "nvidia.com/gpu": "2"}),
                          container("less", _gpu(core=5, mem=1024))]),
    }
    for name, (containers, inits) in shapes.items():
        _create(core_v1, namespace, name, containers, inits)
    alloc = _allocator(cluster, api)
    uuid = {d.index: d.uuid for d in hami_node.devices}
    for name in shapes:
        alloc.bind(namespace, name, "", hami_node.node)
        pod = _pod(core_v1, namespace, name)
        assert pod["metadata"]["annotations"][HAMI.bind_phase_key] == "allocating"
        time.sleep(0.5)  # KWOK had time to run it, and must not have
        assert _pod(core_v1, namespace, name)["status"]["phase"] == "Pending"
        pod, chosen = _allocated_and_running(cluster, core_v1, namespace, name, hami_node)
        envs = node_envs(pod)
        gpu_inits = [c["name"] for c in pod["spec"].get("initContainers") or []
                     if "nvidia.com/gpu" in ((c.get("resources") or {}).get("limits") or {})]
        assert set(envs) == {c.name for c in chosen.containers} | set(gpu_inits)
        for c in chosen.containers:
            env = envs[c.name]
            assert sorted(env["NVIDIA_VISIBLE_DEVICES"].split(",")) == sorted(
                uuid[i] for i in c.card_indices), (name, c.name)
            want = ("100", f"{MIB}m") if c.is_whole else (str(c.core_percent),
                                                          f"{c.memory_mib}m")
            assert (env["CUDA_DEVICE_SM_LIMIT"], env["CUDA_DEVICE_MEMORY_LIMIT_0"]) == want
        first = chosen.containers[0]
        for init in pod["spec"].get("initContainers") or []:
            if init["name"] in gpu_inits:  # its own share, on the first app container's cards
                _assert_under(init, envs[init["name"]], {uuid[i] for i in first.card_indices})
        node = api.get_node(hami_node.node) or {}
        assert HAMI.lock_key not in (node["metadata"].get("annotations") or {})
    pods = [_pod(core_v1, namespace, n) for n in shapes]
    assert _whole_cards_shared(pods) == []
    assert _over_committed(pods) == {}
    # HAMi's vGPU monitor lists a node's pods by the label hami-scheduler sets
    # (cmd/vGPUmonitor/metrics.go:389): every pod bound here is found that way.
    listed = core_v1.list_namespaced_pod(
        namespace, label_selector=f"{HAMI.node_key}={hami_node.node}").items
    assert sorted(p.metadata.name for p in listed) == sorted(shapes)


@pytest.mark.parametrize(("init", "words"), [
    (container("prep", _gpu(cards=2)),
     "so it must ask for at most 1 device and on each no more than 'main' asks"),
    (container("prep", _gpu(core=30, mem=2048)),
     "so it must ask for at most 1 device and on each no more than 'main' asks"),
    ({**container("side", _gpu(core=10, mem=1024)), "restartPolicy": "Always"},
     "runs beside the app containers (restartPolicy: Always)"),
], ids=["more-devices", "more-cores", "gpu-sidecar"])
def test_an_init_container_asking_more_than_its_app_container_is_refused_at_creation(
        core_v1: Any, namespace: str, init: dict[str, Any], words: str) -> None:
    """Through the real API server and webhook: refused back to the client naming the plugin
    and its setting, nothing created (docs/hami-plugin.md, "Init containers")."""
    from kubernetes.client.exceptions import ApiException

    with pytest.raises(ApiException) as refused:
        _create(core_v1, namespace, "too-much", [container("main", _gpu(core=20, mem=4096))],
                [init])
    body = str(refused.value.body)
    assert "agent profile hami (HAMi's device plugin): init container" in body
    assert words in body
    if init["name"] == "prep":
        assert "enableGetPreferredAllocation" in body
    with pytest.raises(ApiException):
        core_v1.read_namespaced_pod("too-much", namespace)


def test_a_share_on_each_of_two_cards_runs_on_two_distinct_cards(
        cluster: DevCluster, core_v1: Any, namespace: str, api: KubeClient,
        hami_node: HamiNode) -> None:
    """HAMi's ``nvidia.com/gpu: 2`` with ``gpumem: 3000`` (pkg/device/nvidia/device.go: two
    vGPUs, each its own device): admitted, placed on two cards, and HAMi's plugin (the
    stand-in) gives the container exactly those two, 3000 MiB on each. Its task priority
    (``nvidia.com/priority``) leaves the resources for HAMi-core's variable, as HAMi's
    webhook writes it (device.go:352-358), so nothing is left Pending for it."""
    limits = {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "3000", "nvidia.com/gpucores": "20",
              "nvidia.com/priority": "0"}
    _create(core_v1, namespace, "two", [container("main", limits)])
    created = _pod(core_v1, namespace, "two")
    main_spec = created["spec"]["containers"][0]
    assert main_spec["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert "nvidia.com/priority" not in main_spec["resources"]["limits"]
    assert {"name": "CUDA_TASK_PRIORITY", "value": "0"} in main_spec["env"]
    alloc = _allocator(cluster, api)
    alloc.bind(namespace, "two", "", hami_node.node)
    assert hami_node.allocate_next() == f"{namespace}/two"
    wait_for("two Running", lambda: _pod(core_v1, namespace, "two")["status"].get(
        "phase") == "Running", timeout=60)
    pod = _pod(core_v1, namespace, "two")
    (main,) = decode_allocation(pod["metadata"]["annotations"][
        cluster.vocabulary.allocation_annotation]).containers
    assert len(set(main.card_indices)) == 2
    assert (main.core_percent, main.memory_mib) == (20, 3000)
    uuid = {d.index: d.uuid for d in hami_node.devices}
    env = node_envs(pod)["main"]
    assert env["NVIDIA_VISIBLE_DEVICES"].split(",") == [uuid[i] for i in main.card_indices]
    assert (env["CUDA_DEVICE_MEMORY_LIMIT_0"], env["CUDA_DEVICE_MEMORY_LIMIT_1"]) == (
        "3000m", "3000m")
    assert env["CUDA_DEVICE_SM_LIMIT"] == "20"


def test_kais_fraction_on_two_devices_runs_on_two_distinct_cards(
        cluster: DevCluster, core_v1: Any, namespace: str, api: KubeClient,
        hami_node: HamiNode) -> None:
    """KAI's ``gpu-fraction: 0.5`` on ``gpu-fraction-num-devices: 2`` (KAI v0.13.0
    pod_info.go:458-465): half of each of two cards, shaped in HAMi's keys and run by its
    plugin (the stand-in) on two distinct cards."""
    pod = make_pod("kai2", [container("main")], annotations={
        "gpu-fraction": "0.5", "gpu-fraction-num-devices": "2"})
    pod["spec"]["schedulerName"] = NOBODY
    core_v1.create_namespaced_pod(namespace, pod)
    limits = _pod(core_v1, namespace, "kai2")["spec"]["containers"][0]["resources"]["limits"]
    assert (limits["nvidia.com/gpu"], limits["nvidia.com/gpucores"],
            limits["nvidia.com/gpumem-percentage"]) == ("2", "50", "50")
    _allocator(cluster, api).bind(namespace, "kai2", "", hami_node.node)
    assert hami_node.allocate_next() == f"{namespace}/kai2"
    wait_for("kai2 Running", lambda: _pod(core_v1, namespace, "kai2")["status"].get(
        "phase") == "Running", timeout=60)
    pod = _pod(core_v1, namespace, "kai2")
    (main,) = decode_allocation(pod["metadata"]["annotations"][
        cluster.vocabulary.allocation_annotation]).containers
    assert len(set(main.card_indices)) == 2 and main.core_percent == 50
    uuid = {d.index: d.uuid for d in hami_node.devices}
    env = node_envs(pod)["main"]
    assert env["NVIDIA_VISIBLE_DEVICES"].split(",") == [uuid[i] for i in main.card_indices]
    assert env["CUDA_DEVICE_SM_LIMIT"] == "50"


def test_cards_registered_in_mig_mode_take_no_pod_and_status_says_why(
        cluster: DevCluster, core_v1: Any, namespace: str, api: KubeClient) -> None:
    """A node whose plugin runs in mig mode for cards 0-2 (HAMi v2.10.0 register.go:187): they
    hand out MIG instances, not HAMi-core shares, so Tessera places on card 3 only and says so
    on /status; a second whole card finds none."""
    name = f"{namespace}-mig"
    cluster.add_nodes([uniform(name, 4, "A100", 40960)])
    devices = tuple(replace(d, mode="mig" if d.index < 3 else "hami-core")
                    for d in fake_devices(name, 4, memory_mib=40960, model="NVIDIA-A100"))
    node = HamiNode(api, name, devices)
    node.register("2026-11-27T21:00:00Z")
    try:
        for pod in ("w", "x"):
            _create(core_v1, namespace, pod, [container("main", _gpu(cards=1))])
        alloc = _allocator(cluster, api)
        rows = {n["name"]: n for n in alloc.state.snapshot()["nodes"]}
        assert "cards 0, 1, 2 left out: registered in mig mode" in rows[name]["problem"]
        alloc.bind(namespace, "w", "", name)
        assert node.allocate_next() == f"{namespace}/w"
        wait_for("w Running", lambda: _pod(core_v1, namespace, "w")["status"].get(
            "phase") == "Running", timeout=60)
        assert node_envs(_pod(core_v1, namespace, "w"))["main"][
            "NVIDIA_VISIBLE_DEVICES"] == devices[3].uuid
        with pytest.raises(BindError):
            alloc.bind(namespace, "x", "", name)
    finally:
        delete_nodes(core_v1, [name])


EXAMPLES = sorted((repo_root() / "examples" / "pods").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_every_dialects_example_pod_runs_with_the_cards_and_shares_chosen(
        cluster: DevCluster, core_v1: Any, namespace: str, api: KubeClient,
        t4_node: HamiNode, path: Path) -> None:
    [pod] = [quantities_as_strings(d) for d in load_documents(path)]
    name = pod["metadata"]["name"]
    pod["spec"]["schedulerName"] = NOBODY
    created = core_v1.create_namespaced_pod(namespace, pod).to_dict()
    for c in created["spec"]["containers"]:
        # The hami profile's shape: the vGPU count HAMi's plugin checks stays on the pod.
        assert "nvidia.com/gpu" in (c["resources"]["limits"] or {}), c
    alloc = _allocator(cluster, api)
    alloc.bind(namespace, name, "", t4_node.node)
    pod, chosen = _allocated_and_running(cluster, core_v1, namespace, name, t4_node)
    uuid = {d.index: d.uuid for d in t4_node.devices}
    envs = node_envs(pod)
    for c in chosen.containers:
        assert envs[c.name]["NVIDIA_VISIBLE_DEVICES"].split(",") == [
            uuid[i] for i in c.card_indices]
        if not c.is_whole:
            assert envs[c.name]["CUDA_DEVICE_SM_LIMIT"] == str(c.core_percent)
            assert envs[c.name]["CUDA_DEVICE_MEMORY_LIMIT_0"] == f"{c.memory_mib}m"


def test_a_stale_lock_is_taken_over_and_a_silent_plugin_leaves_nothing_stuck(
        cluster: DevCluster, core_v1: Any, namespace: str, api: KubeClient,
        hami_node: HamiNode) -> None:
    for name in ("a", "b"):
        _create(core_v1, namespace, name, [container("main", _gpu(core=30, mem=4096))])
    node = hami_node.node
    # A lock HAMi left six minutes ago for a pod long gone.
    api.patch_node(node, {"metadata": {"annotations": {
        HAMI.lock_key: encode_lock(time.time() - 360, namespace, "gone")}}})
    alloc = _allocator(cluster, api)
    alloc.bind(namespace, "a", "", node)
    held = (api.get_node(node) or {})["metadata"]["annotations"][HAMI.lock_key]
    assert parse_lock(held).held_by(namespace, "a")
    # The plugin never answers: b waits its bounded time, fails, and keeps nothing.
    assert isinstance(alloc.agent, HamiAgent)
    alloc.agent.locks.settings = LockSettings(wait_seconds=1.0)
    with pytest.raises(BindError, match="locked"):
        alloc.bind(namespace, "b", "", node)
    assert not _pod(core_v1, namespace, "b")["spec"].get("nodeName")
    assert alloc.state.record(_pod(core_v1, namespace, "b")["metadata"]["uid"]) is None
    # Five minutes on, HAMi's own expiry: b's retry takes the lock over.
    later = _allocator(cluster, api, clock=lambda: time.time() + 301)
    later.bind(namespace, "b", "", node)
    assert parse_lock((api.get_node(node) or {})["metadata"]["annotations"][
        HAMI.lock_key]).held_by(namespace, "b")


def test_a_storm_on_one_node_with_an_allocator_restart_overcommits_nothing(
        cluster: DevCluster, core_v1: Any, namespace: str, api: KubeClient,
        hami_node: HamiNode) -> None:
    count = 48  # 8 cards x 5 pods of 20%, and 8 more that must find no room
    for i in range(count):
        _create(core_v1, namespace, f"p{i}", [container("main", _gpu(core=20, mem=8192))])
    stop = threading.Event()
    served: list[str] = []

    def plugin() -> None:
        while not stop.is_set():
            who = hami_node.allocate_next()
            if who is None:
                stop.wait(0.02)
            else:
                served.append(who)

    agent = threading.Thread(target=plugin, daemon=True)
    agent.start()
    outcomes: dict[str, str] = {}

    def bind_all(alloc: Allocator, names: list[str]) -> None:
        def one(name: str) -> None:
            for _attempt in range(300):  # as kube-scheduler tries a refused bind again
                try:
                    alloc.bind(namespace, name, "", hami_node.node)
                    outcomes[name] = "bound"
                    return
                except BindError as exc:
                    outcomes[name] = str(exc)
                    if "try again" not in str(exc):
                        return
                    time.sleep(0.05)

        threads = [threading.Thread(target=one, args=(n,)) for n in names]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)

    started = time.monotonic()
    first = [f"p{i}" for i in range(count // 2)]
    bind_all(_allocator(cluster, api), first)
    # Restart: a new allocator, its picture rebuilt from the API alone.
    bind_all(_allocator(cluster, api), [f"p{i}" for i in range(count // 2, count)])
    wait_for("every bound pod allocated", lambda: len(served) >= sum(
        1 for v in outcomes.values() if v == "bound"), timeout=120)
    elapsed = time.monotonic() - started
    stop.set()
    agent.join(5)
    bound = sorted(n for n, v in outcomes.items() if v == "bound")
    assert len(bound) == 40, outcomes
    per_card: dict[str, int] = {}
    for name in bound:
        pod = _pod(core_v1, namespace, name)
        assert pod["metadata"]["annotations"][HAMI.bind_phase_key] == "success"
        for uuid in visible(node_envs(pod)):
            per_card[uuid] = per_card.get(uuid, 0) + 20
    assert sorted(per_card.values()) == [100] * 8
    print(f"\nhami storm: {len(bound)} pods bound and allocated on one 8-card node in "
          f"{elapsed:.1f}s (shared machine)")


def test_switching_from_hami_scheduler_double_allocates_nothing(
        cluster: DevCluster, core_v1: Any, namespace: str, api: KubeClient,
        hami_node: HamiNode) -> None:
    devices = hami_node.devices
    # What hami-scheduler left on running pods: a whole card 0 and 80% of each other card.
    for i, device in enumerate(devices):
        entry = (f"{device.uuid},NVIDIA,{MIB},0:;" if i == 0
                 else f"{device.uuid},NVIDIA,{MIB * 8 // 10},80:;")
        pod = make_pod(f"old{i}", [container("main", {"nvidia.com/gpu": "1"})],
                       annotations={HAMI.allocated_key: entry, HAMI.node_key: hami_node.node,
                                    HAMI.bind_phase_key: "success"})
        pod["spec"]["nodeName"] = hami_node.node
        core_v1.create_namespaced_pod(namespace, pod)
    assert adopt_placed_pods(api, cluster.vocabulary, HAMI).adopted == len(devices)
    for name, limits in (("fits", _gpu(core=20, mem=4096)), ("nope", _gpu(core=30, mem=4096))):
        _create(core_v1, namespace, name, [container("main", limits)])
    alloc = _allocator(cluster, api)
    out = alloc.bind(namespace, "fits", "", hami_node.node)
    assert out.cards and out.cards[0] != 0
    hami_node.allocate_next()
    with pytest.raises(BindError):
        alloc.bind(namespace, "nope", "", hami_node.node)  # 20% left on cards 1-7, none on 0


STORM_PODS = 300


def test_a_storm_through_kube_scheduler_with_an_allocator_restart_overcommits_nothing(
        cluster: DevCluster, core_v1: Any, namespace: str, api: KubeClient) -> None:
    """The whole path: kube-scheduler, the cluster's allocator (its own process, hami profile)
    as extender and binder, the stand-in on every node; the allocator is restarted mid-storm.
    300 pods of 10% (HAMi's split count, 10, also caps a card at 10) on 4 x 8 cards (320)."""
    names = [f"{namespace}-s{i}" for i in range(4)]
    cluster.add_nodes([uniform(n, 8, "H100", MIB, labels={"hami-storm": namespace})
                       for n in names])
    nodes = [HamiNode(api, n, fake_devices(n, 8, memory_mib=MIB)) for n in names]
    for node in nodes:
        node.register("2026-11-27T21:00:00Z")
    stop = threading.Event()
    agents = [threading.Thread(target=_serve_allocates, args=(n, stop), daemon=True)
              for n in nodes]
    for t in agents:
        t.start()
    started = time.monotonic()
    try:
        for i in range(STORM_PODS):
            pod = make_pod(f"s{i}", [container("main", _gpu(core=10, mem=4096))])
            pod["spec"]["nodeSelector"] = {"hami-storm": namespace}
            core_v1.create_namespaced_pod(namespace, pod)

        def running() -> int:
            pods = core_v1.list_namespaced_pod(namespace).items
            return sum(1 for p in pods if p.status.phase == "Running")

        wait_for("a third of the storm running", lambda: running() >= STORM_PODS // 3,
                 timeout=600, interval=1)
        cluster.services.restart_allocator()
        wait_for("the whole storm running", lambda: running() == STORM_PODS, timeout=900,
                 interval=2)
        elapsed = time.monotonic() - started
    finally:
        stop.set()
        for t in agents:
            t.join(5)
        delete_nodes(core_v1, names)
    by_uuid = {d.uuid: (n.node, d) for n in nodes for d in n.devices}
    cores: dict[str, int] = {}
    tasks: dict[str, int] = {}
    for pod in core_v1.list_namespaced_pod(namespace).items:
        raw = api.get_pod(namespace, pod.metadata.name)
        annotations = raw["metadata"]["annotations"]
        assert annotations[HAMI.bind_phase_key] == "success"
        chosen = decode_allocation(annotations[cluster.vocabulary.allocation_annotation])
        envs = node_envs(raw)
        [c] = chosen.containers
        [uuid] = envs[c.name]["NVIDIA_VISIBLE_DEVICES"].split(",")
        node, device = by_uuid[uuid]
        assert (node, device.index) == (raw["spec"]["nodeName"], c.card_indices[0])
        cores[uuid] = cores.get(uuid, 0) + int(envs[c.name]["CUDA_DEVICE_SM_LIMIT"])
        tasks[uuid] = tasks.get(uuid, 0) + 1
    assert max(cores.values()) <= 100 and max(tasks.values()) <= 10
    assert sum(tasks.values()) == STORM_PODS
    print(f"\nhami storm through kube-scheduler: {STORM_PODS} pods Running on 4 x 8 cards in "
          f"{elapsed:.0f}s with an allocator restart (shared machine)")


def test_the_allocator_adopts_hami_schedulers_pods_at_start_and_schedules_around_them(
        cluster: DevCluster, core_v1: Any, namespace: str, api: KubeClient) -> None:
    """Switching schedulers for real: running pods with hami-scheduler's annotations, the
    allocator process restarted (it adopts them at start), then kube-scheduler and Tessera
    place new pods around them."""
    name = f"{namespace}-m"
    cluster.add_nodes([uniform(name, 8, "H100", MIB, labels={"hami-migrate": namespace})])
    node = HamiNode(api, name, fake_devices(name, 8, memory_mib=MIB))
    node.register("2026-11-27T21:00:00Z")
    try:
        for i, device in enumerate(node.devices):
            entry = (f"{device.uuid},NVIDIA,{MIB},0:;" if i == 0
                     else f"{device.uuid},NVIDIA,{MIB * 8 // 10},80:;")
            pod = make_pod(f"old{i}", [container("main", {"nvidia.com/gpu": "1"})],
                           annotations={HAMI.allocated_key: entry, HAMI.node_key: name,
                                        HAMI.bind_phase_key: "success"})
            pod["spec"]["nodeName"] = name
            core_v1.create_namespaced_pod(namespace, pod)
        # A pod Tessera bound before its bind wrote HAMi's monitor label: its record and
        # HAMi's keys, 10% of card 1, no hami.io/vgpu-node label (back-filled at start).
        one = node.devices[1]
        mine = make_pod("mine", [container("main", {"nvidia.com/gpu": "1"})], annotations={
            HAMI.allocated_key: f"{one.uuid},NVIDIA,{MIB // 10},10:;", HAMI.node_key: name,
            HAMI.bind_phase_key: "success"})
        mine["spec"]["nodeName"] = name
        core_v1.create_namespaced_pod(namespace, mine)
        record = Allocation(name, (ContainerAllocation("main", (one.index,), 10, MIB // 10),))
        api.patch_pod(namespace, "mine", {"metadata": {"annotations": {
            cluster.vocabulary.allocation_annotation: encode_allocation(record)}}})
        before = api.get_pod(namespace, "mine")
        cluster.services.restart_allocator()  # adopts at start, then lists
        stop = threading.Event()

        def plugin() -> None:
            while not stop.is_set():
                if node.allocate_next() is None:
                    stop.wait(0.05)

        agent = threading.Thread(target=plugin, daemon=True)
        agent.start()
        for pod_name, limits in (("big", _gpu(core=30, mem=4096)),
                                 ("small", _gpu(core=20, mem=4096))):
            pod = make_pod(pod_name, [container("main", limits)])
            pod["spec"]["nodeSelector"] = {"hami-migrate": namespace}
            core_v1.create_namespaced_pod(namespace, pod)
        wait_for("small Running", lambda: _pod(core_v1, namespace, "small")["status"].get(
            "phase") == "Running", timeout=120)
        stop.set()
        agent.join(5)
        small = api.get_pod(namespace, "small")
        [uuid] = visible(node_envs(small))
        assert uuid != node.devices[0].uuid  # not the card hami-scheduler gave whole
        # The way back: what hami-scheduler rebuilds its cache from (scheduler.go:144, :160)
        # names the card the plugin gave, and its monitor finds the pod by its label.
        meta = small["metadata"]
        assert meta["annotations"][HAMI.node_key] == meta["labels"][HAMI.node_key] == name
        [[share]] = shares_of(meta["annotations"][HAMI.allocated_key])
        assert share.uuid == uuid
        big = _pod(core_v1, namespace, "big")
        assert big["status"]["phase"] == "Pending" and not big["spec"].get("nodeName")
        # Every placed pod is findable by HAMi's vGPU monitor (cmd/vGPUmonitor/metrics.go:389):
        # hami-scheduler's, labelled with their adoption, and Tessera's own, back-filled with
        # nothing else of it changed.
        for i in range(len(node.devices)):
            assert api.get_pod(namespace, f"old{i}")["metadata"]["labels"][HAMI.node_key] == name
        after = api.get_pod(namespace, "mine")
        assert after["metadata"]["labels"] == {**before["metadata"]["labels"],
                                               HAMI.node_key: name}
        assert after["metadata"]["annotations"] == before["metadata"]["annotations"]
        assert after["spec"] == before["spec"]
    finally:
        delete_nodes(core_v1, [name])


def test_a_card_takes_no_more_pods_than_its_split_count_through_kube_scheduler(
        cluster: DevCluster, core_v1: Any, namespace: str, api: KubeClient) -> None:
    """HAMi's split count caps the holders of a card (hami-scheduler refuses a device whose
    ``Used`` reached its ``Count``, Project-HAMi/HAMi v2.10.0 pkg/device/nvidia/device.go
    ``Fit``): on two cards registered with split 2, four small pods run, two per card, though
    cores and memory would take ten; the fifth stays Pending with the reason in its event."""
    name = f"{namespace}-split"
    cluster.add_nodes([uniform(name, 2, "H100", MIB, labels={"hami-split": namespace})])
    node = HamiNode(api, name, fake_devices(name, 2, memory_mib=MIB, split=2))
    node.register("2026-11-27T21:00:00Z")
    stop = threading.Event()
    agent = threading.Thread(target=_serve_allocates, args=(node, stop), daemon=True)
    agent.start()
    try:
        for i in range(5):
            pod = make_pod(f"small{i}", [container("main", _gpu(core=10, mem=1024))])
            pod["spec"]["nodeSelector"] = {"hami-split": namespace}
            core_v1.create_namespaced_pod(namespace, pod)

        def running() -> list[str]:
            return [p.metadata.name for p in core_v1.list_namespaced_pod(namespace).items
                    if p.status.phase == "Running"]

        wait_for("four small pods running", lambda: len(running()) == 4, timeout=180)
        [left] = {f"small{i}" for i in range(5)} - set(running())
        message = wait_for("the fifth pod's FailedScheduling event",
                           lambda: pending_reason(core_v1, namespace, left), timeout=60)
    finally:
        stop.set()
        agent.join(5)
        delete_nodes(core_v1, [name])
    assert "no card takes another share; 2 cards at 2 shares (HAMi split count)" in message
    tasks: dict[str, int] = {}
    for pod_name in {f"small{i}" for i in range(5)} - {left}:
        [uuid] = visible(node_envs(api.get_pod(namespace, pod_name)))
        tasks[uuid] = tasks.get(uuid, 0) + 1
    assert tasks == {d.uuid: 2 for d in node.devices}
    assert not _pod(core_v1, namespace, left)["spec"].get("nodeName")
