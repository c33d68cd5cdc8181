"""The preemptions under way as ``/status`` shows them (pure: entries and a lookup in, JSON out).

One document per preemption (:class:`allocator.verbs.preempt_ports.InFlight`): the preemptor,
the node and cards it was made for, each victim and whether the picture still counts it on its
cards, who evicts them (``allocator``, or ``kube-scheduler`` for an answer of the
``preemptVerb``), the deadline, and its state in a word:

- ``held``: every victim went and the freed cards are held for the preemptor (its own filter
  takes the hold over and binds);
- ``waiting-for-victims``: a victim still holds its cards (terminating, or its eviction was
  refused by a PodDisruptionBudget: the preemption then waits for its deadline);
- ``victims-gone``: the victims went but no hold was made (the cards were taken first, or the
  preemptor's own filter placed it already).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

from allocator.decisions import PodRef
from allocator.picture.records import PodRecord
from allocator.verbs.preempt_ports import InFlight

HELD: Final = "held"
WAITING: Final = "waiting-for-victims"
VICTIMS_GONE: Final = "victims-gone"


def _pod(ref: PodRef) -> dict[str, str]:
    return {"namespace": ref.namespace, "name": ref.name, "uid": ref.uid}


def state_of(entry: InFlight, victims_left: int) -> str:
    if entry.held:
        return HELD
    return WAITING if victims_left else VICTIMS_GONE


def _victims(entry: InFlight, record: Callable[[str], PodRecord | None]
             ) -> list[dict[str, Any]]:
    """Each victim, named by the entry or else by the picture while it is there."""
    named = {ref.uid: ref for ref in entry.victim_refs}
    out = []
    for uid in entry.victims:
        held = record(uid)
        ref = named.get(uid) or (PodRef(held.namespace, held.name, uid) if held is not None
                                 else PodRef("", "", uid))
        out.append({**_pod(ref), "gone": held is None})
    return out


def documents(entries: Sequence[InFlight], record: Callable[[str], PodRecord | None],
              now: float) -> list[dict[str, Any]]:
    """``/status`` ``preemptions``: ``record(uid)`` is the picture's record of a pod (None
    once the watch has seen it go)."""
    out = []
    for entry in entries:
        victims = _victims(entry, record)
        left = sum(1 for v in victims if not v["gone"])
        out.append({
            **_pod(entry.pod),
            "node": entry.node,
            "cards": list(entry.cards),
            "victims": victims,
            "evictor": entry.evictor,
            "until": round(entry.until, 3),
            "secondsLeft": max(0, round(entry.until - now)),
            "state": state_of(entry, left),
        })
    return out
