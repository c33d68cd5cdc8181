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


def _config(profile: str = "hami", **hami: Any) -> MutationConfig:
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


# --------------------------------------------------------------------------- privileged


@pytest.mark.parametrize("where", ["initContainers", "containers"])
def test_a_gpu_pod_with_any_privileged_container_is_refused_in_the_hami_profile(
        where: str) -> None:
    """HAMi v2.10.0 pkg/scheduler/webhook.go:99-102: any privileged container, GPU or not."""
    tool = {"name": "tool", "image": "busybox", "securityContext": {"privileged": True}}
    pod = make_pod(dict(SHARE))
    pod["spec"].setdefault(where, []).append(tool)
    with pytest.raises(RequestError, match=r"container 'tool' is privileged.*agent profile hami"):
        mutate_pod(pod, _config())


def test_a_privileged_gpu_container_is_refused_and_privileged_false_is_not() -> None:
    pod = make_pod(dict(SHARE))
    pod["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    with pytest.raises(RequestError, match="container 'main' is privileged"):
        mutate_pod(pod, _config())
    pod["spec"]["containers"][0]["securityContext"] = {"privileged": False}
    assert mutate_pod(pod, _config()).request is not None


@pytest.mark.parametrize("profile", ["elastic", "volcano-vgpu"])
def test_a_privileged_gpu_pod_is_admitted_as_before_outside_the_hami_profile(
        profile: str) -> None:
    limits = ({"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-cores": "30"}
              if profile == "volcano-vgpu" else {"nvidia.com/gpu": "1",
                                                 "nvidia.com/gpumem-percentage": "25",
                                                 "nvidia.com/gpucores": "25"})
    pod = make_pod(limits)
    pod["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    assert mutate_pod(pod, _config(profile)).request is not None


def test_a_privileged_pod_asking_for_no_gpu_is_left_alone() -> None:
    pod = make_pod({"cpu": "1"})
    pod["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    assert mutate_pod(pod, _config()).changed is False


# --------------------------------------------------------------------------- overwriteEnv


def test_overwrite_env_is_off_by_default_as_in_hamis_chart() -> None:
    gpu = {"name": "main", "image": "busybox", "resources": {"limits": dict(SHARE)}}
    plain = {"name": "side", "image": "busybox"}
    spec = mutate_pod(make_pod(containers=[gpu, plain]), _config()).pod["spec"]
    assert "env" not in spec["containers"][1]


def test_overwrite_env_hides_cards_from_non_gpu_containers_only_and_is_idempotent() -> None:
    init = {"name": "warm", "image": "busybox", "resources": {"limits": dict(SHARE)}}
    gpu = {"name": "main", "image": "busybox", "resources": {"limits": dict(SHARE)}}
    plain = {"name": "side", "image": "busybox",
             "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}
    prio = {"name": "prio", "image": "busybox",
            "resources": {"limits": {"nvidia.com/priority": "0"}}}
    config = _config(overwrite_env=True)
    once = mutate_pod(make_pod(containers=[gpu, plain, prio], init_containers=[init]),
                      config).pod
    spec = once["spec"]
    assert "NVIDIA_VISIBLE_DEVICES" not in _env(spec["initContainers"][0])
    assert "NVIDIA_VISIBLE_DEVICES" not in _env(spec["containers"][0])
    assert _env(spec["containers"][1]) == {"NVIDIA_VISIBLE_DEVICES": "none"}
    # A container with only HAMi's task priority asks for no card: HAMi hides them too.
    assert _env(spec["containers"][2]) == {"CUDA_TASK_PRIORITY": "0",
                                           "NVIDIA_VISIBLE_DEVICES": "none"}
    assert mutate_pod(once, config).pod == once


def test_overwrite_env_is_read_from_the_environment_and_needs_the_hami_profile() -> None:
    config = WebhookConfig.from_env({"TESSERA_AGENT_PROFILE": "hami",
                                     "TESSERA_HAMI_OVERWRITE_ENV": "true"})
    assert config.mutation.hami == HamiAdmission(overwrite_env=True)
    with pytest.raises(ConfigError, match="need agent profile hami, not elastic"):
        WebhookConfig.from_env({"TESSERA_AGENT_PROFILE": "elastic",
                                "TESSERA_HAMI_OVERWRITE_ENV": "true"})
    with pytest.raises(ConfigError, match="must be true or false"):
        WebhookConfig.from_env({"TESSERA_AGENT_PROFILE": "hami",
                                "TESSERA_HAMI_OVERWRITE_ENV": "yes please"})
