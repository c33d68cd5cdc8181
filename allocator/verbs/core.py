"""Filter, prioritize and bind decisions over the cluster state and the API adapter.

The HTTP layer (:mod:`allocator.service.extender`) decodes the wire format and calls these; they
know
nothing of HTTP. Filter and prioritize are pure reads of the state. Bind is the only verb that
writes, always in this order: reserve in the cache, a PATCH of the labels the pod must carry
(skipped when it has them), then the Binding, which carries the canonical allocation record and
the agent annotations onto the pod atomically with ``spec.nodeName``; every failure undoes what
was done.
Filter reads the state; a pod it leaves with no node for lack of room is asked again when
our watch releases room it fits in (:mod:`allocator.verbs.requeue`).

Policies see the live workload mix (:mod:`allocator.ranking.mix`: every GPU pod's request, counted
once, at its first filter or from the GPU pods already bound when the allocator starts) and
every node's free CPU and memory (:mod:`allocator.picture.resources`), through their
:class:`~allocator.ranking.policies.PolicyContext`.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from itertools import compress
from typing import Any, Final, cast

import numpy as np
import numpy.typing as npt

from allocator import agents
from allocator.errors import ApiError, BindError, Conflict, NotFound, NotReady, WouldBlock
from allocator.picture.nodelookup import NodeLookup
from allocator.picture.resources import ResourceError, pod_requests
from allocator.picture.state import ClusterState, Stage
from allocator.ports import KubeApi, Obj
from allocator.ranking.content_memo import (
    UNKNOWN_CONTENT,
    AskedNodes,
    FitVerdict,
    Ints,
    Numbers,
    RawScore,
    bucket_value,
    cpu_keys,
    decode_cpu_key,
    request_shape,
)
from allocator.ranking.every_node import TriesAfterMisses, asked_among
from allocator.ranking.fit import NodeState, Unfit, place, unfit_reason
from allocator.ranking.mix import LiveMix
from allocator.ranking.policies import (
    DEFAULT_POLICY,
    MAX_SCORE,
    NodeFacts,
    Policy,
    PolicyContext,
    Workload,
    best_floor,
    chooser,
    get_policy,
    scaled,
    scaled_numbers,
)
from allocator.verbs.decisions import NO_HOOKS, DecisionHooks, PodRef
from allocator.verbs.requeue import RequeueOnRelease, pod_priority
from tessera.dialects import DialectConfig, read_pod_request
from tessera.logs import pod_context
from tessera.vocabulary import (
    Allocation,
    CodecError,
    PodRequest,
    RequestError,
    TesseraError,
    Vocabulary,
    encode_allocation,
)

logger = logging.getLogger(__name__)

#: Filter's verdict for a node its node watch has not seen.
UNKNOWN_NODE: Final = Unfit("node unknown to the GPU allocator (not in its node watch, and not "
                            "found when read by name)")
#: Placing a pod ran out of attempts: the node kept changing under it.
NODE_CHANGING: Final = Unfit("it changed too often to reserve cards; retry")
#: Pods remembered from filter for their bind (kube-scheduler binds within seconds).
RECENT_PODS = 1024
#: How long filter's choice for a pod stays held for its bind (:meth:`Allocator.filter`):
#: kube-scheduler binds at once after choosing, but its binding cycle waits for Permit
#: plugins and for the binds before it on a loaded API server.
HOLD_SECONDS = 15.0
#: Pod UIDs whose request the workload mix has counted (least recently filtered forgotten
#: beyond that: a pod filtered again after that many others counts twice, harmlessly).
OBSERVED_PODS = 65_536


@dataclass(frozen=True)
class AllocatorConfig:
    #: How pods without the canonical annotation are read; carries the vocabulary.
    dialects: DialectConfig = field(default_factory=DialectConfig)
    default_policy: str = DEFAULT_POLICY
    agent_dialects: tuple[str, ...] = (agents.ELASTIC,)
    #: Seed of the random policy (with the pod identity and the node).
    seed: int = 0
    #: Track every node's CPU and memory (all bound pods are watched) for the policies.
    node_resources: bool = True
    #: Filter answers a GPU pod with the nodes the policy scores best only (not every node it
    #: fits): the policy's choice is final, and kube-scheduler, left with one node, neither
    #: scores nor calls prioritize (see :meth:`Allocator.filter`).
    filter_best: bool = True
    #: Seconds filter's single answer stays held for the pod's bind (0: never held).
    hold_seconds: float = HOLD_SECONDS

    @property
    def vocabulary(self) -> Vocabulary:
        return self.dialects.vocabulary

    @property
    def aliyun_unit_mib(self) -> int:
        """MiB per unit of the Aliyun gpushare device plugin (the same unit it reads)."""
        return self.dialects.aliyun_memory_unit_mib


@dataclass(frozen=True)
class FilterOutcome:
    nodes: list[str]
    failed: dict[str, str]
    unresolvable: dict[str, str]


@dataclass(frozen=True)
class BindOutcome:
    """What a successful bind did: ``"bound"``, ``"already-bound"`` or ``"no-gpu"``."""

    outcome: str
    cards: tuple[int, ...] = ()


#: The policy's name bias of the nodes at some positions among a ranking's nodes, in order.
NameBias = Callable[[Ints], Numbers]


@dataclass(frozen=True, slots=True)
class Ranking:
    """Raw policy scores of some nodes, as prioritize derives them: shared per content (or
    :data:`CpuKey`) with each node's name bias added, or one per node. Both the extender's
    0..10 scores and filter's best nodes come from it."""

    #: Each node's score shared by content (NaN: the pod does not fit), or None when
    #: :attr:`one_by_one` holds the scores.
    shared: Numbers | None
    #: The policy's name bias of nodes, added to the shared score (None: no bias), and the
    #: bound of its values (:attr:`allocator.ranking.policies.Policy.name_bias_bound`).
    biases: NameBias | None = None
    bias_bound: float = 0.0
    #: Scores computed node by node (random's rank, a per-pod policy).
    one_by_one: list[RawScore] | None = None
    #: Where each scored node is among the names the ranking is read with (None: every
    #: name, in order).
    at: Ints | None = None

    def raw(self, names: Sequence[str]) -> list[RawScore]:
        """The raw score of each of ``names`` (the nodes this ranking was made for)."""
        if self.shared is None:
            return list(self.one_by_one or [])
        return [None if v != v else v for v in self._totals(self.shared).tolist()]  # NaN: None

    def scaled(self, names: Sequence[str]) -> list[int]:
        """The extender's scores 0..10 (:func:`allocator.ranking.policies.scaled`)."""
        if self.shared is None:
            return scaled(self.raw(names))
        return cast(list[int], scaled_numbers(self._totals(self.shared)).tolist())

    def _totals(self, shared: Numbers) -> Numbers:
        if self.biases is None:
            return shared
        return shared + self.biases(np.arange(len(shared)))

    def best(self, names: Sequence[str]) -> list[str]:
        """The names whose score :meth:`scaled` makes the top one, in order (none when no
        node fits). Selected by array operations, no Python code per node."""
        shared = self.shared
        if shared is None:
            return self._best_one_by_one(names)
        high = float(np.fmax.reduce(shared)) if len(shared) else math.nan
        if high != high:
            return []  # no node fits (NaN everywhere)
        # A node's score is its shared one plus a bias in [0, bound): only nodes whose
        # shared score is within the bound of the highest can be among the best.
        positions = np.flatnonzero(shared >= best_floor(high - self.bias_bound))
        if self.biases is not None:
            values = shared[positions] + self.biases(positions)
            positions = positions[values >= best_floor(float(values.max()))]
        if self.at is not None:
            positions = self.at[positions]
        return [names[i] for i in positions.tolist()]

    def _best_one_by_one(self, names: Sequence[str]) -> list[str]:
        if self.at is not None:
            names = [names[i] for i in self.at.tolist()]
        raw = self.raw(names)
        if None in raw:
            return [n for n, s in zip(names, self.scaled(names), strict=True)
                    if s == MAX_SCORE]
        values = cast(list[float], raw)
        if not values:
            return []
        floor = best_floor(max(values))
        return list(compress(names, map(floor.__le__, values)))


