"""The webhook's rewrite per agent profile: every seed pod (one per dialect) comes out in the shape
the profile's agent serves, or is refused naming that agent; the shape reads back as the same
request (admitting a mutated pod again changes nothing)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tessera.agent_profiles import AgentProfile
from tessera.dialects import DialectConfig, parse_pod
from tessera.vocabulary import RequestError, Vocabulary, decode_request
from tests.builders import AGENT_SETUPS
from tests.builders import REFUSED_SEEDS as REFUSED
from webhook.mutation import MutationConfig, mutate_pod

EXAMPLES = Path(__file__).parents[2] / "examples" / "pods"
SEEDS = sorted(p.name for p in EXAMPLES.glob("*.yaml"))
VOCABULARY = Vocabulary()

def config_for(profile: AgentProfile, hami_agent: str = "") -> MutationConfig:
    return MutationConfig(DialectConfig.from_env({"TESSERA_AGENT_PROFILE": profile.value,
                                                  "TESSERA_HAMI_AGENT": hami_agent}))


def gpu_resources(pod: dict[str, Any]) -> dict[str, set[str]]:
    spec = pod["spec"]
    found: dict[str, set[str]] = {}
    for c in spec.get("initContainers", []) + spec["containers"]:
        resources = c.get("resources") or {}
        keys = set(resources.get("limits") or {}) | set(resources.get("requests") or {})
        found[c["name"]] = {k for k in keys if k not in ("cpu", "memory")}
    return found


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("setup", list(AGENT_SETUPS))
def test_every_seed_pod_takes_its_agents_shape_or_is_refused_naming_it(
    setup: str, seed: str,
) -> None:
    profile, hami_agent = AGENT_SETUPS[setup]
    config = config_for(profile, hami_agent)
    agent = config.dialects.agent
    pod = yaml.safe_load((EXAMPLES / seed).read_text())
    why = REFUSED[setup].get(seed)
    if why is not None:
        with pytest.raises(RequestError) as refused:
            mutate_pod(pod, config)
        assert f"agent profile {profile.value} ({agent.name})" in str(refused.value)
        assert why in str(refused.value)
        return
    once = mutate_pod(pod, config)
    assert once.request is not None
    shaped = dict(once.pod)
    for name, keys in gpu_resources(shaped).items():
        assert keys <= set(agent.pod_resources), (name, keys)
    recorded = decode_request(shaped["metadata"]["annotations"][VOCABULARY.request_annotation])
    assert recorded == once.request
    # Admitted again (re-created from its own manifest): the same pod and the same request.
    twice = mutate_pod(shaped, config)
    assert twice.pod == shaped
    assert twice.request == once.request
    # The shape alone (no annotation) is read as a GPU pod by the profile's own dialect.
    assert parse_pod(shaped, config.dialects) is not None


def test_an_elastic_init_container_keeps_its_devices_but_shares_its_app_containers_card(
) -> None:
    pod = yaml.safe_load((EXAMPLES / "fraction-share.yaml").read_text())
    mutation = mutate_pod(pod, config_for(AgentProfile.ELASTIC))
    shaped = dict(mutation.pod)
    # kubelet must still hand the init container devices (it reuses them for 'cuda').
    assert shaped["spec"]["initContainers"][0]["resources"]["limits"] == {
        "elasticgpu.io/gpu-core": "25"}
    assert mutation.request is not None
    assert [c.name for c in mutation.request.containers] == ["cuda"]


def test_hami_places_the_init_container_on_its_app_containers_cards() -> None:
    # kubelet hands the init container's devices on to 'cuda' (devicesToReuse) and HAMi's
    # plugin with enableGetPreferredAllocation follows them: one placement for both.
    pod = yaml.safe_load((EXAMPLES / "fraction-share.yaml").read_text())
    mutation = mutate_pod(pod, config_for(AgentProfile.HAMI))
    assert mutation.request is not None
    assert [c.name for c in mutation.request.containers] == ["cuda"]
    shaped = dict(mutation.pod)
    assert shaped["spec"]["initContainers"][0]["resources"]["limits"] == {
        "nvidia.com/gpu": "1", "nvidia.com/gpucores": "25", "nvidia.com/gpumem-percentage": "25"}
    limits = dict(mutation.pod)["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "25",
                      "nvidia.com/gpumem-percentage": "25"}


@pytest.mark.parametrize(("setup", "agent_name"),
                         [("volcano-vgpu", "volcano-vgpu-device-plugin"),
                          ("hami-v2.8", "HAMi's device plugin v2.8")])
def test_a_gpu_init_container_is_refused_at_admission_where_the_plugin_serves_apps_only(
    setup: str, agent_name: str,
) -> None:
    # volcano-vgpu-device-plugin v1.12.0 pkg/util/util.go, HAMi v2.8.3 pkg/device-plugin/
    # nvidiadevice/nvinternal/plugin/util.go: GetNextDeviceRequest returns
    # p.Spec.Containers[idx]. The same pod under hami (v2.10.0) keeps its init container
    # (test_hami_keeps_the_init_container_in_the_request).
    pod = yaml.safe_load((EXAMPLES / "fraction-share.yaml").read_text())
    with pytest.raises(RequestError) as refused:
        mutate_pod(pod, config_for(*AGENT_SETUPS[setup]))
    message = str(refused.value)
    assert message.startswith(f"agent profile {AGENT_SETUPS[setup][0].value} ({agent_name}): "
                              "init container 'warmup' asks for 25% core")
    assert "gives devices to app containers only" in message
    without_init = yaml.safe_load((EXAMPLES / "fraction-share.yaml").read_text())
    del without_init["spec"]["initContainers"]
    assert mutate_pod(without_init, config_for(*AGENT_SETUPS[setup])).request is not None


def test_aliyun_finds_its_pod_by_the_gpu_mem_the_webhook_leaves() -> None:
    # gpushare-device-plugin matches a pod by the sum of its app containers' aliyun.com/gpu-mem
    # limits (pkg/gpu/nvidia/podutils.go getGPUMemoryFromPodResource): they must stay.
    pod = yaml.safe_load((EXAMPLES / "nano-gpu-share.yaml").read_text())
    mutation = mutate_pod(pod, config_for(AgentProfile.ALIYUN))
    container = dict(mutation.pod)["spec"]["containers"][0]
    assert container["resources"]["limits"]["aliyun.com/gpu-mem"] == "1"
    assert mutation.request is not None
    (placed,) = mutation.request.containers
    assert (placed.core_percent, placed.memory_mib) == (20, 1024)
