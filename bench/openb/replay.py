"""Replay an openb workload sequence onto the openb cluster, one pod at a time, no departures.

Two roles, kept apart:

- **kube-scheduler's part** (implemented here, because in production it is the scheduler's
  job, not Tessera's): a node fits a pod only if its free CPU and memory cover the pod's
  requests (NodeResourcesFit), and CPU-only pods — which never reach the extender — are
  placed by the scheduler's default scoring, ``NodeResourcesFit`` LeastAllocated (or
  MostAllocated with ``cpu_pods="most"``), ties broken at random like ``selectHost``.
- **Tessera's part** (never re-implemented here): whether a GPU request fits a node, on which
  cards, and how good the node is, come from :func:`allocator.ranking.fit.place`, the placement
  policy's ``score`` and :func:`allocator.ranking.fit.apply_placement` — the code the extender runs.
  The node with the best policy score wins; ties are broken at random (``selectHost``).

Speed without a second implementation: a node's answer (fits or not, the cards chosen, the
score) depends only on its card usage, its type, and — for a policy that reads the node's
CPU (its ``Policy.cpu_thresholds``) — which CPU thresholds its free CPU is above,
before and after the pod. Nodes are grouped into classes by that signature and each
(class, request shape) is computed once by the real code and memoised; the memo is shared by
every seed replayed in the process. Identical nodes are common (1,213 nodes of 15 types), so
most pods cost a handful of numpy operations and dictionary lookups.

**Deployed mode** (:class:`Deployed`): what the shipped path does behind a stock kube-scheduler
v1.34 with the default profile, for every pod. The score of a node is the sum of

- ``NodeResourcesFit`` LeastAllocated (cpu and memory, weight 1 each, plugin weight 1), in
  integers as pkg/scheduler/framework/plugins/noderesources/least_allocated.go:
  ``((alloc - req) * 100) / alloc`` per resource, then ``(cpu + mem) / 2``, where ``req`` is
  the node's *non-zero* requests plus the pod's (a container without a CPU or memory request
  counts 100m / 200 MiB: resource_allocation.go, ``useRequested`` false);
- ``NodeResourcesBalancedAllocation`` (plugin weight 1), balanced_allocation.go: with the
  real requests (``useRequested`` true), fractions capped at 1,
  ``int64((1 - |f_cpu - f_mem| / 2) * 100)``; skipped for a pod without requests;
- for a GPU pod, with ``extender="prioritize"``, the extender's integer 0..10 (the policy's
  raw scores over the nodes that pass the filters, scaled by ``allocator.ranking.policies``
  :data:`SCALINGS`) times the extender weight times ``MaxNodeScore / MaxExtenderPriority`` =
  10 (pkg/scheduler/schedule_one.go ``prioritizeNodes``); with ``extender="filter-best"``
  (shipped) nothing, but only the nodes the policy scores best pass the extender's filter;
- for a CPU-only pod, the CPU-only entry's integer 0..10 (the policy's ``score_cpu_only``,
  scaled the same way) times its own weight times 10 (weight 0: no such entry).

The default profile's other scoring plugins (TaintToleration, NodeAffinity, PodTopologySpread,
InterPodAffinity, ImageLocality, VolumeBinding) give every node the same score for these
pods — no taints, affinities, spread constraints, volumes or images — so they never change a
choice and are left out. The best total wins; equal totals at random (``selectHost``).
The extender sees a node's free CPU as allocatable minus the requests of the pods bound to it.
The workload mix is the allocator's :class:`allocator.ranking.mix.LiveMix`, fed with each arriving
GPU pod in sequence order (what the allocator observes at filter), or the oracle typical pods.

Memoisation stays honest with a changing workload: the memo holds answers for one published
workload; when the live mix publishes a new one, the classes, memo and tables are dropped and
every node is classified again (the policy's CPU thresholds depend on the mix too).

A policy with ``per_pod`` scores (random) cannot be memoised across nodes: its node choice is
a uniformly random pick among the nodes that fit (which is what the maximum of its per-node
hash is, in distribution), and its card choice inside the node is made by ``place`` with the
policy itself.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from allocator.ranking.fit import (
    CardSignature,
    NodeState,
    Unfit,
    apply_placement,
    build_node_state,
    empty_node,
    fits,
    node_signature,
    place,
)
from allocator.ranking.mix import LiveMix
from allocator.ranking.policies import NodeFacts, Policy, PolicyContext, Workload, chooser
from allocator.ranking.policies.base import MAX_SCORE, SCALINGS
from bench.openb.trace import MILLI, TraceNode, TracePod, TypicalPod, gpu_request
from tessera.vocabulary import ContainerAllocation, PodRequest

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
CpuPods = Literal["least", "most", "policy"]
Ties = Literal["random", "ordered"]

#: Largest arrived workload recorded, in percent of GPU capacity.
MAX_ARRIVED_PERCENT = 130

_Shape = tuple[int, int, str]
#: classes kept before the memo is dropped and rebuilt (bounds memory across long runs)
MAX_CLASSES = 8000
#: the table key of CPU-only pods
_CPU_ONLY: _Shape = (0, 0, "")
_CardSig = tuple[CardSignature, ...]
#: memo value: (score, containers) when the request fits, None when it does not
_Answer = tuple[float, tuple[ContainerAllocation, ...]] | None


#: Raw policy scores closer than this are equal (float rounding between alike nodes; the
#: value of ``allocator.ranking.policies.base.scaled``).
_EQUAL_SCORE = 1e-9
#: kube-scheduler's MaxNodeScore (pkg/scheduler/framework/interface.go).
MAX_NODE_SCORE = 100
#: What kube-scheduler counts for a container without a CPU / memory request when scoring
#: (pkg/scheduler/util/pod_resources.go DefaultMilliCPURequest, DefaultMemoryRequest).
DEFAULT_MILLI_CPU = 100
DEFAULT_MEMORY_BYTES = 200 * 1024 * 1024
MIB = 1024 * 1024


#: How the extender steers a GPU pod: ``filter-best`` (shipped) — its filter passes only the
#: nodes with the best raw policy score, kube-scheduler's own plugins choose among them;
#: ``prioritize`` — every node that fits passes, and the extender's scaled 0..10 times its
#: weight is added to kube-scheduler's scores.
Extender = Literal["filter-best", "prioritize"]


@dataclass(frozen=True)
class Deployed:
    """The shipped path's settings (deployed mode)."""

    #: How the extender's answer reaches kube-scheduler (:data:`Extender`).
    extender: Extender = "filter-best"
    #: Extender ``weight`` in the KubeSchedulerConfiguration (``prioritize`` only).
    extender_weight: int = 10
    #: Weight of the CPU-only scoring entry (shipped on); 0 = not configured.
    cpu_only_weight: int = 10
    #: Name in :data:`allocator.ranking.policies.base.SCALINGS`: raw scores -> integers 0..10.
    scaling: str = "best-alone"
    #: True: :class:`allocator.ranking.mix.LiveMix` from the arriving GPU pods; False: the oracle
    #: typical pods of the whole trace.
    live_mix: bool = True
    #: ``LiveMix.refresh`` (observations between two published workloads).
    mix_refresh: int = LiveMix().refresh


