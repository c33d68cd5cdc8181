"""What the speed benchmarks do with a dev cluster: API clients, creating objects from several
threads, and the CPU its components have used."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench.speed.common import group_cpu_seconds
from devcluster.cluster import DevCluster
from devcluster.process import ManagedProcess


def core_v1(dev: DevCluster) -> Any:
    """A CoreV1Api of its own (the kubernetes client's pool is per ApiClient)."""
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=str(dev.kubeconfig))  # type: ignore[no-untyped-call]
    return client.CoreV1Api(api)


def in_parallel(dev: DevCluster, items: Sequence[Any],
                work: Callable[[Any, list[Any]], None], threads: int) -> None:
    """``work(core_v1, chunk)`` over ``items`` split in ``threads`` chunks, one client each."""
    chunks = [list(items[i::threads]) for i in range(threads)]
    with ThreadPoolExecutor(threads) as pool:
        for f in [pool.submit(work, core_v1(dev), c) for c in chunks if c]:
            f.result()


def processes(dev: DevCluster) -> dict[str, ManagedProcess]:
    """The control plane's processes and Tessera's services, by name."""
    procs = {p.name: p for p in dev.control_plane.processes}
    if dev.services is not None:
        for name in ("allocator", "webhook"):
            proc = getattr(dev.services, name)
            if proc is not None:
                procs[name] = proc
    return procs


def cpu_seconds(dev: DevCluster) -> dict[str, float]:
    """CPU seconds each of :func:`processes` has used so far (its whole process group)."""
    return {name: group_cpu_seconds(p.pid) for name, p in processes(dev).items()
            if p.pid is not None}
