"""The preemptions in flight as ``why`` sees them (pure): read from the notes of the Pending
pods, as a new allocator leader reads them back (allocator/verbs/preempt_note.py), and
weighed by the allocator's own rule (:mod:`allocator.preemption.reserved`).

A pending pod with a ``<domain>/preemption`` note before its deadline is a preemption in
flight, by either path (filter's, or kube-scheduler's through the ``preemptVerb``): its cards
on its node are reserved against every other pod of lower or equal priority, and its victims
are leaving (nobody else's victims). What ``why`` cannot see: a preemption decided and not
noted yet (the allocator's worker writes the note within moments), a preemption of the
``preemptVerb`` answered on several nodes (its note has no node: no reservation), and a
reservation the allocator ended early (a pod of higher priority took its cards: the note is
cleared then, so it is seen gone a moment later). ``/status`` ``preemptions`` is the
allocator's own word.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from allocator.preemption.reserved import Reservation, reserved_against
from allocator.verbs.preempt_note import Note, decode_note
from kubectl_tessera.picture import GpuPod, Picture


@dataclass(frozen=True)
class Noted:
    """A preemption in flight: its preemptor and its note."""

    preemptor: GpuPod
    note: Note

    @property
    def reservation(self) -> Reservation:
        return Reservation(self.preemptor.uid, self.preemptor.priority, self.note.node,
                           self.note.cards, self.note.victims)


def in_flight(picture: Picture, now: float | None) -> tuple[Noted, ...]:
    """The preemptions in flight: pending pods with a readable note before its deadline
    (``now`` None: every note counts)."""
    found = []
    for pod in picture.pods:
        note = decode_note(pod.preemption_note) if pod.pending else None
        # A note without a node (the preemptVerb's answer over several nodes) reserves
        # nothing and names no victim leaving any node: the allocator counts it nowhere either.
        if note is not None and note.node and (now is None or note.until > now):
            found.append(Noted(pod, note))
    return tuple(found)


@dataclass(frozen=True)
class Kept:
    """Cards of one node reserved against a pod, and the preemptions that reserve them."""

    node: str
    cards: frozenset[int]
    by: tuple[Noted, ...]


def kept_from(pod: GpuPod, noted: Sequence[Noted]) -> dict[str, Kept]:
    """The cards reserved against ``pod``, by node: those of the preemptions of equal or higher
    priority for other pods (the allocator's rule, :func:`reserved_against`)."""
    cards = reserved_against((n.reservation for n in noted), pod.uid, pod.priority)
    return {node: Kept(node, held, tuple(
        n for n in noted if n.note.node == node
        and reserved_against((n.reservation,), pod.uid, pod.priority)))
        for node, held in cards.items()}


def words(kept: Kept, until_now: float | None = None) -> str:
    """Why the pod is kept off ``kept``'s cards, in words."""
    cards = ", ".join(f"#{i}" for i in sorted(kept.cards))
    by = "; ".join(_one(n, until_now) for n in kept.by)
    return (f"the free card{'s' if len(kept.cards) != 1 else ''} {cards} would fit it but "
            f"{'are' if len(kept.cards) != 1 else 'is'} reserved for a preemption in flight "
            f"of equal or higher priority ({by})")


def _one(noted: Noted, now: float | None) -> str:
    pod, note = noted.preemptor, noted.note
    left = f", {max(0, round(note.until - now))} s left" if now is not None else ""
    return f"{pod.key}, priority {pod.priority}, its victims evicted by {note.evictor}{left}"
