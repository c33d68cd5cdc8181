"""Placement policies by name. Adding one: a file with the policy class, and one line below."""

from __future__ import annotations

from allocator.ranking.policies.base import (
    MAX_SCORE,
    NO_WORKLOAD,
    NodeFacts,
    NodeRank,
    Policy,
    PolicyContext,
    Workload,
    best_floor,
    chooser,
    mean_square_utilisation,
    scaled,
    scaled_numbers,
)
from allocator.ranking.policies.binpack import Binpack
from allocator.ranking.policies.fgd import FGD
from allocator.ranking.policies.fgd_cpu import FGDCpu
from allocator.ranking.policies.fgd_ff import FGDFirstFit
from allocator.ranking.policies.hami import HAMI_POLICIES
from allocator.ranking.policies.random import Random
from allocator.ranking.policies.spread import Spread
from allocator.ranking.policies.usage import Usage
from tessera.vocabulary import RequestError

#: name -> policy. Policies are stateless, so one shared instance each.
REGISTRY: dict[str, Policy] = {
    Binpack.name: Binpack(),
    Spread.name: Spread(),
    Random.name: Random(),
    FGD.name: FGD(),
    FGDFirstFit.name: FGDFirstFit(),
    FGDCpu.name: FGDCpu(),
    Usage.name: Usage(),
    **{hami.name: hami() for hami in HAMI_POLICIES},
}

#: The cluster default: chosen in the openb deployed-mode replay (docs/benchmarks.md).
DEFAULT_POLICY = FGDCpu.name


def get_policy(name: str) -> Policy:
    """The policy called ``name``; a :class:`RequestError` naming the known ones otherwise."""
    policy = REGISTRY.get(name)
    if policy is None:
        known = ", ".join(sorted(REGISTRY))
        raise RequestError(f"unknown placement policy {name!r} (known: {known})")
    return policy


__all__ = [
    "DEFAULT_POLICY",
    "MAX_SCORE",
    "NO_WORKLOAD",
    "REGISTRY",
    "NodeFacts",
    "NodeRank",
    "Policy",
    "PolicyContext",
    "Workload",
    "best_floor",
    "chooser",
    "get_policy",
    "mean_square_utilisation",
    "scaled",
    "scaled_numbers",
]
