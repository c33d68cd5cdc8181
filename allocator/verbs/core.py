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
from dataclasses import dataclass
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
from allocator.verbs.preempt_verb import PreemptVerb
from allocator.verbs.prioritize import Prioritize
from allocator.verbs.reader import PodReader
from allocator.verbs.requeue import RequeueOnRelease

__all__ = ["HOLD_SECONDS", "Allocator", "AllocatorConfig", "assemble", "fast_ranker",
           "node_states"]


@dataclass(frozen=True)
class Allocator:
    """The facade the HTTP shell calls: the three verbs and what they share, built once by
    the app factory (:func:`allocator.service.app.create_app`; tests use :func:`assemble`)."""

    reader: PodReader
    filter: Filter
    prioritizer: Prioritize
    bind: Bind
    #: Which nodes fit a request, and their scores (the ranking port).
    ranker: Ranker
    #: The cluster's node agent (the node-agent port).
    agent: NodeAgent
    #: Pods left with no node for lack of room, asked again on a release (None: off).
    requeue: RequeueOnRelease | None = None
    #: The ``preemptVerb`` (None: kube-scheduler's proposal answered unchanged).
    preempting: PreemptVerb | None = None

    @property
    def state(self) -> ClusterState:
        return self.reader.state

    @property
    def config(self) -> AllocatorConfig:
        return self.reader.config

    @property
    def clock(self) -> Callable[[], float]:
        return self.reader.clock

    def check_ready(self) -> None:
        self.reader.check_ready()

    def expire_holds(self) -> None:
        self.reader.expire_holds()

    def prioritize(self, pod: Mapping[str, Any], names: Sequence[str]) -> list[tuple[str, int]]:
        return list(zip(names, self.scores(pod, names), strict=True))

    def scores(self, pod: Mapping[str, Any], names: Sequence[str]) -> list[int]:
        """Prioritize's scores 0..10, one per name, in order."""
        return self.prioritizer.scores(pod, names)

    def scores_cpu_only(self, pod: Mapping[str, Any], names: Sequence[str]) -> list[int]:
        """``prioritize-cpu-only``'s scores 0..10."""
        return self.prioritizer.scores_cpu_only(pod, names)


def assemble(
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
) -> Allocator:
    """The verbs over ``state``, each given its handles (the app factory wires the same by
    hand; ``ranker``: the shipped fast one by default; ``agent``: the profile's)."""
    reader = PodReader(state, config, clock=clock, is_leader=is_leader)
    ranker = ranker or fast_ranker(state, config, node_lookup)
    agent = agent or agent_for(AgentSetup(config.dialects, api, clock))
    filter_verb = Filter(reader, state, ranker, agent, requeue, hooks)
    if requeue is not None and requeue.hold is None:
        requeue.hold = filter_verb.hold_for  # room a release leaves, held by priority
    return Allocator(reader, filter_verb,
                     Prioritize(reader, ranker), Bind(reader, state, api, agent, hooks),
                     ranker, agent, requeue)


def node_states(state: ClusterState, names: Sequence[str]) -> list[NodeState | None]:
    """Each named node's cards and usage (None: a node the picture does not know)."""
    return [None if view is None else view.state for view in state.views(names)]


def fast_ranker(state: ClusterState, config: AllocatorConfig, node_lookup: NodeLookup | None
                 ) -> FastRanker:
    """The shipped ranker, its memo told every change of the picture."""
    memo = NodeContents()
    state.observe(memo)
    return FastRanker(memo.columns, memo, partial(node_states, state),
                      lambda: state.resources.max_cpu_milli,
                      node_resources=config.node_resources,
                      read=None if node_lookup is None else node_lookup.ensure)

