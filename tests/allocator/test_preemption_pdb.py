"""PodDisruptionBudgets read as kube-scheduler reads them (allocator/preemption/pdb.py)."""

from __future__ import annotations

from typing import Any

import pytest

from allocator.preemption.pdb import LabelledPod, budget_of, budgets_over, selects

WEB = LabelledPod("u-1", "ns", "web-1", {"app": "web", "tier": "front"})
DB = LabelledPod("u-2", "ns", "db-1", {"app": "db"})
ELSEWHERE = LabelledPod("u-3", "other", "web-2", {"app": "web"})


def pdb(selector: Any, allowed: Any = 1, namespace: str = "ns",
        disrupted: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "b", "namespace": namespace}, "spec": {"selector": selector},
            "status": {"disruptionsAllowed": allowed, "disruptedPods": disrupted or {}}}


@pytest.mark.parametrize(("selector", "labels", "expected"), [
    ({"matchLabels": {"app": "web"}}, {"app": "web"}, True),
    ({"matchLabels": {"app": "web"}}, {"app": "db"}, False),
    ({}, {"app": "web"}, False),  # an empty selector selects nothing here
    (None, {"app": "web"}, False),
    ({"matchExpressions": [{"key": "app", "operator": "In", "values": ["web", "db"]}]},
     {"app": "db"}, True),
    ({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["web"]}]},
     {"app": "web"}, False),
    ({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, {"tier": "x"}, True),
    ({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}, {"tier": "x"}, False),
    ({"matchExpressions": [{"key": "tier", "operator": "Near"}]}, {"tier": "x"}, False),
    ({"matchExpressions": "app"}, {"app": "web"}, False),
    ({"matchLabels": {"app": "web"},
      "matchExpressions": [{"key": "tier", "operator": "In", "values": ["back"]}]},
     {"app": "web", "tier": "front"}, False),
])
def test_label_selectors(selector: Any, labels: dict[str, str], expected: bool) -> None:
    assert selects(selector, labels) is expected


def test_a_budget_selects_the_pods_of_its_namespace_less_those_it_counted_already() -> None:
    budget = budget_of(pdb({"matchLabels": {"app": "web"}}, 0), [WEB, DB, ELSEWHERE])
    assert (budget.name, budget.disruptions_allowed, budget.pods) == ("ns/b", 0, {"u-1"})
    counted = budget_of(pdb({"matchLabels": {"app": "web"}}, 0, disrupted={"web-1": "t"}),
                        [WEB])
    assert counted.pods == frozenset()


@pytest.mark.parametrize("allowed", [None, "2", True, 1.5])
def test_an_unreadable_allowance_allows_nothing(allowed: Any) -> None:
    assert budget_of(pdb({"matchLabels": {"app": "web"}}, allowed), [WEB]).disruptions_allowed \
        == 0


def test_only_budgets_over_the_pods_count_and_junk_never_raises() -> None:
    found = budgets_over([pdb({"matchLabels": {"app": "web"}}), pdb({"matchLabels": {"x": "y"}}),
                          {}, {"metadata": "x", "spec": [], "status": 3}], [WEB, DB])
    assert [b.pods for b in found] == [frozenset({"u-1"})]
