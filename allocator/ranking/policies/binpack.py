"""binpack: fill used nodes and used cards first, keeping whole cards and nodes free."""

from __future__ import annotations

from allocator.ranking.fit import NodeState
from allocator.ranking.policies.base import Policy, PolicyContext, mean_square_utilisation


class Binpack(Policy):
    name = "binpack"

    def score(self, before: NodeState, after: NodeState, ctx: PolicyContext) -> float:
        # Mean squared card utilisation after the placement: highest on the node that is
        # already fullest, and inside a node on the fullest card (squares reward
        # concentration), which is best-fit for shares.
        return mean_square_utilisation(after)
