"""The extender's ``preemptVerb``: kube-scheduler's own preemption candidates, answered with
card-level victims.

kube-scheduler calls it only when its dry run found candidates (room short in sum, by the
node's CPU, memory or pod count: Tessera's card resources are ``ignoredByScheduler``), after
filter, in the same scheduling cycle; filter's own path (:mod:`allocator.verbs.preempt`)
covers the pods it finds no candidate for. The answer (decision 0021):

- **Preemption off** (:attr:`AllocatorConfig.preemption
  <allocator.verbs.config.AllocatorConfig.preemption>` false): kube-scheduler's proposal
  unchanged, so the verb in the scheduler configuration changes nothing: the cluster
  preempts as it would with no extender. So does a pod that asks for no card.
- **Not synced, not the leader**: :class:`~allocator.errors.NotReady`, which the HTTP shell
  answers 503 (the result type has no error field; kube-scheduler then fails this attempt
  and retries the pod, as after filter's ``Error``).
- **A preemption in flight** for the pod (filter's path chose victims, before its
  deadline; or an earlier answer's freed cards are held for it): no candidates, the empty
  map. The two paths never both evict for one pod. An earlier answer not yet held is
  replaced (kube-scheduler asks again only when its last preemption is not under way:
  :mod:`allocator.verbs.preempt_answers`).
- **Otherwise** the pure answer (:func:`~allocator.preemption.answer_preemption`) over the
  proposed nodes' offers, built as filter's path builds them (the cards reserved for other
  preemptions of higher or equal priority unavailable, the victims of others leaving:
  :meth:`~allocator.verbs.reservations.Reserving.respected`): kube-scheduler's victims
  kept, and card-level ones added where the cards still need room. An answer on one node
  ends the preemptions of lower priority reserving one of its cards (``outranked``), as
  filter's path does. When every node answered
  has such additions, only the one kube-scheduler's own order would pick is answered (its
  last tie is random; one node makes its choice ours), and remembered in flight with its
  cards, so filter's path
  evicts nobody more for the pod and the freed cards are held for it once its victims are
  gone (:meth:`Preempt.released <allocator.verbs.preempt.Preempt.released>`). That answer's
  note (``evictor: kube-scheduler``) is written on the pod before the answer goes back, so a
  new leader restores its reservation and hold, and never evicts its victims; a note that
  cannot be written is answered with no candidates. When some answered node is
  kube-scheduler's own proposal (its victims free the cards already), the answer is left
  whole and remembered without a node (no hold, no reservation), noted too (``node: ""``,
  decision 0035) so a new leader's filter's path evicts nobody for the pod either.
- An unreadable GPU request, a pod without a UID, or an API error reading the budgets or the
  labels they weigh: the empty map (no preemption this attempt). The offers come from the
  picture, and the budgets are read only when card-level victims are added
  (:func:`~allocator.verbs.preempt_offers.weigh`, shared with filter's path).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Literal

from allocator.decisions import PodRef
from allocator.errors import ApiError
from allocator.preemption import (
    ExtenderAnswer,
    Preemptor,
    answer_preemption,
    pick_one_node,
    policy_of,
    priority_of,
)
from allocator.preemption.extender_wire import (
    ExtenderPreemptionResult,
    PreemptionArgs,
    ProposedVictims,
    encode_result,
)
from allocator.verbs import preempt_offers
from allocator.verbs.preempt import Preempt
from allocator.verbs.preempt_ports import InFlight
from allocator.verbs.reader import PodReader
from tessera.vocabulary import RequestError

logger = logging.getLogger(__name__)

#: The counter each answer adds to (:class:`VerbCounts`).
Kind = Literal["card_level", "unchanged", "none"]


def no_candidates() -> ExtenderPreemptionResult:
    """The empty map: no preemption this attempt."""
    return {"NodeNameToMetaVictims": {}}


def unchanged(proposed: Mapping[str, ProposedVictims]) -> ExtenderPreemptionResult:
    """kube-scheduler's proposal, as it sent it (a node without victims left out: it would
    fail the whole preemption on one)."""
    return encode_result((node, v.uids, v.pdb_violations) for node, v in proposed.items())


@dataclass
class VerbCounts:
    """What the verb answered since start (``/status``: ``preemptVerb``)."""

    #: Calls answered with card-level victims.
    card_level: int = 0
    #: Calls answered with kube-scheduler's proposal unchanged.
    unchanged: int = 0
    #: Calls answered with no candidates.
    none: int = 0

    def as_json(self) -> dict[str, int]:
        return {"cardLevel": self.card_level, "unchanged": self.unchanged, "none": self.none}


class PreemptVerb:
    """The ``preemptVerb`` over the shared reads and filter's preemption (None: off)."""

    def __init__(self, reader: PodReader, preempt: Preempt | None) -> None:
        self.reader = reader
        self.preempt = preempt
        self._counts = VerbCounts()
        self._lock = threading.Lock()

    def counts(self) -> dict[str, int]:
        with self._lock:
            return self._counts.as_json()

    def __call__(self, args: PreemptionArgs) -> ExtenderPreemptionResult:
        """The answer for decoded ``args``; :class:`~allocator.errors.NotReady` when this
        replica cannot decide (preemption on only)."""
        result, kind = self._answer(args)
        got = result["NodeNameToMetaVictims"]
        if not got:
            kind = "none"
        with self._lock:
            setattr(self._counts, kind, getattr(self._counts, kind) + 1)
        ref = PodRef.of(args.pod)
        logger.info("preemptVerb for %s (uid %s): %d node(s) proposed, answered %s", ref.key,
                    ref.uid, len(args.nodes),
                    {n: [p["UID"] for p in v["Pods"]] for n, v in got.items()} or "none")
        return result

    def _answer(self, args: PreemptionArgs) -> tuple[ExtenderPreemptionResult, Kind]:
        preempt = self.preempt
        if preempt is None:
            return unchanged(args.nodes), "unchanged"
        self.reader.check_ready()
        try:
            request = self.reader.pod_request(args.pod)
        except RequestError as exc:
            logger.info("preemptVerb: %s", exc)
            return no_candidates(), "none"
        if request is None:
            return unchanged(args.nodes), "unchanged"  # no card to speak for
        ref = PodRef.of(args.pod)
        if not ref.uid or preempt.acting_for(ref.uid):
            return no_candidates(), "none"
        preemptor = Preemptor(ref.uid, request, priority_of(args.pod), policy_of(args.pod))
        # An earlier answer for the pod is replaced: its victims are this answer's to name.
        others = [f for f in preempt.snapshot() if f.pod.uid != ref.uid]
        found = preempt_offers.offers(preempt.state, list(args.nodes), others)
        try:
            answer = preempt_offers.weigh(
                preempt.api, preempt.gpu_pods, preemptor, preempt.respected(preemptor, found),
                partial(answer_preemption, preemptor, args.nodes), _adds_victims)
        except ApiError as exc:
            logger.warning("preemptVerb for %s not answered: %s", ref.key, exc)
            return no_candidates(), "none"
        answered = answer.result["NodeNameToMetaVictims"]
        if not answered:
            return answer.result, "none"
        until = self.reader.clock() + preempt.deadline_seconds
        chosen = pick_one_node(answer.candidates)
        if chosen is not None and set(answered) == {c.node for c in answer.candidates}:
            result: ExtenderPreemptionResult = {
                "NodeNameToMetaVictims": {chosen.node: answered[chosen.node]}}
            victims = tuple(p["UID"] for p in answered[chosen.node]["Pods"])
            entry = InFlight(ref, request, until, chosen.node, chosen.cards, victims,
                             priority=preemptor.priority,
                             victim_refs=_refs(preempt, victims))
        else:
            result = answer.result
            victims = tuple(p["UID"] for v in answered.values() for p in v["Pods"])
            entry = InFlight(ref, request, until, victims=victims, priority=preemptor.priority)
        if not preempt.remember_answer(entry):
            return no_candidates(), "none"
        if entry.node:  # kube-scheduler clears lower nominations on a node it preempts on
            preempt.taken(ref.uid, preemptor.priority, entry.node, entry.cards, placed=False)
        return result, "card_level"


def _adds_victims(answer: ExtenderAnswer) -> bool:
    """Whether the answer adds victims of ours (the budgets weigh those only: kube-scheduler
    counted its own)."""
    return bool(answer.candidates)


def _refs(preempt: Preempt, uids: tuple[str, ...]) -> tuple[PodRef, ...]:
    """The victims by name, as the picture records them (/status shows them)."""
    return tuple(PodRef(r.namespace, r.name, r.uid)
                 for r in map(preempt.state.record, uids) if r is not None)
