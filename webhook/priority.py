"""Genius's ``genius/priority`` label as standard Kubernetes priority (pure).

Genius orders its scheduling queue by the pod label ``genius/priority`` (an integer; missing or
unreadable is 0), highest first (jiangxiaosheng/Genius ``pkg/schedule/sort/sort.go``, ``Less``:
``strconv.Atoi`` of the label). kube-scheduler's default queue sort, PrioritySort, orders by
``spec.priority`` the same way, so a Genius pod gets the PriorityClass of its level
(:func:`class_name`; the chart creates one per level, value = level, ``preemptionPolicy:
Never``: Genius orders the queue and evicts nobody).

Why the class name and not the number: the Priority admission plugin runs before mutating
webhooks (kubernetes v1.34.4 ``pkg/kubeapiserver/options/plugins.go``, AllOrderedPlugins) and
has already set ``spec.priority`` from the pod's class, or the cluster default, when we see the
pod. Any change a webhook makes re-runs every in-tree mutating plugin once
(``staging/src/k8s.io/apiserver/pkg/admission/reinvocation.go``, ``reinvoker.Admit``; the
mutating dispatcher calls ``SetShouldReinvoke`` on every change), and that second run of
``plugin/pkg/admission/priority/admission.go`` (``admitPod``) refuses a pod whose
``spec.priority`` differs from what its class gives ("the integer value of priority ... must not
be provided"). So the rewrite names the class and removes ``spec.priority`` and
``spec.preemptionPolicy``; the second run fills both in from the class.

A pod of a system class (``system-*``: critical pods) keeps it. Levels are clamped to
``0..levels`` (the classes that exist), so no pod is ever refused for want of a class.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

#: The label Genius reads (sort.go).
GENIUS_PRIORITY_LABEL: Final = "genius/priority"
#: PriorityClass of level ``n``: ``tessera-genius-priority-<n>`` (the chart creates them).
CLASS_PREFIX: Final = "tessera-genius-priority-"


def class_name(level: int) -> str:
    return f"{CLASS_PREFIX}{level}"


def genius_level(labels: Mapping[str, Any], levels: int) -> int | None:
    """The pod's Genius priority clamped to ``0..levels``; None without the label (or when
    the mapping is off, ``levels`` 0). Unreadable is 0, as Genius's ``strconv.Atoi`` gives."""
    value = labels.get(GENIUS_PRIORITY_LABEL)
    if levels <= 0 or not isinstance(value, str):
        return None
    text = value.strip()
    sign = -1 if text.startswith("-") else 1
    digits = text.lstrip("+-")
    level = sign * int(digits) if digits.isascii() and digits.isdigit() and len(digits) < 12 \
        else 0
    return max(0, min(levels, level))


def apply_genius_priority(pod: dict[str, Any], levels: int) -> None:
    """Give the (copied, mutable) pod the PriorityClass of its Genius level, in place."""
    meta = pod.get("metadata")
    spec = pod.get("spec")
    if not isinstance(meta, dict) or not isinstance(spec, dict):
        return
    labels = meta.get("labels")
    level = genius_level(labels if isinstance(labels, Mapping) else {}, levels)
    if level is None:
        return
    current = spec.get("priorityClassName")
    if isinstance(current, str) and current.startswith("system-"):
        return
    wanted = class_name(level)
    if current == wanted and spec.get("priority") in (None, level):
        return  # already ours (a re-invocation): unchanged
    spec["priorityClassName"] = wanted
    spec.pop("priority", None)
    spec.pop("preemptionPolicy", None)
