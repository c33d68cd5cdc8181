"""The victims on one node: kube-scheduler's own selection, over cards (pure).

kube-scheduler (kubernetes v1.34.4
``pkg/scheduler/framework/plugins/defaultpreemption/default_preemption.go:218-318``,
``SelectVictimsOnNode``) removes every pod of lower priority from a copy of the node, checks
that the preemptor fits then, and puts pods back one at a time ("reprieves" them), most
important first and the ones a PodDisruptionBudget forbids evicting before the others; a pod
whose return makes the preemptor unfit stays a victim. Here "fits" is the card-level fit of
:func:`allocator.ranking.fit.fits` and the pods are the GPU pods on the node's eligible cards.

Why the result is minimal: fit is monotone (taking a pod off a card never makes a request fit
less), so a victim kept because its return did not fit beside the pods reprieved so far cannot
return beside the larger final set either: no victim can be dropped. Every victim is then on a
card the preemptor gets (one that is not could return without touching the placement). Without
budgets the highest victim priority is also the least any victim set on the node allows: all
pods above it return together with room to spare, and the walk tries them first.

Cost: one fit check to see the pod does not fit as it is, one with every lower-priority pod
gone (the cheap pre-check: most nodes stop here), then one per potential victim.
"""

from __future__ import annotations

from collections.abc import Sequence

from allocator.preemption.budgets import split_by_budget
from allocator.preemption.model import Budget, GpuPod, NodeOffer, NodeVictims, Preemptor, importance
from allocator.preemption.release import with_back, without
from allocator.ranking.fit import Chooser, Unfit, fits, place, unfit_reason
from allocator.ranking.search import eligible

#: Why a node yields no victims: the preemptor fits there already.
FITS_ALREADY = "fits without preemption"
#: Why a node yields no victims: no pod of lower priority holds one of its eligible cards.
NO_LOWER_PRIORITY = "no GPU pod of lower priority on its cards"


def potential_victims(preemptor: Preemptor, node: NodeOffer) -> list[GpuPod]:
    """The GPU pods of strictly lower priority holding at least one card the preemptor may use
    (allowed model, enough memory), most important first (kubernetes v1.34.4
    ``default_preemption.go:360-363``, ``isPreemptionAllowed``: lower priority only)."""
    usable = {c.card.index for c in node.state.cards if eligible(preemptor.request, c.card)}
    pods = [p for p in node.pods if p.priority < preemptor.priority
            and any(i in usable for c in p.containers for i in c.card_indices)]
    pods.sort(key=importance)
    return pods


def select_victims(preemptor: Preemptor, node: NodeOffer, budgets: Sequence[Budget] = (),
                   chooser: Chooser | None = None) -> NodeVictims | str:
    """The victims on ``node`` and where the preemptor then goes, or why there are none."""
    request = preemptor.request
    if fits(request, node.state):
        return FITS_ALREADY
    candidates = potential_victims(preemptor, node)
    if not candidates:
        why = unfit_reason(request, node.state)
        return why.reason if why is not None and not why.resolvable else NO_LOWER_PRIORITY
    state = without(node.state, candidates)
    if not fits(request, state):
        why = unfit_reason(request, state)
        detail = f": {why.reason}" if why is not None else ""
        return (f"does not fit even with its {len(candidates)} GPU pods of lower priority "
                f"gone{detail}")
    violating, free = split_by_budget(candidates, budgets)
    forbidden = {id(p) for p in violating}
    victims: list[GpuPod] = []
    for pod in (*violating, *free):
        trial = with_back(state, pod, node.state)
        if fits(request, trial):
            state = trial
        else:
            victims.append(pod)
    violations = sum(1 for v in victims if id(v) in forbidden)
    victims.sort(key=importance)
    placed = place(request, state, chooser or _first_card, preemptor.uid)
    # fits() said yes on this very state; place() agrees with it or fails loudly (a bug).
    assert not isinstance(placed, Unfit), "placement lost a feasible node"
    return NodeVictims(node.name, tuple(victims), violations, placed.containers)


def _first_card(before: object, after: object) -> float:
    """No preference: the placement takes the lowest-indexed cards that work."""
    return 0.0
