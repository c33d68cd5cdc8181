"""``why``'s word on preemption (pure): whom the allocator would evict for a Pending pod and
why those, or which preemption it made for a pod.

- **Would** (:func:`would_preempt`): a Pending GPU pod that fits on no node, but would on some
  if other pods released cards (the ``no-room`` verdicts), goes to the allocator's own choice,
  :func:`allocator.preemption.choose_preemption`, over the offers the allocator builds
  (allocator/verbs/preempt.py): each such node's cards and the GPU pods bound there with their
  ``spec.priority`` and ``status.startTime``, and the PodDisruptionBudgets over the pods of
  lower priority. The answer names the victims (the fewest pods of strictly lower priority
  whose cards make room), the node, and what put that node before the next one in
  kube-scheduler's order (:data:`CRITERIA`); or, when no preemption helps, the core's reason
  (``preemptionPolicy: Never``, nothing of lower priority on the cards...) and each node's.
- **Made** (:func:`made_preemption`): the allocator's ``<domain>/preemption`` annotation
  (``{"node", "cards", "until", "victims", "evictor"}``, allocator/verbs/preempt_note.py; its
  victims are UIDs) and the ``Preempted`` Events on the pod ("preempting NS/A, NS/B for card
  1 of node N", allocator/kube/events.py), whose victims it names; a note of the
  ``preemptVerb`` (``evictor: kube-scheduler``) is kube-scheduler's preemption, whose
  Events are on the victims.

The preemptions in flight of other pods, read from their notes
(:mod:`kubectl_tessera.reserving`), are respected as the allocator respects them
(:func:`allocator.preemption.reserved.respecting`): the cards they reserve against the pod
are out of reach (their pods no victims), and their victims are leaving (their room free,
none a victim again). What the plugin cannot see: the allocator's holds (a pod held for its
bind is never a victim; the plugin sees bound pods only), and a preemption decided and not
noted yet (``/status`` ``preemptions`` lists every one).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Final

from allocator import preemption as core
from allocator.preemption.budgets import split_by_budget
from allocator.preemption.pdb import LabelledPod, budgets_over
from allocator.preemption.reserved import respecting
from allocator.ranking.cards import NodeState
from allocator.verbs.preempt_note import KUBE_SCHEDULER
from kubectl_tessera.picture import GpuPod, Picture
from kubectl_tessera.reserving import Noted
from tessera.vocabulary import Allocation

#: Words for kube-scheduler's order of candidate nodes (allocator/preemption/choose.py), one
#: per member of :func:`allocator.preemption.order_key`, then the tie.
CRITERIA: Final = ("fewer PodDisruptionBudget violations", "a lower highest victim priority",
                   "a smaller sum of victim priorities", "fewer victims",
                   "a later start of its highest-priority victims")
TIE: Final = "as good, and looked at first"
#: The allocator's Event on the preemptor (allocator/kube/events.py ``preempting``).
PREEMPTED_REASON: Final = "Preempted"
PREEMPTING_PREFIX: Final = "preempting "
#: Candidate nodes listed at most (best first).
MAX_CANDIDATES: Final = 5


@dataclass(frozen=True)
class Victim:
    pod: str
    #: spec.priority (None when only an Event names it).
    priority: int | None = None
    #: The cards it holds on the node.
    cards: tuple[int, ...] = ()
    #: A PodDisruptionBudget does not let it go now (counted against the node).
    protected: bool = False


@dataclass(frozen=True)
class Candidate:
    """A node where preemption makes room: its victims and the preemptor's cards there."""

    node: str
    cards: tuple[int, ...]
    victims: tuple[Victim, ...]
    budget_violations: int


@dataclass(frozen=True)
class PreemptionWord:
    #: "would" (the allocator would preempt so now), "made" (it preempted for the pod) or
    #: "none" (no preemption helps: ``reason`` says why).
    kind: str
    reason: str
    node: str = ""
    cards: tuple[int, ...] = ()
    victims: tuple[Victim, ...] = ()
    #: "would": every node where preemption helps, best first (the first is ``node``).
    candidates: tuple[Candidate, ...] = ()
    #: "would" and "none": why not on each other node looked at.
    not_on: tuple[tuple[str, str], ...] = ()
    #: "made": until when the freed cards are kept for it (Unix seconds).
    until: float | None = None
    #: "made": the notes of its ``Preempted`` Events.
    events: tuple[str, ...] = ()


def _names(victims: Sequence[Victim]) -> str:
    return ", ".join(v.pod for v in victims)


def _cards(cards: Sequence[int]) -> str:
    return f"card{'s' if len(cards) != 1 else ''} " + ", ".join(f"#{i}" for i in cards)


