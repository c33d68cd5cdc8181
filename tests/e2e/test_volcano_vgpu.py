"""Volcano's vGPU contract on a dev cluster of the ``volcano-vgpu`` agent profile: real API
server, kube-scheduler with the allocator process as extender and binder, KWOK holding each
pod Pending until ``volcano.sh/bind-phase: success``, and the node stand-in playing Volcano's
vGPU device plugin on every node (devcluster/volcano_plugin.py: its ``GetPendingPod`` serves
the oldest pod of the node by ``volcano.sh/vgpu-time`` holding the device count kubelet asks,
whichever pod kubelet starts, and never releases ``volcano.sh/mutex.lock``).

What each container would see (the stand-in's record on the pod) is compared with Tessera's
record: a pod served another pod's devices shows as a container off its record.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from typing import Any

import pytest
from dev_clusters import running
from kubernetes.client.exceptions import ApiException

from allocator.hami.codec import VOLCANO_VGPU
from allocator.kube.client import KubeClient
from devcluster.binaries import Binaries
from devcluster.checks import allocation_problems
from devcluster.cluster import DevCluster
from devcluster.hami_node import device_uuid, node_envs
from devcluster.nodes import delete_nodes, uniform
from devcluster.options import Options
from devcluster.workloads import container, ensure_namespace, make_pod, wait_for
from kubectl_tessera.report import CardInfo
from tessera.agent_profiles import AgentProfile
from tessera.vocabulary import decode_allocation

pytestmark = pytest.mark.e2e

MIB = 15360
_count = itertools.count()

#: Every form the webhook reads for Volcano vGPU (tests/unit/test_dialects.py, docs/dialects.md).
FORMS: dict[str, dict[str, str]] = {
    "whole": {"volcano.sh/vgpu-number": "1"},
    "whole2": {"volcano.sh/vgpu-number": "2"},
    "memory": {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "3000"},
    "memory-cores": {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "3000",
                     "volcano.sh/vgpu-cores": "50"},
    "percent-cores": {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory-percentage": "25",
                      "volcano.sh/vgpu-cores": "25"},
    "cores": {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-cores": "30"},
    "memory-alone": {"volcano.sh/vgpu-memory": "1024"},
    "cores-100": {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-cores": "100"},
}


@pytest.fixture(scope="module")
def cluster(binaries: Binaries, request: pytest.FixtureRequest) -> Iterator[DevCluster]:
    """A dev cluster of its own: volcano-vgpu profile, the stand-in on every node."""
    dev = DevCluster(binaries, None, Options(agent_profile=AgentProfile.VOLCANO_VGPU,
                                             webhook_args=("--dialects=volcano",),
                                             allocator_args=("--dialects=volcano",)))
    with running(dev, request, "volcano-vgpu dev cluster"):
        yield dev


@pytest.fixture
def core_v1(cluster: DevCluster) -> Any:
    return cluster.core_v1()


@pytest.fixture
def api(cluster: DevCluster) -> KubeClient:
    return KubeClient.from_config(
        str(cluster.control_plane.kubeconfig_path("tessera-allocator")))


@pytest.fixture
def namespace(core_v1: Any) -> Iterator[str]:
    name = f"volcano-{next(_count)}"
    ensure_namespace(core_v1, name)
    yield name
    core_v1.delete_namespace(name)


def _phases(core_v1: Any, namespace: str) -> dict[str, str]:
    return {p.metadata.name: p.status.phase
            for p in core_v1.list_namespaced_pod(namespace).items}


def _off_record(pod: dict[str, Any], cluster: DevCluster) -> list[str]:
    """Containers that see other cards, cores or memory than Tessera's record says."""
    annotations = pod["metadata"]["annotations"]
    chosen = decode_allocation(annotations[cluster.vocabulary.allocation_annotation])
    node = pod["spec"]["nodeName"]
    envs = node_envs(pod)
    problems = []
    for c in chosen.containers:
        env = envs.get(c.name)
        want = sorted(device_uuid(node, i) for i in c.card_indices)
        if env is None or sorted(env["NVIDIA_VISIBLE_DEVICES"].split(",")) != want:
            problems.append(f"{pod['metadata']['name']}/{c.name}: sees {env}, record {c}")
            continue
        cores = "100" if c.is_whole else str(c.core_percent)
        memory = f"{MIB}m" if c.is_whole else f"{c.memory_mib}m"
        if (env["CUDA_DEVICE_SM_LIMIT"], env["CUDA_DEVICE_MEMORY_LIMIT_0"]) != (cores, memory):
            problems.append(f"{pod['metadata']['name']}/{c.name}: {env} != {c}")
    return problems


def _record_problems(pod: dict[str, Any], cluster: DevCluster, cards: int) -> list[str]:
    """The shared oracle (devcluster/checks.py) on the pod's record, less its checks of
    elastic-gpu-agent's keys: the volcano-vgpu profile writes Volcano's (checked above)."""
    elastic = (f"agent annotation {cluster.vocabulary.domain}/container-",
               f"{cluster.vocabulary.domain}/assumed annotation missing")
    found = allocation_problems(pod, [CardInfo(i, "Tesla-T4", MIB) for i in range(cards)],
                                cluster.vocabulary)
    return [p for p in found if not p.startswith(elastic)]


