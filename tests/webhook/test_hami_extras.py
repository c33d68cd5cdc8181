"""HAMi's webhook extras under Tessera's webhook (issue 46): ``nvidia.com/priority`` leaves the
resources and becomes ``CUDA_TASK_PRIORITY``; the cluster's GPU core policy and runtime class
are written where HAMi's webhook writes them (pkg/device/nvidia/device.go:347-388)."""

from __future__ import annotations

from typing import Any

import pytest
from builders import make_pod

from tessera.dialects import DialectConfig
from tessera.vocabulary import ConfigError, RequestError
from webhook.config import WebhookConfig
from webhook.hami_extras import HamiAdmission
from webhook.mutation import MutationConfig, mutate_pod


def _config(profile: str = "hami", **hami: str) -> MutationConfig:
    dialects = DialectConfig.from_env(
        {"TESSERA_DIALECTS": "elastic,hami", "TESSERA_AGENT_PROFILE": profile})
    return MutationConfig(dialects, hami=HamiAdmission(**hami))


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", [])}


SHARE = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000", "nvidia.com/gpucores": "30"}


@pytest.mark.parametrize("priority", ["0", "1"])
def test_a_task_priority_leaves_the_resources_and_becomes_hami_cores_variable(
        priority: str) -> None:
    pod = make_pod({**SHARE, "nvidia.com/priority": priority})
    main = mutate_pod(pod, _config()).pod["spec"]["containers"][0]
    assert "nvidia.com/priority" not in main["resources"]["limits"]
    assert "nvidia.com/priority" not in main["resources"].get("requests", {})
    assert _env(main)["CUDA_TASK_PRIORITY"] == priority
    assert main["resources"]["limits"]["nvidia.com/gpumem"] == "3000"


def test_a_task_priority_overrides_the_containers_own_variable_once_and_is_idempotent() -> None:
    pod = make_pod({**SHARE, "nvidia.com/priority": "0"})
    pod["spec"]["containers"][0]["env"] = [{"name": "CUDA_TASK_PRIORITY", "value": "1"},
                                           {"name": "KEEP", "value": "x"}]
    config = _config()
    once = mutate_pod(pod, config).pod
    env = once["spec"]["containers"][0]["env"]
    assert [e["name"] for e in env] == ["KEEP", "CUDA_TASK_PRIORITY"]
    assert _env(once["spec"]["containers"][0])["CUDA_TASK_PRIORITY"] == "0"
    assert mutate_pod(once, config).pod == once


def test_a_task_priority_on_a_container_without_a_gpu_in_a_gpu_pod_is_written_as_hami_does(
) -> None:
    side = {"name": "side", "image": "busybox",
            "resources": {"limits": {"nvidia.com/priority": "1"}}}
    gpu = {"name": "main", "image": "busybox", "resources": {"limits": dict(SHARE)}}
    spec = mutate_pod(make_pod(containers=[gpu, side]), _config()).pod["spec"]
    assert "resources" not in spec["containers"][1] or not spec["containers"][1]["resources"]
    assert _env(spec["containers"][1]) == {"CUDA_TASK_PRIORITY": "1"}


@pytest.mark.parametrize(("value", "why"), [("101", "at most 100"), ("-1", "0 (high)"),
                                            ("0.5", "0 (high)"), ("x", "quantity")])
def test_an_invalid_task_priority_is_refused_naming_the_key(value: str, why: str) -> None:
    with pytest.raises(RequestError, match=r"nvidia\.com/priority") as refused:
        mutate_pod(make_pod({**SHARE, "nvidia.com/priority": value}), _config())
    assert why in str(refused.value)


@pytest.mark.parametrize("profile", ["elastic", "nano-gpu"])
def test_a_task_priority_is_refused_under_an_agent_without_hami_core(profile: str) -> None:
    pod = make_pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "25",
                    "nvidia.com/gpucores": "25", "nvidia.com/priority": "0"})
    with pytest.raises(RequestError, match=rf"HAMi-core.s task priority.*{profile}.*remove it"):
        mutate_pod(pod, _config(profile))


def test_a_task_priority_is_written_under_volcano_vgpu_whose_plugin_loads_hami_core() -> None:
    """volcano-vgpu-device-plugin v1.12.0 pkg/plugin/server.go:438-441 mounts libvgpu.so."""
    limits = {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-cores": "30",
              "nvidia.com/priority": "1"}
    main = mutate_pod(make_pod(limits), _config("volcano-vgpu")).pod["spec"]["containers"][0]
    assert "nvidia.com/priority" not in main["resources"]["limits"]
    assert _env(main) == {"CUDA_TASK_PRIORITY": "1"}


@pytest.mark.parametrize("policy", ["force", "disable"])
def test_a_core_policy_other_than_default_is_written_on_every_container(policy: str) -> None:
    init = {"name": "warm", "image": "busybox", "resources": {"limits": dict(SHARE)}}
    gpu = {"name": "main", "image": "busybox", "resources": {"limits": dict(SHARE)}}
    plain = {"name": "side", "image": "busybox"}
    spec = mutate_pod(make_pod(containers=[gpu, plain], init_containers=[init]),
                      _config(gpu_core_policy=policy)).pod["spec"]
    for container in [*spec["initContainers"], *spec["containers"]]:
        assert _env(container)["GPU_CORE_UTILIZATION_POLICY"] == policy


def test_the_default_core_policy_writes_nothing() -> None:
    spec = mutate_pod(make_pod(dict(SHARE)), _config()).pod["spec"]
    assert "env" not in spec["containers"][0]


def test_the_runtime_class_is_set_on_a_gpu_pod_naming_none_and_kept_where_named() -> None:
    config = _config(runtime_class_name="nvidia")
    assert mutate_pod(make_pod(dict(SHARE)), config).pod["spec"]["runtimeClassName"] == "nvidia"
    own = make_pod(dict(SHARE))
    own["spec"]["runtimeClassName"] = "kata"
    assert mutate_pod(own, config).pod["spec"]["runtimeClassName"] == "kata"
    plain = make_pod({"cpu": "1"})
    assert "runtimeClassName" not in mutate_pod(plain, config).pod["spec"]


@pytest.mark.parametrize(("env", "problem"), [
    ({"TESSERA_HAMI_GPU_CORE_POLICY": "always"}, "not one of default, force, disable"),
    ({"TESSERA_HAMI_RUNTIME_CLASS": "Not_A_Name"}, "not a valid RuntimeClass name"),
    ({"TESSERA_AGENT_PROFILE": "elastic", "TESSERA_HAMI_GPU_CORE_POLICY": "force"},
     "need agent profile hami, not elastic"),
])
def test_bad_hami_webhook_settings_are_refused_at_start(env: dict[str, str],
                                                        problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        WebhookConfig.from_env({"TESSERA_AGENT_PROFILE": "hami", "TESSERA_WEBHOOK_INSECURE_HTTP":
                                "true", **env})


def test_hami_webhook_settings_are_read_from_the_environment() -> None:
    config = WebhookConfig.from_env({"TESSERA_AGENT_PROFILE": "hami",
                                     "TESSERA_HAMI_GPU_CORE_POLICY": "force",
                                     "TESSERA_HAMI_RUNTIME_CLASS": "nvidia"})
    assert config.mutation.hami == HamiAdmission("force", "nvidia")