def decided_by(best: core.NodeVictims, other: core.NodeVictims) -> str:
    """What put ``best`` before ``other`` in kube-scheduler's order, in words."""
    for word, a, b in zip(CRITERIA, core.order_key(best), core.order_key(other), strict=True):
        if a != b:
            return word
    return TIE


def _victim(pod: core.GpuPod, protected: frozenset[str]) -> Victim:
    cards = sorted({i for c in pod.containers for i in c.card_indices})
    return Victim(pod.key, pod.priority, tuple(cards), pod.uid in protected)


def _offers(picture: Picture, preemptor: core.Preemptor,
            rooms: Sequence[tuple[str, NodeState]]
            ) -> tuple[list[core.NodeOffer], list[LabelledPod]]:
    """The allocator's offers over ``rooms`` (node, state), and the pods that may go."""
    by_node: dict[str, list[core.GpuPod]] = {}
    lower = []
    for p in picture.holders:
        if p.allocation is None:
            continue
        by_node.setdefault(p.node, []).append(
            core.GpuPod(p.uid, p.namespace, p.name, p.allocation, p.priority, p.started_at))
        if p.priority < preemptor.priority:
            lower.append(LabelledPod(p.uid, p.namespace, p.name, p.labels))
    offers = [core.NodeOffer(state, tuple(by_node.get(name, ()))) for name, state in rooms]
    return offers, lower


def _protected(preemptor: core.Preemptor, offers: Sequence[core.NodeOffer],
               budgets: Sequence[core.Budget]) -> frozenset[str]:
    """The pods whose eviction a budget forbids, counted node by node as kube-scheduler
    counts (allocator/preemption/budgets.py)."""
    if not budgets:
        return frozenset()
    return frozenset(p.uid for offer in offers for p in split_by_budget(
        core.potential_victims(preemptor, offer), budgets)[0])


@dataclass(frozen=True)
class _Placed:
    allocation: Allocation


def _placed(picture: Picture, uid: str) -> _Placed | None:
    """Where a pod is (a victim leaving: its room counts free)."""
    pod = picture.pod_by_uid(uid)
    return _Placed(pod.allocation) if pod is not None and pod.allocation is not None else None


def would_preempt(picture: Picture, pod: GpuPod, rooms: Sequence[tuple[str, NodeState]],
                  pdbs: Sequence[Mapping[str, Any]] = (), noted: Sequence[Noted] = ()
                  ) -> PreemptionWord:
    """What the allocator would do for ``pod`` (Pending, fitting nowhere) over ``rooms``,
    the nodes where it would fit if others released cards, with the preemptions ``noted``
    in flight respected."""
    assert pod.request is not None
    preemptor = core.Preemptor(pod.uid, pod.request, pod.priority, pod.preemption_policy)
    if preemptor.policy is core.PreemptionPolicy.NEVER:
        return PreemptionWord("none", f"preemptionPolicy is Never: it waits for room and "
                                      f"evicts nobody ({core.POLICY_NEVER})")
    if not rooms:
        return PreemptionWord("none", "no node would have room even with other pods gone: "
                                      "evicting nobody helps")
    offers, lower = _offers(picture, preemptor, rooms)
    if noted:
        offers = respecting(offers, [n.reservation for n in noted], preemptor,
                            partial(_placed, picture), {})
    budgets = budgets_over(pdbs, lower) if lower else []
    decision = core.choose_preemption(preemptor, offers, budgets)
    if isinstance(decision, core.NoPreemption):
        return PreemptionWord("none", decision.reason,
                              not_on=tuple(sorted(decision.nodes.items())))
    found, why_not = core.candidates_on(preemptor, offers, budgets)
    found.sort(key=core.order_key)  # stable: the chosen node (the first of the best) leads
    protected = _protected(preemptor, offers, budgets)
    victims = tuple(_victim(v, protected) for v in decision.victims)
    return PreemptionWord(
        "would", _would_reason(pod, decision, victims, found), decision.node, decision.cards,
        victims,
        tuple(Candidate(c.node, c.cards, tuple(_victim(v, protected) for v in c.victims),
                        c.pdb_violations) for c in found[:MAX_CANDIDATES]),
        tuple(sorted(why_not.items())))


def _would_reason(pod: GpuPod, chosen: core.NodeVictims, victims: Sequence[Victim],
                  found: Sequence[core.NodeVictims]) -> str:
    top = max(v.priority or 0 for v in victims)
    words = (f"the allocator would evict {_names(victims)} (priority {top} at most, below "
             f"this pod's {pod.priority}) on {chosen.node} for {_cards(chosen.cards)}: the "
             f"fewest pods of lower priority whose cards make room there")
    others = [c for c in found if c.node != chosen.node]
    if others:
        words += (f"; {chosen.node} before {others[0].node} ({len(others[0].victims)} "
                  f"victims): {decided_by(chosen, others[0])}")
    if chosen.pdb_violations:
        words += (f"; {chosen.pdb_violations} of them a PodDisruptionBudget protects: the "
                  f"Eviction API refuses those (429) and the preemption stops there")
    return words


