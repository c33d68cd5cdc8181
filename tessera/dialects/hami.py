"""HAMi's keys (pure, opt-in): ``nvidia.com/gpu`` with ``nvidia.com/gpumem``,
``nvidia.com/gpumem-percentage`` and ``nvidia.com/gpucores``; and HAMi's reading of a vGPU
request, which Volcano's vGPU keys share (:mod:`tessera.dialects.volcano`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from tessera.agent_profiles import HAMI_RESOURCES, AgentProfile, VgpuResources
from tessera.dialects.base import MAX_CARDS, MAX_MEMORY_MIB, ContainerResources, Parser
from tessera.vocabulary import ContainerRequest, RequestError

if TYPE_CHECKING:
    from tessera.dialects.config import DialectConfig

# Source: Project-HAMi/HAMi v2.10.0 pkg/device/nvidia/device.go (NvidiaConfig resource names,
# and GenerateResourceRequests: limits first, then requests; gpumem MiB; percentages of one
# card; defaultExclusiveCoreIfNeeded: a count without share keys is the whole card).
HAMI_KEYS: Final = HAMI_RESOURCES
#: HAMi's task priority resource, :data:`HAMI_PRIORITY_KEY` (device.go:352-358), is not a
#: request but HAMi-core's variable, which the webhook writes in its place
#: (webhook/hami_extras.py): ``pkg/util/types.go:39``.
HAMI_TASK_PRIORITY_ENV: Final = "CUDA_TASK_PRIORITY"


def vgpu(
    c: ContainerResources, k: VgpuResources, profile: AgentProfile = AgentProfile.ELASTIC
) -> ContainerRequest | None:
    """HAMi semantics (pkg/device/nvidia/device.go; Volcano's devices/util.go reads its keys the
    same way): ``count`` n vGPUs, each on its own card; without memory keys a vGPU gets 100% of
    the card's memory (defaultMemory 0); without cores it reserves no compute (defaultCores 0);
    share keys without a count mean one vGPU (defaultGPUNum 1).

    ``profile`` is the node agent the pod is shaped for: under HAMi's own agent the count is
    the counted resource, so a memory percent alone is a share the scheduler counts."""
    count = c.integer(k.count, low=0, high=MAX_CARDS, valid="the number of (v)GPUs is a whole "
                      "number >= 0")
    memory = c.integer(
        k.memory, low=0, high=MAX_MEMORY_MIB, valid="memory is a whole number of MiB >= 0"
    )
    memory_percent = c.integer(
        k.memory_percent, low=1, high=100, valid="a percent of the card's memory is 1-100"
    )
    cores = c.integer(k.cores, low=0, high=100, valid="cores are a percent 0-100")
    share_keys_given = memory is not None or memory_percent is not None or cores is not None
    if count is None:
        if not share_keys_given:
            return None
        count = 1
    if count == 0:
        return None
    if memory and memory_percent is not None:
        # HAMi documents the two as exclusive (CHANGELOG v1.0.1.4: gpumem-percentage "can not
        # be used with nvidia.com/gpumem"); Volcano silently prefers the percentage (vgpu
        # utils.go). Either way one of the two numbers would be ignored.
        raise RequestError(
            f"container {c.name!r}: {k.memory} and {k.memory_percent} cannot be used "
            f"together; keep one of them"
        )
    whole_memory = not memory and memory_percent in (None, 100)
    if whole_memory and cores in (None, 0, 100):
        return ContainerRequest(c.name, cards=count, init=c.init)
    if cores == 100:
        raise RequestError(
            f"container {c.name!r}: {k.cores}=100 with a memory share is invalid; a share takes "
            f"1-99% of compute, or drop the memory keys for a whole card"
        )
    if not cores and not memory and profile is not AgentProfile.HAMI:
        # The canonical shape counts compute; HAMi's agent counts nvidia.com/gpu (one share
        # per vGPU), so there HAMi's meaning holds: defaultCores 0 (device.go:579), the
        # percent of the card's memory (device.go:551-566, 780-782).
        raise RequestError(
            f"container {c.name!r}: {k.memory_percent}={memory_percent} without {k.cores} "
            f"reserves nothing the scheduler can count under the {profile} agent profile (it "
            f"counts compute); add {k.cores} (1-99) or give memory in MiB with {k.memory}"
        )
    return ContainerRequest(
        c.name,
        core_percent=cores or 0,
        memory_mib=memory or 0,
        memory_percent=0 if memory else (memory_percent or 100),
        init=c.init,
        # HAMi: Nums n vGPUs, each its own card (device.go:520-597, fitInDevices'
        # tmpDevs); the agents that cannot run it refuse it (agent_profiles/refusals.py).
        shares=count,
    )


def vgpu_parser(keys: VgpuResources) -> Parser:
    def parse(c: ContainerResources, cfg: DialectConfig) -> ContainerRequest | None:
        return vgpu(c, keys, cfg.agent_profile)

    return parse
