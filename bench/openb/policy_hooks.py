"""What the replay asks of a policy beyond the extender's contract.

kube-scheduler, not Tessera, knows a node's CPU and places CPU-only pods; the replay plays that
part (bench/openb/replay.py), and a policy that reads node CPU (fgd and its kin) offers it two
hooks the extender never calls. They are declared here, with the benchmark, rather than in
:class:`allocator.policies.Policy`; a policy offers them by having them (checked by type).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from allocator.fit import NodeState
from allocator.policies import Workload


@runtime_checkable
class ReadsNodeCpu(Protocol):
    """A policy whose score reads the node's free CPU (``PolicyContext.node_facts``)."""

    def cpu_thresholds(self, typical_cpu: Sequence[int], max_cpu: int) -> tuple[int, ...]:
        """The free-CPU values the score can tell apart: it depends on a node's free CPU only
        through ``free >= threshold`` for these (the replay memoises by that)."""
        ...

    def score_cpu_only(self, node: NodeState, cpu_before: int, cpu_after: int,
                       workload: Workload) -> float:
        """Score of a pod that takes only CPU on ``node`` (the authors' simulator scores
        CPU-only pods with the policy under test too)."""
        ...
