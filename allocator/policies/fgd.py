"""fgd: Fragmentation Gradient Descent — place where the expected fragmentation grows least.

The idea and the measure are from Weng et al., "Beware of Fragmentation: Scheduling
GPU-Sharing Workloads with Fragmentation Gradient Descent", USENIX ATC '23. The authors'
implementation, which this follows, is hkust-adsl/kubernetes-scheduler-simulator:

- ``pkg/utils/frag.go`` — ``NodeGpuShareFragAmount`` / ``NodeGpuShareFragAmountScore`` and
  ``GetNodePodFrag``: for each *typical pod* t of the workload mix, with popularity w_t, a node's
  idle GPU capacity counts as fragmented when t cannot run on the node at all (too few cards
  with room, a GPU model t does not accept, or too little CPU left), and otherwise only the cards
  too small for t count;
- ``pkg/simulator/plugin/fgd_score.go`` — ``calculateGpuShareFragExtendScore``: the node score
  is the *decrease* of that expected fragmentation caused by the placement, and the same
  measure picks the card of a GPU share inside the node.

So ``F(node) = sum_t w_t * frag_t(node)`` and ``score(before, after) = F(before) - F(after)``.

Differences from the Go plugin, all deliberate:

- capacity is measured in cards (a card's free fraction, ``1 - CardState.utilisation``: its
  free compute and memory averaged) instead of milli-GPU; when a share takes compute and
  memory in the same proportion — as the openb replay does — this is exactly the paper's
  1-D ``MilliGpuLeft`` / 1000;
- the score is the raw difference, not ``int(sigmoid(diff / 1000) * 100)``; the sigmoid is
  monotone, and truncating it to an integer only creates ties;
- CPU-only typical pods are left out of the mix: their term is ``w * idle GPU`` of the node
  whatever happens (both ``XLSatisfied`` and ``XRLackCPU`` count as fragment in ``frag.go``),
  so it changes every candidate's score by the same amount and never changes a decision;
- node CPU is optional (see below); the extender tracks GPUs only, so in production the CPU
  check is skipped unless the caller supplies it.

Inputs through :class:`~allocator.policies.base.PolicyContext`:

- ``ctx.workload``: ``(PodRequest, weight)`` pairs — the typical pods and their popularity
  (weights are normalised here). Without a workload every placement scores 0.
- ``ctx.extra[CPU_OF_TYPICAL]``: tuple of milli-CPU, one per workload entry (optional);
- ``ctx.extra[NODE_CPU_FREE]``: mapping node name -> free milli-CPU before the placement;
- ``ctx.extra[POD_CPU]``: milli-CPU the pod being placed asks for.

Contract used by callers that memoise: the score depends on a node's free CPU only through
the comparisons ``typical_cpu > free_cpu``, so two CPU values between the same consecutive
typical CPU requests give the same score (:func:`cpu_thresholds`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from threading import Lock
from typing import Final, TypeVar

from allocator.fit import CardState, NodeState, fits, share_memory_mib
from allocator.policies.base import PolicyContext
from tessera.vocabulary import ContainerRequest, PodRequest

#: ``ctx.extra`` keys (see the module docstring).
CPU_OF_TYPICAL: Final = "fgd.typical_cpu_milli"
NODE_CPU_FREE: Final = "fgd.node_cpu_free_milli"
POD_CPU: Final = "fgd.pod_cpu_milli"

_SHARE, _WHOLE, _GENERAL = 0, 1, 2

#: (free capacity in cards, per typical pod: (usable free capacity, its GPU request fits))
Usable = tuple[float, tuple[tuple[float, bool], ...]]
_V = TypeVar("_V")


@dataclass(frozen=True, slots=True)
class Typical:
    """One typical pod of the mix, pre-digested for the fragmentation measure."""

    request: PodRequest
    weight: float
    cpu_milli: int
    kind: int
    #: lower-cased allowed models, None = any
    models: frozenset[str] | None
    min_card_memory_mib: int
    #: the single container's needs: whole cards, or a share's core / memory
    cards: int
    core_percent: int
    memory_mib: int
    memory_percent: int


@dataclass(frozen=True, slots=True)
class Mix:
    """The workload mix, normalised: weights sum to 1."""

    typical: tuple[Typical, ...]
    #: sorted distinct CPU requests of the typical pods (the CPU "thresholds")
    cpu_thresholds: tuple[int, ...]
    #: memo of :func:`fragmentation` for this mix: (card signature, free CPU) -> value
    cache: dict[tuple[object, ...], float] = field(default_factory=dict, compare=False)
    #: memo of :func:`usable_capacity`: card signature -> value
    usable: dict[tuple[object, ...], Usable] = field(default_factory=dict, compare=False)


def compile_mix(workload: Sequence[tuple[PodRequest, float]],
                cpu_milli: Sequence[int] | None = None) -> Mix:
    total = sum(w for _, w in workload if w > 0)
    typical: list[Typical] = []
    for i, (req, w) in enumerate(workload):
        if w <= 0:
            continue
        cpu = int(cpu_milli[i]) if cpu_milli is not None and i < len(cpu_milli) else 0
        only = req.containers[0] if len(req.containers) == 1 else None
        kind = _GENERAL if only is None else (_WHOLE if only.cards else _SHARE)
        c = only or ContainerRequest("none", cards=1)
        models = frozenset(m.lower() for m in req.models) if req.models else None
        typical.append(Typical(req, w / total, cpu, kind, models, req.min_card_memory_mib,
                               c.cards, c.core_percent, c.memory_mib, c.memory_percent))
    return Mix(tuple(typical), tuple(sorted({t.cpu_milli for t in typical})))


def card_free(card: CardState) -> float:
    """Idle capacity of a card in cards (0 for a card taken whole)."""
    return 0.0 if card.whole else 1.0 - card.utilisation


def _share_fits(c: ContainerRequest, card: CardState) -> bool:
    return (not card.whole and card.free_core >= c.core_percent
            and card.free_memory_mib >= share_memory_mib(c, card.card))


_CACHE_LIMIT = 500_000


def fragmentation(node: NodeState, mix: Mix, cpu_free: int | None = None) -> float:
    """Expected idle GPU capacity of ``node`` (in cards) that a typical pod cannot use.

    ``cpu_free`` None means CPU is not a constraint (the caller does not track it).
    """
    key = (_signature(node), cpu_free)
    cache = mix.cache
    value = cache.get(key)
    if value is None:
        total, per_typical = usable_capacity(node, mix)
        value = 0.0
        for t, (usable, runs) in zip(mix.typical, per_typical, strict=True):
            if not runs or (cpu_free is not None and t.cpu_milli > cpu_free):
                value += t.weight * total  # t cannot run here: every free card is stranded
            else:
                value += t.weight * (total - usable)  # only the cards too small for t
        _remember(cache, key, value)
    return value


def _signature(node: NodeState) -> tuple[tuple[str, int, int, int, bool, bool], ...]:
    return tuple((c.card.model, c.card.memory_mib, c.core_used, c.memory_used_mib, c.whole,
                  c.idle) for c in node.cards)


def _remember(cache: dict[tuple[object, ...], _V], key: tuple[object, ...], value: _V) -> None:
    if len(cache) >= _CACHE_LIMIT:
        cache.clear()
    cache[key] = value


def usable_capacity(node: NodeState, mix: Mix) -> Usable:
    """(free capacity of the node in cards, and per typical pod: the free capacity on the cards
    it could use, and whether its GPU request fits the node at all) — CPU not considered."""
    key = _signature(node)
    value = mix.usable.get(key)
    if value is None:
        value = _usable_capacity(node, mix)
        _remember(mix.usable, key, value)
    return value


def _usable_capacity(node: NodeState, mix: Mix) -> Usable:
    # Per card: (free fraction, lower-case model, memory, free core, free MiB, idle, state);
    # only cards with something free can matter.
    cards = []
    total = 0.0
    for c in node.cards:
        free = 0.0 if c.whole else 1.0 - c.utilisation
        if free > 0.0:
            total += free
            mem = c.card.memory_mib
            cards.append((free, c.card.model.lower(), mem, 100 - c.core_used,
                          mem - c.memory_used_mib, c.idle, c))
    if total <= 0.0:
        return 0.0, tuple((0.0, False) for _ in mix.typical)
    out: list[tuple[float, bool]] = []
    for t in mix.typical:
        models, min_mem = t.models, t.min_card_memory_mib
        usable_free = 0.0
        count = 0
        for free, model, mem, free_core, free_mem, idle, cs in cards:
            if (models is not None and model not in models) or mem < min_mem:
                continue
            if t.kind == _SHARE:
                if t.memory_percent:
                    need = max(1, -(-mem * t.memory_percent // 100))
                else:
                    need = t.memory_mib
                ok = free_core >= t.core_percent and free_mem >= need
            elif t.kind == _WHOLE:
                ok = idle
            else:
                ok = any(idle if c.cards else _share_fits(c, cs)
                         for c in t.request.containers)
            if ok:
                usable_free += free
                count += 1
        if t.kind == _SHARE:
            runs = count > 0
        elif t.kind == _WHOLE:
            runs = count >= t.cards
        else:
            runs = count > 0 and fits(t.request, node)
        out.append((usable_free, runs))
    return total, tuple(out)


def cpu_thresholds(ctx: PolicyContext) -> tuple[int, ...]:
    """Sorted CPU requests of the typical pods: the only CPU values the score can tell apart."""
    return _mix(ctx).cpu_thresholds


# A policy is stateless, but digesting the mix on every call would dominate the cost of a
# score; keep the last few digests, keyed by the identity of the workload tuple (the caller
# builds it once per workload picture). The tuple itself is kept alive with its digest so an
# id is never reused while cached.
_MIX_CACHE: dict[int, tuple[object, object, Mix]] = {}
_MIX_LOCK = Lock()
_MIX_CACHE_SIZE = 8


def _mix(ctx: PolicyContext) -> Mix:
    return _mix_of(ctx.workload, ctx.extra.get(CPU_OF_TYPICAL))


def _mix_of(workload: tuple[tuple[PodRequest, float], ...], cpu: object) -> Mix:
    hit = _MIX_CACHE.get(id(workload))
    if hit is not None and hit[0] is workload and hit[1] is cpu:
        return hit[2]
    cpu_seq: Sequence[int] | None = None
    if isinstance(cpu, Sequence):
        cpu_seq = [int(x) for x in cpu]
    mix = compile_mix(workload, cpu_seq)
    with _MIX_LOCK:
        if len(_MIX_CACHE) >= _MIX_CACHE_SIZE:
            _MIX_CACHE.pop(next(iter(_MIX_CACHE)))
        _MIX_CACHE[id(workload)] = (workload, cpu, mix)
    return mix


def _cpu(ctx: PolicyContext, node: str) -> tuple[int | None, int | None]:
    """(free CPU before, free CPU after) of ``node``, or (None, None) when not supplied."""
    free = ctx.extra.get(NODE_CPU_FREE)
    if not isinstance(free, Mapping):
        return None, None
    before = free.get(node)
    if not isinstance(before, int):
        return None, None
    pod = ctx.extra.get(POD_CPU, 0)
    return before, before - (pod if isinstance(pod, int) else 0)


class FGD:
    name = "fgd"
    per_pod = False
    #: the score reads the node's free CPU from ``ctx.extra`` when the caller supplies it
    host_cpu_aware = True

    def measure(self, node: NodeState, mix: Mix, cpu_free: int | None) -> float:
        """The node's expected fragmentation (in cards); subclasses refine it."""
        return fragmentation(node, mix, cpu_free)

    def cpu_thresholds(self, typical_cpu: Sequence[int], max_cpu: int) -> tuple[int, ...]:
        """The CPU values the measure can tell apart: it depends on a node's free CPU only
        through ``free >= threshold`` for these (callers may memoise by that)."""
        return tuple(sorted(set(typical_cpu)))

    def score(self, before: NodeState, after: NodeState, ctx: PolicyContext) -> float:
        mix = _mix(ctx)
        if not mix.typical:
            return 0.0
        cpu_before, cpu_after = _cpu(ctx, before.name)
        return self.measure(before, mix, cpu_before) - self.measure(after, mix, cpu_after)

    def score_cpu_only(self, node: NodeState, cpu_before: int, cpu_after: int,
                       workload: tuple[tuple[PodRequest, float], ...],
                       typical_cpu: Sequence[int]) -> float:
        """Score of a pod that takes only CPU on ``node`` (no GPU): the growth of the node's
        fragmentation as its free CPU drops from ``cpu_before`` to ``cpu_after``.

        The extender never sees CPU-only pods; a caller that places them (the benchmark, as
        the authors' simulator does) can use this."""
        mix = _mix_of(workload, typical_cpu)
        return self.measure(node, mix, cpu_before) - self.measure(node, mix, cpu_after)
