"""The picture as ``/status`` shows it (pure: built from one reading of the tables)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from allocator.picture.records import PodRecord
from allocator.picture.resources import NodeResources
from allocator.ranking.cards import NodeState

#: (name, inventory source, inventory problem, over-commitments, state) of one node.
NodeRow = tuple[str, str, str, tuple[str, ...], NodeState]


def document(nodes: list[NodeRow], pods: Mapping[str, PodRecord], bad: Mapping[str, str],
             synced: bool, resources: NodeResources, max_nodes: int | None
             ) -> dict[str, Any]:
    """Every node (the first ``max_nodes`` by name), card, capacity, and who holds what."""
    free_cpu, free_memory = resources.free_cpu, resources.free_memory
    nodes.sort(key=lambda n: n[0])
    docs = [_node(row, pods, free_cpu.get(row[0]), free_memory.get(row[0]))
            for row in nodes[:max_nodes]]
    return {
        "synced": synced,
        "nodeCount": len(nodes),
        "nodes": docs,
        "pods": len(pods),
        "ignoredRecords": dict(bad),
        "ignoredPodRequests": resources.noted(),
    }


def _node(row: NodeRow, pods: Mapping[str, PodRecord], cpu_free: int | None,
          memory_free: int | None) -> dict[str, Any]:
    name, source, problem, problems, st = row
    cards = [{
        "index": cs.card.index,
        "model": cs.card.model,
        "memoryMiB": cs.card.memory_mib,
        "coreUsedPercent": cs.core_used,
        "memoryUsedMiB": cs.memory_used_mib,
        "whole": cs.whole,
        "foreignMemoryMiB": cs.foreign_memory_mib,
        "busyPercent": cs.busy_percent,
        "pods": [_holder(pods.get(uid), uid, ctr) for uid, ctr in cs.holders],
    } for cs in st.cards]
    return {
        "name": name,
        "source": source,
        "problem": problem or None,
        "overCommitted": list(problems),
        "coreTotal": st.core_total,
        "coreUsed": st.core_used,
        "memoryTotalMiB": st.memory_total_mib,
        "memoryUsedMiB": st.memory_used_mib,
        "cpuFreeMilli": cpu_free,
        "memoryFreeBytes": memory_free,
        "cards": cards,
    }


def _holder(rec: PodRecord | None, uid: str, container: str) -> dict[str, str]:
    return {
        "uid": uid,
        "namespace": rec.namespace if rec else "",
        "name": rec.name if rec else "",
        "container": container,
        "stage": rec.stage.value if rec else "",
    }
