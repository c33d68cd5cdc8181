"""What the three verbs share: the reads of a pod and of the picture they all make.

:class:`PodReader` is built once by the app factory and handed to each verb
(:mod:`allocator.verbs.filter`, :mod:`allocator.verbs.prioritize`,
:mod:`allocator.verbs.bind`): the pod's GPU request and its policy, the policy's view of the
pod (the live workload mix, :mod:`allocator.ranking.mix`, and every node's free CPU and memory,
:mod:`allocator.picture.resources`), the pods kept from filter for their bind, and readiness.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from allocator.errors import NotReady
from allocator.picture.state import ClusterState
from allocator.ports import Obj
from allocator.ranking.cards import NodeState
from allocator.ranking.mix import LiveMix
from allocator.ranking.policies import NodeFacts, Policy, PolicyContext, Workload, get_policy
from allocator.verbs.config import AllocatorConfig
from allocator.verbs.pods import Requests, pod_cpu_milli, pod_key, requests_or_zero
from tessera.dialects import read_pod_request
from tessera.vocabulary import CodecError, PodRequest, RequestError

#: Pods remembered from filter for their bind (kube-scheduler binds within seconds).
RECENT_PODS = 1024
#: Pod UIDs whose request the workload mix has counted (least recently filtered forgotten
#: beyond that: a pod filtered again after that many others counts twice, harmlessly).
OBSERVED_PODS = 65_536


class PodReader:
    """The verbs' shared reads of a pod and of the picture (thread-safe)."""

    def __init__(self, state: ClusterState, config: AllocatorConfig, *,
                 clock: Callable[[], float], is_leader: Callable[[], bool]) -> None:
        self.state = state
        self.config = config
        self.clock = clock
        self.is_leader = is_leader
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

    def peek(self, uid: str) -> Obj | None:
        """The pod remembered by ``uid``, left remembered (None: not, or gone)."""
        with self._recent_lock:
            return self._recent.get(uid)

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