#: A pod's (milli-CPU, memory bytes) requests as a node counts them, or None when node
#: resources are not tracked.
Requests = tuple[int, int] | None


def _uid_of(pod: Mapping[str, Any]) -> str:
    uid = (pod.get("metadata") or {}).get("uid")
    return uid if isinstance(uid, str) else ""


def pod_key(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}/{meta.get('uid', '')}"


class Allocator:
    """The extender's brain: state + adapter + configuration + clock."""

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
    ) -> None:
        self.state = state
        self.api = api
        self.config = config
        self.clock = clock
        self.is_leader = is_leader
        #: Pods left with no node for lack of room, asked again on a release (None: off).
        self.requeue = requeue
        #: Reads of nodes the scheduler names before our node watch has them (None: off).
        self.node_lookup = node_lookup
        #: Told of allocations, failed binds and refusals (Events, the page).
        self.hooks = hooks
        get_policy(config.default_policy)  # validate at start
        # Pods kube-scheduler just sent to filter/prioritize, by UID: bind uses the copy
        # instead of reading the pod again (one API round trip of three).
        self._recent: OrderedDict[str, Obj] = OrderedDict()
        self._recent_lock = threading.Lock()
        #: The live workload mix, and the pods it has counted (under ``_mix_lock``).
        self.mix = LiveMix()
        self._observed: OrderedDict[str, None] = OrderedDict()
        self._mix_lock = threading.Lock()
        self._node_facts: Mapping[str, NodeFacts] = (
            state.resources.view() if config.node_resources else {})
        #: When filter-best tries ranking every known node first (:meth:`_best_of_every_node`).
        self.every_node_tries = TriesAfterMisses()

    # ------------------------------------------------------------------ common
    def check_ready(self) -> None:
        if not self.state.synced:
            raise NotReady("GPU allocator is still syncing its picture of the cluster; retry")
        if not self.is_leader():
            raise NotReady("this GPU allocator replica is not the leader; retry")

    def pod_request(self, pod: Mapping[str, Any]) -> PodRequest | None:
        """The pod's GPU request: the canonical annotation (one JSON decode, the hot path),
        else the shared dialect normalisation (pods that arrived without the webhook)."""
        try:
            return read_pod_request(pod, self.config.dialects)
        except (CodecError, RequestError) as exc:
            raise RequestError(f"invalid GPU request: {exc}") from exc

    def remember(self, pod: Mapping[str, Any]) -> None:
        """Keep the pod the scheduler sent with a verb, for its bind (bounded, LRU).

        Safe because every write of bind is conditional or checked: the PATCH carries the
        UID as precondition, the Binding fails if the pod is bound meanwhile (and then the
        pod is read again), and the scheduler only filters pods that are not bound yet.
        """
        uid = (pod.get("metadata") or {}).get("uid")
        if isinstance(uid, str) and uid and isinstance(pod, dict):
            with self._recent_lock:
                self._recent[uid] = pod
                self._recent.move_to_end(uid)
                if len(self._recent) > RECENT_PODS:
                    self._recent.popitem(last=False)

    def _recall(self, namespace: str, name: str, uid: str) -> Obj | None:
        if not uid:
            return None
        with self._recent_lock:
            pod = self._recent.pop(uid, None)
        meta = (pod or {}).get("metadata") or {}
        if pod is None or meta.get("name") != name or meta.get("namespace", "") != namespace:
            return None
        if (pod.get("spec") or {}).get("nodeName"):
            return None  # not what the scheduler sends; read the truth instead
        return pod

    def policy_for(self, request: PodRequest) -> Policy:
        return get_policy(request.policy or self.config.default_policy)

    def context(self, request: PodRequest, pod: Mapping[str, Any],
                cpu_milli: int | None = None) -> PolicyContext:
        """The policy's view of the pod (``cpu_milli``: its CPU request, when already read)."""
        return PolicyContext(request, pod_key=pod_key(pod), seed=self.config.seed,
                             workload=self.workload(), node_facts=self._node_facts,
                             pod_cpu_milli=pod_cpu_milli(pod) if cpu_milli is None
                             else cpu_milli)

    def expire_holds(self) -> None:
        """Release filter's holds whose time has passed. Filter does it before it decides;
        the documents operators read do it too, so a quiet cluster shows no stale hold."""
        self.state.expire_holds(self.clock())

    # ------------------------------------------------------------------ workload mix
    def workload(self) -> Workload:
        """The workload mix as published now (it changes in steps, see
        :mod:`allocator.ranking.mix`)."""
        with self._mix_lock:
            return self.mix.workload()

    def observe(self, pod: Mapping[str, Any], request: PodRequest) -> None:
        """Count the GPU pod's request in the workload mix, once per pod UID."""
        uid = (pod.get("metadata") or {}).get("uid")
        if not isinstance(uid, str) or not uid:
            return
        with self._mix_lock:
            if uid in self._observed:
                self._observed.move_to_end(uid)
                return
            self._observed[uid] = None
            if len(self._observed) > OBSERVED_PODS:
                self._observed.popitem(last=False)
            # Read only for a pod not yet counted: filter calls this for every pod it sees.
            self.mix.observe(request, pod_cpu_milli(pod))

    def seed_mix(self, pods: Iterable[Mapping[str, Any]]) -> None:
        """Count the GPU pods already in the cluster (a list at start), oldest first, so a
        restarted allocator is not blind to the workload. Unreadable requests are skipped
        (the pod is still counted by the state as its record says)."""
        def created(pod: Mapping[str, Any]) -> tuple[str, str]:
            meta = pod.get("metadata") or {}
            stamp, uid = meta.get("creationTimestamp"), meta.get("uid")
            return (stamp if isinstance(stamp, str) else "", uid if isinstance(uid, str) else "")

        for pod in sorted(pods, key=created):
            try:
                request = read_pod_request(pod, self.config.dialects)
            except Exception:  # one bad pod must not stop the others (the state notes it)
                continue
            if request is not None:
                self.observe(pod, request)

    # ------------------------------------------------------------------ filter
    def filter(self, pod: Mapping[str, Any], names: Sequence[str], *,
               may_block: bool = True) -> FilterOutcome:
        """The nodes the GPU pod fits on, and why not on the others; with
        :attr:`AllocatorConfig.filter_best`, only the nodes the policy scores best.
        ``may_block`` False: :class:`WouldBlock` instead of reading nodes from the API
        (:mod:`allocator.picture.nodelookup`); ask again with True. A pod left with no node, some
        for lack of room, is asked again when our watch releases room it fits in
        (:mod:`allocator.verbs.requeue`).

        Filtering to the best is what prioritize would say, said where kube-scheduler cannot
        blur it: its own plugins then judge only among the policy's tied best nodes, and with
        one node left it skips scoring (``schedulePod``: ``len(feasibleNodes) == 1``). The
        other fitting nodes are left out of the reply, not reported as failed: kube-scheduler
        drops nodes a nodeCacheCapable filter does not name, and reads the failure reasons only
        when no node is left (they are all there then).

        When the answer is one node, the pod's cards there are held for its bind
        (:meth:`ClusterState.hold <allocator.picture.state.ClusterState.hold>`): the filters of the
        pods after it, which come while it is being bound, count them as taken. A pod asked
        again drops its hold first; a hold nobody claims expires after
        :attr:`AllocatorConfig.hold_seconds`. The bind claims it, or places the pod afresh when
        the hold is gone or names another node.
        """
        out = self._filter_pod(pod, names, may_block)
        if out.nodes:
            self.hooks.fits(PodRef.of(pod))
        elif names:
            self.hooks.refused(PodRef.of(pod), {**out.failed, **out.unresolvable})
        return out

    def _filter_pod(self, pod: Mapping[str, Any], names: Sequence[str],
                    may_block: bool) -> FilterOutcome:
        self.check_ready()
        try:
            request = self.pod_request(pod)
            if request is not None:
                self.policy_for(request)  # an unknown policy fails here, visibly
        except RequestError as exc:
            # Nothing the scheduler can do on any node: unresolvable, with the reason.
            return FilterOutcome([], {}, dict.fromkeys(names, event_safe(str(exc))))
        if request is None:
            return FilterOutcome(list(names), {}, {})
        self.remember(pod)
        self.observe(pod, request)
        self.expire_holds()
        uid = _uid_of(pod)
        self.state.release_hold(uid)
        best = self._best_of_every_node(pod, request, names)
        if best is not None:
            if self.requeue is not None:
                self.requeue.fitted(uid)
            return best
        found, short = self._filter(request, names, may_block)
        if self.requeue is not None:
            if isinstance(found, AskedNodes) or found.nodes:
                self.requeue.fitted(uid)
            elif short:
                # No node left, some only for lack of room: perhaps a release our watch has
                # not applied yet, which kube-scheduler retried the pod on
                # (allocator/verbs/requeue.py).
                self.requeue.refused(PodRef.of(pod), request, pod_priority(pod))
        if isinstance(found, AskedNodes):
            return self._best_of(pod, request, found)
        return found

    def fits_on(self, request: PodRequest, node: str) -> bool:
        """Whether a pod of ``request`` fits on ``node`` now (holds counted as taken); False
        for a node our watches do not know."""
        try:
            found, _short = self._filter(request, [node], may_block=False)
        except WouldBlock:
            return False
        return isinstance(found, AskedNodes) or bool(found.nodes)

    def _best_of(self, pod: Mapping[str, Any], request: PodRequest, fitting: AskedNodes
                 ) -> FilterOutcome:
        """The fitting nodes, narrowed to those the policy scores best (see :meth:`filter`)
        when configured and there is a choice."""
        nodes = fitting.name_list() if len(fitting) <= 1 else []
        inputs = None
        if self.config.filter_best and len(fitting) > 1:
            inputs = self._placing_inputs(request, pod)  # the ranking's, then the hold's
            nodes = self._ranking(pod, request, fitting, inputs[0]).best(fitting.names)
        if not nodes:
            nodes = fitting.name_list()
        if len(nodes) == 1:
            self._hold(pod, request, nodes[0], inputs)
        return FilterOutcome(nodes, {}, {})

    def _best_of_every_node(self, pod: Mapping[str, Any], request: PodRequest,
                            names: Sequence[str]) -> FilterOutcome | None:
        """Filter-best's answer found without looking up every asked name: the policy's best
        among every node we know, narrowed to the asked names; None when that does not give
        the answer (then :meth:`_best_of` over the asked nodes does).

        The same answer as ranking the asked nodes only, whenever one of the best known
        nodes was asked: the asked nodes we know are among every node, so the highest score
        among them is the highest of all, and their best are exactly the best of all that
        were asked. Only a score shared per content (or CPU key) qualifies, being a node's
        own whatever the other nodes are (a policy that scores node by node, or scales the
        scores among the nodes asked, does not). An asked name our node watch has not
        delivered yet is not read first (:mod:`allocator.picture.nodelookup`) when a known node
        answers; it is read when none does, as before.

        Why: a name's lookup is the largest part of a filter at thousands of nodes
        (docs/benchmarks.md, issue 13), while the best are a few nodes, found in the asked
        list by comparing strings. Skipped when fewer than half the fitting nodes were asked,
        where ranking all would cost more than it saves, and for a while after such a miss
        (:class:`~allocator.ranking.every_node.TriesAfterMisses`)."""
        if not self.config.filter_best or not names:
            return None
        policy = self.policy_for(request)
        if policy.per_pod or not self.every_node_tries.should_try():
            return None  # a skipped call costs no policy context
        inputs = self._placing_inputs(request, pod)
        if policy.node_ranker(inputs[0]) is not None:
            return None
        every = self.state.columns.every_node()
        fits = self._fits(request, every)
        fitting_count = int(np.count_nonzero(fits))
        nodes: list[str] = []
        if fitting_count and 2 * len(names) >= fitting_count:
            fitting = every.where(fits)
            best = self._ranking(pod, request, fitting, inputs[0]).best(fitting.names)
            nodes = asked_among(best, names)
        if not nodes:
            self.every_node_tries.miss()
            return None
        self.every_node_tries.hit()
        if len(nodes) == 1:
            self._hold(pod, request, nodes[0], inputs)
        return FilterOutcome(nodes, {}, {})

    def _hold(self, pod: Mapping[str, Any], request: PodRequest, node: str,
              inputs: tuple[PolicyContext, Requests] | None) -> None:
        """Hold the pod's cards on ``node`` for its bind, if they can be placed (best effort:
        without a hold the bind places the pod afresh, as it always could); a bind elsewhere
        on the node meanwhile means placing again, a few times. ``inputs``: the pod's
        :meth:`_placing_inputs`, when the ranking read them already."""
        uid = _uid_of(pod)
        if not uid or self.config.hold_seconds <= 0:
            return
        ctx, requests = inputs or self._placing_inputs(request, pod)
        meta = pod.get("metadata") or {}
        until = self.clock() + self.config.hold_seconds

        def hold(allocation: Allocation, version: int, requests: Requests) -> bool:
            return self.state.hold(uid, meta.get("namespace", ""), meta.get("name", ""),
                                   allocation, version, requests, until=until,
                                   made_for=request)

        self._place_and_keep(request, self.policy_for(request), ctx, requests, uid, node, hold,
                             3)

    def _filter(self, request: PodRequest, names: Sequence[str], may_block: bool
                ) -> tuple[FilterOutcome | AskedNodes, bool]:
        """(the nodes the pod fits, to rank (filter_best, or all fit), or the outcome with
        every node's reason; whether some node was rejected only for lack of free room)."""
        asked = self._asked(names, may_block)
        fits = self._fits(request, asked)
        if fits.all():  # the common case
            return asked, False
        if self.config.filter_best and fits.any():
            # No reasons: kube-scheduler reads them only when no node is left (filter). Nor
            # whether a node lacked room: read only then (the requeue) too.
            return asked.where(fits), False
        contents = asked.contents.tolist()
        verdicts = self._fit_verdicts(request, contents)
        ok: list[str] = []
        failed: dict[str, str] = {}
        unresolvable: dict[str, str] = {}
        for name, content in zip(names, contents, strict=True):
            verdict = verdicts[content]
            if verdict is None:
                ok.append(name)
            elif verdict.resolvable:
                failed[name] = verdict.reason
            else:
                unresolvable[name] = verdict.reason
        short = any(verdict is not None and verdict is not UNKNOWN_NODE and verdict.resolvable
                    for verdict in verdicts.values())
        return FilterOutcome(ok, failed, unresolvable), short

    def _asked(self, names: Sequence[str], may_block: bool) -> AskedNodes:
        """Every named node as the columns see it; nodes our node watch has not delivered yet
        are read by name first (:mod:`allocator.picture.nodelookup`)."""
        asked = self.state.columns.asked(names)
        if self.node_lookup is not None and (asked.contents == UNKNOWN_CONTENT).any():
            unknown = asked.unknown()
            if not may_block and not self.node_lookup.settled(unknown):
                raise WouldBlock("nodes unknown to the node watch are to be read")
            self.node_lookup.ensure(unknown)
            asked = self.state.columns.asked(names)
        return asked

    def _fits(self, request: PodRequest, nodes: AskedNodes) -> npt.NDArray[np.bool_]:
        """Whether the pod fits each node: fit depends on a node's cards and usage only, so
        the thousands of alike nodes of a big cluster cost one :func:`unfit_reason`, kept per
        content id and per node slot (:mod:`allocator.ranking.content_memo`)."""
        contents = self.state.node_contents
        shape = request_shape(request)
        numbers = contents.numbers(
            contents.fit_slots, shape, nodes, nodes.contents,
            contents.fit_verdicts.answers(shape), self._verdict_of(request),
            _fits_as_number)
        fits: npt.NDArray[np.bool_] = numbers == 1.0
        return fits

    def _fit_verdicts(self, request: PodRequest, contents: Iterable[int]
                      ) -> dict[int, FitVerdict]:
        """The verdict of every distinct content among ``contents``."""
        node_contents = self.state.node_contents
        memo = node_contents.fit_verdicts.answers(request_shape(request))
        return node_contents.answers(contents, memo, self._verdict_of(request))

    def _verdict_of(self, request: PodRequest) -> Callable[[int], FitVerdict]:
        representative = self.state.node_contents.representative

        def verdict(content: int) -> FitVerdict:
            state = representative(content)
            if state is None:  # unknown, or an id retired since it was read
                return UNKNOWN_NODE
            return _readable(unfit_reason(request, state))

        return verdict

    # ------------------------------------------------------------------ prioritize
    def prioritize(self, pod: Mapping[str, Any], names: Sequence[str]) -> list[tuple[str, int]]:
        return list(zip(names, self.scores(pod, names), strict=True))

    def scores(self, pod: Mapping[str, Any], names: Sequence[str]) -> list[int]:
        """Prioritize's scores 0..10, one per name, in order."""
        self.check_ready()
        request = self.pod_request(pod)
        if request is None:
            return [0] * len(names)
        return self._ranking(pod, request, self.state.columns.asked(names)).scaled(names)

    def _ranking(self, pod: Mapping[str, Any], request: PodRequest, nodes: AskedNodes,
                 ctx: PolicyContext | None = None) -> Ranking:
        """The policy's raw scores of the pod on each of ``nodes`` (``ctx``: the policy's view
        of the pod, when already made)."""
        policy = self.policy_for(request)
        if ctx is None:
            ctx = self.context(request, pod)
        rank = policy.node_ranker(ctx)
        if rank is not None:
            # The policy ranks feasible nodes by name, without placing the pod on each (random:
            # a seeded hash of pod and node); feasibility is filter's, shared by content.
            fits = self._fits(request, nodes).tolist()
            return Ranking(None, one_by_one=[
                rank(name) if fit else None
                for name, fit in zip(nodes.name_list(), fits, strict=True)], at=nodes.at)
        if policy.per_pod:
            # The score depends on the pod's identity: placed and scored node by node, never
            # shared.
            return Ranking(None, one_by_one=[
                None if view is None else _placed_score(request, policy, ctx, view.state)
                for view in self.state.views(nodes.name_list())], at=nodes.at)
        # Every other score is a function of the node's content (and, for a policy that reads
        # node CPU, of where the node's free CPU lies among the policy's thresholds), plus,
        # for a policy with a name bias (fgd-ff's fixed first-fit order), that bias on top:
        # one placement per distinct content, the bias added per node.
        bias = policy.name_bias()
        thresholds = self._cpu_thresholds(policy, ctx.workload)
        shape = (policy.name, request_shape(request), ctx.workload, thresholds)

        def raw_score(state: NodeState, before: int = 0, after: int = 0) -> RawScore:
            scored = ctx if not thresholds else _at_buckets(ctx, state.name, thresholds,
                                                            before, after)
            score = _placed_score(request, policy, scored, state)
            if score is None or bias is None:
                return score
            return score - bias(state.name)

        return self._fan_out(nodes, shape, thresholds, ctx.pod_cpu_milli, raw_score, policy)

    def scores_cpu_only(self, pod: Mapping[str, Any], names: Sequence[str]) -> list[int]:
        """``prioritize-cpu-only``'s scores 0..10, one per name, in order: a pod that asks
        for no GPU is scored by the default policy's
        :meth:`~allocator.ranking.policies.Policy.score_cpu_only` over each node's free CPU; a GPU
        pod
        (scored by the main extender entry), or a policy that cannot score such pods, gets 0
        everywhere."""
        self.check_ready()
        if self.pod_request(pod) is not None or not self.config.node_resources:
            return [0] * len(names)
        policy = get_policy(self.config.default_policy)
        workload = self.workload()
        thresholds = self._cpu_thresholds(policy, workload)
        bias = policy.name_bias()
        shape = ("cpu-only", policy.name, workload, thresholds)

        def raw_score(state: NodeState, before: int = 0, after: int = 0) -> RawScore:
            score = policy.score_cpu_only(state, bucket_value(thresholds, before),
                                          bucket_value(thresholds, after), workload)
            if score is None or bias is None:
                return score
            return score - bias(state.name)

        return self._fan_out(self.state.columns.asked(names), shape, thresholds,
                             pod_cpu_milli(pod), raw_score, policy).scaled(names)

    def _cpu_thresholds(self, policy: Policy, workload: Workload) -> tuple[int, ...]:
        if not self.config.node_resources:
            return ()
        return tuple(policy.cpu_thresholds(workload.cpu_milli,
                                           self.state.resources.max_cpu_milli))

    def _fan_out(self, nodes: AskedNodes, shape: tuple[object, ...],
                 thresholds: tuple[int, ...], pod_cpu: int,
                 raw_score: Callable[[NodeState, int, int], RawScore],
                 policy: Policy) -> Ranking:
        """Raw scores shared per distinct content (with ``thresholds``: per content and CPU
        buckets before and after ``pod_cpu``), memoised per ``shape``, with the policy's name
        bias to add back per node."""
        node_contents = self.state.node_contents
        representative = node_contents.representative
        keys = (cpu_keys(nodes.contents, nodes.free_cpu, thresholds, pod_cpu) if thresholds
                else nodes.contents)

        def answer(key: int) -> RawScore:
            content, before, after = (decode_cpu_key(key, thresholds) if thresholds
                                      else (key, 0, 0))
            state = representative(content)
            return None if state is None else raw_score(state, before, after)

        shared = node_contents.numbers(node_contents.score_slots, shape, nodes, keys,
                                       node_contents.raw_scores.answers(shape), answer,
                                       _score_as_number)
        bias = policy.name_bias()
        if bias is None:
            return Ranking(shared, at=nodes.at)
        return Ranking(shared, partial(self.state.columns.biases, policy.name, bias, nodes),
                       policy.name_bias_bound, at=nodes.at)

    # ------------------------------------------------------------------ bind
    def bind(self, namespace: str, name: str, uid: str, node: str) -> BindOutcome:
        """Bind the pod to ``node`` with its cards; :class:`BindError` when it did not happen
        (and then nothing of it remains: cache and pod annotations are rolled back)."""
        try:
            return self._bind(namespace, name, uid, node)
        except BindError as exc:
            self.hooks.bind_failed(PodRef(namespace, name, uid), node, str(exc))
            raise

    def _bind(self, namespace: str, name: str, uid: str, node: str) -> BindOutcome:
        self.check_ready()
        who = f"{namespace}/{name}"
        pod = self._recall(namespace, name, uid)
        try:
            if pod is None:
                pod = self.api.get_pod(namespace, name)
        except NotFound as exc:
            raise BindError(f"pod {who} not found") from exc
        except ApiError as exc:
            raise BindError(f"reading pod {who} failed: {exc}") from exc
        actual_uid = (pod.get("metadata") or {}).get("uid", "")
        if uid and actual_uid != uid:
            raise BindError(f"pod {who} was replaced (uid {actual_uid}, scheduler had {uid})")
        uid = actual_uid
        bound_to = (pod.get("spec") or {}).get("nodeName") or ""
        record = self.state.record(uid)
        held = False
        if record is not None and record.stage is Stage.HELD:
            held = record.node == node and not bound_to
            if not held:
                self.state.release_hold(uid)  # not this bind's: the pod is placed afresh
            record = None

        if record is not None:
            if record.node != node:
                raise BindError(
                    f"pod {who} already holds cards on node {record.node}, not {node}")
            if record.stage is Stage.INFLIGHT:
                raise BindError(f"a bind of pod {who} to {node} is already in progress")
            # Idempotent repeat: the cards are ours; make sure the Binding exists.
            if bound_to != node:
                annotations = self._bind_metadata(pod, record.allocation)[0]
                self._create_binding(namespace, name, uid, node, annotations)
            return BindOutcome("already-bound", record.allocation.card_indices())
        if bound_to:
            if bound_to == node:
                return BindOutcome("already-bound")
            raise BindError(f"pod {who} is already bound to node {bound_to}")

        try:
            request = self.pod_request(pod)
            policy = self.policy_for(request) if request is not None else None
        except RequestError as exc:
            raise BindError(str(exc)) from exc
        if request is None or policy is None:
            # Not a GPU pod after all (the scheduler only sends pods with our resources,
            # but a pod may have changed): bind it plainly.
            self.state.release_hold(uid)
            self._create_binding(namespace, name, uid, node, {})
            return BindOutcome("no-gpu")

        reserved = self.state.claim_hold(uid, node, request) if held else None
        if reserved is None:
            reserved = self._reserve(pod, request, policy, uid, node)
        try:
            return self._write_and_bind(pod, reserved, policy, namespace, name, uid, node)
        except BaseException:
            self.state.unreserve(uid)  # no-op when the failure path already released it
            raise

    def _write_and_bind(self, pod: Obj, reserved: Allocation, policy: Policy, namespace: str,
                        name: str, uid: str, node: str) -> BindOutcome:
        who = f"{namespace}/{name}"
        allocation = replace(reserved, allocated_at=self.clock())
        annotations, patch, rollback = self._bind_metadata(pod, allocation)
        if patch is not None:
            try:
                self.api.patch_pod(namespace, name, patch)
            except ApiError as exc:
                raise BindError(f"labelling pod {who} for its allocation failed: {exc}") from exc
        try:
            if not self.is_leader():
                raise BindError("lost leadership before binding; retry")
            self._create_binding(namespace, name, uid, node, annotations)
        except Exception as exc:
            undone = "rolled back"
            if patch is not None:
                try:
                    self.api.patch_pod(namespace, name, rollback)
                except Exception as rb_exc:
                    # Labels stay on an unbound pod: harmless (no allocation record was
                    # written, and no node agent looks at a pod without a node).
                    undone = f"label rollback failed too ({rb_exc})"
                    logger.error("rollback of %s failed: %s", who, rb_exc,
                                 extra=pod_context(pod))
            self.state.unreserve(uid)
            raise BindError(f"{describe_error(exc)}; allocation {undone}") from exc
        self.state.mark_bound(uid)
        cards = allocation.card_indices()
        logger.info("bound %s to %s cards %s", who, node, cards,
                    extra=pod_context(pod, node=node, policy=policy.name, outcome="bound"))
        self.hooks.allocated(PodRef(namespace, name, uid), node, cards, policy.name)
        return BindOutcome("bound", cards)

    def _reserve(self, pod: Obj, request: PodRequest, policy: Policy, uid: str,
                 node: str) -> Allocation:
        meta = pod.get("metadata") or {}

        def reserve(allocation: Allocation, version: int, requests: Requests) -> bool:
            if self.state.reserve(uid, meta.get("namespace", ""), meta.get("name", ""),
                                  allocation, version, requests):
                return True
            if self.state.record(uid) is not None:
                raise BindError(f"a bind of pod {pod_key(pod)} is already in progress")
            return False

        ctx, requests = self._placing_inputs(request, pod)
        with self.state.node_lock(node):
            kept = self._place_and_keep(request, policy, ctx, requests, uid, node, reserve, 100)
        if kept is None:
            raise BindError(f"node {node} is unknown to the GPU allocator")
        if isinstance(kept, Unfit):
            raise BindError(f"node {node}: {kept.reason}")
        return kept

    def _placing_inputs(self, request: PodRequest, pod: Mapping[str, Any]
                        ) -> tuple[PolicyContext, Requests]:
        """The policy's view of the pod, and its (milli-CPU, memory bytes) requests as a node
        counts them (None when node resources are not tracked): the requests read once for
        both."""
        cpu_and_memory = _requests_or_zero(pod)
        return (self.context(request, pod, cpu_and_memory[0]),
                cpu_and_memory if self.config.node_resources else None)

    def _place_and_keep(self, request: PodRequest, policy: Policy, ctx: PolicyContext,
                        requests: Requests, uid: str, node: str,
                        keep: Callable[[Allocation, int, Requests], bool], attempts: int
                        ) -> Allocation | Unfit | None:
        """Place the pod on ``node`` with its policy and ``keep`` the allocation there (a
        reservation or a hold, given the node's version it was placed on and the pod's
        ``requests``), placing again when ``keep`` says the node changed meanwhile. The
        allocation kept; why the pod does not fit (or :data:`NODE_CHANGING` when ``attempts``
        ran out); None for a node unknown."""
        choose = chooser(policy, ctx)
        for _attempt in range(attempts):
            view = self.state.view(node)
            if view is None:
                return None
            placed = place(request, view.state, choose, pod_uid=uid)
            if isinstance(placed, Unfit):
                return placed
            allocation = placed.allocation(uid, 0.0)
            if keep(allocation, view.version, requests):
                return allocation
        return NODE_CHANGING

    def _bind_metadata(self, pod: Obj, allocation: Allocation
                       ) -> tuple[dict[str, str], Obj | None, Obj]:
        """(annotations for the Binding, label PATCH or None when nothing is missing, its
        rollback).

        The allocation record and the agent annotations travel **in the Binding**: the
        pods/binding subresource copies ``metadata.annotations`` onto the pod in the same
        storage update that sets ``spec.nodeName`` (kubernetes
        ``pkg/registry/core/pod/storage/storage.go``, ``BindingREST.setPodNodeAndMetadata``:
        ``for k, v := range annotations { pod.Annotations[k] = v }``). So a record exists only
        on a bound pod, and no crash can leave one on a pod that is not. Labels are copied
        there only behind the PodTopologyLabelsAdmission gate, so the labels that must be on
        the pod — the GPU-pod label our watch selects by, the labels of agents that select
        by label (nano-gpu) — are PATCHed first (harmless on an unbound pod), with the UID as
        precondition. A webhook-admitted pod already has the GPU-pod label and the default
        elastic dialect wants none (see :mod:`allocator.agents`), so its bind is the Binding
        alone.
        """
        vocab = self.config.vocabulary
        meta = pod.get("metadata") or {}
        old_ann: dict[str, str] = dict(meta.get("annotations") or {})
        old_lab: dict[str, str] = dict(meta.get("labels") or {})
        extra = agents.agent_metadata(
            allocation, self.config.agent_dialects, vocab,
            self.state.cards(allocation.node), int(self.clock() * 1e9),
            self.config.aliyun_unit_mib,
        )
        for dialect, why in extra.skipped.items():
            logger.warning("agent dialect %s not written: %s", dialect, why,
                           extra=pod_context(pod))
        annotations = dict(extra.annotations)
        annotations[vocab.allocation_annotation] = encode_allocation(allocation)
        wanted = {**extra.labels, vocab.gpu_pod_label: "true"}
        # Every pod we bind carries the GPU-pod label, so the label-selected pod watch sees
        # it even when it was admitted without the webhook.
        labels: dict[str, str | None] = {k: v for k, v in wanted.items() if old_lab.get(k) != v}
        # A Binding can add annotations but not remove them: agent keys an older allocator
        # left on this unbound pod (another dialect set) are cleared with the labels.
        stale: dict[str, str | None] = {
            k: None for k in agents.all_agent_keys(old_ann, vocab) if k not in annotations}
        if not labels and not stale:
            return annotations, None, {}
        # The UID makes the patch conditional: a pod recreated under the same name fails it.
        patch_meta: Obj = {"uid": meta.get("uid"), "labels": labels}
        if stale:
            patch_meta["annotations"] = stale
        rollback: Obj = {"metadata": {"labels": {k: old_lab.get(k) for k in labels}}}
        return annotations, {"metadata": patch_meta}, rollback

    def _create_binding(self, namespace: str, name: str, uid: str, node: str,
                        annotations: Mapping[str, str]) -> None:
        try:
            self.api.bind_pod(namespace, name, uid, node, annotations)
        except Conflict as exc:
            # Already bound (a lost reply of an earlier attempt?): fine if to this node.
            try:
                current = self.api.get_pod(namespace, name)
            except ApiError:
                current = {}
            if (current.get("spec") or {}).get("nodeName") == node:
                if annotations and self.config.vocabulary.allocation_annotation not in (
                        (current.get("metadata") or {}).get("annotations") or {}):
                    # Bound by someone else, without cards: record ours on the bound pod.
                    self._annotate_bound(namespace, name, uid, node, annotations)
                return
            raise BindError(f"binding {namespace}/{name} to {node} conflicted: {exc}") from exc
        except ApiError as exc:
            raise BindError(f"binding {namespace}/{name} to {node} failed: {exc}") from exc

    def _annotate_bound(self, namespace: str, name: str, uid: str, node: str,
                        annotations: Mapping[str, str]) -> None:
        try:
            self.api.patch_pod(namespace, name, {"metadata": {
                "uid": uid, "annotations": dict(annotations)}})
        except ApiError as exc:
            raise BindError(f"pod {namespace}/{name} was bound to {node} without an allocation, "
                            f"and recording it failed: {exc}") from exc


