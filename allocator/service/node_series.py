"""The per-node, per-card and per-pod series of ``/metrics``, written as Prometheus text with
each node's lines kept until its cards change.

Why: a cluster has a handful of series per card, and prometheus_client builds an object per
sample and formats every one again on each scrape, which made a scrape of a large cluster a
long stretch of CPU holding the state's lock (docs/benchmarks.md, issue 13's eighth pass).
A node's lines follow from its :class:`allocator.ranking.fit.NodeState` alone: the state is
immutable and replaced on every change (allocator/picture/state.py), and the pods holding its cards
have records whose pod names and allocations are fixed for the pod's life (a new allocation
or a released pod replaces the state). So a node's lines are kept with the state object they
were written from and written again only when the node's state is another object.

Labels are DCGM exporter's where the two overlap (allocator/service/metrics.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from allocator.picture.state import ClusterState, PodRecord
from allocator.ranking.fit import NodeState
from tessera.vocabulary import WHOLE_CARD_PERCENT


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    help: str

    def header(self) -> str:
        return f"# HELP {self.name} {_escape_help(self.help)}\n# TYPE {self.name} gauge\n"


NODE_CORE: Final = Family("tessera_allocator_node_gpu_core_percent",
                          "GPU compute per node in percent of one card")
NODE_MEMORY: Final = Family("tessera_allocator_node_gpu_memory_mib",
                            "GPU memory per node in MiB")
CARD_CORE: Final = Family("tessera_allocator_gpu_core_allocated_percent",
                          "Compute of the card allocated to pods, in percent of the card")
CARD_MEMORY: Final = Family("tessera_allocator_gpu_memory_allocated_mib",
                            "Memory of the card allocated to pods, in MiB")
CARD_TOTAL: Final = Family("tessera_allocator_gpu_memory_total_mib",
                           "Memory of the card, in MiB")
POD_CORE: Final = Family("tessera_allocator_pod_gpu_core_percent",
                         "Compute of the card held by the pod (all its containers), in percent "
                         "of the card")
POD_MEMORY: Final = Family("tessera_allocator_pod_gpu_memory_mib",
                           "Memory of the card held by the pod (all its containers), in MiB")
#: Every replica's series (usage per node).
NODE_FAMILIES: Final = (NODE_CORE, NODE_MEMORY)
#: The leader's only: the follower keeps the same picture, and both replicas are scraped
#: (the follower is not Ready, but Prometheus scrapes it), so the follower's copy would
#: double every sum over the cluster.
CARD_FAMILIES: Final = (CARD_CORE, CARD_MEMORY, CARD_TOTAL, POD_CORE, POD_MEMORY)
FAMILIES: Final = NODE_FAMILIES + CARD_FAMILIES


class NodeSeries:
    """The series of :data:`FAMILIES` for every node of ``state``, as exposition text."""

    def __init__(self, state: ClusterState, is_leader: Callable[[], bool]) -> None:
        self._state = state
        self._is_leader = is_leader
        #: node name -> (the state its lines were written from, its lines per family)
        self._kept: dict[str, tuple[NodeState, tuple[str, ...]]] = {}
        self._lock = threading.Lock()  # two scrapes at once share one set of kept lines

    def text(self) -> str:
        leader = self._is_leader()
        nodes, records = self._state.node_states()
        with self._lock:
            kept, fresh = self._kept, {}
            for name, state in nodes:
                entry = kept.get(name)
                if entry is None or entry[0] is not state:
                    entry = (state, node_lines(name, state, records))
                fresh[name] = entry
            self._kept = fresh  # nodes gone are dropped with their lines
        families = FAMILIES if leader else NODE_FAMILIES
        return "".join(family.header() + "".join(lines[i] for _, lines in fresh.values())
                       for i, family in enumerate(families))


def node_lines(name: str, state: NodeState, records: Mapping[str, PodRecord]
               ) -> tuple[str, ...]:
    """A node's lines, one string per family of :data:`FAMILIES`, in that order."""
    node = _escape(name)
    card_core, card_memory, card_total, pod_core, pod_memory = [], [], [], [], []
    for cs in state.cards:
        card = cs.card
        model = _escape(card.model)
        labels = f'gpu="{card.index}",modelName="{model}",node="{node}"'
        card_core.append(_line(CARD_CORE, labels, cs.core_used))
        card_memory.append(_line(CARD_MEMORY, labels, cs.memory_used_mib))
        card_total.append(_line(CARD_TOTAL, labels, card.memory_mib))
        for uid in dict.fromkeys(uid for uid, _container in cs.holders):
            record = records.get(uid)
            if record is None:
                continue
            core, memory = pod_share(record, card.index, card.memory_mib)
            who = (f'gpu="{card.index}",modelName="{model}",'
                   f'namespace="{_escape(record.namespace)}",node="{node}",'
                   f'pod="{_escape(record.name)}"')
            pod_core.append(_line(POD_CORE, who, core))
            pod_memory.append(_line(POD_MEMORY, who, memory))
    return (
        _line(NODE_CORE, f'kind="allocated",node="{node}"', state.core_used)
        + _line(NODE_CORE, f'kind="total",node="{node}"', state.core_total),
        _line(NODE_MEMORY, f'kind="allocated",node="{node}"', state.memory_used_mib)
        + _line(NODE_MEMORY, f'kind="total",node="{node}"', state.memory_total_mib),
        "".join(card_core), "".join(card_memory), "".join(card_total),
        "".join(pod_core), "".join(pod_memory),
    )


def pod_share(record: PodRecord, index: int, card_memory_mib: int) -> tuple[int, int]:
    """(core percent, memory MiB) of card ``index`` that the pod holds, all containers."""
    core = memory = 0
    for c in record.allocation.containers:
        if index in c.card_indices:
            # A whole card is all of it; init and app containers both hold theirs
            # (allocator/ranking/fit.py reserves both).
            core += WHOLE_CARD_PERCENT if c.is_whole else c.core_percent
            memory += card_memory_mib if c.is_whole else c.memory_mib
    return core, memory


def _line(family: Family, labels: str, value: int) -> str:
    # Labels sorted by name and values as floats: what prometheus_client writes.
    return f"{family.name}{{{labels}}} {float(value)!r}\n"


def _escape(value: str) -> str:
    """A label value in the text format: backslash, double quote and newline escaped."""
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _escape_help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")
