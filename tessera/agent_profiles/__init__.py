"""The node agent a cluster runs, and what it asks of Tessera (pure).

Tessera decides which cards a pod gets; a node agent (a device plugin) hands them to the
containers. Each agent finds its pods differently, so the pod's shape must follow the agent:
an **agent profile** per cluster, chosen at install (``--agent-profile`` /
``TESSERA_AGENT_PROFILE``, one setting for the webhook and the allocator; with ``hami``, an
older HAMi release that behaves differently is named by ``--hami-agent`` /
``TESSERA_HAMI_AGENT``, set alike on both too: :data:`HAMI_AGENTS`), decides

- which resources the webhook leaves on each GPU container (what that agent's device plugin
  registers, so kubelet calls it): :meth:`NodeAgent.container_resources`;
- what is refused at admission because that agent cannot run it, in a message that names the
  agent: :meth:`NodeAgent.refusals`;
- how the request is placed so the agent's behaviour is right (an init container on the card its
  app container will reuse): :meth:`NodeAgent.placement_request`;
- which resources the kube-scheduler extender manages: :meth:`NodeAgent.managed_resources`;
- what its nodes advertise, for the allocator's inventory: :meth:`NodeAgent.capacity`.

The keys written at bind (annotations the agent reads) are the allocator's
(``allocator.agents``, one writer per profile). docs/agents.md says per agent what works.

Upstream sources (every resource name below was read there):

- elastic: elastic-ai/elastic-gpu-agent ``v0.4.1``: ``pkg/plugins/base.go``
  (``NewGPUSharePlugin`` registers ``v1alpha1.ResourceGPUCore`` and ``ResourceGPUMemory``,
  ``elasticgpu.io/gpu-core`` and ``elasticgpu.io/gpu-memory`` in the vendored
  ``elasticgpu.io/elastic-gpu/api/v1alpha1/types.go``), ``pkg/plugins/gpushare.go`` (100 core
  devices per card, one memory device per MiB; ``PreStartContainer`` finds the container by
  its device list through kubelet's pod-resources, ``pkg/kube/locator.go``, and reads
  ``elasticgpu.io/container-<name>``, hardcoded in ``pkg/common/const.go``).
- nano-gpu: nano-gpu-agent 0.3, whose history elastic-ai/elastic-gpu-agent continues (tag
  ``v0.2.0``): ``pkg/common/const.go`` ``ResourceName = "nano-gpu/gpu-percent"``,
  ``pkg/plugins/server.go`` (100 devices per card; ``PreStartContainer`` locates the container
  as above and ``strconv.Atoi``s one card index).
- aliyun: AliyunContainerService/gpushare-device-plugin ``v0.3.0`` (and master ``45fb8b8``):
  ``pkg/gpu/nvidia/const.go`` (``aliyun.com/gpu-mem``, ``aliyun.com/gpu-count``),
  ``pkg/gpu/nvidia/allocate.go`` (``Allocate`` takes the devices of one container request and
  looks for the pending pod whose ``getGPUMemoryFromPodResource``, the sum of its *app*
  containers' ``aliyun.com/gpu-mem`` limits, ``podutils.go``, equals that count),
  ``pkg/gpu/nvidia/podmanager.go`` (``aliyun.com/gpu-count`` patched into node capacity).
- hami: Project-HAMi/HAMi ``v2.10.0``: ``charts/hami/values.yaml`` and
  ``charts/hami/templates/scheduler/device-configmap.yaml`` (``resourceCountName``
  ``nvidia.com/gpu``, ``resourceMemoryName`` ``nvidia.com/gpumem``,
  ``resourceMemoryPercentageName`` ``nvidia.com/gpumem-percentage``, ``resourceCoreName``
  ``nvidia.com/gpucores``), ``charts/hami/templates/_helpers.tpl``
  (``hami-vgpu.scheduler.managedResources``: all four with ``ignoredByScheduler: true``, and
  the task priority ``nvidia.com/priority``, ``:202``, which the extender manages too),
  ``pkg/device/nvidia/device.go`` (``GenerateResourceRequests``: a count without memory keys is
  100% of the card's memory; ``defaultExclusiveCoreIfNeeded``: such a count gets
  ``gpucores: 100``). The device plugin registers only the count (cards x split count).
- volcano-vgpu: Project-HAMi/volcano-vgpu-device-plugin ``v1.12.0``: ``doc/config.md`` (the four
  names), ``pkg/plugin/server.go`` ``apiDevices`` (registers ``vgpu-number`` as cards x split
  count, ``vgpu-memory`` as each card's MiB / ``GPUMemoryFactor``, default 1, and
  ``vgpu-cores`` as 100 x ``DeviceCoresScaling``, default 1, per card).

Which containers HAMi's and Volcano's plugins give devices to: the plugin's ``Allocate`` takes
the next container's entry of the pod's device annotation (``GetNextDeviceRequest``). In
volcano-vgpu-device-plugin ``v1.12.0`` (``pkg/util/util.go``; unchanged on its master of
2026-08) and HAMi up to ``v2.8.3`` (``pkg/device-plugin/nvidiadevice/nvinternal/plugin/
util.go``) it returns ``p.Spec.Containers[idx]``: entries are app containers only, and a GPU
init container is handed an app container's devices, or none. HAMi ``v2.9.0`` (commit
``0658b5c``, "support device allocation for multi-container with init containers", #1650)
lists init containers first (the same file, and ``Resourcereqs`` in ``pkg/device/devices.go``).

The package: the profiles, their resource names and agents (:mod:`.profiles`);
:class:`NodeAgent` (:mod:`.node_agent`) answers through one table per question, a line per
profile: the shapes, capacity and placement (:mod:`.shapes`) and the refusals
(:mod:`.refusals`). A new profile is a line in each table.
"""

from __future__ import annotations

from tessera.agent_profiles.node_agent import NodeAgent, shape_markers
from tessera.agent_profiles.profiles import (
    AGENTS,
    ALIYUN_COUNT_KEY,
    ALIYUN_MEMORY_KEY,
    DEFAULT_PROFILE,
    HAMI_AGENT_ENV,
    HAMI_AGENT_FLAG,
    HAMI_AGENTS,
    HAMI_PRIORITY_KEY,
    HAMI_RESOURCES,
    MIB_PER_GIB,
    NANO_PERCENT_KEY,
    NVIDIA_GPU_KEY,
    PROFILE_ENV,
    PROFILE_FLAG,
    VOLCANO_RESOURCES,
    Agent,
    AgentProfile,
    Capacity,
    ManagedResource,
    VgpuResources,
    hami_agent_problem,
)

__all__ = [
    "AGENTS",
    "ALIYUN_COUNT_KEY",
    "ALIYUN_MEMORY_KEY",
    "DEFAULT_PROFILE",
    "HAMI_AGENTS",
    "HAMI_AGENT_ENV",
    "HAMI_AGENT_FLAG",
    "HAMI_PRIORITY_KEY",
    "HAMI_RESOURCES",
    "MIB_PER_GIB",
    "NANO_PERCENT_KEY",
    "NVIDIA_GPU_KEY",
    "PROFILE_ENV",
    "PROFILE_FLAG",
    "VOLCANO_RESOURCES",
    "Agent",
    "AgentProfile",
    "Capacity",
    "ManagedResource",
    "NodeAgent",
    "VgpuResources",
    "hami_agent_problem",
    "shape_markers",
]
