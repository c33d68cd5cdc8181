"""What each profile's agent cannot run, in messages that name the agent (pure). One line per
profile in :data:`REFUSALS`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Final

from tessera.agent_profiles.profiles import (
    ALIYUN_MEMORY_KEY,
    HAMI_AGENT_FLAG,
    NANO_PERCENT_KEY,
    AgentProfile,
)
from tessera.vocabulary import WHOLE_CARD_PERCENT, ContainerRequest, PodRequest

if TYPE_CHECKING:
    from tessera.agent_profiles.node_agent import NodeAgent


def _gpu_app_containers(request: PodRequest) -> list[ContainerRequest]:
    return [c for c in request.containers if not c.init]


def inherited_init_refusals(a: NodeAgent, request: PodRequest) -> list[str]:
    """elastic-gpu-agent and nano-gpu-agent find a container by its device list in kubelet's
    pod-resources, which lists app containers only; kubelet hands an init container's devices
    on to the first app container asking for the same resource (devicesToReuse). So an init
    container is served with that app container's cards, and only when it asks for exactly
    the same: otherwise no listed container has its devices and ``PreStartContainer`` fails
    ("not such pod with the same devices list"), and the pod never starts."""
    return _init_as_first_app(
        request,
        f"{a.name} finds a container by devices kubelet lists for app containers only, so it "
        f"cannot start this init container",
        f"{a.name} serves an init container with that app container's cards")


def _init_as_first_app(request: PodRequest, without_app: str, with_app: str,
                       fits: Callable[[ContainerRequest, ContainerRequest], str] | None = None
                       ) -> list[str]:
    """The rule every agent that serves init containers shares: a GPU init container runs on
    the first GPU app container's devices (``without_app``, ``with_app``: why, worded per
    agent). ``fits(init, app)`` says what the init container must ask for ("" when it may):
    by default exactly what the app container asks."""
    inits = [c for c in request.containers if c.init]
    if not inits:
        return []
    apps = _gpu_app_containers(request)
    if not apps:
        return [
            f"init container {c.name!r} asks for {c.describe()} but no app container asks for "
            f"a GPU; {without_app}: give the GPU to an app container"
            for c in inits
        ]
    first = apps[0]
    check = fits or _exactly_the_same
    problems = []
    for c in inits:
        must = check(c, first)
        if must:
            problems.append(
                f"init container {c.name!r} asks for {c.describe()} but {first.name!r}, the "
                f"app container kubelet hands its devices to, asks for {first.describe()}; "
                f"{with_app}, so it must ask for {must}")
    return problems


def _exactly_the_same(init: ContainerRequest, app: ContainerRequest) -> str:
    same = replace(init, name=app.name, init=False, restartable=False) == app
    return "" if same else "exactly the same"


def _memory_percent(c: ContainerRequest) -> int:
    """A share's memory as a percent of its card, 0 when it is given in MiB; a share with no
    memory gets all of it (HAMi: ``GenerateResourceRequests``, shapes._vgpu_placement)."""
    if c.memory_mib:
        return 0
    return c.memory_percent or WHOLE_CARD_PERCENT


def device_count(c: ContainerRequest) -> int:
    """The devices kubelet hands the container (its ``nvidia.com/gpu``)."""
    return c.cards if c.is_whole else c.shares


def init_share_fits(init: ContainerRequest, app: ContainerRequest) -> str:
    """HAMi's looser rule (docs/hami-plugin.md, "Init containers"): "" when ``init`` asks for
    at most as many devices as ``app`` and, on each, a share no larger than ``app``'s; else what it
    must ask for. Any share, or the whole card, fits under a whole card; under a share, a
    share whose cores and memory are each at most the app's, memory in the same unit (MiB
    with MiB, percent of the card with percent: which MiB a percent is depends on the card,
    not known at admission). Then HAMi's own count of each card is the app container's
    (v2.10.0 ``pkg/device/initContainer.go`` ``CollapseInitContainerUsage``: per card the
    larger of the init containers' peak and the app containers' sum), and so is Tessera's."""
    count = device_count(app)
    must = (f"at most {count} device{'s' if count > 1 else ''} and on each no more than "
            f"{app.name!r} asks")
    if device_count(init) > count:
        return must
    if app.is_whole:
        return ""
    if init.is_whole or init.core_percent > app.core_percent:
        return must
    init_percent, app_percent = _memory_percent(init), _memory_percent(app)
    if app_percent == WHOLE_CARD_PERCENT:
        return ""  # all of the card's memory: any memory fits under it
    if bool(init_percent) != bool(app_percent):
        return (f"its memory in the same unit as {app.name!r} (MiB, or a percent of the "
                f"card), at most as much")
    if init.memory_mib > app.memory_mib or init_percent > app_percent:
        return must
    return ""


