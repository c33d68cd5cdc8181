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
from tests.builders import REFUSED_SEEDS as REFUSED
from webhook.mutation import MutationConfig, mutate_pod

EXAMPLES = Path(__file__).parents[2] / "examples" / "pods"
SEEDS = sorted(p.name for p in EXAMPLES.glob("*.yaml"))
VOCABULARY = Vocabulary()

def config_for(profile: AgentProfile) -> MutationConfig:
    return MutationConfig(DialectConfig.from_env({"TESSERA_AGENT_PROFILE": profile.value}))


def gpu_resources(pod: dict[str, Any]) -> dict[str, set[str]]:
    spec = pod["spec"]
    found: dict[str, set[str]] = {}
    for c in spec.get("initContainers", []) + spec["containers"]:
        resources = c.get("resources") or {}
        keys = set(resources.get("limits") or {}) | set(resources.get("requests") or {})
        found[c["name"]] = {k for k in keys if k not in ("cpu", "memory")}
    return found


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("profile", list(AgentProfile), ids=str)
def test_every_seed_pod_takes_its_agents_shape_or_is_refused_naming_it(
    profile: AgentProfile, seed: str,
) -> None:
    config = config_for(profile)
    agent = config.dialects.agent
    pod = yaml.safe_load((EXAMPLES / seed).read_text())
    why = REFUSED[profile].get(seed)
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


def test_hami_keeps_the_init_container_in_the_request() -> None:
    pod = yaml.safe_load((EXAMPLES / "fraction-share.yaml").read_text())
    mutation = mutate_pod(pod, config_for(AgentProfile.HAMI))
    assert mutation.request is not None
    assert [c.name for c in mutation.request.containers] == ["warmup", "cuda"]
    limits = dict(mutation.pod)["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "25",
                      "nvidia.com/gpumem-percentage": "25"}


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
