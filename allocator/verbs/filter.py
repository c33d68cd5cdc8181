"""Filter: the nodes a GPU pod fits on, narrowed to those its policy scores best.

kube-scheduler sends the pod and the names of the nodes its own plugins left. The answer:

1. A pod without a GPU request fits every node; an unreadable request fits none, with the
   reason (unresolvable: nothing on any node would change it).
2. The pod is remembered for its bind, counted in the workload mix, and its earlier hold, if
   any, dropped (a pod asked again is placed afresh).
3. With filter-best (the shipped setting), the ranker may know the best of the asked nodes
   without looking each name up (:meth:`~allocator.ranking.port.Ranker.best_known`).
4. Otherwise the ranker says where the pod fits (reading unknown names from the API first),
   and the policy's best among them are kept. A pod left with no node, some only for lack of
   room, is asked again when our watch releases room it fits in, the room held for the
   first of them by priority; releases are judged before a pod is placed, and a pod of
   higher priority takes room held for a lower one (:mod:`allocator.verbs.requeue`).
5. When the answer is one node, the pod's cards there are held for its bind.

Cards reserved for a preemption in flight of equal or higher priority
(:mod:`allocator.preemption.reserved`, kube-scheduler's nominated pods) are not the pod's:
steps 3-5 run among the nodes without such cards; only when none fits, the pod is placed on
the other cards of a node with some, and held there (a bind always has a hold to claim), else
refused there. A pod placed on cards a preemption of lower priority reserved ends it.

The node agent (:class:`~allocator.agents.port.NodeAgent`) may name nodes to leave out
first (:meth:`~allocator.agents.port.NodeAgent.nodes_to_avoid`: steps 3-5 then run among the
others, try after try, and only then among all the asked nodes) and may narrow tied nodes
(:meth:`~allocator.agents.port.NodeAgent.answer`), and may keep the answer back until a
bind there would be served before kube-scheduler's bind timeout
(:meth:`~allocator.agents.port.NodeAgent.wait_for_turn`, bounded; it refuses the nodes when
they stay full); an agent that starts one pod at a time per node behind a lock does all three
(docs/architecture.md).

Filtering to the best is what prioritize would say, said where kube-scheduler cannot blur it:
its own plugins then judge only among the policy's tied best nodes, and with one node left it
skips scoring (``schedulePod``: ``len(feasibleNodes) == 1``). The other fitting nodes are left
out of the reply, not reported as failed: kube-scheduler drops nodes a nodeCacheCapable filter
does not name, and reads the failure reasons only when no node is left (they are all there
then).

The hold (:meth:`ClusterState.hold <allocator.picture.state.ClusterState.hold>`): the filters
of the pods after it, which come while it is being bound, count its cards as taken. A hold
nobody claims expires after :attr:`AllocatorConfig.hold_seconds
<allocator.verbs.config.AllocatorConfig.hold_seconds>`; the bind claims it, or places the pod
afresh when the hold is gone or names another node.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from functools import cache, partial
from itertools import filterfalse
from typing import Any, Final, Protocol

from allocator.agents.port import NodeAgent
from allocator.decisions import DecisionHooks, PodRef
from allocator.errors import event_safe
from allocator.picture.state import ClusterState
from allocator.preemption.reserved import blocked
from allocator.ranking.cards import NodeState
from allocator.ranking.fit import place_and_keep
from allocator.ranking.policies import PolicyContext, chooser
from allocator.ranking.port import Nodes, Ranker
from allocator.verbs.pods import Requests, uid_of
from allocator.verbs.priority import pod_priority
from allocator.verbs.reader import PodReader
from allocator.verbs.requeue import Refused, RequeueOnRelease
from tessera.vocabulary import Allocation, PodRequest, RequestError

#: Placing the pod for its hold: a bind elsewhere on the node meanwhile means placing again,
#: a few times (without a hold the bind places the pod afresh, as it always could).
HOLD_PLACEMENTS: Final = 3

#: Why a pod is refused on a node whose free cards a preemption of equal or higher priority
#: reserved (kube-scheduler shows it in the pod's FailedScheduling Event).
RESERVED: Final = "the free cards are reserved for a pod of equal or higher priority"


class Preempting(Protocol):
    """Preemption as filter uses it (:class:`~allocator.verbs.preempt.Preempt`)."""

    def __call__(self, pod: Mapping[str, Any], request: PodRequest,
                 names: Sequence[str]) -> object:
        """Preempt for a pod refused for want of room on ``names`` (the answer unused)."""

    def reserved(self, uid: str, priority: int) -> Mapping[str, frozenset[int]]:
        """The cards reserved against a pod, by node."""

    def taken(self, uid: str, priority: int, node: str, cards: tuple[int, ...]) -> None:
        """A pod was placed on ``cards`` of ``node`` (lower reservations there end)."""

#: The pod's policy context and requests, read at most once per filter.
Inputs = Callable[[], tuple[PolicyContext, Requests]]


@dataclass(frozen=True)
class FilterOutcome:
    nodes: list[str]
    failed: dict[str, str]
    unresolvable: dict[str, str]


class Filter:
    """The filter verb, with its handles: the shared reads, the picture (holds), the ranking
    port, the node agent, the requeue of refused pods (None: off), the decision hooks."""

    def __init__(self, reader: PodReader, state: ClusterState, ranker: Ranker,
                 agent: NodeAgent, requeue: RequeueOnRelease | None,
                 hooks: DecisionHooks, preempt: Preempting | None = None) -> None:
        self.reader = reader
        self.state = state
        self.ranker = ranker
        self.agent = agent
        self.requeue = requeue
        self.hooks = hooks
        self.preempt = preempt  # None: preemption off (allocator/verbs/preempt.py)
        self.config = reader.config
        self._pods_to_start = state.pods_to_start  # bound once: asked on every filter

    def __call__(self, pod: Mapping[str, Any], names: Sequence[str]) -> FilterOutcome:
        """The answer, told to the decision hooks (a fit, or a refusal with every reason)."""
        out = self._decide(pod, names)
        if out.nodes:
            self.hooks.fits(PodRef.of(pod))
        elif names:
            self.hooks.refused(PodRef.of(pod), {**out.failed, **out.unresolvable})
            if self.preempt is not None and out.failed:
                request = self.reader.pod_request(pod)  # read fine a moment ago
                if request is not None:
                    self.preempt(pod, request, list(out.failed))
        return out

    def _decide(self, pod: Mapping[str, Any], names: Sequence[str]) -> FilterOutcome:
        r = self.reader
        r.check_ready()
        try:
            request = r.pod_request(pod)
            if request is not None:
                r.policy_for(request)  # an unknown policy fails here, visibly
        except RequestError as exc:
            # Nothing the scheduler can do on any node: unresolvable, with the reason.
            return FilterOutcome([], {}, dict.fromkeys(names, event_safe(str(exc))))
        if request is None:
            return FilterOutcome(list(names), {}, {})
        r.remember(pod)
        r.observe(pod, request)
        r.expire_holds()
        uid = uid_of(pod)
        untold: set[str] = set()  # room released for this pod, told the requeue if not taken
        if self.requeue is not None:
            self.requeue.settle()  # room released meanwhile held for the pod it is owed
            self.requeue.taken_over(uid)
            for other, _node in self.requeue.outranked(pod_priority(pod), names):
                untold.add(self.state.release_hold(other, tell=False) or "")  # it comes first
        untold.add(self.state.release_hold(uid, tell=False) or "")
        priority = pod_priority(pod)
        reserved = self.preempt.reserved(uid, priority) if self.preempt is not None else {}
        try:
            return self._place_among(pod, request, names, reserved)
        finally:
            record = self.state.record(uid)
            for node in untold - {"", record.node if record is not None else ""}:
                self.state.tell_released(node)  # the room it left is others' now
            if record is not None and self.preempt is not None:
                self.preempt.taken(uid, priority, record.node, record.allocation.card_indices())

    def _place_among(self, pod: Mapping[str, Any], request: PodRequest, names: Sequence[str],
                     reserved: Mapping[str, frozenset[int]]) -> FilterOutcome:
        """Steps 3-5, among the nodes the agent does not avoid first, the nodes with cards
        ``reserved`` against the pod last."""
        inputs: Inputs = cache(lambda: self.reader.placing_inputs(request, pod))
        if reserved:
            reserved = {name: reserved[name] for name in names if name in reserved}
            names = [name for name in names if name not in reserved]
        for avoided in self.agent.nodes_to_avoid(names, self._pods_to_start):
            # The agent's busy nodes left out first, the busiest last.
            free = list(filterfalse(avoided.__contains__, names))
            if not free or len(free) == len(names):
                continue
            out = self._place(pod, request, free, inputs,
                              avoid={*avoided, *reserved} if reserved else avoided)
            if out.nodes:
                return out
        out = (self._place(pod, request, names, inputs, avoid=reserved) if names
               else FilterOutcome([], {}, {}))
        if out.nodes or not reserved:
            return out
        return self._around_reserved(pod, request, reserved, inputs, out)

    def _around_reserved(self, pod: Mapping[str, Any], request: PodRequest,
                         reserved: Mapping[str, frozenset[int]], inputs: Inputs,
                         out: FilterOutcome) -> FilterOutcome:
        """The pod on the cards not reserved of the first node it fits on, held there; else
        refused there too."""
        uid = uid_of(pod)
        failed = dict(out.failed)
        for node in sorted(reserved):
            if self._hold(pod, request, node, inputs, reserved[node]):
                if self.requeue is not None:
                    self.requeue.fitted(uid)
                return FilterOutcome([node], {}, {})
            failed[node] = RESERVED
        if self.requeue is not None:
            self.requeue.refused(PodRef.of(pod), request, pod_priority(pod), nodes=failed)
        return FilterOutcome([], failed, out.unresolvable)

    def _place(self, pod: Mapping[str, Any], request: PodRequest, names: Sequence[str],
               inputs: Inputs, avoid: Collection[str] = ()) -> FilterOutcome:
        """Steps 3-5 among ``names`` (``avoid``: nodes not among them, left out of any
        ranking)."""
        uid = uid_of(pod)
        mark = self.requeue.mark() if self.requeue is not None else 0
        best = self._best_known(pod, request, names, inputs, avoid)
        if best is not None:
            if self.requeue is not None:
                self.requeue.fitted(uid)
            return best
        found = self.ranker.fit(request, names, explain_when_some_fit=not self.config.filter_best)
        if self.requeue is not None:
            if not found.explained or found.nodes:
                self.requeue.fitted(uid)
            elif found.short:
                # No node left, some only for lack of room: perhaps a release our watch has
                # not applied yet, which kube-scheduler retried the pod on.
                self.requeue.refused(PodRef.of(pod), request, pod_priority(pod),
                                     nodes=found.failed, since=mark)
        if found.explained:
            return FilterOutcome(found.nodes.name_list(), found.failed, found.unresolvable)
        return self._best_of(pod, request, found.nodes, inputs)

    def fits_on(self, request: PodRequest, node: str) -> bool:
        """Whether a pod of ``request`` fits on ``node`` now (holds counted as taken); False
        for a node our watches do not know (never read from the API)."""
        found = self.ranker.fit(request, [node],
                                explain_when_some_fit=not self.config.filter_best,
                                read_unknown=False)
        return bool(found.nodes)

    def hold_for(self, refused: Refused, node: str) -> bool:
        """Hold room on ``node`` for a pod filter refused (the requeue's priority hold):
        placed as its own filter would place it there; False when it cannot be (the pod's
        body no longer remembered, or it does not fit)."""
        pod = self.reader.peek(refused.pod.uid)
        if pod is None:
            return False
        inputs: Inputs = cache(lambda: self.reader.placing_inputs(refused.request, pod))
        against = (self.preempt.reserved(refused.pod.uid, refused.priority)
                   if self.preempt is not None else {})
        self._hold(pod, refused.request, node, inputs, against.get(node, frozenset()))
        record = self.state.record(refused.pod.uid)
        return record is not None and record.node == node

    def _best_known(self, pod: Mapping[str, Any], request: PodRequest, names: Sequence[str],
                    inputs: Inputs, avoid: Collection[str]) -> FilterOutcome | None:
        """Filter-best's answer found without looking up every asked name, or None."""
        if not self.config.filter_best or not names:
            return None
        nodes = self.ranker.best_known(request, self.reader.policy_for(request), names,
                                       lambda: inputs()[0], avoid)
        if nodes is None:
            return None
        return self._answer(pod, request, nodes, inputs)

    def _best_of(self, pod: Mapping[str, Any], request: PodRequest, fitting: Nodes,
                 inputs: Inputs) -> FilterOutcome:
        """The fitting nodes, narrowed to those the policy scores best when configured and
        there is a choice."""
        nodes = fitting.name_list() if len(fitting) <= 1 else []
        if self.config.filter_best and len(fitting) > 1:
            nodes = self.ranker.best(request, self.reader.policy_for(request), inputs()[0],
                                     fitting)
        if not nodes:
            nodes = fitting.name_list()
        return self._answer(pod, request, nodes, inputs)

    def _answer(self, pod: Mapping[str, Any], request: PodRequest, nodes: list[str],
                inputs: Inputs) -> FilterOutcome:
        """The nodes as the answer (tied ones as the agent answers them, once the agent
        says a bind there would be served in time); one node is held for the pod's bind."""
        if len(nodes) > 1:
            nodes = self.agent.answer(nodes)
        busy = self.agent.wait_for_turn(nodes, self._pods_to_start) if nodes else None
        if busy is not None:
            # Unresolvable: evicting would not shorten the plugin's queue, so neither our
            # preemption nor kube-scheduler's looks at these nodes; kube-scheduler still
            # retries the pod on the next cluster event.
            return FilterOutcome([], {}, dict.fromkeys(nodes, busy))
        if len(nodes) == 1:
            self._hold(pod, request, nodes[0], inputs)
        return FilterOutcome(nodes, {}, {})

    def _hold(self, pod: Mapping[str, Any], request: PodRequest, node: str,
              inputs: Inputs, reserved: frozenset[int] = frozenset()) -> bool:
        """Hold the pod's cards on ``node`` for its bind, if they can be placed (best
        effort), never on the ``reserved`` cards; whether held."""
        uid = uid_of(pod)
        if not uid or self.config.hold_seconds <= 0:
            return False
        ctx, requests = inputs()
        meta = pod.get("metadata") or {}
        until = self.reader.clock() + self.config.hold_seconds
        state = self.state

        def hold(allocation: Allocation, version: int, requests: Requests) -> bool:
            return state.hold(uid, meta.get("namespace", ""), meta.get("name", ""),
                              allocation, version, requests, until=until, made_for=request)

        def node_now() -> tuple[NodeState, int] | None:
            now = self.reader.node_now(node)
            return now if now is None or not reserved else (blocked(now[0], reserved), now[1])

        placed = place_and_keep(request, node_now,
                                chooser(self.reader.policy_for(request), ctx), uid,
                                partial(hold, requests=requests), HOLD_PLACEMENTS)
        return isinstance(placed, Allocation)