def workload_context(typical: Sequence[TypicalPod]) -> Workload:
    """``PolicyContext.workload`` (requests, weights and CPU) from the typical pods.

    CPU-only typical pods have no GPU request and are left out (see allocator.ranking.policies.fgd:
    their term never changes a decision)."""
    pairs: list[tuple[PodRequest, float]] = []
    cpus: list[int] = []
    for t in typical:
        req = gpu_request(t.shape)
        if req is None:
            continue
        pairs.append((req, t.weight))
        cpus.append(t.cpu_milli)
    return Workload(tuple(pairs), tuple(cpus))


@dataclass
class Classes:
    """Node classes: every signature seen gets an id and a representative node state.

    Shared by all runs of one (trace, policy) in a process, together with the memo."""

    ids: dict[tuple[int, _CardSig, int], int] = field(default_factory=dict)
    reps: list[NodeState] = field(default_factory=list)
    buckets: list[int] = field(default_factory=list)
    memo: dict[tuple[_Shape, int], _Answer] = field(default_factory=dict)
    #: per request shape: value of every (class, CPU bucket after) code; NaN = not computed
    tables: dict[_Shape, FloatArray] = field(default_factory=dict)
    misses: int = 0
    resets: int = 0
    #: content of the workload the memo's answers were computed for
    workload_key: object = None

    def reset(self) -> None:
        """Forget every class (bounds memory; the caller re-classifies its nodes)."""
        self.ids.clear()
        self.reps.clear()
        self.buckets.clear()
        self.memo.clear()
        self.tables.clear()
        self.resets += 1

    def classify(self, type_id: int, state: NodeState, bucket: int) -> int:
        key = (type_id, node_signature(state), bucket)
        cid = self.ids.get(key)
        if cid is None:
            cid = len(self.reps)
            self.ids[key] = cid
            self.reps.append(state)
            self.buckets.append(bucket)
        return cid


