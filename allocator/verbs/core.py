"""The verbs, assembled: the thin facade the HTTP shell (:mod:`allocator.service.extender`)
and the tests call.

Each verb is an object holding only its handles, told top to bottom in a module of its own:
:class:`~allocator.verbs.filter.Filter` (the nodes a GPU pod fits, narrowed to the policy's
best), :class:`~allocator.verbs.prioritize.Prioritize` (0..10 scores) and
:class:`~allocator.verbs.bind.Bind` (the only verb that writes). What they share is one small
reader (:class:`~allocator.verbs.reader.PodReader`). They know nothing of HTTP, ask the
ranking only through :class:`~allocator.ranking.port.Ranker` and the node agent only through
:class:`~allocator.agents.port.NodeAgent`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

from allocator.agents.port import NodeAgent
from allocator.agents.profiles import AgentSetup, agent_for
from allocator.decisions import NO_HOOKS, DecisionHooks
from allocator.picture.nodelookup import NodeLookup
from allocator.picture.state import ClusterState
from allocator.ports import KubeApi
from allocator.ranking.cards import NodeState
from allocator.ranking.content_memo import NodeContents
from allocator.ranking.fast import FastRanker
from allocator.ranking.port import Ranker
from allocator.verbs.bind import Bind
from allocator.verbs.config import HOLD_SECONDS, AllocatorConfig
from allocator.verbs.filter import Filter
from allocator.verbs.prioritize import Prioritize
from allocator.verbs.reader import PodReader
from allocator.verbs.requeue import RequeueOnRelease
from tessera.vocabulary import PodRequest

__all__ = ["HOLD_SECONDS", "Allocator", "AllocatorConfig", "node_states"]


class Allocator:
    """The three verbs and their shared reader, built once (the app factory does it)."""

    def __init__(
        self,
        state: ClusterState,
        api: KubeApi,
        config: AllocatorConfig,
        *,
        clock: Callable[[], float] = time.time,
        is_leader: Callable[[], bool] = lambda: True,
        requeue: RequeueOnRelease | None = None,
        node_lookup: NodeLookup | None = None,
        hooks: DecisionHooks = NO_HOOKS,
        ranker: Ranker | None = None,
        agent: NodeAgent | None = None,
    ) -> None:
        self.state = state
        self.config = config
        #: The verbs' shared reads (readiness, the pod's request and policy, the mix).
        self.reader = PodReader(state, config, clock=clock, is_leader=is_leader)
        #: Which nodes fit a request, and their scores (the ranking port).
        self.ranker: Ranker = ranker or _fast_ranker(state, config, node_lookup)
        #: The cluster's node agent (the node-agent port).
        self.agent = agent or agent_for(AgentSetup(config.dialects, api, clock))
        #: Pods left with no node for lack of room, asked again on a release (None: off).
        self.requeue = requeue
        self.filter = Filter(self.reader, state, self.ranker, self.agent, requeue, hooks)
        self.prioritizer = Prioritize(self.reader, self.ranker)
        self.bind = Bind(self.reader, state, api, self.agent, hooks)

    @property
    def clock(self) -> Callable[[], float]:
        return self.reader.clock

    def check_ready(self) -> None:
        self.reader.check_ready()

    def expire_holds(self) -> None:
        self.reader.expire_holds()

    def fits_on(self, request: PodRequest, node: str) -> bool:
        """Whether a pod of ``request`` fits on ``node`` now (the requeue's question)."""
        return self.filter.fits_on(request, node)

    def prioritize(self, pod: Mapping[str, Any], names: Sequence[str]) -> list[tuple[str, int]]:
        return list(zip(names, self.scores(pod, names), strict=True))

    def scores(self, pod: Mapping[str, Any], names: Sequence[str]) -> list[int]:
        """Prioritize's scores 0..10, one per name, in order."""
        return self.prioritizer.scores(pod, names)

    def scores_cpu_only(self, pod: Mapping[str, Any], names: Sequence[str]) -> list[int]:
        """``prioritize-cpu-only``'s scores 0..10."""
        return self.prioritizer.scores_cpu_only(pod, names)


def node_states(state: ClusterState, names: Sequence[str]) -> list[NodeState | None]:
    """Each named node's cards and usage (None: a node the picture does not know)."""
    return [None if view is None else view.state for view in state.views(names)]


def _fast_ranker(state: ClusterState, config: AllocatorConfig, node_lookup: NodeLookup | None
                 ) -> FastRanker:
    """The shipped ranker, its memo told every change of the picture."""
    memo = NodeContents()
    state.observe(memo)
    return FastRanker(memo.columns, memo, partial(node_states, state),
                      lambda: state.resources.max_cpu_milli,
                      node_resources=config.node_resources,
                      read=None if node_lookup is None else node_lookup.ensure)

