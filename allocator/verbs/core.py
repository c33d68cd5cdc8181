"""The allocator's core: its configuration, and what the three verbs share.

:class:`Allocator` holds the cluster picture, the API port, the ranking port and the clock,
and answers the verbs kube-scheduler asks, each told top to bottom in a module of its own:
:mod:`allocator.verbs.filter` (the nodes a GPU pod fits, narrowed to the policy's best),
:mod:`allocator.verbs.prioritize` (0..10 scores) and :mod:`allocator.verbs.bind` (the only
verb that writes). They know nothing of HTTP (:mod:`allocator.service.extender` decodes the
wire format) and ask the ranking only through :class:`~allocator.ranking.port.Ranker`.

Policies see the live workload mix (:mod:`allocator.ranking.mix`: every GPU pod's request,
counted once, at its first filter or from the GPU pods already bound when the allocator
starts) and every node's free CPU and memory (:mod:`allocator.picture.resources`), through
their :class:`~allocator.ranking.policies.PolicyContext`.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from allocator.errors import NotReady
from allocator.hami import codec as hami_codec
from allocator.hami.lock import NodeLocks
from allocator.picture.nodelookup import NodeLookup
from allocator.picture.state import ClusterState
from allocator.ports import KubeApi, Obj
from allocator.ranking.cards import NodeState
from allocator.ranking.content_memo import NodeContents
from allocator.ranking.fast import FastRanker
from allocator.ranking.mix import LiveMix
from allocator.ranking.policies import (
    DEFAULT_POLICY,
    NodeFacts,
    Policy,
    PolicyContext,
    Workload,
    get_policy,
)
from allocator.ranking.port import Ranker
from allocator.verbs import bind as bind_verb
from allocator.verbs import filter as filter_verb
from allocator.verbs import prioritize as prioritize_verb
from allocator.verbs.bind import BindOutcome
from allocator.verbs.decisions import NO_HOOKS, DecisionHooks
from allocator.verbs.filter import FilterOutcome
from allocator.verbs.pods import Requests, pod_cpu_milli, pod_key, requests_or_zero
from allocator.verbs.requeue import RequeueOnRelease
from tessera.dialects import DialectConfig, read_pod_request
from tessera.vocabulary import (
    CodecError,
    PodRequest,
    RequestError,
    Vocabulary,
)

#: Pods remembered from filter for their bind (kube-scheduler binds within seconds).
RECENT_PODS = 1024
#: How long filter's choice for a pod stays held for its bind (:mod:`allocator.verbs.filter`):
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


class Allocator:
    """The extender's brain: picture + API port + ranking port + configuration + clock."""

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
        #: Which nodes fit a request, and their scores (the ranking port).
        self.ranker: Ranker = ranker or _fast_ranker(state, config, node_lookup)
        #: HAMi's flavor and node locks (None: another agent). The hami and volcano-vgpu
        #: agent profiles mean their current flavor; --hami-agent names an older one (the
        #: setting the webhook reads too: DialectConfig.hami_agent).
        profile = str(config.dialects.agent_profile)
        self.hami = (hami_codec.FLAVORS[config.dialects.hami_agent or profile]
                     if profile in hami_codec.FLAVORS else None)
        self.hami_locks = NodeLocks(api, self.hami, clock=clock) if self.hami else None

    # ------------------------------------------------------------------ the verbs
    def filter(self, pod: Mapping[str, Any], names: Sequence[str]) -> FilterOutcome:
        """The nodes the GPU pod fits, narrowed to the policy's best
        (:func:`allocator.verbs.filter.filter_pod`)."""
        return filter_verb.filter_pod(self, pod, names)

    def fits_on(self, request: PodRequest, node: str) -> bool:
        """Whether a pod of ``request`` fits on ``node`` now (holds counted as taken); False
        for a node our watches do not know."""
        return filter_verb.fits_on(self, request, node)

    def prioritize(self, pod: Mapping[str, Any], names: Sequence[str]) -> list[tuple[str, int]]:
        return list(zip(names, self.scores(pod, names), strict=True))

    def scores(self, pod: Mapping[str, Any], names: Sequence[str]) -> list[int]:
        """Prioritize's scores 0..10, one per name, in order."""
        return prioritize_verb.scores(self, pod, names)

    def scores_cpu_only(self, pod: Mapping[str, Any], names: Sequence[str]) -> list[int]:
        """``prioritize-cpu-only``'s scores 0..10 (:func:`allocator.verbs.prioritize.
        scores_cpu_only`)."""
        return prioritize_verb.scores_cpu_only(self, pod, names)

    def bind(self, namespace: str, name: str, uid: str, node: str) -> BindOutcome:
        """Bind the pod to ``node`` with its cards (:func:`allocator.verbs.bind.bind`)."""
        return bind_verb.bind(self, namespace, name, uid, node)

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

    def recall(self, namespace: str, name: str, uid: str) -> Obj | None:
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

    # ------------------------------------------------------------------ placing
    def node_now(self, node: str) -> tuple[NodeState, int] | None:
        """The node's state and version now (None: unknown), to place a pod on."""
        view = self.state.view(node)
        return None if view is None else (view.state, view.version)

    def placing_inputs(self, request: PodRequest, pod: Mapping[str, Any]
                       ) -> tuple[PolicyContext, Requests]:
        """The policy's view of the pod, and its (milli-CPU, memory bytes) requests as a node
        counts them (None when node resources are not tracked): the requests read once for
        both."""
        cpu_and_memory = requests_or_zero(pod)
        return (self.context(request, pod, cpu_and_memory[0]),
                cpu_and_memory if self.config.node_resources else None)


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
