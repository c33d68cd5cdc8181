"""The ``preemptVerb``'s answer: kube-scheduler's candidates with card-level victims (pure).

kube-scheduler calls the verb only when its own dry run found candidates (room short in sum,
by the node's resources); it sends each candidate node with the victims it chose there and
takes the nodes answered as its new candidates, then picks one by ``pickOneNodeForPreemption``
(kubernetes v1.34.4 ``pkg/scheduler/framework/preemption/preemption.go:337-392`` and
``:397-425``). Per node it proposed:

- where the cards need room, the answer is the card-level selection
  (:func:`~allocator.preemption.victims.select_victims`) in place of its GPU victims, plus its
  victims that hold no card (it evicts those for CPU, memory or pod count, which the cards do
  not measure): :func:`~allocator.preemption.extender_wire.merged_victims`;
- where the pod already fits on the cards, its own proposal is answered unchanged (the room
  it is short of is not the cards');
- where no card-level victims can make room (or the node is not known here), the node is left
  out: evicting there would not let the pod run.

kube-scheduler then chooses among the answered nodes by the same order
:func:`~allocator.preemption.choose.pick_one_node` follows, reading priorities and start times
from its own copies of the pods.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from allocator.preemption.choose import POLICY_NEVER, candidates_on
from allocator.preemption.extender_wire import (
    ExtenderPreemptionResult,
    ProposedVictims,
    encode_result,
    merged_victims,
)
from allocator.preemption.model import (
    Budget,
    NodeOffer,
    NodeVictims,
    PreemptionPolicy,
    Preemptor,
)
from allocator.preemption.victims import FITS_ALREADY
from allocator.ranking.fit import Chooser

#: Why a node kube-scheduler proposed is left out: the allocator has no cards for it.
UNKNOWN_NODE = "not a node with GPU cards known to the allocator"


@dataclass(frozen=True)
class ExtenderAnswer:
    """The result to send, why each proposed node left out was (for logs and Events), and
    the card-level choices answered (the rest of the result: nodes kube-scheduler proposed
    where the pod fits the cards already, answered as it proposed)."""

    result: ExtenderPreemptionResult
    left_out: Mapping[str, str]
    candidates: tuple[NodeVictims, ...] = ()


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
    found, why = candidates_on(preemptor, list(known.values()), budgets, chooser)
    answers: list[tuple[str, Sequence[str], int]] = []
    for candidate in found:
        offer, theirs = known[candidate.node], proposed[candidate.node]
        ours = [v.uid for v in candidate.victims]
        uids = merged_victims(theirs, ours, (p.uid for p in offer.pods))
        kept_theirs = len(uids) > len(ours)
        violations = (max(candidate.pdb_violations, theirs.pdb_violations) if kept_theirs
                      else candidate.pdb_violations)
        answers.append((candidate.node, uids, violations))
    for name, reason in why.items():
        if reason == FITS_ALREADY and proposed[name].uids:
            answers.append((name, proposed[name].uids, proposed[name].pdb_violations))
        else:
            left_out[name] = reason
    return ExtenderAnswer(encode_result(answers), left_out, tuple(found))
