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
   room, is asked again when our watch releases room it fits in
   (:mod:`allocator.verbs.requeue`).
5. When the answer is one node, the pod's cards there are held for its bind.

With HAMi's node agent (a node lock), steps 3-5 first run among the asked nodes whose agent
has no pod to start (:mod:`allocator.picture.awaiting`: a bind there would wait for the
plugin's Allocate of the pods before it), then among those with the fewest, and only then
among them all; and tied nodes are answered by the first, held at once.

Filtering to the best is what prioritize would say, said where kube-scheduler cannot blur it:
its own plugins then judge only among the policy's tied best nodes, and with one node left it
skips scoring (``schedulePod``: ``len(feasibleNodes) == 1``). The other fitting nodes are left
out of the reply, not reported as failed: kube-scheduler drops nodes a nodeCacheCapable filter
does not name, and reads the failure reasons only when no node is left (they are all there
then).

The hold (:meth:`ClusterState.hold <allocator.picture.state.ClusterState.hold>`): the filters
of the pods after it, which come while it is being bound, count its cards as taken. A hold
nobody claims expires after :attr:`AllocatorConfig.hold_seconds
<allocator.verbs.core.AllocatorConfig.hold_seconds>`; the bind claims it, or places the pod
afresh when the hold is gone or names another node.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache, partial
from typing import TYPE_CHECKING, Any, Final

from allocator.errors import event_safe
from allocator.ranking.fit import place_and_keep
from allocator.ranking.policies import PolicyContext, chooser
from allocator.ranking.port import Nodes
from allocator.verbs.decisions import PodRef
from allocator.verbs.pods import Requests, uid_of
from allocator.verbs.requeue import pod_priority
from tessera.vocabulary import Allocation, PodRequest, RequestError

if TYPE_CHECKING:
    from allocator.verbs.core import Allocator

#: Placing the pod for its hold: a bind elsewhere on the node meanwhile means placing again,
#: a few times (without a hold the bind places the pod afresh, as it always could).
HOLD_PLACEMENTS: Final = 3

#: The pod's policy context and requests, read at most once per filter.
Inputs = Callable[[], tuple[PolicyContext, Requests]]


@dataclass(frozen=True)
class FilterOutcome:
    nodes: list[str]
    failed: dict[str, str]
    unresolvable: dict[str, str]


def filter_pod(a: Allocator, pod: Mapping[str, Any], names: Sequence[str]) -> FilterOutcome:
    """The answer, told to the decision hooks (a fit, or a refusal with every reason)."""
    out = _decide(a, pod, names)
    if out.nodes:
        a.hooks.fits(PodRef.of(pod))
    elif names:
        a.hooks.refused(PodRef.of(pod), {**out.failed, **out.unresolvable})
    return out


def _decide(a: Allocator, pod: Mapping[str, Any], names: Sequence[str]) -> FilterOutcome:
    a.check_ready()
    try:
        request = a.pod_request(pod)
        if request is not None:
            a.policy_for(request)  # an unknown policy fails here, visibly
    except RequestError as exc:
        # Nothing the scheduler can do on any node: unresolvable, with the reason.
        return FilterOutcome([], {}, dict.fromkeys(names, event_safe(str(exc))))
    if request is None:
        return FilterOutcome(list(names), {}, {})
    a.remember(pod)
    a.observe(pod, request)
    a.expire_holds()
    uid = uid_of(pod)
    a.state.release_hold(uid)
    inputs: Inputs = cache(lambda: a.placing_inputs(request, pod))
    for queued in _queues_to_avoid(a, names):
        # HAMi's plugins start one pod at a time per node: a bind to a node whose agent has
        # pods to start waits for them, so nodes with the fewest go first.
        free = [name for name in names if name not in queued]
        if not free or len(free) == len(names):
            continue
        out = _place(a, pod, request, free, inputs, avoid=queued)
        if out.nodes:
            return out
    return _place(a, pod, request, names, inputs)


def _queues_to_avoid(a: Allocator, names: Sequence[str]) -> Iterator[set[str]]:
    """With HAMi's lock, the nodes to leave out, try after try: every node whose agent has
    a pod to start, then those with more than the fewest, and so on (nothing without it)."""
    if a.hami_locks is None or len(names) < 2:
        return
    queued = a.state.pods_to_start()
    for depth in sorted(set(queued.values())):
        yield {node for node, count in queued.items() if count >= depth}


def _place(a: Allocator, pod: Mapping[str, Any], request: PodRequest, names: Sequence[str],
           inputs: Inputs, avoid: Collection[str] = ()) -> FilterOutcome:
    """Steps 3-5 among ``names`` (``avoid``: nodes not among them, left out of any
    ranking)."""
    uid = uid_of(pod)
    best = _best_known(a, pod, request, names, inputs, avoid)
    if best is not None:
        if a.requeue is not None:
            a.requeue.fitted(uid)
        return best
    found = a.ranker.fit(request, names, explain_when_some_fit=not a.config.filter_best)
    if a.requeue is not None:
        if not found.explained or found.nodes:
            a.requeue.fitted(uid)
        elif found.short:
            # No node left, some only for lack of room: perhaps a release our watch has
            # not applied yet, which kube-scheduler retried the pod on.
            a.requeue.refused(PodRef.of(pod), request, pod_priority(pod))
    if found.explained:
        return FilterOutcome(found.nodes.name_list(), found.failed, found.unresolvable)
    return _best_of(a, pod, request, found.nodes, inputs)


def fits_on(a: Allocator, request: PodRequest, node: str) -> bool:
    """Whether a pod of ``request`` fits on ``node`` now (holds counted as taken); False for
    a node our watches do not know (never read from the API)."""
    found = a.ranker.fit(request, [node], explain_when_some_fit=not a.config.filter_best,
                         read_unknown=False)
    return bool(found.nodes)


def _best_known(a: Allocator, pod: Mapping[str, Any], request: PodRequest,
                names: Sequence[str], inputs: Inputs, avoid: Collection[str]
                ) -> FilterOutcome | None:
    """Filter-best's answer found without looking up every asked name, or None."""
    if not a.config.filter_best or not names:
        return None
    nodes = a.ranker.best_known(request, a.policy_for(request), names,
                                lambda: inputs()[0], avoid)
    if nodes is None:
        return None
    return _answer(a, pod, request, nodes, inputs)


def _best_of(a: Allocator, pod: Mapping[str, Any], request: PodRequest, fitting: Nodes,
             inputs: Inputs) -> FilterOutcome:
    """The fitting nodes, narrowed to those the policy scores best when configured and
    there is a choice."""
    nodes = fitting.name_list() if len(fitting) <= 1 else []
    if a.config.filter_best and len(fitting) > 1:
        nodes = a.ranker.best(request, a.policy_for(request), inputs()[0], fitting)
    if not nodes:
        nodes = fitting.name_list()
    return _answer(a, pod, request, nodes, inputs)


def _answer(a: Allocator, pod: Mapping[str, Any], request: PodRequest, nodes: list[str],
            inputs: Inputs) -> FilterOutcome:
    """The nodes as the answer; one node is held for the pod's bind.

    With HAMi's lock, tied nodes are answered by the first (kube-scheduler's order starts
    at a node it moves on each cycle): held at once, the filters that follow leave that node
    to its bind, where kube-scheduler's choice among ties would reach the picture only with
    the bind, after a burst of filters had chosen the same node and queued at its lock."""
    if len(nodes) > 1 and a.hami_locks is not None:
        nodes = nodes[:1]
    if len(nodes) == 1:
        _hold(a, pod, request, nodes[0], inputs)
    return FilterOutcome(nodes, {}, {})


def _hold(a: Allocator, pod: Mapping[str, Any], request: PodRequest, node: str,
          inputs: Inputs) -> None:
    """Hold the pod's cards on ``node`` for its bind, if they can be placed (best effort)."""
    uid = uid_of(pod)
    if not uid or a.config.hold_seconds <= 0:
        return
    ctx, requests = inputs()
    meta = pod.get("metadata") or {}
    until = a.clock() + a.config.hold_seconds

    def hold(allocation: Allocation, version: int, requests: Requests) -> bool:
        return a.state.hold(uid, meta.get("namespace", ""), meta.get("name", ""),
                            allocation, version, requests, until=until, made_for=request)

    place_and_keep(request, partial(a.node_now, node), chooser(a.policy_for(request), ctx),
                   uid, partial(hold, requests=requests), HOLD_PLACEMENTS)