@dataclass
class RunResult:
    trace: str
    policy: str
    seed: int
    pods: int
    placed: int
    failed_gpu_pods: int
    failed_cpu_pods: int
    #: cumulative arrived / allocated milli-GPU after each pod
    arrived: IntArray
    allocated: IntArray
    capacity_milli: int
    problems: list[str]

    def curve(self) -> list[float]:
        return allocation_curve(self.arrived, self.allocated, self.capacity_milli)


def allocation_curve(arrived: IntArray, allocated: IntArray, capacity_milli: int,
                     top: int = MAX_ARRIVED_PERCENT) -> list[float]:
    """Allocation ratio (%) at each arrived-workload step k = 0..top (% of capacity).

    As the authors' analysis (experiments/analysis/merge_alloc_discrete_0920.py): the mean
    allocation ratio over the pods whose arrived ratio rounds to k, else over k-1..k+1; NaN
    when no pod arrived there (the run ended earlier)."""
    arrive_pct = np.round(arrived / capacity_milli * 100.0)
    alloc_pct = allocated / capacity_milli * 100.0
    out: list[float] = []
    for k in range(top + 1):
        sel = arrive_pct == k
        if not sel.any():
            sel = (arrive_pct >= k - 1) & (arrive_pct <= k + 1)
        out.append(float(alloc_pct[sel].mean()) if sel.any() else math.nan)
    return out


