"""The agent profiles (tessera/agent_profiles/): per profile the shape a container gets, what
is refused (naming the agent), the request as placed, the extender's managed resources and the
capacity its nodes advertise. Every resource name is the one the agent's source registers; the
file and tag are cited beside each table (and in the module's docstring)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tessera.agent_profiles import (
    AGENTS,
    HAMI_AGENTS,
    AgentProfile,
    Capacity,
    ManagedResource,
    NodeAgent,
    shape_markers,
)
from tessera.dialects import Dialect, DialectConfig
from tessera.vocabulary import (
    ConfigError,
    ContainerRequest,
    PodRequest,
    RequestError,
    Vocabulary,
)
from tests.builders import share, whole

ELASTIC = NodeAgent(AgentProfile.ELASTIC)
NANO = NodeAgent(AgentProfile.NANO_GPU)
ALIYUN = NodeAgent(AgentProfile.ALIYUN)
HAMI = NodeAgent(AgentProfile.HAMI)
VOLCANO = NodeAgent(AgentProfile.VOLCANO_VGPU)
HAMI_V28 = NodeAgent(AgentProfile.HAMI, hami_agent="hami-v2.8")


def pod(*containers: ContainerRequest) -> PodRequest:
    return PodRequest(containers)


# elastic-ai/elastic-gpu-agent v0.4.1 pkg/plugins/base.go registers elasticgpu.io/gpu-core
# (100 devices a card, pkg/plugins/gpushare.go) and elasticgpu.io/gpu-memory (one per MiB).
# nano-gpu-agent 0.3 (elastic-ai/elastic-gpu-agent v0.2.0) pkg/common/const.go ResourceName
# "nano-gpu/gpu-percent", 100 devices a card (pkg/plugins/server.go).
# AliyunContainerService/gpushare-device-plugin v0.3.0 pkg/gpu/nvidia/const.go resourceName
# "aliyun.com/gpu-mem", counted in the plugin's --memory-unit (GiB by default).
# Project-HAMi/HAMi v2.10.0 charts/hami/values.yaml resourceName/resourceMem/resourceCores/
# resourceMemPercentage; a whole card as its webhook writes it (pkg/device/nvidia/device.go
# defaultExclusiveCoreIfNeeded: gpucores 100).
# Project-HAMi/volcano-vgpu-device-plugin v1.12.0 doc/config.md: the volcano.sh/vgpu-* names.
@pytest.mark.parametrize(
    ("agent", "container", "resources"),
    [
        (ELASTIC, share(core=30, mem=1000),
         {"elasticgpu.io/gpu-core": "30", "elasticgpu.io/gpu-memory": "1000"}),
        (ELASTIC, share(core=25, pct=25), {"elasticgpu.io/gpu-core": "25"}),
        (ELASTIC, share(mem=512), {"elasticgpu.io/gpu-memory": "512"}),
        (ELASTIC, whole(cards=2), {"elasticgpu.io/gpu-core": "200"}),
        (NANO, share(core=30, mem=1000), {"nano-gpu/gpu-percent": "30"}),
        (NANO, whole(cards=1), {"nano-gpu/gpu-percent": "100"}),
        (ALIYUN, share(mem=3072), {"aliyun.com/gpu-mem": "3"}),
        (ALIYUN, share(core=10, mem=1000), {"aliyun.com/gpu-mem": "1"}),
        (HAMI, share(core=30, mem=1000),
         {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "30", "nvidia.com/gpumem": "1000"}),
        (HAMI, share(core=20, pct=40),
         {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "20",
          "nvidia.com/gpumem-percentage": "40"}),
        (HAMI, whole(cards=2), {"nvidia.com/gpu": "2", "nvidia.com/gpucores": "100"}),
        (VOLCANO, share(core=50, mem=3000),
         {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-cores": "50",
          "volcano.sh/vgpu-memory": "3000"}),
        (VOLCANO, whole(cards=4),
         {"volcano.sh/vgpu-number": "4", "volcano.sh/vgpu-cores": "100"}),
    ],
    ids=lambda v: v.profile.value if isinstance(v, NodeAgent) else None,
)
def test_a_container_gets_the_resources_its_agent_registers(
    agent: NodeAgent, container: ContainerRequest, resources: dict[str, str],
) -> None:
    shaped = agent.container_resources(container)
    assert shaped == resources
    assert set(shaped) <= set(agent.pod_resources)


def test_the_aliyun_unit_follows_the_plugins_memory_unit() -> None:
    mib = NodeAgent(AgentProfile.ALIYUN, aliyun_unit_mib=1)
    assert mib.container_resources(share(mem=1000)) == {"aliyun.com/gpu-mem": "1000"}


@pytest.mark.parametrize(
    ("agent", "request_", "words"),
    [
        (NANO, pod(whole(cards=2)), ["nano-gpu-agent", "one card"]),
        (NANO, pod(share(mem=2000)), ["nano-gpu-agent", "compute percent only"]),
        (ALIYUN, pod(whole(cards=1)), ["gpushare-device-plugin", "no whole card"]),
        (ALIYUN, pod(share(core=30)), ["gpushare-device-plugin", "memory only"]),
        (ALIYUN, pod(share(core=20, pct=20)), ["gpushare-device-plugin", "memory only"]),
        (ALIYUN, pod(share("a", mem=1024), share("b", mem=1024)),
         ["gpushare-device-plugin", "one GPU container per pod"]),
        (ALIYUN, pod(share("init", mem=1024, init=True), share(mem=1024)),
         ["gpushare-device-plugin", "init container 'init'", "another pod's card"]),
        (ELASTIC, pod(share("init", core=10, init=True), share(core=20)),
         ["elastic-gpu-agent", "exactly the same"]),
        (ELASTIC, pod(whole("init", init=True)),
         ["elastic-gpu-agent", "no app container asks for a GPU"]),
        (NANO, pod(share("init", core=10, init=True), share(core=20)),
         ["nano-gpu-agent", "exactly the same"]),
        # volcano-vgpu-device-plugin v1.12.0 pkg/util/util.go and HAMi v2.8.3
        # pkg/device-plugin/nvidiadevice/nvinternal/plugin/util.go, GetNextDeviceRequest:
        # the pod's device entries are p.Spec.Containers' (app containers only).
        (VOLCANO, pod(share("init", core=10, init=True), share(pct=30, core=30)),
         ["volcano-vgpu-device-plugin", "init container 'init'", "app containers only"]),
        (HAMI_V28, pod(whole("init", init=True), share(core=10, mem=100)),
         ["HAMi's device plugin v2.8", "init container 'init'", "app containers only",
          "HAMi v2.9.0 or later"]),
        # HAMi v2.10.0 server.go Allocate (alignContainerDevicesWithAllocatedIDs) with
        # kubelet's devicesToReuse: the app container runs on the init container's cards.
        (HAMI, pod(whole("init", init=True), share(core=10, mem=100)),
         ["HAMi's device plugin", "enableGetPreferredAllocation",
          "at most 1 device and on each no more than 'main' asks"]),
        (HAMI, pod(share("init", core=10, mem=100, init=True)),
         ["HAMi's device plugin", "no app container asks for a GPU"]),
        # volcano-vgpu-device-plugin v1.12.0 pkg/util/util.go:88-98 getOldestPod: the pod's
        # total device count must equal one container's.
        (VOLCANO, pod(share(core=10), share("b", pct=30, core=30)),
         ["volcano-vgpu-device-plugin", "containers 'main', 'b'", "getOldestPod",
          "one GPU container per pod"]),
    ],
    ids=["nano-two-cards", "nano-memory-only", "aliyun-whole", "aliyun-core-only",
         "aliyun-percent", "aliyun-two-containers", "aliyun-init", "elastic-init-differs",
         "elastic-init-alone", "nano-init-differs", "volcano-init", "hami-v2.8-init",
         "hami-init-differs", "hami-init-alone", "volcano-two-containers"],
)
def test_what_the_agent_cannot_run_is_refused_naming_the_agent(
    agent: NodeAgent, request_: PodRequest, words: list[str],
) -> None:
    message = "; ".join(agent.refusals(request_))
    for word in words:
        assert word in message


@pytest.mark.parametrize(
    ("agent", "request_"),
    [
        (ELASTIC, pod(whole(cards=3), share("side", core=10, mem=100))),
        (ELASTIC, pod(whole("init", cards=2, init=True), whole(cards=2), share("side", core=5))),
        (NANO, pod(share("init", core=30, init=True), share(core=30))),
        (NANO, pod(whole(cards=1), share("b", core=10, pct=10))),
        (ALIYUN, pod(share(core=10, mem=1000))),
        # HAMi v2.9.0+ lists init containers first (Resourcereqs, popNextContainerDevices).
        (HAMI, pod(whole("init", cards=2, init=True), whole(cards=2), whole("b", cards=4))),
        (VOLCANO, pod(whole(cards=2))),
        (HAMI_V28, pod(share(core=10), whole("b", cards=2))),
    ],
    ids=["elastic-multi", "elastic-init-same", "nano-init-same", "nano-mixed", "aliyun-share",
         "hami-init", "volcano-one-container", "hami-v2.8-apps"],
)
def test_what_the_agent_runs_is_not_refused(agent: NodeAgent, request_: PodRequest) -> None:
    assert agent.refusals(request_) == ()


# HAMi's looser rule (refusals.init_share_fits, docs/hami-plugin.md "Init containers"): at most the
# first GPU app container's device count, each share no larger (v2.10.0
# pkg/device/initContainer.go CollapseInitContainerUsage then counts each card as the app's).
@pytest.mark.parametrize(
    ("init", "app", "must"),
    [
        (whole("i", cards=2, init=True), whole(cards=2), ""),
        (whole("i", cards=1, init=True), whole(cards=3), ""),
        (share("i", core=99, mem=80_000, init=True), whole(cards=1), ""),
        (share("i", core=10, pct=10, shares=2, init=True), whole(cards=2), ""),
        (share("i", core=20, mem=4096, init=True), share(core=20, mem=4096), ""),
        (share("i", core=10, mem=1024, init=True), share(core=40, mem=8192), ""),
        (share("i", mem=1024, init=True), share(core=40, mem=8192), ""),
        (share("i", core=20, mem=4096, init=True), share(core=20, mem=4096, shares=2), ""),
        (share("i", core=10, pct=25, init=True), share(core=30, pct=50), ""),
        # An app share with all of the card's memory: any memory fits under it.
        (share("i", core=10, mem=4096, init=True), share(core=30, pct=100), ""),
        (share("i", core=10, mem=4096, init=True), share(core=30), ""),
        (whole("i", cards=3, init=True), whole(cards=2), "at most 2 devices"),
        (share("i", core=10, mem=100, shares=3, init=True), whole(cards=2),
         "at most 2 devices"),
        (share("i", core=10, mem=100, shares=2, init=True), share(core=10, mem=100),
         "at most 1 device and"),
        (whole("i", cards=1, init=True), share(core=50, mem=1024), "no more than 'main'"),
        (share("i", core=41, mem=1024, init=True), share(core=40, mem=8192),
         "no more than 'main'"),
        (share("i", core=40, mem=8193, init=True), share(core=40, mem=8192),
         "no more than 'main'"),
        (share("i", core=10, pct=51, init=True), share(core=30, pct=50), "no more than"),
        (share("i", core=10, pct=10, init=True), share(core=30, mem=8192), "same unit"),
        (share("i", core=10, init=True), share(core=30, mem=8192), "same unit"),
    ],
    ids=["whole-same", "whole-fewer", "share-under-whole", "two-shares-under-two-wholes",
         "share-same", "share-smaller", "memory-only-smaller", "fewer-shares",
         "percent-smaller", "mib-under-all-memory", "mib-under-no-memory-key",
         "more-wholes", "more-shares-than-wholes", "more-shares", "whole-over-share",
         "more-cores", "more-memory", "more-percent", "percent-against-mib",
         "all-memory-against-mib"],
)
def test_hami_admits_an_init_container_asking_at_most_its_app_containers_share(
        init: ContainerRequest, app: ContainerRequest, must: str) -> None:
    refused = HAMI.refusals(pod(init, app))
    if not must:
        assert refused == ()
        assert HAMI.placement_request(pod(init, app)) == HAMI.placement_request(pod(app))
        return
    (message,) = refused
    assert message.startswith(f"init container 'i' asks for {init.describe()} but 'main', ")
    assert "HAMi's device plugin (with enableGetPreferredAllocation)" in message
    assert must in message


def test_elastic_and_nano_still_want_exactly_the_app_containers_request() -> None:
    # Their agents find the init container by its device list (module refusals): no looser
    # rule there.
    smaller = pod(share("i", core=10, mem=1024, init=True), share(core=40, mem=8192))
    for agent in (ELASTIC, NANO):
        assert "exactly the same" in "; ".join(agent.refusals(smaller))
    assert HAMI.refusals(smaller) == ()


def test_hami_refuses_a_gpu_sidecar_naming_the_plugin() -> None:
    # A restartable init container runs beside the app containers; placed on their share its
    # own would be counted nowhere (refusals._hami_init_refusals).
    side = replace(share("side", core=10, mem=1024, init=True), restartable=True)
    (message,) = HAMI.refusals(pod(side, share(core=40, mem=8192)))
    assert message.startswith("init container 'side' asks for 10% core and 1024 MiB and runs "
                              "beside the app containers (restartPolicy: Always)")
    assert "HAMi's device plugin" in message and "give the GPU to an app container" in message
    assert HAMI.refusals(pod(side)) == (message.replace("40% core and 8192 MiB", ""),)
    # Elsewhere the rule stays what it was (a sidecar asking the same is folded).
    assert ELASTIC.refusals(pod(replace(share("side", core=40, init=True), restartable=True),
                                share(core=40))) == ()


def test_elastic_and_nano_place_an_init_container_on_its_app_containers_card() -> None:
    # kubelet hands the init container's devices on to the app container asking for the same
    # (devicesToReuse); the agent serves the init container with that container's cards.
    written = pod(whole("init", cards=2, init=True), whole(cards=2))
    for agent in (ELASTIC, NANO, HAMI):
        assert agent.placement_request(written) == pod(whole(cards=2))
    # HAMi's plugin lists the init container's entry, on the same cards (allocator/hami).


def test_aliyun_places_memory_in_the_plugins_unit() -> None:
    assert ALIYUN.placement_request(pod(share(mem=1000))) == pod(share(mem=1024))
    assert ALIYUN.placement_request(pod(share(mem=2048))) == pod(share(mem=2048))


def test_a_vgpu_share_without_memory_reserves_the_memory_hami_gives_it() -> None:
    # GenerateResourceRequests (HAMi v2.10.0 pkg/device/nvidia/device.go): no memory key is
    # 100% of the card's memory, and HAMi-core lets the container use all of it.
    for agent in (HAMI, VOLCANO):
        assert agent.placement_request(pod(share(core=30))) == pod(share(core=30, pct=100))
        assert agent.placement_request(pod(share(core=30, mem=10))) == pod(
            share(core=30, mem=10))


def test_the_extender_manages_every_resource_the_shaped_pods_carry() -> None:
    # HAMi v2.10.0 charts/hami/templates/_helpers.tpl hami-vgpu.scheduler.managedResources
    # (:198-202): the four names and the task priority, each ignoredByScheduler (memory,
    # cores and priority are never on a node).
    assert HAMI.managed_resources() == tuple(ManagedResource(n) for n in (
        "nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpumem-percentage",
        "nvidia.com/gpucores", "nvidia.com/priority"))
    assert "nvidia.com/priority" not in HAMI.pod_resources  # the webhook takes it out
    assert [r.name for r in ELASTIC.managed_resources()] == [
        "elasticgpu.io/gpu-core", "elasticgpu.io/gpu-memory"]
    assert [r.name for r in NANO.managed_resources()] == ["nano-gpu/gpu-percent"]
    assert [r.name for r in ALIYUN.managed_resources()] == ["aliyun.com/gpu-mem"]
    assert all(r.ignored_by_scheduler for a in (ELASTIC, NANO, ALIYUN, HAMI, VOLCANO)
               for r in a.managed_resources())


def test_each_profile_says_how_its_nodes_advertise_cards() -> None:
    assert ELASTIC.capacity == Capacity("elasticgpu.io/gpu-core", 100, "elasticgpu.io/gpu-memory")
    assert NANO.capacity == Capacity("nano-gpu/gpu-percent", 100, None)
    # gpushare-device-plugin pkg/gpu/nvidia/podmanager.go patches aliyun.com/gpu-count.
    assert ALIYUN.capacity == Capacity("aliyun.com/gpu-count", 1, "aliyun.com/gpu-mem", 1024)
    # volcano-vgpu-device-plugin v1.12.0 pkg/plugin/server.go apiDevices: 100 cores a card.
    assert VOLCANO.capacity == Capacity("volcano.sh/vgpu-cores", 100, "volcano.sh/vgpu-memory")
    assert HAMI.capacity is None  # cards x split count: read from HAMi's register annotation


def test_every_profile_names_its_agent() -> None:
    assert set(AGENTS) == set(AgentProfile)
    assert {a.name for a in AGENTS.values()} >= {"elastic-gpu-agent", "nano-gpu-agent",
                                                  "gpushare-device-plugin"}


def test_the_refusal_names_the_older_hami_release_as_the_webhook_says_it() -> None:
    with pytest.raises(RequestError, match=r"^agent profile hami \(HAMi's device plugin v2\.8\): "
                       r"init container 'init'"):
        HAMI_V28.admit(pod(whole("init", init=True), whole()))
    assert HAMI.admit(pod(whole("init", init=True), whole())) == pod(whole())


def test_the_hami_agent_setting_is_read_alike_by_both_services() -> None:
    config = DialectConfig.from_env({"TESSERA_AGENT_PROFILE": "hami",
                                     "TESSERA_HAMI_AGENT": "hami-v2.8"})
    assert config.agent == HAMI_V28
    assert config.agent.agent is HAMI_AGENTS["hami-v2.8"]
    assert DialectConfig.from_env({"TESSERA_AGENT_PROFILE": "hami"}).agent == HAMI


@pytest.mark.parametrize(
    ("env", "words"),
    [({"TESSERA_AGENT_PROFILE": "hami", "TESSERA_HAMI_AGENT": "hami-v2.7"},
      ["TESSERA_HAMI_AGENT='hami-v2.7'", "known: hami-v2.8"]),
     ({"TESSERA_AGENT_PROFILE": "volcano-vgpu", "TESSERA_HAMI_AGENT": "hami-v2.8"},
      ["TESSERA_AGENT_PROFILE=hami (not volcano-vgpu)"]),
     ({"TESSERA_HAMI_AGENT": "hami-v2.8"}, ["(not elastic)"])],
    ids=["unknown-release", "volcano", "elastic"],
)
def test_a_hami_agent_without_the_hami_profile_or_unknown_is_a_config_error(
    env: dict[str, str], words: list[str],
) -> None:
    with pytest.raises(ConfigError) as caught:
        DialectConfig.from_env(env)
    for word in words:
        assert word in str(caught.value)
    with pytest.raises(ConfigError):
        NodeAgent(AgentProfile.VOLCANO_VGPU, hami_agent="hami-v2.8")


def test_elastic_gpu_agent_with_another_domain_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"elastic-gpu-agent reads only elasticgpu\.io"):
        DialectConfig.from_env({"TESSERA_DOMAIN": "gpu.example.com"})
    for profile in ("nano-gpu", "aliyun", "hami", "volcano-vgpu"):
        config = DialectConfig.from_env({"TESSERA_DOMAIN": "gpu.example.com",
                                         "TESSERA_AGENT_PROFILE": profile})
        assert config.agent.domain_problem() == ""


@pytest.mark.parametrize(
    ("profile", "dialect"),
    [("elastic", Dialect.ELASTIC), ("nano-gpu", Dialect.PERCENT), ("aliyun", Dialect.ALIYUN),
     ("hami", Dialect.HAMI), ("volcano-vgpu", Dialect.VOLCANO)],
)
def test_the_profiles_own_dialect_is_always_read(profile: str, dialect: Dialect) -> None:
    config = DialectConfig.from_env({"TESSERA_AGENT_PROFILE": profile,
                                     "TESSERA_DIALECTS": "kai"})
    assert config.agent_profile == AgentProfile(profile)
    assert config.enabled == {Dialect.KAI, dialect}


@pytest.mark.parametrize(
    ("env", "words"),
    [({"TESSERA_AGENT_PROFILE": "gpushare"}, ["not an agent profile", "volcano-vgpu"]),
     ({"TESSERA_AGENT_DIALECTS": "nano-gpu"},
      ["TESSERA_AGENT_DIALECTS='nano-gpu' is replaced by TESSERA_AGENT_PROFILE"])],
    ids=["unknown", "removed-setting"],
)
def test_a_bad_profile_setting_is_a_config_error(env: dict[str, str], words: list[str]) -> None:
    with pytest.raises(ConfigError) as caught:
        DialectConfig.from_env(env)
    for word in words:
        assert word in str(caught.value)


def test_a_profile_with_a_vocabulary_keeps_it() -> None:
    agent = DialectConfig(vocabulary=Vocabulary("gpu.example.com"),
                          agent_profile=AgentProfile.NANO_GPU).agent
    assert agent.vocabulary.domain == "gpu.example.com"
    assert agent.name == "nano-gpu-agent"


@pytest.mark.parametrize("agent", [ELASTIC, NANO, ALIYUN, HAMI, VOLCANO],
                         ids=lambda a: a.profile.value)
def test_every_shape_carries_a_marker_the_pod_keys_policy_knows(agent: NodeAgent) -> None:
    markers = set(shape_markers(Vocabulary()))
    for container in (share(core=30, mem=1000), share(core=25, pct=25), share(mem=2048),
                      whole(cards=1), whole(cards=3)):
        if agent.refusals(pod(container)):
            continue
        placed = agent.placement_request(pod(container)).containers[0]
        assert markers & set(agent.container_resources(placed)), container
