"""The writers of the ``hami`` and ``volcano-vgpu`` agent profiles (pure): HAMi's pod
annotations for the allocation, from the node's register annotation (allocator/hami/,
docs/hami.md). The node lock is taken around the write step by the bind
(:mod:`allocator.hami.lock`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from allocator.agents import AgentMetadata, AgentWriter, BindContext
from allocator.hami.codec import FLAVORS, HAMI, VOLCANO_VGPU, Flavor
from allocator.hami.writer import all_keys, bind_annotations, bind_labels, read_devices
from tessera.agent_profiles import AgentProfile
from tessera.vocabulary import Vocabulary


def _writer(profile: AgentProfile, default: Flavor) -> Callable[[BindContext], AgentMetadata]:
    def write(ctx: BindContext) -> AgentMetadata:
        flavor = FLAVORS.get(ctx.hami_flavor) or default
        devices = read_devices(ctx.node_annotations, flavor)
        if devices is None or devices.problem:
            why = devices.problem if devices else f"node has no {flavor.register_key}"
            return AgentMetadata(skipped={profile: why})
        written = bind_annotations(ctx.allocation, ctx.pod, devices, flavor, ctx.now_ns / 1e9)
        if isinstance(written, str):
            return AgentMetadata(skipped={profile: written})
        return AgentMetadata(annotations=written, labels=bind_labels(ctx.allocation.node, flavor))
    return write


def _owns(flavor: Flavor) -> Callable[[str, Vocabulary], bool]:
    keys = frozenset(all_keys(flavor))

    def owns(key: str, _vocabulary: Vocabulary) -> bool:
        return key in keys
    return owns


HAMI_WRITERS: Final = {
    AgentProfile.HAMI: AgentWriter(_writer(AgentProfile.HAMI, HAMI), _owns(HAMI)),
    AgentProfile.VOLCANO_VGPU: AgentWriter(_writer(AgentProfile.VOLCANO_VGPU, VOLCANO_VGPU),
                                           _owns(VOLCANO_VGPU)),
}