def _note(text: str) -> tuple[str, tuple[int, ...], float | None, bool] | str:
    """The annotation's node, cards, deadline and whether kube-scheduler evicts its victims
    (an answer of the ``preemptVerb``), or why it cannot be read."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        return f"its preemption annotation is not JSON ({exc})"
    if not isinstance(doc, dict) or not isinstance(doc.get("node"), str):
        return "its preemption annotation names no node"
    cards = doc.get("cards")
    cards = cards if isinstance(cards, list) else []
    until = doc.get("until")
    return (doc["node"], tuple(c for c in cards if isinstance(c, int) and not isinstance(c, bool)),
            float(until) if isinstance(until, int | float) else None,
            doc.get("evictor") == KUBE_SCHEDULER)


def _preempting_notes(events: Sequence[Mapping[str, Any]]) -> list[str]:
    notes = []
    for event in events:
        text = event.get("message") or event.get("note")
        if event.get("reason") == PREEMPTED_REASON and isinstance(text, str):
            notes.append(text)
    return notes


def _victims_named(notes: Sequence[str]) -> tuple[Victim, ...]:
    """The victims the Events name ("preempting NS/A, NS/B for card 1 of node N")."""
    seen: dict[str, Victim] = {}
    for text in notes:
        if text.startswith(PREEMPTING_PREFIX) and " for " in text:
            listed = text[len(PREEMPTING_PREFIX):].split(" for ", 1)[0]
            for name in (n.strip() for n in listed.split(",")):
                if name:
                    seen.setdefault(name, Victim(name))
    return tuple(seen.values())


def deadline_passed(word: PreemptionWord | None, now: float | None) -> bool:
    return (word is not None and word.until is not None and now is not None
            and now > word.until)


def made_preemption(pod: GpuPod, events: Sequence[Mapping[str, Any]] = (),
                    now: float | None = None) -> PreemptionWord | None:
    """The preemption the allocator made for ``pod`` (None: its annotation is not there);
    ``now`` judges its deadline (None: not judged)."""
    if not pod.preemption_note:
        return None
    read = _note(pod.preemption_note)
    if isinstance(read, str):
        return PreemptionWord("made", read)
    node, cards, until, by_scheduler = read
    notes = _preempting_notes(events)
    victims = _victims_named(notes)
    evicted = (f"evicting {_names(victims)}" if victims
               else "its victims not named by any Event (Events expire after an hour)")
    who = "the allocator preempted"
    if by_scheduler:  # kube-scheduler's Events name them, on the victims (not read here)
        who, evicted = ("kube-scheduler preempted", "deleting the pods the allocator's "
                        "preemptVerb answered it (its Preempted Events on them name them)")
    where = f"{node} for {_cards(cards)}"
    if pod.node:
        outcome = ("it was bound there" if pod.node == node
                   else f"it was bound on {pod.node} instead")
        return PreemptionWord("made", f"{who} on {where}, {evicted}; {outcome}", node, cards,
                              victims, until=until, events=tuple(notes))
    word = PreemptionWord("made", f"{who} on {where}, {evicted}; the freed cards are kept "
                                  f"for it until the deadline",
                          node, cards, victims, until=until, events=tuple(notes))
    if deadline_passed(word, now):
        word = replace(word, reason=f"{who} on {where}, {evicted}; the deadline passed "
                                    f"without its bind: it may preempt again")
    return word


def render(word: PreemptionWord) -> list[str]:
    """The lines ``why`` prints for a preemption word."""
    lines = [f"  preemption: {word.reason}"]
    if word.kind == "would":
        for victim in word.victims:
            budget = ", a budget protects it" if victim.protected else ""
            lines.append(f"    evict {victim.pod} (priority {victim.priority}, "
                         f"{_cards(victim.cards)}{budget})")
        if len(word.candidates) > 1:
            lines.append("    nodes where preemption makes room, best first:")
            for c in word.candidates:
                mark = "*" if c.node == word.node else " "
                top = max((v.priority or 0 for v in c.victims), default=0)
                lines.append(f"   {mark} {c.node}: {len(c.victims)} victims, highest priority "
                             f"{top}, {c.budget_violations} budget violations, "
                             f"{_cards(c.cards)}")
    for node, reason in word.not_on:
        lines.append(f"    not on {node}: {reason}")
    for note in word.events:
        lines.append(f"    event: {note}")
    return lines
