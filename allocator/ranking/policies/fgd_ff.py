"""fgd-ff: FGD with a tolerance and a fixed first-fit order among near-equal nodes.

FGD (:mod:`allocator.ranking.policies.fgd`) ranks nodes by how much a placement grows the expected
fragmentation. Many candidates grow it by the same amount or nearly so (every node that
still has an idle card, for a whole-card pod; every node where a CPU-only pod crosses no
typical pod's CPU request), and which of them wins matters: always preferring the same nodes
keeps the others whole for later pods, spreading at random fragments all of them.

The authors' simulator gets that preference by accident — its score is an integer
(``int(sigmoid(diff / 1000) * 100)``, pkg/simulator/plugin/fgd_score.go), so differences below
about 40 milli-GPU tie, and its kube-scheduler keeps the smallest node name among ties (node
names prefixed with a seeded permutation; vendor/k8s.io/kubernetes/pkg/scheduler/core/
generic_scheduler.go ``selectHost``). Stock kube-scheduler breaks ties at random, so this
policy makes the preference explicit instead of relying on the scheduler:

- fragmentation changes are rounded to :data:`TOLERANCE` cards (centred, so a change smaller
  than half of it counts as none);
- within one such step, a fixed per-node rank decides: :meth:`fixed_rank`, a stable hash of the
  node name below :data:`TOLERANCE`, so a node's place in the order is the same for every pod,
  every replica and every restart — first fit in a fixed order.

The score is ``step(FGD) + fixed_rank(node)``; the rank is the policy's ``name_bias`` (the only
part of the score that depends on the node's name), so callers may share the rest between
nodes of equal content.
"""

from __future__ import annotations

import hashlib
import math
from typing import Final

from allocator.ranking.fit import NodeState
from allocator.ranking.policies.base import NodeRank, PolicyContext, Workload
from allocator.ranking.policies.fgd import FGD

#: Fragmentation changes (in cards) are compared in steps of this size: about one step of the
#: authors' integer score near zero (sigmoid'(0) * 100 = 25 per card, i.e. 40 milli-GPU).
TOLERANCE: Final = 0.04


def _step(diff: float) -> float:
    return TOLERANCE * math.floor(diff / TOLERANCE + 0.5)


class FGDFirstFit(FGD):
    name = "fgd-ff"
    name_bias_bound = TOLERANCE

    def fixed_rank(self, node: str) -> float:
        """The node's fixed rank, in [0, TOLERANCE): never outweighs a fragmentation step."""
        digest = hashlib.blake2b(node.encode(), digest_size=8).digest()
        return 0.999 * TOLERANCE * int.from_bytes(digest, "big") / 2**64

    def score(self, before: NodeState, after: NodeState, ctx: PolicyContext) -> float:
        return _step(super().score(before, after, ctx)) + self.fixed_rank(after.name)

    def name_bias(self) -> NodeRank:
        return self.fixed_rank

    def score_cpu_only(self, node: NodeState, cpu_before: int, cpu_after: int,
                       workload: Workload) -> float:
        raw = super().score_cpu_only(node, cpu_before, cpu_after, workload)
        return _step(raw) + self.fixed_rank(node.name)
