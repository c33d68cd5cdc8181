"""Which potential victims a PodDisruptionBudget forbids evicting (pure).

kube-scheduler's rule (kubernetes v1.34.4
``pkg/scheduler/framework/plugins/defaultpreemption/default_preemption.go:384-430``,
``filterPodsWithPDBViolation``): walk the node's potential victims most important first; each
pod takes one disruption from every budget that selects it; a pod that drives any budget below
zero is *violating*. The walk is over the potential victims (every pod of lower priority that
could go), not over the victims finally chosen, and the allowances start afresh on each node.
"""

from __future__ import annotations

from collections.abc import Sequence

from allocator.preemption.model import Budget, GpuPod


def split_by_budget(pods: Sequence[GpuPod], budgets: Sequence[Budget]
                    ) -> tuple[list[GpuPod], list[GpuPod]]:
    """(violating, not violating), each in the order of ``pods`` (give them most important
    first)."""
    allowed = [b.disruptions_allowed for b in budgets]
    violating: list[GpuPod] = []
    free: list[GpuPod] = []
    for pod in pods:
        over = False
        for i, budget in enumerate(budgets):
            if pod.uid in budget.pods:
                allowed[i] -= 1
                over = over or allowed[i] < 0
        (violating if over else free).append(pod)
    return violating, free
