"""PodDisruptionBudgets as preemption counts them, read from policy/v1 objects (pure).

kube-scheduler's reading (kubernetes v1.34.4
``pkg/scheduler/framework/plugins/defaultpreemption/default_preemption.go:384-430``): a budget
selects the pods of its namespace its label selector matches, an empty selector matching
none; a pod named in its ``status.disruptedPods`` was counted already by the API server and
is left out; ``status.disruptionsAllowed`` is what it lets go. Any malformed part of a budget
makes it select nobody (never raises): the API server still enforces it on eviction.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from allocator.preemption.model import Budget


@dataclass(frozen=True, slots=True)
class LabelledPod:
    uid: str
    namespace: str
    name: str
    labels: Mapping[str, str]


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _requirement_holds(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool | None:
    """One ``matchExpressions`` entry against ``labels`` (None: unreadable)."""
    key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
    if not isinstance(key, str) or not isinstance(values, list):
        return None
    if op == "In":
        return labels.get(key) in values
    if op == "NotIn":
        return labels.get(key) not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    return None


def selects(selector: object, labels: Mapping[str, str]) -> bool:
    """Whether a ``metav1.LabelSelector`` selects ``labels``: an empty, absent or unreadable
    one selects nothing (as kube-scheduler reads a budget's)."""
    sel = _mapping(selector)
    match = _mapping(sel.get("matchLabels"))
    exprs = sel.get("matchExpressions") or []
    if not isinstance(exprs, list) or (not match and not exprs):
        return False
    if any(labels.get(k) != v for k, v in match.items()):
        return False
    for expr in exprs:
        held = _requirement_holds(_mapping(expr), labels)
        if not held:
            return False
    return True


def budget_of(pdb: Mapping[str, Any], pods: Iterable[LabelledPod]) -> Budget:
    """The budget of one policy/v1 PodDisruptionBudget over ``pods``."""
    meta, spec, status = (_mapping(pdb.get(k)) for k in ("metadata", "spec", "status"))
    namespace = meta.get("namespace")
    allowed = status.get("disruptionsAllowed")
    allowed = allowed if isinstance(allowed, int) and not isinstance(allowed, bool) else 0
    disrupted = _mapping(status.get("disruptedPods"))
    chosen = frozenset(p.uid for p in pods
                       if p.namespace == namespace and p.name not in disrupted
                       and selects(spec.get("selector"), p.labels))
    return Budget(f"{namespace}/{meta.get('name', '')}", allowed, chosen)


def budgets_over(pdbs: Sequence[Mapping[str, Any]], pods: Sequence[LabelledPod]
                 ) -> list[Budget]:
    """The budgets that select any of ``pods`` (the others cannot matter)."""
    found = [budget_of(pdb, pods) for pdb in pdbs]
    return [b for b in found if b.pods]
