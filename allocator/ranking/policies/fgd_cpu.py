"""fgd-cpu: fgd-ff whose fragmentation also counts GPUs that the node's CPU cannot feed.

FGD (:mod:`allocator.ranking.policies.fgd`, after the authors' pkg/utils/frag.go) looks one pod
ahead: a node's free GPUs count as stranded for a typical pod only once the node's free CPU
is below that pod's CPU request. Until then, taking CPU costs nothing in its measure — even
on nodes whose CPU will run out long before their GPUs (in openb, a G2 node has 96 cores for
8 GPUs while the most popular one-GPU pods ask 11.3 cores each).

This policy adds the free GPU capacity that the node's free CPU cannot feed when the node
is filled with the typical pods that still fit it, in their mix proportions:

    stranded = max(0, U - W * C * G_bar / C_bar - SHORTFALL_TOLERANCE)

over the typical pods t that fit the node (GPU request and CPU) and ask for CPU and GPU:
U = sum_t w_t * usable_t (usable_t: free capacity on the cards t can use), W = sum_t w_t,
G_bar / C_bar = sum_t w_t * g_t / sum_t w_t * cpu_t (GPUs per milli-CPU of a pod drawn from
the mix; g_t: GPUs per t pod), C the node's free CPU. Filling with the mix, not with each t
alone (``max(0, usable_t - floor(C / cpu_t) * g_t)`` summed over t, the first version):
the CPU-hungry pods' shortfall is offset by the CPU-light ones, as it is when a node is
really filled, so the term no longer over-counts stranding on nodes whose CPU suits the mix
on average; measured in the openb replay (docs/benchmarks.md, "fgd-cpu: filling with the
mix"). A shortfall below :data:`SHORTFALL_TOLERANCE` cards is not counted (``stranded`` is
the shortfall minus it): the mix's CPU per GPU is an average, and a node less than half a
card short still feeds its cards with the CPU-light pods of the mix. Counting it made a
fresh 96-core 8-GPU node look worse than a fresh 128-core one for every CPU-hungry 1-GPU
pod, and those pods took the few nodes the rare 120-core 8-GPU pods fit on (openb
``multigpu*``; docs/benchmarks.md, "fgd-cpu: a CPU shortfall below half a card counts as
none"). The measure is ``F + stranded``; scoring, the tolerance and the fixed first-fit
order are fgd-ff's (:mod:`allocator.ranking.policies.fgd_ff`). Free CPU is read in steps of
:data:`CPU_STEP_MILLI` (rounded down), so that the measure depends on CPU only through
``free >= threshold`` for the thresholds :meth:`cpu_thresholds` lists — what lets callers
memoise it.

Without node CPU (``ctx.node_facts`` empty, as in the extender today) it is fgd-ff.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from allocator.ranking.fit import NodeState
from allocator.ranking.policies.fgd import (
    _SHARE,
    _WHOLE,
    Mix,
    Typical,
    fragmentation,
    usable_capacity,
)
from allocator.ranking.policies.fgd_ff import FGDFirstFit

#: Free CPU is counted in steps of 4 cores (rounded down).
CPU_STEP_MILLI: Final = 4000
#: Cards of shortfall that count as none (the mix's CPU per GPU is an average).
SHORTFALL_TOLERANCE: Final = 0.5


def _gpus(t: Typical) -> float:
    """GPUs one pod of ``t`` takes (in cards); 0 when unknown (a share sized in MiB only)."""
    if t.kind == _WHOLE:
        return float(t.container.cards)
    if t.kind == _SHARE:
        return max(t.container.core_percent, t.container.memory_percent) / 100
    return float(sum(c.cards if c.cards else max(c.core_percent, c.memory_percent) / 100
                     for c in t.request.containers))


def cpu_stranding(node: NodeState, mix: Mix, cpu_free: int) -> float:
    """Expected free GPU capacity (cards) the node's free CPU cannot feed, the node filled
    with the typical pods that fit it in their mix proportions, less
    :data:`SHORTFALL_TOLERANCE`."""
    stepped = cpu_free // CPU_STEP_MILLI * CPU_STEP_MILLI
    total, per_typical = usable_capacity(node, mix)
    if total <= 0.0:
        return 0.0
    weight = usable_free = gpus = cpu = 0.0
    for t, (usable, runs) in zip(mix.typical, per_typical, strict=True):
        if not runs or t.cpu_milli <= 0 or t.cpu_milli > cpu_free:
            continue  # FGD already counts these nodes as fully fragmented for t
        g = _gpus(t)
        if g <= 0.0:
            continue
        weight += t.weight
        usable_free += t.weight * usable
        gpus += t.weight * g
        cpu += t.weight * t.cpu_milli
    if weight <= 0.0:
        return 0.0
    return max(0.0, usable_free - weight * stepped * gpus / cpu - SHORTFALL_TOLERANCE)


class FGDCpu(FGDFirstFit):
    name = "fgd-cpu"

    def measure(self, node: NodeState, mix: Mix, cpu_free: int | None) -> float:
        base = fragmentation(node, mix, cpu_free)
        if cpu_free is None:
            return base
        return base + cpu_stranding(node, mix, cpu_free)

    def cpu_thresholds(self, typical_cpu: Sequence[int], max_cpu: int) -> tuple[int, ...]:
        steps = range(CPU_STEP_MILLI, max_cpu + CPU_STEP_MILLI, CPU_STEP_MILLI)
        return tuple(sorted(set(typical_cpu) | set(steps)))
