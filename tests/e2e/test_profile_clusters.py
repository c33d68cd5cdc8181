"""Every agent profile end to end: a dev cluster per profile whose fake nodes advertise that
agent's resources, whose webhook and allocator run with ``--agent-profile`` and whose
kube-scheduler's extender manages that profile's resources (as the chart's ``agentProfile``
renders it). Each seed pod (one per dialect) is created through the real API server and
either keeps the shape that agent serves, is bound, and gets the keys the agent reads (and no
other agent's), or is refused back to the client with the agent named.

The elastic profile is the session cluster of the other e2e tests (tests/e2e/conftest.py);
the others get one cluster each, started once per profile (and one for HAMi v2.8, the hami
profile with ``--hami-agent=hami-v2.8``). The hami and volcano-vgpu clusters run without the
allocator: their pods are shaped and refused here, and bound, allocated and
Running on nodes that carry HAMi's register annotation in tests/e2e/test_hami.py (the HAMi
node stand-in)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from dev_clusters import running

from allocator import agents
from devcluster.binaries import Binaries
from devcluster.cluster import DevCluster
from devcluster.nodes import GpuNodeSpec, Inventory, uniform
from devcluster.options import Options
from devcluster.workloads import (
    container,
    ensure_namespace,
    get_object,
    make_pod,
    quantities_as_strings,
    wait_for,
)
from tessera.agent_profiles import AgentProfile, NodeAgent
from tessera.vocabulary import Vocabulary, decode_allocation, decode_request
from tests.builders import AGENT_SETUPS
from tests.builders import REFUSED_SEEDS as REFUSED

pytestmark = pytest.mark.e2e

NodePool = Callable[[list[GpuNodeSpec]], dict[str, str]]

EXAMPLES = Path(__file__).parents[2] / "examples" / "pods"
VOCABULARY = Vocabulary()
NAMESPACE = "profiles"
#: How each profile's nodes describe their cards: from the agent's own allocatable where it
#: tells cards and memory, GFD labels for nano (it registers no memory), the per-card
#: annotation for HAMi (its count is cards x split count; HAMi's register annotation is read
#: by its own inventory source).
INVENTORY = {
    AgentProfile.NANO_GPU: Inventory.GFD,
    AgentProfile.ALIYUN: Inventory.EVEN,
    AgentProfile.HAMI: Inventory.CARDS,
    AgentProfile.VOLCANO_VGPU: Inventory.EVEN,
}

#: The profiles whose pods this test binds: their nodes are described by what the agent
#: registers (or GFD labels); HAMi's writers need HAMi's register annotation on the node.
BOUND_HERE = frozenset({AgentProfile.NANO_GPU, AgentProfile.ALIYUN})


#: The dev clusters of this module: every agent setup but the session cluster's (elastic).
SETUPS = [s for s, (profile, _) in AGENT_SETUPS.items() if profile in INVENTORY]


@pytest.fixture(scope="module", params=SETUPS)
def profile_cluster(binaries: Binaries, request: pytest.FixtureRequest
                    ) -> Iterator[tuple[DevCluster, str]]:
    """A dev cluster of one agent setup, and its label (the profile, or ``hami-v2.8``)."""
    setup: str = request.param
    profile, hami_agent = AGENT_SETUPS[setup]
    base = os.environ.get("TESSERA_E2E_WORKDIR")
    workdir = Path(base) / f"profile-{setup}" if base else None
    bound_here = profile in BOUND_HERE and agents.writer(profile) is not None
    dev = DevCluster(binaries, workdir, Options(agent_profile=profile, hami_agent=hami_agent,
                                                allocator=bound_here))
    nodes = [uniform(f"{setup}-t4-{i}", 4, "Tesla-T4", 15360,
                     inventory=INVENTORY[profile]) for i in range(2)]
    with running(dev, request, f"{setup} dev cluster", nodes):
        ensure_namespace(dev.core_v1(), NAMESPACE)
        yield dev, setup


def _seed(name: str) -> dict[str, Any]:
    pod: dict[str, Any] = quantities_as_strings(yaml.safe_load((EXAMPLES / name).read_text()))
    pod["spec"]["terminationGracePeriodSeconds"] = 0
    return pod


def _gpu_keys(pod: dict[str, Any]) -> dict[str, set[str]]:
    spec = pod["spec"]
    found: dict[str, set[str]] = {}
    for c in [*(spec.get("initContainers") or []), *spec["containers"]]:
        resources = c.get("resources") or {}
        keys = set(resources.get("limits") or {}) | set(resources.get("requests") or {})
        found[c["name"]] = keys - {"cpu", "memory"}
    return found


SEEDS = sorted(p.name for p in EXAMPLES.glob("*.yaml"))


@pytest.mark.parametrize("seed", SEEDS)
def test_each_seed_pod_keeps_its_agents_shape_and_gets_its_keys_or_is_refused_naming_it(
    profile_cluster: tuple[DevCluster, str], seed: str,
) -> None:
    from kubernetes.client.exceptions import ApiException

    cluster, setup = profile_cluster
    profile = cluster.options.agent_profile
    core_v1 = cluster.core_v1()
    agent = cluster.options.agent
    pod = _seed(seed)
    name = pod["metadata"]["name"]
    why = REFUSED[setup].get(seed)
    if why is not None:
        with pytest.raises(ApiException) as refused:
            core_v1.create_namespaced_pod(NAMESPACE, pod)
        body = str(refused.value.body)
        assert f"agent profile {profile.value} ({agent.name})" in body
        assert why in body
        return
    core_v1.create_namespaced_pod(NAMESPACE, pod)
    created = get_object(core_v1.read_namespaced_pod, name, NAMESPACE)
    # The shape the agent's device plugin serves: its resources and no other GPU key.
    for container_name, keys in _gpu_keys(created).items():
        assert keys <= set(agent.pod_resources), (container_name, keys)
    request = decode_request(created["metadata"]["annotations"][VOCABULARY.request_annotation])
    assert request == agent.placement_request(request)
    if not cluster.options.allocator:
        return

    def bound() -> dict[str, Any] | None:
        obj = get_object(core_v1.read_namespaced_pod, name, NAMESPACE)
        return obj if (obj.get("spec") or {}).get("nodeName") else None

    obj = wait_for(f"{name} bound", bound, timeout=60)
    annotations = obj["metadata"]["annotations"]
    allocation = decode_allocation(annotations[VOCABULARY.allocation_annotation])
    assert [c.name for c in allocation.containers] == [c.name for c in request.containers]
    keys = agents.all_agent_keys(annotations, VOCABULARY)
    writer = agents.writer(profile)
    assert writer is not None and keys
    # Only what this agent reads: every agent key on the pod is its writer's.
    assert all(writer.owns(k, VOCABULARY) for k in keys), keys


def test_the_nodes_advertise_the_agents_resources_and_no_other_agents(
    profile_cluster: tuple[DevCluster, str],
) -> None:
    cluster, setup = profile_cluster
    agent = cluster.options.agent
    node = get_object(cluster.core_v1().read_node, f"{setup}-t4-0")
    allocatable = node["status"]["allocatable"]
    capacity = agent.capacity
    if capacity is not None:
        assert int(allocatable[capacity.count]) == 4 * capacity.per_card
    assert VOCABULARY.core_resource not in allocatable  # elastic-gpu-agent's, not this one's


#: What each setup's webhook does with a GPU init container asking for what its app container
#: asks for: admitted, or refused with these words (the agent's limit; docs/agents.md).
INIT_CONTAINER_OUTCOME = {
    "nano-gpu": "",  # served from the app container's card (kubelet hands its devices on)
    "aliyun": "init container 'warmup'",
    # HAMi v2.9.0+ lists init containers in the pod's device annotation, on the app
    # container's cards (with enableGetPreferredAllocation kubelet hands their devices on).
    "hami": "",
    # GetNextDeviceRequest maps the entries to spec.containers: HAMi v2.8.3
    # nvinternal/plugin/util.go, volcano-vgpu-device-plugin v1.12.0 pkg/util/util.go.
    "hami-v2.8": "init container 'warmup' asks for 50% core and 4096 MiB; HAMi's device plugin "
                 "v2.8 gives devices to app containers only",
    "volcano-vgpu": "init container 'warmup' asks for 50% core and 4096 MiB; "
                    "volcano-vgpu-device-plugin gives devices to app containers only",
}


def test_a_gpu_init_container_is_refused_at_admission_where_the_agent_cannot_serve_it(
    profile_cluster: tuple[DevCluster, str],
) -> None:
    """The same pod through the real API server: its webhook admits it where the agent gives
    the init container devices (hami, i.e. HAMi v2.10.0), and refuses it back to the client,
    naming the agent, where the plugin serves app containers only (volcano-vgpu, HAMi v2.8):
    not bound to sit Pending."""
    from kubernetes.client.exceptions import ApiException

    cluster, setup = profile_cluster
    core_v1 = cluster.core_v1()
    agent = cluster.options.agent
    ask = {"elasticgpu.io/gpu-core": "50", "elasticgpu.io/gpu-memory": "4096"}
    name = "init-gpu"
    pod = make_pod(name, [container("app", limits=ask)],
                   init_containers=[container("warmup", limits=ask)])
    pod["spec"]["schedulerName"] = "nobody-binds-this"  # what is checked is admission
    refusal = INIT_CONTAINER_OUTCOME[setup]
    if refusal:
        with pytest.raises(ApiException) as refused:
            core_v1.create_namespaced_pod(NAMESPACE, pod)
        body = str(refused.value.body)
        assert f"agent profile {agent.profile.value} ({agent.name}): " in body
        assert refusal in body
        with pytest.raises(ApiException):  # nothing was created
            core_v1.read_namespaced_pod(name, NAMESPACE)
        return
    core_v1.create_namespaced_pod(NAMESPACE, pod)
    try:
        created = get_object(core_v1.read_namespaced_pod, name, NAMESPACE)
        init = created["spec"]["initContainers"][0]
        # kubelet calls the agent's plugin for the init container too: it keeps the shape.
        keys = set(init["resources"]["limits"]) - {"cpu", "memory"}
        assert keys and keys <= set(agent.pod_resources)
        annotations = created["metadata"]["annotations"]
        request = decode_request(annotations[VOCABULARY.request_annotation])
        placed = [(c.name, c.init) for c in request.containers]
        # nano and HAMi place the init container on the app container's cards.
        assert placed == [("app", False)]
    finally:
        core_v1.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)


def test_a_cluster_spec_of_another_profile_is_refused_before_start() -> None:
    # The dev cluster refuses to run kube-scheduler with another profile's resources.
    from devcluster import DevClusterError
    from devcluster.cluster import scheduler_setup
    from devcluster.scheduler_config import ExtenderAddress

    address = ExtenderAddress("https://127.0.0.1:1", {})
    shipped, _ = scheduler_setup(Options(agent_profile=AgentProfile.HAMI), VOCABULARY, address)
    names = {r["name"] for e in shipped["extenders"] for r in e.get("managedResources") or []}
    assert names == {r.name for r in NodeAgent(AgentProfile.HAMI).managed_resources()}
    assert "nvidia.com/priority" in names  # HAMi's task priority, as HAMi's chart lists it
    with pytest.raises(DevClusterError):
        scheduler_setup(Options(), Vocabulary("gpu.example.com"), address)
    # An older HAMi release is the hami profile's alone, and both services get its flag.
    with pytest.raises(DevClusterError, match="TESSERA_AGENT_PROFILE=hami"):
        Options(agent_profile=AgentProfile.VOLCANO_VGPU, hami_agent="hami-v2.8")
    older = Options(agent_profile=AgentProfile.HAMI, hami_agent="hami-v2.8")
    assert older.profile_args == ("--agent-profile=hami", "--hami-agent=hami-v2.8")


def test_elastic_an_init_container_runs_on_its_app_containers_card_or_is_refused(
    cluster: DevCluster, core_v1: Any, namespace: str, pool: NodePool,
) -> None:
    """The session cluster runs the elastic profile: an init container asking for what its app
    container asks for is placed on that container's cards (kubelet hands its devices on, and
    elastic-gpu-agent serves it from the app container's annotation); one asking for something
    else is refused naming the agent."""
    from kubernetes.client.exceptions import ApiException

    selector = pool([uniform(f"{namespace}-t4", 2, "Tesla-T4", 15360)])
    whole = {"elasticgpu.io/gpu-core": "100"}
    same = make_pod("same", [container("app", limits=whole)],
                    init_containers=[container("warmup", limits=whole)], node_selector=selector)
    core_v1.create_namespaced_pod(namespace, same)

    def bound() -> dict[str, Any] | None:
        obj = get_object(core_v1.read_namespaced_pod, "same", namespace)
        return obj if (obj.get("spec") or {}).get("nodeName") else None

    annotations = wait_for("same bound", bound, timeout=60)["metadata"]["annotations"]
    allocation = decode_allocation(annotations[VOCABULARY.allocation_annotation])
    assert [(c.name, len(c.card_indices)) for c in allocation.containers] == [("app", 1)]
    (card,) = allocation.containers[0].card_indices
    assert annotations["elasticgpu.io/container-app"] == str(card)
    half = {"elasticgpu.io/gpu-core": "50"}
    differs = make_pod("differs", [container("app", limits=whole)],
                       init_containers=[container("warmup", limits=half)],
                       node_selector=selector)
    with pytest.raises(ApiException) as refused:
        core_v1.create_namespaced_pod(namespace, differs)
    assert "agent profile elastic (elastic-gpu-agent)" in str(refused.value.body)
    assert "exactly the same" in str(refused.value.body)