def multi_share_refusals(a: NodeAgent, request: PodRequest) -> list[str]:
    """A share on each of several cards (HAMi's ``nvidia.com/gpu: 2`` with ``gpumem``) runs
    under HAMi's own plugin only, which hands a container several devices each with its own
    limit; the other agents give a container's shares one card."""
    return [
        f"container {c.name!r} asks for {c.describe()}; {a.name} gives a container's share "
        f"one card: ask for one share, or run HAMi's device plugin (agent profile hami)"
        for c in request.containers if c.shares > 1
    ]


def _elastic_refusals(a: NodeAgent, request: PodRequest) -> list[str]:
    return multi_share_refusals(a, request) + inherited_init_refusals(a, request)


def _nano_refusals(a: NodeAgent, request: PodRequest) -> list[str]:
    problems = [
        f"container {c.name!r} asks for {c.describe()}; {a.name} gives a container one card "
        f"(it reads one card index): ask for one card or a share of one"
        for c in request.containers if c.cards > 1
    ] + [
        f"container {c.name!r} asks for {c.describe()} without compute; {a.name} hands out "
        f"compute percent only ({NANO_PERCENT_KEY}): add a compute share"
        for c in request.containers if not c.is_whole and not c.core_percent
    ]
    return problems + multi_share_refusals(a, request) + inherited_init_refusals(a, request)


def _aliyun_refusals(a: NodeAgent, request: PodRequest) -> list[str]:
    problems = [
        f"init container {c.name!r} asks for {c.describe()}; {a.name} finds a pod by the "
        f"{ALIYUN_MEMORY_KEY} of its app containers, so an init container would get another "
        f"pod's card or none: give the GPU to an app container"
        for c in request.containers if c.init
    ] + [
        f"container {c.name!r} asks for {c.describe()}; {a.name} shares cards by memory "
        f"only ({ALIYUN_MEMORY_KEY}) and serves no whole card"
        + ("" if c.is_whole else ": ask for GPU memory in MiB or GiB")
        for c in request.containers if c.is_whole or not c.memory_mib
    ]
    apps = _gpu_app_containers(request)
    if len(apps) > 1:
        problems.append(
            f"containers {', '.join(repr(c.name) for c in apps)} all ask for a GPU; {a.name} "
            f"serves one GPU container per pod (it matches a pod by its total "
            f"{ALIYUN_MEMORY_KEY} against one container's): keep one"
        )
    return problems + multi_share_refusals(a, request)


