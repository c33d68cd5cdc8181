"""spread: put each pod where the least is used, on the least used card."""

from __future__ import annotations

from allocator.ranking.fit import NodeState
from allocator.ranking.policies.base import Policy, PolicyContext, mean_square_utilisation


class Spread(Policy):
    name = "spread"

    def score(self, before: NodeState, after: NodeState, ctx: PolicyContext) -> float:
        # The opposite of binpack: minimise the mean squared card utilisation after the
        # placement, which evens load across nodes and across the cards of one node.
        return 1.0 - mean_square_utilisation(after)
