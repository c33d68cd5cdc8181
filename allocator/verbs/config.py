"""The verbs' configuration (the ``--policy``, ``--seed``, filter-best and hold settings)."""

from __future__ import annotations

from dataclasses import dataclass, field

from allocator.ranking.policies import DEFAULT_POLICY
from tessera.dialects import DialectConfig
from tessera.vocabulary import Vocabulary

#: How long filter's choice for a pod stays held for its bind (:mod:`allocator.verbs.filter`):
#: kube-scheduler binds at once after choosing, but its binding cycle waits for Permit
#: plugins and for the binds before it on a loaded API server.
HOLD_SECONDS = 15.0


@dataclass(frozen=True)
class AllocatorConfig:
    #: How pods without the canonical annotation are read; carries the vocabulary.
    dialects: DialectConfig = field(default_factory=DialectConfig)
    default_policy: str = DEFAULT_POLICY
    #: Seed of the random policy (with the pod identity and the node).
    seed: int = 0
    #: Track every node's CPU and memory (all bound pods are watched) for the policies.
    node_resources: bool = True
    #: Filter answers a GPU pod with the nodes the policy scores best only (not every node it
    #: fits): the policy's choice is final, and kube-scheduler, left with one node, neither
    #: scores nor calls prioritize (see :mod:`allocator.verbs.filter`).
    filter_best: bool = True
    #: Seconds filter's single answer stays held for the pod's bind (0: never held).
    hold_seconds: float = HOLD_SECONDS
    #: Evict pods of lower priority for a GPU pod refused everywhere for want of card room
    #: (allocator/verbs/preempt.py), and answer kube-scheduler's ``preemptVerb`` with
    #: card-level victims (allocator/verbs/preempt_verb.py). On, as kube-scheduler preempts.
    preemption: bool = True

    @property
    def vocabulary(self) -> Vocabulary:
        return self.dialects.vocabulary
