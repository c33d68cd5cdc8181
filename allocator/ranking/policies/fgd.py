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

Inputs through :class:`~allocator.ranking.policies.base.PolicyContext`:

- ``ctx.workload``: the typical pods, their popularity (weights are normalised here) and their
  CPU requests (optional). Without a workload every placement scores 0. The digest of the mix
  (:class:`Mix`, with its memos) is kept by the workload (``Workload.derived``), which the
  caller owns;
- ``ctx.node_facts[node].cpu_free_milli``: the node's free milli-CPU before the placement, and
  ``ctx.pod_cpu_milli``: what the pod asks for (both optional).

Contract used by callers that memoise: the score depends on a node's free CPU only through
the comparisons ``typical_cpu > free_cpu``, so two CPU values between the same consecutive
typical CPU requests give the same score (:meth:`FGD.cpu_thresholds`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from allocator.ranking.cards import CardState, NodeState, node_signature
from allocator.ranking.fit import fits
from allocator.ranking.policies.base import Policy, PolicyContext, Workload
from allocator.ranking.search import room_for_share, share_fits
from tessera.vocabulary import ContainerRequest, PodRequest

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
    #: the single container (whole cards or a share); one whole card for a general pod
    container: ContainerRequest


@dataclass(frozen=True, slots=True)
class Mix:
    """The workload mix, normalised: weights sum to 1."""

    typical: tuple[Typical, ...]
    #: memo of :func:`fragmentation` for this mix: (node signature, free CPU) -> value
    fragmentation_memo: dict[tuple[object, ...], float] = field(default_factory=dict,
                                                                compare=False)
    #: memo of :func:`usable_capacity`: node signature -> value
    usable_memo: dict[tuple[object, ...], Usable] = field(default_factory=dict, compare=False)


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
        typical.append(Typical(req, w / total, cpu, kind, models, req.min_card_memory_mib, c))
    return Mix(tuple(typical))


def card_free(card: CardState) -> float:
    """Idle capacity of a card in cards (0 for a card taken whole)."""
    return 0.0 if card.whole else 1.0 - card.utilisation


_CACHE_LIMIT = 500_000


def fragmentation(node: NodeState, mix: Mix, cpu_free: int | None = None) -> float:
    """Expected idle GPU capacity of ``node`` (in cards) that a typical pod cannot use.

    ``cpu_free`` None means CPU is not a constraint (the caller does not track it).
    """
    key = (node_signature(node), cpu_free)
    value = mix.fragmentation_memo.get(key)
    if value is None:
        value = _fragmentation(usable_capacity(node, mix), mix, cpu_free)
        _remember(mix.fragmentation_memo, key, value)
    return value


def _fragmentation(capacity: Usable, mix: Mix, cpu_free: int | None) -> float:
    total, per_typical = capacity
    value = 0.0
    for t, (usable, runs) in zip(mix.typical, per_typical, strict=True):
        if not runs or (cpu_free is not None and t.cpu_milli > cpu_free):
            value += t.weight * total  # t cannot run here: every free card is stranded
        else:
            value += t.weight * (total - usable)  # only the cards too small for t
    return value


def _remember(cache: dict[tuple[object, ...], _V], key: tuple[object, ...], value: _V) -> None:
    if len(cache) >= _CACHE_LIMIT:
        cache.clear()
    cache[key] = value


def usable_capacity(node: NodeState, mix: Mix) -> Usable:
    """(free capacity of the node in cards, and per typical pod: the free capacity on the cards
    it could use, and whether its GPU request fits the node at all) — CPU not considered."""
    key = node_signature(node)
    value = mix.usable_memo.get(key)
    if value is None:
        value = _usable_capacity(node, mix)
        _remember(mix.usable_memo, key, value)
    return value


#: A card with something free, as the measure reads it: (free fraction, lower-case model, the
#: card, its free core percent, its free MiB, whether it takes another share: not at its cap).
#: Read once per node, not once per typical pod.
_OpenCard = tuple[float, str, CardState, int, int, bool]


def _usable_capacity(node: NodeState, mix: Mix) -> Usable:
    # Only cards with something free can matter (so none of them is taken whole).
    open_cards = [(free, c.card.model.lower(), c, c.free_core, c.free_memory_mib,
                   not c.shares_full) for c in node.cards if (free := card_free(c)) > 0.0]
    total = sum(card[0] for card in open_cards)
    if total <= 0.0:
        return 0.0, tuple((0.0, False) for _ in mix.typical)
    return total, tuple(_usable_by(t, open_cards, node) for t in mix.typical)


def _usable_by(t: Typical, open_cards: Sequence[_OpenCard],
               node: NodeState) -> tuple[float, bool]:
    """(free capacity on the cards ``t`` could use, whether ``t``'s GPU request fits)."""
    usable_free = 0.0
    count = 0
    for free, model, card, free_core, free_mib, takes_share in open_cards:
        if (t.models is not None and model not in t.models) or (
                card.card.memory_mib < t.min_card_memory_mib):
            continue
        if t.kind == _SHARE:
            could_use = takes_share and room_for_share(t.container, card.card, free_core,
                                                       free_mib)
        elif t.kind == _WHOLE:
            could_use = card.idle
        else:  # a general pod: one of its containers
            could_use = any(card.idle if c.cards else share_fits(c, card)
                            for c in t.request.containers)
        if could_use:
            usable_free += free
            count += 1
    if t.kind == _SHARE:
        return usable_free, count > 0
    if t.kind == _WHOLE:
        return usable_free, count >= t.container.cards
    return usable_free, count > 0 and fits(t.request, node)


def mix_of(workload: Workload) -> Mix:
    """The digest of a workload (kept by it: ``workload.derived(mix_of)``)."""
    return compile_mix(workload.typical, workload.cpu_milli)


def _cpu(ctx: PolicyContext, node: str) -> tuple[int | None, int | None]:
    """(free CPU before, free CPU after) of ``node``, or (None, None) when not supplied."""
    facts = ctx.node_facts.get(node)
    if facts is None:
        return None, None
    return facts.cpu_free_milli, facts.cpu_free_milli - ctx.pod_cpu_milli


class FGD(Policy):
    name = "fgd"

    def measure(self, node: NodeState, mix: Mix, cpu_free: int | None) -> float:
        """The node's expected fragmentation (in cards); subclasses refine it."""
        return fragmentation(node, mix, cpu_free)

    def cpu_thresholds(self, typical_cpu: Sequence[int], max_cpu: int) -> tuple[int, ...]:
        """The CPU values the measure can tell apart: it depends on a node's free CPU only
        through ``free >= threshold`` for these (callers may memoise by that)."""
        return tuple(sorted(set(typical_cpu)))

    def score(self, before: NodeState, after: NodeState, ctx: PolicyContext) -> float:
        mix = ctx.workload.derived(mix_of)
        if not mix.typical:
            return 0.0
        cpu_before, cpu_after = _cpu(ctx, before.name)
        return self.measure(before, mix, cpu_before) - self.measure(after, mix, cpu_after)

    def score_cpu_only(self, node: NodeState, cpu_before: int, cpu_after: int,
                       workload: Workload) -> float:
        """Score of a pod that takes only CPU on ``node`` (no GPU): the growth of the node's
        fragmentation as its free CPU drops from ``cpu_before`` to ``cpu_after``.

        The extender never sees CPU-only pods; a caller that places them (the benchmark, as
        the authors' simulator does) can use this."""
        mix = workload.derived(mix_of)
        return self.measure(node, mix, cpu_before) - self.measure(node, mix, cpu_after)
