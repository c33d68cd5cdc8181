"""Prioritize: the extender's scores 0..10 of the nodes kube-scheduler asks about.

Two entries, as the shipped KubeSchedulerConfiguration names them:

- ``prioritize``: a GPU pod's raw policy score on each node (the pod placed there by the
  policy, :meth:`~allocator.ranking.policies.Policy.score`), min-max scaled to 0..10; 0 where
  it does not fit, and 0 everywhere for a pod without a GPU request.
- ``prioritize-cpu-only``: a pod that asks for no GPU, scored by the default policy's
  :meth:`~allocator.ranking.policies.Policy.score_cpu_only` over each node's free CPU; a GPU
  pod (scored by the entry above), or a policy that cannot score such pods, gets 0
  everywhere.

Filter-best (:mod:`allocator.verbs.filter`) keeps only the nodes the first entry would score
10, so with the shipped settings kube-scheduler rarely needs it; both read the ranking port.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from allocator.ranking.policies import get_policy
from allocator.verbs.pods import pod_cpu_milli

if TYPE_CHECKING:
    from allocator.verbs.core import Allocator


def scores(a: Allocator, pod: Mapping[str, Any], names: Sequence[str]) -> list[int]:
    """``prioritize``'s scores, one per name, in order."""
    a.check_ready()
    request = a.pod_request(pod)
    if request is None:
        return [0] * len(names)
    return a.ranker.scores(request, a.policy_for(request), a.context(request, pod), names)


def scores_cpu_only(a: Allocator, pod: Mapping[str, Any], names: Sequence[str]) -> list[int]:
    """``prioritize-cpu-only``'s scores, one per name, in order."""
    a.check_ready()
    if a.pod_request(pod) is not None or not a.config.node_resources:
        return [0] * len(names)
    policy = get_policy(a.config.default_policy)
    return a.ranker.scores_cpu_only(policy, a.workload(), pod_cpu_milli(pod), names)
