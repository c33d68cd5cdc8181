"""Prometheus metrics of one allocator app (its own registry: apps in tests never collide).

Per-card and per-pod series (written by :mod:`allocator.service.node_series`) use the labels of
NVIDIA's DCGM exporter where the two overlap (``gpu`` = the card's index on its node,
``modelName``, ``namespace``, ``pod``; DCGM exporter ``pkg/dcgmexporter``, its default
labels), so a dashboard can join what Tessera allocated with what the card actually does
(``DCGM_FI_DEV_GPU_UTIL``, ``DCGM_FI_DEV_FB_USED``) on ``gpu``, ``modelName`` and, for pods,
``namespace``/``pod``. The node is ``node`` (DCGM's ``Hostname`` is the node's host name,
which need not be the Node's name).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from allocator.decisions import DecisionHooks, PodRef, PreemptionEnd
from allocator.picture.state import ClusterState
from allocator.service.node_series import NodeSeries

#: Filter/prioritize targets are single-digit milliseconds; bind includes its API write.
LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                   5.0)


class _ProblemCollector(Collector):
    """The objects the state could not read, at scrape time."""

    def __init__(self, state: ClusterState) -> None:
        self._state = state

    def collect(self) -> Iterator[GaugeMetricFamily]:
        records, nodes = self._state.problem_counts()
        yield GaugeMetricFamily("tessera_allocator_ignored_pod_records",
                                "GPU pods whose allocation record cannot be read (see /status "
                                "ignoredRecords)", value=records)
        yield GaugeMetricFamily("tessera_allocator_nodes_with_problems",
                                "Nodes whose GPU inventory cannot be read as given (see /status "
                                "nodes[].problem)", value=nodes)


class _QueryCollector(Collector):
    """The measured figures' queries to Prometheus, by outcome, at scrape time."""

    def __init__(self, queries: Callable[[], dict[str, int]]) -> None:
        self._queries = queries

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily("tessera_allocator_measured_queries",
                                     "Queries for measured GPU figures, by outcome",
                                     labels=["outcome"])
        for outcome, count in sorted(self._queries().items()):
            family.add_metric([outcome], count)
        yield family


class PreemptionCounts(DecisionHooks):
    """Counts preemption through the decision hooks (allocator/verbs/preempt.py tells them)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.started = Counter(
            "tessera_allocator_preemptions", "Preemptions decided: victims chosen on a node "
            "for a GPU pod that fits nowhere, their evictions begun", registry=registry)
        self.victims = Counter(
            "tessera_allocator_preemption_victims", "Pods evicted by preemption (a victim "
            "already gone counts)", registry=registry)
        self.ended = Counter(
            "tessera_allocator_preemptions_ended", "Preemptions over, by outcome: only "
            "'bound' led to the preemptor's bind on the node its victims left",
            ["outcome"], registry=registry)
        for outcome in PreemptionEnd:  # every outcome a series from the start, at 0
            self.ended.labels(outcome.value)
        #: Set by the app to count the preemptions under way at scrape time (0 when off).
        self.in_flight = Gauge(
            "tessera_allocator_preemptions_in_flight", "Preemptions under way: victims "
            "chosen, the preemptor neither bound nor past its deadline (see /status "
            "preemptions)", registry=registry)

    def preemption_started(self, preemptor: PodRef, victims: tuple[PodRef, ...], node: str,
                           cards: tuple[int, ...]) -> None:
        self.started.inc()

    def preempted(self, preemptor: PodRef, victims: tuple[PodRef, ...], node: str,
                  cards: tuple[int, ...]) -> None:
        self.victims.inc(len(victims))

    def preemption_ended(self, preemptor: PodRef, node: str, outcome: PreemptionEnd) -> None:
        self.ended.labels(outcome.value).inc()


class Metrics:
    def __init__(self, state: ClusterState,
                 is_leader: Callable[[], bool] = lambda: True) -> None:
        self.registry = CollectorRegistry()
        self.verb_seconds = Histogram(
            "tessera_allocator_verb_seconds", "Extender verb latency", ["verb"],
            buckets=LATENCY_BUCKETS, registry=self.registry,
        )
        self.binds = Counter(
            "tessera_allocator_binds", "Bind outcomes", ["outcome"], registry=self.registry,
        )
        self.events = Counter(
            "tessera_allocator_events", "Kubernetes Events about pods: created, updated (a "
            "series' count), dropped (a rate limit or a full queue), failed (the API refused)",
            ["outcome"], registry=self.registry,
        )
        #: Set by the app to count its recent refusals (allocator/service/pending.py) at scrape
        #: time.
        self.refused_pods = Gauge(
            "tessera_allocator_refused_pods", "Pods filter recently left without a node "
            "(the page's pending list)", registry=self.registry,
        )
        self.registry.register(_ProblemCollector(state))
        #: A decision hook of preemption (allocator/service/app.py hands it to Preempt).
        self.preemption = PreemptionCounts(self.registry)
        #: Per node, card and pod: written apart from the registry
        #: (allocator/service/node_series.py).
        self.series = NodeSeries(state, is_leader)
        self.leader = Gauge("tessera_allocator_leader",
                            "1 on the replica that holds the Lease (answers the verbs)",
                            registry=self.registry)
        self.leader.set_function(lambda: 1.0 if is_leader() else 0.0)

    def watch_measured(self, fresh: Callable[[], bool],
                       queries: Callable[[], dict[str, int]]) -> None:
        """Series of the measured figures' source (allocator/service/measured_source.py), when
        on."""
        gauge = Gauge("tessera_allocator_measured_fresh", "1 while the measured GPU figures "
                      "from Prometheus are fresh; 0: placing by bookings alone",
                      registry=self.registry)
        gauge.set_function(lambda: 1.0 if fresh() else 0.0)
        self.registry.register(_QueryCollector(queries))

    def exposition(self) -> bytes:
        """Everything in the text format (``prometheus_client.CONTENT_TYPE_LATEST``)."""
        return generate_latest(self.registry) + self.series.text().encode()
