"""The preemption annotation on a preemptor (pure): what a restarted or new leader reads back.

``<domain>/preemption`` is ``{"node":…,"cards":[…],"until":…,"victims":[…],"evictor":…}``:
the node and cards its victims free, the deadline in Unix seconds (the allocator's clock is
the wall clock, so another process compares it with its own), the victims' UIDs (the hold
waits until the picture has seen every one of them go), and who evicts them: ``allocator``
(filter's path, :mod:`allocator.verbs.preempt`: a new leader evicts those the last one left)
or ``kube-scheduler`` (the ``preemptVerb``'s answer, :mod:`allocator.verbs.preempt_verb`:
kube-scheduler deletes them, a new leader never does). A note without ``evictor`` (written
before it existed) is filter's path's. ``node`` is ``""`` (and ``cards`` ``[]``) only in a
``kube-scheduler`` note: the verb's answer left whole over several nodes (kube-scheduler's own
victims free the cards; it picks the node), which reserves nothing and is never held, but
keeps filter's path from evicting for the pod until the deadline (decision
0035). An allocator older than that reads such a note as no note (its decode
refused an empty node) and ignores it. Written before the first eviction (by the worker, or
before the verb's answer goes back), so a leader that dies after evicting leaves the note
behind; read back by :meth:`Preempt.restore <allocator.verbs.preempt.Preempt.restore>`
(decision 0026).

Why not ``status.nominatedNodeName`` alone: kube-scheduler clears it on the pod's next failed
attempt whose own preemption finds no candidate (v1.34.4 ``pkg/scheduler/framework/preemption/
preemption.go`` lines 276-278, ``NewPostFilterResultWithNominatedNode("")``, written by
``pkg/scheduler/schedule_one.go`` lines 1159-1168), which is every attempt of a card-level
preemption. The annotation is ours and stays.

Anyone who may edit the pod may write the annotation: decoding is total (None for anything
unreadable) and sizes are bounded; the reader caps the deadline (no hold lives forever).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeVar

T = TypeVar("T")

#: Who evicts a preemption's victims: the allocator (filter's path) or kube-scheduler (it asked
#: the ``preemptVerb``, and deletes the victims it was answered).
Evictor = Literal["allocator", "kube-scheduler"]
ALLOCATOR: Final[Evictor] = "allocator"
KUBE_SCHEDULER: Final[Evictor] = "kube-scheduler"

#: Longest annotation value read (a note of 64 victims and 64 cards is well under it).
MAX_NOTE_BYTES: Final = 8192
#: Victims and cards a note may name.
MAX_ITEMS: Final = 64


@dataclass(frozen=True, slots=True)
class Note:
    node: str
    cards: tuple[int, ...]
    #: Unix seconds.
    until: float
    #: UIDs; empty when the writer did not say (then the hold is placed when the pod fits).
    victims: tuple[str, ...] = ()
    #: Who evicts the victims (a restore evicts those left only when it is the allocator).
    evictor: Evictor = ALLOCATOR


def encode_note(note: Note) -> str:
    return json.dumps({"node": note.node, "cards": list(note.cards),
                       "until": round(note.until, 3), "victims": list(note.victims),
                       "evictor": note.evictor},
                      separators=(",", ":"))


def _evictor(value: object) -> Evictor | None:
    """``evictor`` as written (absent: an older note, filter's path's), None when unknown."""
    if value is None or value == ALLOCATOR:
        return ALLOCATOR
    return KUBE_SCHEDULER if value == KUBE_SCHEDULER else None


def _items(value: object, kind: type[T]) -> tuple[T, ...] | None:
    if not isinstance(value, list) or len(value) > MAX_ITEMS:
        return None
    if not all(isinstance(v, kind) and not isinstance(v, bool) for v in value):
        return None
    return tuple(value)


def decode_note(text: object) -> Note | None:
    """The note, or None when ``text`` is not one (never raises)."""
    if not isinstance(text, str) or len(text) > MAX_NOTE_BYTES:
        return None
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    node, until = doc.get("node"), doc.get("until")
    cards = _items(doc.get("cards"), int)
    victims = _items(doc.get("victims", []), str)
    evictor = _evictor(doc.get("evictor"))
    if (not isinstance(node, str) or len(node) > 253 or cards is None
            or victims is None or evictor is None or isinstance(until, bool)
            or not isinstance(until, int | float) or not math.isfinite(until)):
        return None
    # No node: an answer of the verb left whole over several nodes, which frees no card of ours.
    if not node and (evictor != KUBE_SCHEDULER or cards):
        return None
    return Note(node, cards, float(until), victims, evictor)


def noted(annotation: str, pod: dict[str, Any]) -> tuple[dict[str, Any], Note] | None:
    """A pod not being deleted with its note (``annotation``), or None (a restore's list)."""
    meta = pod.get("metadata") or {}
    note = decode_note((meta.get("annotations") or {}).get(annotation))
    if note is None or meta.get("deletionTimestamp"):
        return None
    return pod, note
