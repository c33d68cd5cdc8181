"""Prometheus metrics of one allocator app (its own registry: apps in tests never collide)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from allocator.state import ClusterState

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


class Metrics:
    def __init__(self, state: ClusterState) -> None:
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
        self.registry.register(_NodeCollector(state))
