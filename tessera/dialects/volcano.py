"""Volcano vGPU's keys (pure): ``volcano.sh/vgpu-number``, ``volcano.sh/vgpu-memory``,
``volcano.sh/vgpu-memory-percentage`` and ``volcano.sh/vgpu-cores``, read as HAMi reads its
own (:func:`tessera.dialects.hami.vgpu`)."""

from __future__ import annotations

from typing import Final

from tessera.agent_profiles import VOLCANO_RESOURCES

# Volcano vGPU (HAMi's request model under Volcano's names). Source: volcano-sh/volcano v1.15.1
# pkg/scheduler/api/devices/config/vgpu.go (the four names) and pkg/scheduler/api/devices/util.go
# ExtractResourceRequest (a count, MiB, % of memory, % of compute; a memory key without a count
# means one vGPU). Memory is MiB: Project-HAMi/volcano-vgpu-device-plugin v1.12.0
# pkg/plugin/register.go registers each card's memory as total bytes / (1024*1024).
VOLCANO_KEYS: Final = VOLCANO_RESOURCES
