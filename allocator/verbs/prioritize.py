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
from typing import Any

from allocator.ranking.policies import get_policy
from allocator.ranking.port import Ranker
from allocator.verbs.pods import pod_cpu_milli
from allocator.verbs.reader import PodReader


class Prioritize:
    """The two prioritize entries, with their handles: the shared reads and the ranking port."""

    def __init__(self, reader: PodReader, ranker: Ranker) -> None:
        self.reader = reader
        self.ranker = ranker

    def scores(self, pod: Mapping[str, Any], names: Sequence[str]) -> list[int]:
        """``prioritize``'s scores, one per name, in order."""
        r = self.reader
        r.check_ready()
        request = r.pod_request(pod)
        if request is None:
            return [0] * len(names)
        return self.ranker.scores(request, r.policy_for(request), r.context(request, pod), names)

    def scores_cpu_only(self, pod: Mapping[str, Any], names: Sequence[str]) -> list[int]:
        """``prioritize-cpu-only``'s scores, one per name, in order."""
        r = self.reader
        r.check_ready()
        if r.pod_request(pod) is not None or not r.config.node_resources:
            return [0] * len(names)
        policy = get_policy(r.config.default_policy)
        return self.ranker.scores_cpu_only(policy, r.workload(), pod_cpu_milli(pod), names)
