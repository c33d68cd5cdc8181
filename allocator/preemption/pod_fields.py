"""The pod fields preemption reads, decoded from a Pod object as the API server sends it (pure).

A pod in an extender body or a watch event is anyone's JSON: every reader here returns a
value of the right type whatever it finds, never raises, and falls back to what harms nobody
(priority 0, not started, and ``Never`` for a policy it cannot read: a pod whose policy is
unknown evicts nobody).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final

from allocator.preemption.model import PreemptionPolicy

#: ``spec.priority`` is an int32 (k8s.io/api core/v1 ``PodSpec.Priority``).
INT32_MIN: Final = -(2**31)
INT32_MAX: Final = 2**31 - 1


def _section(pod: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = pod.get(key)
    return value if isinstance(value, Mapping) else {}


def priority_of(pod: Mapping[str, Any]) -> int:
    """``spec.priority`` (the Priority admission plugin resolves the class to it); 0 when
    absent or not an int32, as kube-scheduler reads a nil priority (k8s.io/component-helpers
    ``scheduling/corev1`` ``PodPriority``)."""
    value = _section(pod, "spec").get("priority")
    if isinstance(value, bool) or not isinstance(value, int):
        return 0
    return value if INT32_MIN <= value <= INT32_MAX else 0


def policy_of(pod: Mapping[str, Any]) -> PreemptionPolicy:
    """``spec.preemptionPolicy``: absent is the default (``PreemptLowerPriority``); a value
    that is neither of the two is read as ``Never``."""
    value = _section(pod, "spec").get("preemptionPolicy")
    if value is None:
        return PreemptionPolicy.PREEMPT_LOWER_PRIORITY
    try:
        return PreemptionPolicy(value)
    except ValueError:
        return PreemptionPolicy.NEVER


def started_at(pod: Mapping[str, Any]) -> float | None:
    """``status.startTime`` in Unix seconds (RFC 3339, as the API server writes it); None when
    absent or unreadable (the pod then counts as started now)."""
    value = _section(pod, "status").get("startTime")
    if not isinstance(value, str) or len(value) > 64:
        return None
    try:
        stamp = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return stamp.timestamp() if stamp.tzinfo is not None else None