class Replay:
    """One cluster, one policy; :meth:`run` replays one workload sequence."""

    def __init__(self, nodes: Sequence[TraceNode], policy: Policy,
                 typical: Sequence[TypicalPod], *, trace: str = "",
                 cpu_pods: CpuPods = "least", ties: Ties = "random",
                 classes: Classes | None = None, deployed: Deployed | None = None) -> None:
        self.nodes = list(nodes)
        self.deployed = deployed
        if deployed is not None and policy.per_pod:
            raise ValueError("deployed mode scores every node; per-pod policies are not modelled")
        self._scale = SCALINGS[deployed.scaling] if deployed is not None else None
        self.ties = ties
        self._rank: IntArray = np.arange(len(self.nodes), dtype=np.int64)
        self.policy = policy
        self.trace = trace
        self.cpu_pods = cpu_pods
        self.classes = classes or Classes()
        self.oracle = workload_context(typical)
        #: the policy's hooks for node CPU, when it reads node CPU (fgd and its kin)
        self._set_workload(self.oracle)
        type_ids: dict[tuple[object, ...], int] = {}
        self.type_of = np.array(
            [type_ids.setdefault(tuple(n.cards), len(type_ids)) for n in self.nodes],
            dtype=np.int64)
        self.cpu_cap = np.array([n.cpu_milli for n in self.nodes], dtype=np.int64)
        self.mem_cap = np.array([n.memory_mib for n in self.nodes], dtype=np.int64)
        self.capacity_milli = MILLI * sum(n.gpus for n in self.nodes)
        self._models = np.array([n.model for n in self.nodes])
        self._access: dict[str, npt.NDArray[np.bool_]] = {}
        self._requests: dict[_Shape, PodRequest | None] = {}
        bias = policy.name_bias()
        self._has_bias = bias is not None
        self._bias: FloatArray = np.array(
            [float(bias(n.name)) if bias is not None else 0.0 for n in self.nodes])
        #: kube-scheduler's non-zero requests of the bound pods (LeastAllocated reads them;
        #: memory in bytes)
        self.cpu_nonzero: IntArray = np.zeros(len(self.nodes), dtype=np.int64)
        self.memory_nonzero: IntArray = np.zeros(len(self.nodes), dtype=np.int64)
        self._bias_by_name = dict(zip((n.name for n in self.nodes), self._bias.tolist(),
                                      strict=True))

    # ------------------------------------------------------------------ helpers
    def _set_workload(self, workload: Workload) -> None:
        """Use ``workload`` from now on (the memo must be dropped by the caller if it held
        answers for another one)."""
        self.workload = workload
        self.typical_cpu = workload.cpu_milli
        # The CPU values the policy's score can tell apart (fgd: the typical pods' CPU
        # requests); nodes whose free CPU is between the same two share its answers.
        self.thresholds: tuple[int, ...] = tuple(self.policy.cpu_thresholds(
            self.typical_cpu, max(n.cpu_milli for n in self.nodes)))
        self.n_buckets = len(self.thresholds) + 1
        self._thr = np.array(self.thresholds, dtype=np.int64)

    def _bias_of(self, name: str) -> float:
        return self._bias_by_name.get(name, 0.0) if self._has_bias else 0.0

    def bucket(self, cpu_free: int) -> int:
        return bisect_right(self.thresholds, cpu_free)

    def _bucket_rep(self, b: int) -> int:
        """A CPU value inside bucket b (the policy only compares CPU with the thresholds)."""
        if b == 0:
            return (self.thresholds[0] - 1) if self.thresholds else 0
        return self.thresholds[b - 1]

    def access(self, spec: str) -> npt.NDArray[np.bool_]:
        mask = self._access.get(spec)
        if mask is None:
            allowed = {m for m in spec.split("|") if m}
            mask = np.isin(self._models, sorted(allowed)) if allowed else np.ones(
                len(self.nodes), dtype=bool)
            self._access[spec] = mask
        return mask

    def request(self, shape: _Shape) -> PodRequest | None:
        if shape not in self._requests:
            self._requests[shape] = gpu_request(shape)
        return self._requests[shape]

    def context(self, request: PodRequest, *, seed: int = 0, pod_key: str = "",
                node: str = "", cpu_before: int = 0, cpu_after: int = 0) -> PolicyContext:
        if not self.thresholds:
            return PolicyContext(request, pod_key=pod_key, seed=seed, workload=self.workload)
        return PolicyContext(request, pod_key=pod_key, seed=seed, workload=self.workload,
                             node_facts={node: NodeFacts(cpu_before)},
                             pod_cpu_milli=cpu_before - cpu_after)

    def _answer(self, shape: _Shape, request: PodRequest, code: int) -> _Answer:
        """The real code's answer for a node of class ``code // n_buckets`` whose free CPU
        after the pod falls in bucket ``code % n_buckets`` (memoised)."""
        key = (shape, code)
        memo = self.classes.memo
        if key in memo:
            return memo[key]
        self.classes.misses += 1
        cid, b_after = divmod(code, self.n_buckets)
        rep = self.classes.reps[cid]
        ctx = self.context(request, node=rep.name,
                           cpu_before=self._bucket_rep(self.classes.buckets[cid]),
                           cpu_after=self._bucket_rep(b_after))
        placed = place(request, rep, chooser(self.policy, ctx))
        answer: _Answer = None
        if not isinstance(placed, Unfit):
            answer = (self.policy.score(rep, placed.after, ctx), placed.containers)
        memo[key] = answer
        return answer

    def _table(self, shape: _Shape) -> FloatArray:
        need = len(self.classes.reps) * self.n_buckets
        table = self.classes.tables.get(shape)
        if table is None or table.size < need:
            grown = np.full(max(2 * need, 4096), np.nan)
            if table is not None:
                grown[: table.size] = table
            self.classes.tables[shape] = table = grown
        return table

    def _values(self, shape: _Shape, codes: IntArray,
                compute: Callable[[int], float]) -> FloatArray:
        """Value of every candidate's code, computing (once) the codes never seen."""
        table = self._table(shape)
        values = table[codes]
        missing = np.isnan(values)
        if missing.any():
            for code in np.unique(codes[missing]).tolist():
                table[code] = compute(code)
            values = table[codes]
        return values

    def _tie(self, idx: IntArray, values: FloatArray, rng: np.random.Generator) -> int:
        """Index (into idx) of the best value; ties at random, like kube-scheduler's
        selectHost. Values of different classes equal up to float rounding are ties."""
        best = values.max()
        if best == -np.inf:
            return -1
        tied = np.flatnonzero(values >= best - 1e-9)
        if tied.size == 1:
            return int(tied[0])
        if self.ties == "ordered":
            return int(tied[np.argmin(self._rank[idx[tied]])])
        return int(tied[rng.integers(tied.size)])

    def _codes(self, idx: IntArray, cls: IntArray, cpu_free: IntArray, cpu: int) -> IntArray:
        if not self.thresholds:
            return cls[idx] * self.n_buckets
        b_after = np.searchsorted(self._thr, cpu_free[idx] - cpu, side="right")
        return cls[idx] * self.n_buckets + b_after

    def _policy_values(self, idx: IntArray, cls: IntArray, cpu_free: IntArray, pod: TracePod,
                       request: PodRequest) -> tuple[IntArray, FloatArray]:
        """(memo code, policy score) of every candidate; -inf where the request does not fit."""
        shape = pod.shape
        codes = self._codes(idx, cls, cpu_free, pod.cpu_milli)

        def compute(code: int) -> float:
            answer = self._answer(shape, request, code)
            if answer is None:
                return -np.inf
            # The table holds the score without the representative node's own bias.
            return answer[0] - self._bias_of(self.classes.reps[code // self.n_buckets].name)

        values = self._values(shape, codes, compute)
        if self._has_bias:
            values = values + self._bias[idx]
        return codes, values

    def _pick(self, idx: IntArray, cls: IntArray, cpu_free: IntArray, pod: TracePod,
              request: PodRequest, rng: np.random.Generator,
              ) -> tuple[int, tuple[ContainerAllocation, ...]]:
        if idx.size == 0:
            return -1, ()
        codes, values = self._policy_values(idx, cls, cpu_free, pod, request)
        k = self._tie(idx, values, rng)
        if k < 0:
            return -1, ()
        answer = self.classes.memo[(pod.shape, int(codes[k]))]
        assert answer is not None
        return int(idx[k]), answer[1]

    # ------------------------------------------------------------------ deployed mode
    def kube_scores(self, idx: IntArray, pod: TracePod, cpu_free: IntArray,
                     mem_free: IntArray) -> IntArray:
        """kube-scheduler's LeastAllocated + BalancedAllocation of the candidates, integers."""
        cpu_cap = self.cpu_cap[idx]
        mem_cap = self.mem_cap[idx] * MIB
        cpu_nz = self.cpu_nonzero[idx] + (pod.cpu_milli or DEFAULT_MILLI_CPU)
        mem_nz = self.memory_nonzero[idx] + (pod.memory_mib * MIB or DEFAULT_MEMORY_BYTES)
        least_cpu = np.where(cpu_nz > cpu_cap, 0, (cpu_cap - cpu_nz) * MAX_NODE_SCORE // cpu_cap)
        least_mem = np.where(mem_nz > mem_cap, 0, (mem_cap - mem_nz) * MAX_NODE_SCORE // mem_cap)
        least = (least_cpu + least_mem) // 2
        if pod.cpu_milli == 0 and pod.memory_mib == 0:
            return least  # BalancedAllocation skips a pod without requests
        f_cpu = np.minimum((cpu_cap - cpu_free[idx] + pod.cpu_milli) / cpu_cap, 1.0)
        f_mem = np.minimum(((self.mem_cap[idx] - mem_free[idx] + pod.memory_mib) * MIB)
                           / mem_cap, 1.0)
        balanced = ((1.0 - np.abs((f_cpu - f_mem) / 2)) * MAX_NODE_SCORE).astype(np.int64)
        return least + balanced

    def extender_scores(self, values: FloatArray, weight: int) -> IntArray:
        """The extender's integers 0..10 for these raw scores, weighted and scaled to
        kube-scheduler's 0..100 as schedule_one.go does."""
        assert self._scale is not None
        distinct = np.unique(values)  # the scaling depends only on the set of values
        ints = self._scale({str(i): float(v) for i, v in enumerate(distinct.tolist())})
        table = np.array([ints[str(i)] for i in range(distinct.size)], dtype=np.int64)
        return table[np.searchsorted(distinct, values)] * weight * (MAX_NODE_SCORE // MAX_SCORE)

    @staticmethod
    def _best(total: IntArray, rng: np.random.Generator) -> int:
        """selectHost: the best total, equal ones at random."""
        tied = np.flatnonzero(total == total.max())
        return int(tied[rng.integers(tied.size)]) if tied.size > 1 else int(tied[0])

    def _pick_deployed(self, idx: IntArray, cls: IntArray, cpu_free: IntArray,
                       mem_free: IntArray, pod: TracePod, request: PodRequest,
                       rng: np.random.Generator,
                       ) -> tuple[int, tuple[ContainerAllocation, ...]]:
        assert self.deployed is not None
        if idx.size == 0:
            return -1, ()
        codes, values = self._policy_values(idx, cls, cpu_free, pod, request)
        ok = np.isfinite(values)  # the extender's filter
        if not ok.any():
            return -1, ()
        idx, codes, values = idx[ok], codes[ok], values[ok]
        if self.deployed.extender == "filter-best":
            best = values >= values.max() - _EQUAL_SCORE
            idx, codes = idx[best], codes[best]
            total = self.kube_scores(idx, pod, cpu_free, mem_free)
        else:
            total = (self.kube_scores(idx, pod, cpu_free, mem_free)
                     + self.extender_scores(values, self.deployed.extender_weight))
        k = self._best(total, rng)
        answer = self.classes.memo[(pod.shape, int(codes[k]))]
        assert answer is not None
        return int(idx[k]), answer[1]

    def _cpu_only_values(self, idx: IntArray, cls: IntArray, cpu_free: IntArray,
                         pod: TracePod) -> FloatArray:
        """The policy's ``score_cpu_only`` of every candidate (name bias included); 0 where
        the policy cannot score such pods (every node equal)."""
        policy = self.policy

        def compute(code: int) -> float:
            cid, b_after = divmod(code, self.n_buckets)
            rep = self.classes.reps[cid]
            value = policy.score_cpu_only(
                rep, self._bucket_rep(self.classes.buckets[cid]), self._bucket_rep(b_after),
                self.workload)
            return 0.0 if value is None else float(value) - self._bias_of(rep.name)

        codes = self._codes(idx, cls, cpu_free, pod.cpu_milli)
        values = self._values(_CPU_ONLY, codes, compute)
        if self._has_bias:
            values = values + self._bias[idx]
        return values

    def _pick_per_pod(self, idx: IntArray, cls: IntArray, states: list[NodeState],
                      pod: TracePod, request: PodRequest, seed: int, uid: str,
                      rng: np.random.Generator,
                      ) -> tuple[int, tuple[ContainerAllocation, ...]]:
        if idx.size == 0:
            return -1, ()
        codes = cls[idx] * self.n_buckets

        def compute(code: int) -> float:
            rep = self.classes.reps[code // self.n_buckets]
            return 0.0 if fits(request, rep) else -np.inf

        ok = self._values(pod.shape, codes, compute) == 0.0
        feasible = idx[ok]
        if feasible.size == 0:
            return -1, ()
        n = int(feasible[rng.integers(feasible.size)])
        ctx = self.context(request, seed=seed, pod_key=uid)
        placed = place(request, states[n], chooser(self.policy, ctx), pod_uid=uid)
        assert not isinstance(placed, Unfit), "fit memo disagrees with place()"
        return n, placed.containers

    def _place_cpu_pod(self, fit: npt.NDArray[np.bool_], cls: IntArray, cpu_free: IntArray,
                       mem_free: IntArray, pod: TracePod, rng: np.random.Generator) -> int:
        idx = np.flatnonzero(fit)
        if idx.size == 0:
            return -1
        if self.deployed is not None:
            total = self.kube_scores(idx, pod, cpu_free, mem_free)
            if self.deployed.cpu_only_weight:
                total = total + self.extender_scores(self._cpu_only_values(idx, cls, cpu_free, pod),
                                               self.deployed.cpu_only_weight)
            return int(idx[self._best(total, rng)])
        if self.cpu_pods == "policy":
            if self.policy.per_pod:
                # random places every pod at random (the simulator's RandomScore does).
                return int(idx[rng.integers(idx.size)])
            # The authors' simulator scores CPU-only pods with the policy under test too
            # (for FGD: the growth of the node's fragmentation caused by the CPU the pod
            # takes, fgd_score.go's nodeRes.Sub branch); a policy that cannot score them
            # leaves every node that fits tied.
            values = self._cpu_only_values(idx, cls, cpu_free, pod)
            return int(idx[self._tie(idx, values, rng)])
        # kube-scheduler NodeResourcesFit scoring (pkg/scheduler/framework/plugins/
        # noderesources/least_allocated.go, most_allocated.go): mean over CPU and memory of
        # the free (or used) fraction after the pod, equal weights.
        free = ((cpu_free[idx] - pod.cpu_milli) / self.cpu_cap[idx]
                + (mem_free[idx] - pod.memory_mib) / self.mem_cap[idx])
        score: FloatArray = free if self.cpu_pods == "least" else -free
        return int(idx[self._tie(idx, score, rng)])

    # ------------------------------------------------------------------ run
    def _classify_all(self, states: list[NodeState], cpu_free: IntArray) -> IntArray:
        return np.array([self.classes.classify(int(self.type_of[i]), states[i],
                                               self.bucket(int(cpu_free[i])))
                         for i in range(len(states))], dtype=np.int64)

    def _use_workload(self, workload: Workload, states: list[NodeState],
                      cpu_free: IntArray) -> IntArray:
        """Score against ``workload`` from now on; the node classes of the current state.

        The memo is kept when it was computed for an equal workload (the oracle's, shared by
        the seeds of a task); otherwise it is dropped with the classes, whose CPU buckets
        depend on the workload's thresholds."""
        self._set_workload(workload)
        key = (workload.typical, workload.cpu_milli)
        if self.classes.workload_key != key:
            self.classes.reset()
            self.classes.workload_key = key
        return self._classify_all(states, cpu_free)

    def run(self, pods: Sequence[TracePod], seed: int) -> RunResult:
        rng = np.random.default_rng(seed)
        # "ordered" ties: the authors' simulator prefixes node names with a seeded random
        # permutation and its selectHost keeps the smallest name among equal scores
        # (pkg/simulator/simulator.go syncClusterResourceList; vendor/k8s.io/kubernetes/pkg/
        # scheduler/core/generic_scheduler.go selectHost) — a fixed preference order per run.
        self._rank = rng.permutation(len(self.nodes)).astype(np.int64)
        states = [empty_node(n.name, n.cards) for n in self.nodes]
        cpu_free = self.cpu_cap.copy()
        mem_free = self.mem_cap.copy()
        self.cpu_nonzero[:] = 0
        self.memory_nonzero[:] = 0
        deployed = self.deployed
        live = (LiveMix(refresh=deployed.mix_refresh)
                if deployed is not None and deployed.live_mix else None)
        cls = self._use_workload(self.oracle if live is None else live.workload(),
                                 states, cpu_free)
        records: list[list[tuple[str, tuple[ContainerAllocation, ...]]]] = [
            [] for _ in self.nodes]
        arrived = np.zeros(len(pods), dtype=np.int64)
        allocated = np.zeros(len(pods), dtype=np.int64)
        arr = used = 0
        placed = failed_gpu = failed_cpu = 0
        per_pod = self.policy.per_pod

        for i, pod in enumerate(pods):
            if len(self.classes.reps) > MAX_CLASSES:
                self.classes.reset()
                cls = self._classify_all(states, cpu_free)
            arr += pod.gpu_request_milli
            fit = (cpu_free >= pod.cpu_milli) & (mem_free >= pod.memory_mib)
            request = self.request(pod.shape)
            chosen = -1
            containers: tuple[ContainerAllocation, ...] = ()
            uid = f"{seed}-{i}"
            if request is None:
                chosen = self._place_cpu_pod(fit, cls, cpu_free, mem_free, pod, rng)
                if chosen < 0:
                    failed_cpu += 1
            else:
                if live is not None:
                    # What the allocator observes at filter, before it scores the pod.
                    live.observe(request, pod.cpu_milli)
                    if live.workload() is not self.workload:
                        cls = self._use_workload(live.workload(), states, cpu_free)
                if pod.gpu_spec:
                    fit &= self.access(pod.gpu_spec)
                idx = np.flatnonzero(fit)
                if per_pod:
                    chosen, containers = self._pick_per_pod(
                        idx, cls, states, pod, request, seed, uid, rng)
                elif deployed is not None:
                    chosen, containers = self._pick_deployed(
                        idx, cls, cpu_free, mem_free, pod, request, rng)
                else:
                    chosen, containers = self._pick(idx, cls, cpu_free, pod, request, rng)
                if chosen < 0:
                    failed_gpu += 1
                else:
                    states[chosen] = apply_placement(states[chosen], containers, uid)
                    records[chosen].append((uid, containers))
                    used += pod.gpu_request_milli
            if chosen >= 0:
                placed += 1
                cpu_free[chosen] -= pod.cpu_milli
                mem_free[chosen] -= pod.memory_mib
                self.cpu_nonzero[chosen] += pod.cpu_milli or DEFAULT_MILLI_CPU
                self.memory_nonzero[chosen] += pod.memory_mib * MIB or DEFAULT_MEMORY_BYTES
                cls[chosen] = self.classes.classify(int(self.type_of[chosen]), states[chosen],
                                                    self.bucket(int(cpu_free[chosen])))
            arrived[i] = arr
            allocated[i] = used

        problems = self.check(states, records, cpu_free, mem_free, used)
        return RunResult(self.trace, self.policy.name, seed, len(pods), placed, failed_gpu,
                         failed_cpu, arrived, allocated, self.capacity_milli, problems)

    def check(self, states: list[NodeState],
              records: list[list[tuple[str, tuple[ContainerAllocation, ...]]]],
              cpu_free: IntArray, mem_free: IntArray, used_milli: int) -> list[str]:
        """Invariants of the end state, through the allocator's own record replay."""
        problems: list[str] = []
        card_milli = 0
        for node, state, recs in zip(self.nodes, states, records, strict=True):
            rebuilt, issues = build_node_state(node.name, node.cards, recs)
            problems.extend(f"{node.name}: {p}" for p in issues)
            for c in rebuilt.cards:
                if c.free_core < 0 or c.free_memory_mib < 0:
                    problems.append(f"{node.name}: card {c.card.index} over-committed")
                card_milli += c.core_used * 10
            if [(c.core_used, c.memory_used_mib, c.whole) for c in rebuilt.cards] != [
                    (c.core_used, c.memory_used_mib, c.whole) for c in state.cards]:
                problems.append(f"{node.name}: state differs from its allocation records")
        if (cpu_free < 0).any() or (mem_free < 0).any():
            problems.append("a node's CPU or memory is over-committed")
        if card_milli != used_milli:
            problems.append(f"cards hold {card_milli} milli-GPU, pods placed {used_milli}")
        if used_milli > self.capacity_milli:
            problems.append("more GPU allocated than the cluster has")
        return problems

