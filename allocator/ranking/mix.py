"""The live workload mix: typical GPU requests and their weights, from the pods seen (pure).

FGD and its kin (:mod:`allocator.ranking.policies.fgd`) judge a node by how well its free GPUs suit
the
*typical* pods of the workload. In production nobody hands the allocator that list, so it
learns it: every GPU pod it is asked to place is one observation of its request shape and CPU
request. Weights decay exponentially with the number of later observations (``half_life``),
so the mix follows a changing workload; at most ``max_shapes`` shapes are kept (the lightest
is forgotten first), so memory is bounded whatever users send.

Policies memoise per :class:`~allocator.ranking.policies.Workload` (``Workload.derived``), and the
allocator keeps scores per workload, so the published workload changes in steps, not on
every pod: :meth:`LiveMix.workload` rebuilds it at most once per ``refresh`` observations.
Everything is a function of the observation sequence alone (no clock), so a replay is
deterministic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from allocator.ranking.policies.base import NO_WORKLOAD, Workload
from tessera.vocabulary import ContainerRequest, PodRequest

#: A request with its names and policy left out: what makes two pods the same typical pod.
ShapeKey = tuple[tuple[tuple[int, int, int, int], ...], tuple[str, ...], int, int]


def shape_key(request: PodRequest, cpu_milli: int) -> ShapeKey:
    """The typical-pod key of a request: per container (cards, core %, memory %, MiB), the
    allowed models, the minimum card memory, and the pod's milli-CPU."""
    containers = tuple(sorted((c.cards, c.core_percent, c.memory_percent, c.memory_mib)
                              for c in request.containers))
    models = tuple(sorted(m.lower() for m in request.models))
    return containers, models, request.min_card_memory_mib, max(0, cpu_milli)


def _canonical(key: ShapeKey) -> PodRequest:
    containers, models, min_mib, _cpu = key
    return PodRequest(
        tuple(ContainerRequest(f"c{i}", cards=cards, core_percent=core,
                               memory_percent=mem_pct, memory_mib=mib)
              for i, (cards, core, mem_pct, mib) in enumerate(containers)),
        models=models, min_card_memory_mib=min_mib)


@dataclass
class LiveMix:
    """Decayed popularity of request shapes. Not thread-safe: the caller serialises."""

    #: Observations after which an observation weighs half as much.
    half_life: int = 2000
    #: Shapes kept; beyond that, the lightest is forgotten.
    max_shapes: int = 256
    #: Typical pods published: the heaviest shapes covering ``coverage`` of the weight, at
    #: most ``max_typical`` of them (a policy's cost grows with their number).
    coverage: float = 0.95
    max_typical: int = 24
    #: Observations between two rebuilds of the published workload. Each rebuild that changes
    #: the mix drops every score kept for the old one; 256 is what the deployed-mode tables
    #: were measured with (docs/benchmarks.md: 0.03 points from 64 on ``default``).
    refresh: int = 256
    _weights: dict[ShapeKey, float] = field(default_factory=dict, init=False)
    #: Weight of the next observation (grows instead of decaying every stored weight).
    _unit: float = field(default=1.0, init=False)
    _seen: int = field(default=0, init=False)
    _published_at: int = field(default=-1, init=False)
    _published: Workload = field(default=NO_WORKLOAD, init=False)

    def __post_init__(self) -> None:
        if self.half_life < 1 or self.max_shapes < 1 or self.max_typical < 1 or self.refresh < 1:
            raise ValueError("half_life, max_shapes, max_typical and refresh must be >= 1")
        if not 0.0 < self.coverage <= 1.0:
            raise ValueError("coverage must be in (0, 1]")

    @property
    def observations(self) -> int:
        return self._seen

    def observe(self, request: PodRequest, cpu_milli: int = 0) -> None:
        """One pod of this request (count each pod once)."""
        key = shape_key(request, cpu_milli)
        self._weights[key] = self._weights.get(key, 0.0) + self._unit
        self._seen += 1
        self._unit *= math.pow(2.0, 1.0 / self.half_life)
        if self._unit > 1e12:  # rescale before floats lose the small weights
            self._weights = {k: w / self._unit for k, w in self._weights.items()}
            self._unit = 1.0
        if len(self._weights) > self.max_shapes:
            lightest = min(self._weights, key=lambda k: (self._weights[k], k))
            del self._weights[lightest]

    def typical(self) -> list[tuple[ShapeKey, float]]:
        """The typical shapes, heaviest first, with weights normalised over them."""
        ranked = sorted(self._weights.items(), key=lambda kv: (-kv[1], kv[0]))
        total = sum(w for _, w in ranked)
        chosen: list[tuple[ShapeKey, float]] = []
        covered = 0.0
        for key, w in ranked:
            if covered >= self.coverage * total or len(chosen) >= self.max_typical:
                break
            chosen.append((key, w))
            covered += w
        return [(key, w / covered) for key, w in chosen]

    def workload(self) -> Workload:
        """The published workload: rebuilt when ``refresh`` observations arrived since the
        last rebuild (the first observation publishes at once); the same object otherwise."""
        if self._seen == 0:
            return NO_WORKLOAD
        if self._published_at < 0 or self._seen - self._published_at >= self.refresh:
            typical = self.typical()
            rebuilt = Workload(tuple((_canonical(key), w) for key, w in typical),
                               tuple(key[3] for key, _ in typical))
            # An unchanged mix keeps its object, and with it every score kept for it.
            if (rebuilt.typical, rebuilt.cpu_milli) != (self._published.typical,
                                                        self._published.cpu_milli):
                self._published = rebuilt
            self._published_at = self._seen
        return self._published