def _hami_init_refusals(a: NodeAgent, request: PodRequest) -> list[str]:
    """HAMi's plugin since v2.9.0 gives every container its entry of the pod's device
    annotation, init containers included; but with its ``enableGetPreferredAllocation`` it
    moves each container onto the cards of the device IDs kubelet chose
    (``alignContainerDevicesWithAllocatedIDs``), and kubelet gives the first GPU app container
    the init containers' devices first (``devicesToReuse``). An init container asking for at
    most as many devices as that container, each share no larger (:func:`init_share_fits`),
    placed on the first of its cards, runs on its record under either setting (docs/hami.md,
    "Init containers"): more devices would hand the app container a random subset of them.

    A GPU sidecar (``restartPolicy: Always``) runs beside the app containers, on devices
    kubelet hands to none of them (kubernetes v1.34.4 ``manager.go:380-387``), but takes an
    earlier init container's first: refused, its share would be counted nowhere."""
    sidecars = [
        f"init container {c.name!r} asks for {c.describe()} and runs beside the app "
        f"containers (restartPolicy: Always), where a GPU init container runs on their share "
        f"(kubelet hands {a.name} its devices, or an earlier init container's): its share "
        f"would be counted nowhere; give the GPU to an app container"
        for c in request.containers if c.restartable
    ]
    rest = tuple(c for c in request.containers if not c.restartable)
    if not rest:
        return sidecars
    return sidecars + _init_as_first_app(
        replace(request, containers=rest),
        f"with enableGetPreferredAllocation kubelet hands an init container's devices on to "
        f"the next one and {a.name} follows them",
        f"{a.name} (with enableGetPreferredAllocation) runs that container on the init "
        f"container's cards and the init container on that container's share",
        init_share_fits)


def _volcano_containers_refusals(a: NodeAgent, request: PodRequest) -> list[str]:
    """volcano-vgpu-device-plugin ``v1.12.0`` (and its master of 2026-08) finds the pod of an
    ``Allocate`` as one on its node whose ``volcano.sh/devices-to-allocate`` holds, in all,
    exactly as many devices as that one container asks (``getOldestPod``,
    ``pkg/util/util.go:88-98``: ``DecodePodDevices`` sums every container's entry). A pod
    with two GPU app containers holds more than either asks, so its first container's
    ``Allocate`` finds no pod (or another pod that happens to match) and it never starts."""
    apps = _gpu_app_containers(request)
    if a.profile is not AgentProfile.VOLCANO_VGPU or len(apps) < 2:
        return []
    return [
        f"containers {', '.join(repr(c.name) for c in apps)} all ask for a GPU; {a.name} "
        f"finds a pod by its total device count against one container's (getOldestPod), so "
        f"a pod with several GPU containers never starts: keep one GPU container per pod"
    ]


def _vgpu_refusals(a: NodeAgent, request: PodRequest) -> list[str]:
    """HAMi's plugin since v2.9.0 gives every container its entry of the pod's device
    annotation, init containers included (:func:`_hami_init_refusals`); earlier releases and
    volcano-vgpu's map the entries to app containers only (module docstring), so a GPU init
    container would run on an app container's devices, or on none."""
    several = ([] if a.profile is AgentProfile.HAMI else multi_share_refusals(a, request)
               + _volcano_containers_refusals(a, request))
    if not a.agent.app_containers_only:
        return several + _hami_init_refusals(a, request)
    upgrade = (" (or run HAMi v2.9.0 or later, without "
               f"{HAMI_AGENT_FLAG})") if a.profile is AgentProfile.HAMI else ""
    return several + [
        f"init container {c.name!r} asks for {c.describe()}; {a.name} gives devices to app "
        f"containers only (GetNextDeviceRequest maps the pod's device annotation to "
        f"spec.containers), so an init container gets none of its own: give the GPU to an "
        f"app container{upgrade}"
        for c in request.containers if c.init
    ]


REFUSALS: Final[Mapping[AgentProfile, Callable[[NodeAgent, PodRequest], list[str]]]] = {
    AgentProfile.ELASTIC: _elastic_refusals,
    AgentProfile.NANO_GPU: _nano_refusals,
    AgentProfile.ALIYUN: _aliyun_refusals,
    AgentProfile.HAMI: _vgpu_refusals,
    AgentProfile.VOLCANO_VGPU: _vgpu_refusals,
}
