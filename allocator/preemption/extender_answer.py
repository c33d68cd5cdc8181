"""The ``preemptVerb``'s answer: kube-scheduler's candidates, made to free the cards (pure).

kube-scheduler calls the verb only when its own dry run found candidates (room short in sum,
by the node's resources); it sends each candidate node with the victims it chose there and
takes the nodes answered as its new candidates, then picks one by ``pickOneNodeForPreemption``
(kubernetes v1.34.4 ``pkg/scheduler/framework/preemption/preemption.go:337-392`` and
``:397-425``). Tessera's card resources are ``ignoredByScheduler`` in every shipped
configuration, so kube-scheduler chose its victims for room the cards do not measure (CPU,
memory, pod count, other resources) and needs every one of them: its walk put back every pod
it could (``SelectVictimsOnNode``). Per node it proposed:

- its victims are kept, and taken off the node's cards first (a GPU pod among them frees its
  card share too); then, where the pod still does not fit on the cards, the card-level
  selection (:func:`~allocator.preemption.victims.select_victims`) over the pods left adds
  the fewest more, all on the cards the pod gets;
- where its victims leave the cards room enough, its proposal is answered unchanged;
- where no card-level victims can make room (or the node is not known here), the node is left
  out: evicting there would not let the pod run.

So every answered set makes the pod fit both ways: kube-scheduler's own check (its victims are
in it) and the cards'. A victim set of kube-scheduler's chosen for the cards' sum (a
configuration that does not ignore them) is kept too: never a wasted eviction, perhaps one
more than the cards alone needed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from allocator.preemption.choose import POLICY_NEVER, candidates_on
from allocator.preemption.extender_wire import (
    ExtenderPreemptionResult,
    ProposedVictims,
    encode_result,
)
from allocator.preemption.model import (
    Budget,
    NodeOffer,
    NodeVictims,
    PreemptionPolicy,
    Preemptor,
    importance,
)
from allocator.preemption.release import without
from allocator.preemption.victims import FITS_ALREADY
from allocator.ranking.fit import Chooser

#: Why a node kube-scheduler proposed is left out: the allocator has no cards for it.
UNKNOWN_NODE = "not a node with GPU cards known to the allocator"


@dataclass(frozen=True)
class ExtenderAnswer:
    """The result to send, why each proposed node left out was (for logs and Events), and
    the nodes where card-level victims were added, each with every GPU victim answered there
    (kube-scheduler's and the added ones, most important first) and the pod's placement once
    they are gone. Nodes answered as kube-scheduler proposed them are not among these."""

    result: ExtenderPreemptionResult
    left_out: Mapping[str, str]
    candidates: tuple[NodeVictims, ...] = ()


def after_proposal(offer: NodeOffer, proposed: ProposedVictims) -> NodeOffer:
    """``offer`` with kube-scheduler's proposed victims gone from its cards and its pods."""
    theirs = set(proposed.uids)
    gone = [p for p in offer.pods if p.uid in theirs]
    if not gone:
        return offer
    return NodeOffer(without(offer.state, gone), tuple(p for p in offer.pods
                                                       if p.uid not in theirs))


def answer_preemption(preemptor: Preemptor, proposed: Mapping[str, ProposedVictims],
                      offers: Sequence[NodeOffer], budgets: Sequence[Budget] = (),
                      chooser: Chooser | None = None) -> ExtenderAnswer:
    """The ``ExtenderPreemptionResult`` for kube-scheduler's ``proposed`` candidates, given
    the allocator's view of (some of) those nodes in ``offers``."""
    if preemptor.policy is PreemptionPolicy.NEVER:
        # kube-scheduler checks this itself before calling; answer alike if it ever does not.
        return ExtenderAnswer(encode_result([]), dict.fromkeys(proposed, POLICY_NEVER))
    known = {o.name: o for o in offers if o.name in proposed}
    left_out = {n: UNKNOWN_NODE for n in proposed if n not in known}
    after = [after_proposal(o, proposed[o.name]) for o in known.values()]
    found, why = candidates_on(preemptor, after, budgets, chooser)
    answers: list[tuple[str, Sequence[str], int]] = []
    chosen: list[NodeVictims] = []
    for candidate in found:
        theirs = proposed[candidate.node]
        added = [v.uid for v in candidate.victims]
        # An upper bound: kube-scheduler's count over its victims, ours over the added ones.
        violations = theirs.pdb_violations + candidate.pdb_violations
        answers.append((candidate.node, (*theirs.uids, *added), violations))
        kept = [p for p in known[candidate.node].pods if p.uid in set(theirs.uids)]
        chosen.append(replace(candidate, pdb_violations=violations, victims=tuple(
            sorted((*kept, *candidate.victims), key=importance))))
    for name, reason in why.items():
        if reason == FITS_ALREADY and proposed[name].uids:
            answers.append((name, proposed[name].uids, proposed[name].pdb_violations))
        else:
            left_out[name] = reason
    return ExtenderAnswer(encode_result(answers), left_out, tuple(chosen))
