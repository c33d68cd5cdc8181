"""random: a reproducible pseudo-random choice (seed + pod identity + node + cards).

No global RNG: the score is a hash, so the same pod, seed and cluster state always land on
the same node and cards, in any process and any thread.
"""

from __future__ import annotations

import hashlib

from allocator.fit import NodeState
from allocator.policies.base import PolicyContext


class Random:
    name = "random"
    per_pod = True

    def score(self, before: NodeState, after: NodeState, ctx: PolicyContext) -> float:
        # Which cards changed identifies the candidate inside a node.
        changed = ",".join(
            str(a.card.index) for b, a in zip(before.cards, after.cards, strict=True) if a != b
        )
        text = f"{ctx.seed}|{ctx.pod_key}|{after.name}|{changed}".encode()
        digest = hashlib.blake2b(text, digest_size=8).digest()
        return int.from_bytes(digest, "big") / 2**64
