"""Prometheus metrics of one allocator app (its own registry: apps in tests never collide).

Per-card and per-pod series use the labels of NVIDIA's DCGM exporter where the two overlap
(``gpu`` = the card's index on its node, ``modelName``, ``namespace``, ``pod``; DCGM
exporter ``pkg/dcgmexporter``, its default labels), so a dashboard can join what Tessera
allocated with what the card actually does (``DCGM_FI_DEV_GPU_UTIL``, ``DCGM_FI_DEV_FB_USED``)
on ``gpu``, ``modelName`` and, for pods, ``namespace``/``pod``. The node is ``node`` (DCGM's
``Hostname`` is the node's host name, which need not be the Node's name).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from allocator.state import ClusterState
from tessera.transport import TLS_CONNECTIONS, TlsConnections

#: Filter/prioritize targets are single-digit milliseconds; bind includes two API writes.
LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                   5.0)


class _NodeCollector(Collector):
    """Allocated vs total GPU core and memory per node, and the objects the state could not
    read, from the state at scrape time."""

    def __init__(self, state: ClusterState) -> None:
        self._state = state

    def collect(self) -> Iterator[GaugeMetricFamily]:
        core = GaugeMetricFamily("tessera_allocator_node_gpu_core_percent",
                                 "GPU compute per node in percent of one card",
                                 labels=["node", "kind"])
        memory = GaugeMetricFamily("tessera_allocator_node_gpu_memory_mib",
                                   "GPU memory per node in MiB", labels=["node", "kind"])
        for node, core_used, core_total, mem_used, mem_total in self._state.totals():
            core.add_metric([node, "allocated"], core_used)
            core.add_metric([node, "total"], core_total)
            memory.add_metric([node, "allocated"], mem_used)
            memory.add_metric([node, "total"], mem_total)
        yield core
        yield memory
        records, nodes = self._state.problem_counts()
        yield GaugeMetricFamily("tessera_allocator_ignored_pod_records",
                                "GPU pods whose allocation record cannot be read (see /status "
                                "ignoredRecords)", value=records)
        yield GaugeMetricFamily("tessera_allocator_nodes_with_problems",
                                "Nodes whose GPU inventory cannot be read as given (see /status "
                                "nodes[].problem)", value=nodes)


class _CardCollector(Collector):
    """Per card: compute and memory allocated, memory total; per pod and card: its share.

    The leader's only: the follower keeps the same picture, and both replicas are scraped
    (the follower is not Ready, but Prometheus scrapes it), so the follower's copy would
    double every sum over the cluster."""

    def __init__(self, state: ClusterState, is_leader: Callable[[], bool]) -> None:
        self._state = state
        self._is_leader = is_leader

    def collect(self) -> Iterator[GaugeMetricFamily]:
        card_labels = ["node", "gpu", "modelName"]
        pod_labels = ["namespace", "pod", "node", "gpu", "modelName"]
        core = GaugeMetricFamily("tessera_allocator_gpu_core_allocated_percent",
                                 "Compute of the card allocated to pods, in percent of the card",
                                 labels=card_labels)
        memory = GaugeMetricFamily("tessera_allocator_gpu_memory_allocated_mib",
                                   "Memory of the card allocated to pods, in MiB",
                                   labels=card_labels)
        total = GaugeMetricFamily("tessera_allocator_gpu_memory_total_mib",
                                  "Memory of the card, in MiB", labels=card_labels)
        pod_core = GaugeMetricFamily("tessera_allocator_pod_gpu_core_percent",
                                     "Compute of the card held by the pod (all its containers), "
                                     "in percent of the card", labels=pod_labels)
        pod_memory = GaugeMetricFamily("tessera_allocator_pod_gpu_memory_mib",
                                       "Memory of the card held by the pod (all its containers), "
                                       "in MiB", labels=pod_labels)
        nodes = self._state.snapshot()["nodes"] if self._is_leader() else []
        for node in nodes:
            name = node["name"]
            for card in node["cards"]:
                labels = [name, str(card["index"]), card["model"]]
                core.add_metric(labels, card["coreUsedPercent"])
                memory.add_metric(labels, card["memoryUsedMiB"])
                total.add_metric(labels, card["memoryMiB"])
                for holder in {h["uid"]: h for h in card["pods"]}.values():
                    share = self._share(holder["uid"], card["index"], card["memoryMiB"])
                    if share is not None:
                        who = [holder["namespace"], holder["name"], *labels]
                        pod_core.add_metric(who, share[0])
                        pod_memory.add_metric(who, share[1])
        yield from (core, memory, total, pod_core, pod_memory)

    def _share(self, uid: str, index: int, card_memory_mib: int) -> tuple[int, int] | None:
        record = self._state.record(uid)
        if record is None:
            return None
        core = memory = 0
        for c in record.allocation.containers:
            if index in c.card_indices:
                # A whole card is all of it; init and app containers both hold theirs
                # (allocator/fit.py reserves both).
                core += 100 if c.is_whole else c.core_percent
                memory += card_memory_mib if c.is_whole else c.memory_mib
        return core, memory


class _TlsCollector(Collector):
    """TLS connections the listener began (:class:`tessera.transport.TlsConnections`)."""

    def __init__(self, connections: TlsConnections) -> None:
        self._connections = connections

    def collect(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily(
            "tessera_allocator_tls_connections", "TLS connections begun (one handshake each): "
            "a client that reuses its connections adds none per request",
            value=self._connections.begun)


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
        #: Set by the app to count its recent refusals (allocator/pending.py) at scrape time.
        self.refused_pods = Gauge(
            "tessera_allocator_refused_pods", "Pods filter recently left without a node "
            "(the page's pending list)", registry=self.registry,
        )
        self.registry.register(_NodeCollector(state))
        self.registry.register(_CardCollector(state, is_leader))
        self.registry.register(_TlsCollector(TLS_CONNECTIONS))
        self.leader = Gauge("tessera_allocator_leader",
                            "1 on the replica that holds the Lease (answers the verbs)",
                            registry=self.registry)
        self.leader.set_function(lambda: 1.0 if is_leader() else 0.0)
