"""What HAMi's webhook writes on a pod besides its resources (pure), written by Tessera's where
HAMi's would: the container environment HAMi-core reads inside the container, and the pod's
runtime class.

Source: Project-HAMi/HAMi v2.10.0 ``pkg/device/nvidia/device.go:347-388`` (``MutateAdmission``,
run on every init and app container, ``pkg/scheduler/webhook.go:74-98``):

- a container with ``nvidia.com/priority`` in its limits (the chart's ``resourcePriority``,
  ``charts/hami/values.yaml:29``) gets ``CUDA_TASK_PRIORITY=<value>``
  (``pkg/util/types.go:39``), HAMi-core's task priority: ``examples/nvidia/example.yaml:31``
  names 0 (high) and 1 (low, the default). HAMi leaves the resource on the container and lists
  it among the extender's ``managedResources`` with ``ignoredByScheduler``
  (``charts/hami/templates/_helpers.tpl:202``); Tessera takes it out instead, so no
  scheduler configuration has to know it (no node advertises it: kube-scheduler would leave
  the pod Pending). Its meaning is the environment variable, which stays. volcano-vgpu's
  plugin loads HAMi-core too (volcano-vgpu-device-plugin v1.12.0 ``pkg/plugin/server.go:
  438-441`` mounts ``libvgpu.so``; its monitor reads the priority, ``cmd/vgpu-monitor/
  feedback.go:83-106``), so the variable is written under that profile as well; under any
  other the key is refused (nothing in the container reads it).
- every container gets ``GPU_CORE_UTILIZATION_POLICY=<policy>`` (``pkg/util/types.go:40``)
  when the cluster's ``devices.nvidia.gpuCorePolicy`` (``charts/hami/values.yaml:491``,
  ``force`` or ``disable``) is not ``default``.
- a pod asking for a GPU and naming no runtime class gets the configured
  ``runtimeClassName`` (``devicePlugin.runtimeClassName``, ``values.yaml:384-385``; unset by
  default).
- with the chart's ``scheduler.overwriteEnv`` (``values.yaml:75``, default false), every
  container asking for no GPU gets ``NVIDIA_VISIBLE_DEVICES=none`` (``device.go:380-385``), so
  the nvidia runtime's default (every card) does not reach it. HAMi's webhook is sent every
  pod; Tessera's only pods carrying a GPU key (its ``matchConditions``, which keep it off the
  cluster's other pods), so here it reaches the GPU-less containers of GPU pods only.

And what it refuses: a pod asking for a GPU with a privileged container, init or app, GPU or
not (``pkg/scheduler/webhook.go:71``, ``:99-102``, ``:125-143``, since commit ``7db31bf``,
first released in v2.10.0; up to v2.9 the privileged container was skipped and the pod let
through): denied with ``container <name> is privileged``, so the pod is never created, nor
scheduled. A privileged container sees every device of its node, so no share holds there.

HAMi appends each variable; Kubernetes gives the last of two same-named variables, so setting
it in place (one entry, HAMi's value) is what the container sees either way, and admitting the
mutated pod again changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from tessera.agent_profiles import AgentProfile, NodeAgent
from tessera.dialects import HAMI_PRIORITY_KEY, HAMI_TASK_PRIORITY_ENV, ContainerResources
from tessera.vocabulary import ConfigError, RequestError

TASK_PRIORITY_ENV: Final = HAMI_TASK_PRIORITY_ENV
CORE_POLICY_ENV: Final = "GPU_CORE_UTILIZATION_POLICY"
#: HAMi's ``GPUCoreUtilizationPolicy`` values (device.go:79-83); ``default`` writes nothing.
CORE_POLICIES: Final = ("default", "force", "disable")
#: Highest task priority accepted: HAMi-core's classes are 0 and 1; HAMi's monitor keeps a
#: slot per priority up to the value (cmd/vGPUmonitor/feedback.go:91-96), so it is bounded.
MAX_TASK_PRIORITY: Final = 100
#: The profiles whose device plugin loads HAMi-core into the container (module docstring).
HAMI_CORE_PROFILES: Final = frozenset({AgentProfile.HAMI, AgentProfile.VOLCANO_VGPU})
#: The nvidia runtime's variable; ``none`` gives the container no card (device.go:380-385).
VISIBLE_DEVICES_ENV: Final = "NVIDIA_VISIBLE_DEVICES"


@dataclass(frozen=True)
class HamiAdmission:
    """The cluster's HAMi webhook settings Tessera's webhook applies (hami profile only)."""

    #: HAMi's ``devices.nvidia.gpuCorePolicy``.
    gpu_core_policy: str = "default"
    #: HAMi's ``devicePlugin.runtimeClassName`` ("" : none).
    runtime_class_name: str = ""
    #: HAMi's ``scheduler.overwriteEnv``: ``NVIDIA_VISIBLE_DEVICES=none`` on the containers
    #: of a GPU pod that ask for no GPU.
    overwrite_env: bool = False

    def problem(self, profile: AgentProfile) -> str:
        """What is wrong with these settings under ``profile`` (``""``: nothing)."""
        if self.gpu_core_policy not in CORE_POLICIES:
            return (f"the HAMi GPU core policy {self.gpu_core_policy!r} is not one of "
                    f"{', '.join(CORE_POLICIES)}")
        if profile is not AgentProfile.HAMI and self != HamiAdmission():
            return (f"the HAMi webhook settings (GPU core policy, runtime class, overwrite "
                    f"env) are read by HAMi-core, HAMi's device plugin and the nvidia "
                    f"runtime of HAMi's nodes: they need agent profile hami, not "
                    f"{profile.value}")
        return ""

    def __post_init__(self) -> None:
        if self.gpu_core_policy not in CORE_POLICIES:
            raise ConfigError(self.problem(AgentProfile.HAMI))


def _set_env(container: dict[str, Any], name: str, value: str) -> None:
    env = container.get("env")
    if not isinstance(env, list):
        env = container["env"] = []
    kept = [e for e in env if not (isinstance(e, Mapping) and e.get("name") == name)]
    kept.append({"name": name, "value": value})
    env[:] = kept


def _task_priority(container: dict[str, Any], agent: NodeAgent) -> str | None:
    """The container's ``nvidia.com/priority`` as HAMi-core's variable value, taken out of its
    resources (None: it asks none)."""
    resources = container.get("resources")
    if not isinstance(resources, dict):
        return None
    limits, requests = (resources.get(part) for part in ("limits", "requests"))
    keyed = ContainerResources(str(container.get("name")), False,
                               limits if isinstance(limits, Mapping) else {},
                               requests if isinstance(requests, Mapping) else {})
    if not keyed.has(HAMI_PRIORITY_KEY):
        return None
    if agent.profile not in HAMI_CORE_PROFILES:
        raise RequestError(
            f"container {keyed.name!r}: {HAMI_PRIORITY_KEY} is HAMi-core's task priority, read "
            f"inside the container by HAMi-core, which {agent.name} (agent profile "
            f"{agent.profile.value}) does not load: remove it")
    value = keyed.integer(HAMI_PRIORITY_KEY, low=0, high=MAX_TASK_PRIORITY,
                          valid="HAMi's task priority is 0 (high) or 1 (low)")
    for part in ("limits", "requests"):
        mapping = resources.get(part)
        if isinstance(mapping, dict):
            mapping.pop(HAMI_PRIORITY_KEY, None)
            if not mapping:
                del resources[part]
    return str(value)


def _privileged(container: Mapping[str, Any]) -> bool:
    context = container.get("securityContext")
    return isinstance(context, Mapping) and context.get("privileged") is True


def refuse_privileged(spec: Mapping[str, Any], agent: NodeAgent) -> None:
    """Under the hami profile, refuse a GPU pod with a privileged container as HAMi's webhook
    does (the first one named, init containers first:
    HAMi v2.10.0 pkg/scheduler/webhook.go:125-137). The other
    profiles' agents never refused one (docs/decisions/0031-privileged-gpu-pods.md)."""
    if agent.profile is not AgentProfile.HAMI:
        return
    for field_name in ("initContainers", "containers"):
        for container in spec.get(field_name) or []:
            if isinstance(container, Mapping) and _privileged(container):
                raise RequestError(
                    f"container {container.get('name')!r} is privileged: a privileged "
                    f"container sees every card of its node, so no GPU share holds there, "
                    f"and HAMi's webhook refuses such a GPU pod as well (agent profile hami, "
                    f"HAMi v2.10.0); drop securityContext.privileged or the pod's GPU request")


def apply_hami_extras(spec: dict[str, Any], settings: HamiAdmission, agent: NodeAgent,
                      gpu_containers: frozenset[str]) -> None:
    """Write on a GPU pod's ``spec`` (in place) what HAMi's webhook writes; ``gpu_containers``
    names the containers asking for a GPU. Raises :class:`RequestError` for a task priority
    that is invalid or that no agent reads."""
    profile = agent.profile
    hide = profile is AgentProfile.HAMI and settings.overwrite_env
    for field_name in ("initContainers", "containers"):
        for container in spec.get(field_name) or []:
            priority = _task_priority(container, agent)
            if priority is not None:
                _set_env(container, TASK_PRIORITY_ENV, priority)
            if profile is AgentProfile.HAMI and settings.gpu_core_policy != "default":
                _set_env(container, CORE_POLICY_ENV, settings.gpu_core_policy)
            if hide and container.get("name") not in gpu_containers:
                _set_env(container, VISIBLE_DEVICES_ENV, "none")
    if (profile is AgentProfile.HAMI and settings.runtime_class_name
            and not spec.get("runtimeClassName")):
        spec["runtimeClassName"] = settings.runtime_class_name