def describe_error(exc: BaseException) -> str:
    """The message a verb returns in ``Error`` (never containing ``%``: see
    :func:`event_safe`)."""
    if isinstance(exc, TesseraError):
        return event_safe(str(exc))
    return event_safe(f"internal error in the GPU allocator: {type(exc).__name__}: {exc}")


def event_safe(text: str) -> str:
    """``text`` without ``%``, for every reason and error the extender returns.

    kube-scheduler passes the failure message to ``Eventf`` as the *format* string
    (kubernetes ``pkg/scheduler/schedule_one.go``, ``handleSchedulingFailure``, v1.34.4
    ~line 1120), so ``50% core`` would read ``50%!c(MISSING)ore`` in the pod's events.
    Escaping as ``%%`` is no answer: the same text goes verbatim into the PodScheduled
    condition, where it would show doubled. So the sign is spelled out.
    """
    return text.replace("%", " percent") if "%" in text else text


def _readable(unfit: Unfit | None) -> FitVerdict:
    """A fit verdict as filter keeps it: None, or the :class:`Unfit` with an
    :func:`event_safe` reason (once per distinct node content, not per node)."""
    if unfit is None:
        return None
    return Unfit(event_safe(unfit.reason), unfit.resolvable)


def _requests_or_zero(pod: Mapping[str, Any]) -> tuple[int, int]:
    """(milli-CPU, memory bytes) the pod requests; (0, 0) if unreadable (the API server
    validates them, so only a hand-made pod gets here)."""
    try:
        return pod_requests(pod)
    except (ResourceError, TypeError, ValueError, ArithmeticError):
        return 0, 0


def pod_cpu_milli(pod: Mapping[str, Any]) -> int:
    return _requests_or_zero(pod)[0]


def _at_buckets(ctx: PolicyContext, node: str, thresholds: Sequence[int], before: int,
                after: int) -> PolicyContext:
    """``ctx`` for a representative node: its free CPU a value inside bucket ``before``, the
    pod's CPU what brings it to a value inside bucket ``after``."""
    cpu_before = bucket_value(thresholds, before)
    cpu_after = bucket_value(thresholds, after)
    return replace(ctx, node_facts={node: NodeFacts(cpu_before)},
                   pod_cpu_milli=cpu_before - cpu_after)


def _fits_as_number(verdict: FitVerdict) -> float:
    return 1.0 if verdict is None else 0.0


def _score_as_number(score: RawScore) -> float:
    return math.nan if score is None else score


def _placed_score(request: PodRequest, policy: Policy, ctx: PolicyContext,
                  state: NodeState) -> RawScore:
    """The policy's score of the pod placed on ``state`` by the policy (None: no fit)."""
    placed = place(request, state, chooser(policy, ctx))
    return None if isinstance(placed, Unfit) else policy.score(state, placed.after, ctx)
