"""Card-aware preemption: whom to evict, on which node, for a GPU pod that fits nowhere (pure).

The decision only: plain functions over frozen values, no API, no clock, no shared state. The
verbs that act on it (evict through the Eviction API, hold the freed cards, answer the
extender's ``preemptVerb``) are built over it.

Design (docs/decisions/0012-card-aware-preemption-core.md says why):

- **Input** (:mod:`.model`): the :class:`Preemptor` (its :class:`~tessera.vocabulary.PodRequest`,
  ``spec.priority``, ``spec.preemptionPolicy``); each candidate node as a :class:`NodeOffer`,
  the :class:`~allocator.ranking.cards.NodeState` the ranking sees and the :class:`GpuPod` s on
  it (their :class:`~tessera.vocabulary.Allocation`, priority, start time); the
  PodDisruptionBudgets as :class:`Budget` s (allowed disruptions, UIDs of the pods selected).
- **Pod fields** (:mod:`.pod_fields`): ``spec.priority``, ``spec.preemptionPolicy`` and
  ``status.startTime`` read from any JSON without raising (an unreadable policy evicts nobody).
- **On one node** (:mod:`.victims`): kube-scheduler's own victim selection
  (``SelectVictimsOnNode``) with the card-level fit of :mod:`allocator.ranking.fit`: take every
  GPU pod of strictly lower priority off the cards the pod may use; if it still does not fit,
  the node is out (the cheap pre-check); else put pods back most important first, budget-
  protected ones before the others, and keep as victims those whose return leaves no room.
  The result is minimal (no victim can be spared) and every victim holds a card the preemptor
  gets (:mod:`.release` takes pods off cards and puts them back; :mod:`.budgets` says which
  pods a budget protects, as kube-scheduler counts).
- **Across nodes** (:mod:`.choose`): kube-scheduler's ``pickOneNodeForPreemption`` order:
  fewest budget violations, lowest highest-victim priority, smallest priority sum, fewest
  victims, latest start of the highest-priority victims, then the first node given.
- **Output**: a :data:`Preemption` (node, victims most important first, budget violations, the
  preemptor's placement there and so its cards) or a :class:`NoPreemption` with the reason,
  overall and per node (``preemptionPolicy: Never``; fits already; nothing of lower priority
  on the cards; does not fit even with them all gone).
- **Wire** (:mod:`.extender_wire`): the extender's ``ExtenderPreemptionArgs`` decoded and its
  ``ExtenderPreemptionResult`` encoded, as kube-scheduler sends and reads them;
  :mod:`.extender_answer` answers kube-scheduler's candidates with card-level victims (its
  victims that hold no card kept), leaving out the nodes where the cards cannot make room.

Cost: per node two fit checks to rule it out, plus one per lower-priority pod on a node where
preemption helps; never a search over subsets. Nodes alike in cards and pods (names and start
times aside) are worked out once (:mod:`.alike`).
"""

from __future__ import annotations

from allocator.preemption.choose import (
    POLICY_NEVER,
    candidates_on,
    choose_preemption,
    freed_first,
    nobody_lower,
    order_key,
    pick_one_node,
)
from allocator.preemption.extender_answer import ExtenderAnswer, answer_preemption
from allocator.preemption.model import (
    Budget,
    GpuPod,
    NodeOffer,
    NodeVictims,
    NoPreemption,
    Preemption,
    PreemptionPolicy,
    Preemptor,
    importance,
)
from allocator.preemption.pod_fields import policy_of, priority_of, started_at
from allocator.preemption.victims import (
    FITS_ALREADY,
    NO_LOWER_PRIORITY,
    potential_victims,
    select_victims,
)

__all__ = [
    "FITS_ALREADY",
    "NO_LOWER_PRIORITY",
    "POLICY_NEVER",
    "Budget",
    "ExtenderAnswer",
    "GpuPod",
    "NoPreemption",
    "NodeOffer",
    "NodeVictims",
    "Preemption",
    "PreemptionPolicy",
    "Preemptor",
    "answer_preemption",
    "candidates_on",
    "choose_preemption",
    "freed_first",
    "importance",
    "nobody_lower",
    "order_key",
    "pick_one_node",
    "policy_of",
    "potential_victims",
    "priority_of",
    "select_victims",
    "started_at",
]
