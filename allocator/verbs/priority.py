"""A pod's scheduling priority as the allocator orders refused pods by it (pure).

``spec.priority`` is what kube-scheduler's queue sorts by (PrioritySort): the Priority
admission plugin sets it from the pod's PriorityClass (or the cluster's default class) on
create. A Genius pod carries its level as the label ``genius/priority`` (Genius's queue sorts by
it: jiangxiaosheng/Genius ``pkg/schedule/sort/sort.go``); the webhook turns it into a
PriorityClass when ``TESSERA_GENIUS_PRIORITY_LEVELS`` is on (webhook/priority.py), and then
both say the same. When it is off, the label is all that says the pod's level: a pod without
a PriorityClass of its own is ordered by its label.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

#: The label Genius orders its queue by (the webhook's ``GENIUS_PRIORITY_LABEL``; the
#: allocator does not import the webhook).
GENIUS_PRIORITY_LABEL: Final = "genius/priority"
#: kube-scheduler's bounds on a priority (``scheduling/v1`` ``HighestUserDefinablePriority``
#: is 1e9; system classes are 2e9 and a little more): a label is clamped to them.
PRIORITY_BOUND: Final = 2_000_001_000


def _int(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return None


def genius_priority(labels: object) -> int | None:
    """The ``genius/priority`` label as an integer (None without one; unreadable is 0, as
    Genius's ``strconv.Atoi`` gives)."""
    value = labels.get(GENIUS_PRIORITY_LABEL) if isinstance(labels, Mapping) else None
    if not isinstance(value, str):
        return None
    text = value.strip()
    digits = text.lstrip("+-")
    if not (digits.isascii() and digits.isdigit() and len(digits) < 12):
        return 0
    level = -int(digits) if text.startswith("-") else int(digits)
    return max(-PRIORITY_BOUND, min(PRIORITY_BOUND, level))


def pod_priority(pod: Mapping[str, Any]) -> int:
    """The pod's priority: ``spec.priority`` when it has a PriorityClass of its own (named in
    ``spec.priorityClassName``), else its ``genius/priority`` label, else ``spec.priority``
    (the cluster default's value), else 0."""
    spec = pod.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    meta = pod.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    priority = _int(spec.get("priority"))
    if priority is not None and spec.get("priorityClassName"):
        return priority
    label = genius_priority(meta.get("labels"))
    if label is not None:
        return label
    return 0 if priority is None else priority