def test_a_pod_of_each_volcano_vgpu_form_runs_on_its_record(
        cluster: DevCluster, core_v1: Any, namespace: str, api: KubeClient) -> None:
    names = [f"{namespace}-f{i}" for i in range(2)]
    cluster.add_nodes([uniform(n, 8, "Tesla-T4", MIB, labels={"volcano-forms": namespace})
                       for n in names])
    try:
        for form, limits in FORMS.items():
            pod = make_pod(form, [container("main", limits)])
            pod["spec"]["nodeSelector"] = {"volcano-forms": namespace}
            core_v1.create_namespaced_pod(namespace, pod)
        wait_for("every form Running", lambda: set(_phases(core_v1, namespace).values())
                 == {"Running"}, timeout=240, interval=1)
        problems = []
        for form in FORMS:
            pod = api.get_pod(namespace, form) or {}
            assert pod["metadata"]["annotations"][VOLCANO_VGPU.bind_phase_key] == "success"
            problems += _off_record(pod, cluster) + _record_problems(pod, cluster, 8)
        assert problems == []
    finally:
        delete_nodes(core_v1, names)


def test_a_pod_with_two_gpu_containers_is_refused_at_creation_naming_the_plugin(
        core_v1: Any, namespace: str) -> None:
    """volcano-vgpu-device-plugin v1.12.0 getOldestPod (pkg/util/util.go:88-98) matches the
    pod's total device count against one container's: such a pod would never start."""
    limits = {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-cores": "30"}
    pod = make_pod("two", [container("a", limits), container("b", limits)])
    with pytest.raises(ApiException) as refused:
        core_v1.create_namespaced_pod(namespace, pod)
    assert refused.value.status == 422
    body = str(refused.value.body)
    assert "volcano-vgpu-device-plugin" in body and "one GPU container per pod" in body
    assert _phases(core_v1, namespace) == {}


STORM_PODS = 40  # of 25% + 3840 MiB: 4 per card, 32 fit on 4 x 2 cards, 8 stay Pending


def test_a_storm_on_several_nodes_with_an_allocator_restart_overcommits_nothing(
        cluster: DevCluster, core_v1: Any, namespace: str, api: KubeClient) -> None:
    names = [f"{namespace}-s{i}" for i in range(4)]
    cluster.add_nodes([uniform(n, 2, "Tesla-T4", MIB, labels={"volcano-storm": namespace})
                       for n in names])
    fit = 4 * 2 * 4
    started = time.monotonic()
    try:
        def create(numbers: range) -> None:
            for i in numbers:
                pod = make_pod(f"s{i}", [container("main", {
                    "volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-cores": "25",
                    "volcano.sh/vgpu-memory": "3840"})])
                pod["spec"]["nodeSelector"] = {"volcano-storm": namespace}
                core_v1.create_namespaced_pod(namespace, pod)

        def running() -> int:
            return sum(1 for p in _phases(core_v1, namespace).values() if p == "Running")

        # Half the storm, then a restart while its pods bind, then the other half: the new
        # allocator rebuilds its picture from the API and places the rest around it.
        create(range(STORM_PODS // 2))
        wait_for("a quarter of the storm running", lambda: running() >= fit // 4,
                 timeout=300, interval=0.2)
        cluster.services.restart_allocator()
        create(range(STORM_PODS // 2, STORM_PODS))
        wait_for("every pod that fits running", lambda: running() >= fit, timeout=600,
                 interval=2)
        elapsed = time.monotonic() - started
        time.sleep(5)  # room for a wrong extra bind to show
        phases = _phases(core_v1, namespace)
        assert sorted(phases.values()).count("Running") == fit, phases
        cores: dict[str, int] = {}
        memory: dict[str, int] = {}
        problems = []
        for name, phase in phases.items():
            pod = api.get_pod(namespace, name) or {}
            if phase != "Running":
                assert not pod["spec"].get("nodeName"), name  # unbound: holds nothing
                continue
            problems += _off_record(pod, cluster) + _record_problems(pod, cluster, 2)
            for env in node_envs(pod).values():
                [uuid] = env["NVIDIA_VISIBLE_DEVICES"].split(",")
                cores[uuid] = cores.get(uuid, 0) + int(env["CUDA_DEVICE_SM_LIMIT"])
                memory[uuid] = memory.get(uuid, 0) + int(
                    env["CUDA_DEVICE_MEMORY_LIMIT_0"].removesuffix("m"))
        assert problems == []
        assert max(cores.values()) <= 100 and max(memory.values()) <= MIB
        assert sum(cores.values()) == fit * 25
    finally:
        delete_nodes(core_v1, names)
    print(f"\nvolcano-vgpu storm: {fit} of {STORM_PODS} pods Running on 4 x 2 cards in "
          f"{elapsed:.0f}s with an allocator restart (shared machine)")
