"""What the speed benchmarks do with a dev cluster: API clients, creating objects from several
threads, the CPU its components have used, when pods are bound, and what the allocator's
/metrics count."""

from __future__ import annotations

import json
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from bench.speed.common import client_context, group_cpu_seconds, https_text, metrics_text
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


def admin_context(dev: DevCluster) -> ssl.SSLContext:
    """TLS as the dev cluster's admin (its client certificate), trusting its CA."""
    cp = dev.control_plane
    return client_context(cp.ca_file, cp.pki_dir / "admin.crt", cp.pki_dir / "admin.key")


def allocator_counters(dev: DevCluster) -> dict[str, float]:
    """From the allocator's /metrics (over mutual TLS as the admin, on a connection of its
    own): each verb's calls and seconds so far (``<verb>_count``, ``<verb>_seconds``), its
    binds by outcome (``binds_<outcome>``), and the TLS connections it has begun when its
    server counts them (only floor-gunicorn's does: no ``tls_connections`` else)."""
    text = metrics_text(f"127.0.0.1:{dev.services.allocator_port}", admin_context(dev))
    counters: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            verb = s.labels.get("verb")
            if s.name == "tessera_allocator_verb_seconds_count" and verb:
                counters[f"{verb}_count"] = s.value
            elif s.name == "tessera_allocator_verb_seconds_sum" and verb:
                counters[f"{verb}_seconds"] = s.value
            elif s.name == "tessera_allocator_binds_total":
                counters[f"binds_{s.labels.get('outcome', '')}"] = s.value
            elif s.name == "tessera_allocator_tls_connections_total":
                counters["tls_connections"] = counters.get("tls_connections", 0.0) + s.value
    return counters


def wait_allocator_records(dev: DevCluster, count: int, timeout: float = 60.0) -> None:
    """Return once the allocator's picture holds at least ``count`` pod records (its
    ``/status``): its pod watch has seen the binds made so far."""
    server = f"127.0.0.1:{dev.services.allocator_port}"
    context = admin_context(dev)
    deadline = time.perf_counter() + timeout
    while True:
        seen = int(json.loads(https_text(server, context, "/status"))["pods"])
        if seen >= count:
            return
        if time.perf_counter() > deadline:
            raise TimeoutError(f"the allocator's picture holds {seen} pod records, not "
                               f"{count}, after {timeout:g} s")
        time.sleep(0.2)


class BindWatch:
    """Raw watch of a namespace's pods: first time each pod is seen with a node."""

    def __init__(self, dev: DevCluster, namespace: str) -> None:
        self.core = core_v1(dev)
        self.namespace = namespace
        self.bound: dict[str, float] = {}
        self.stop = threading.Event()
        resp = self.core.list_namespaced_pod(namespace, _preload_content=False)
        self.rv = json.loads(resp.data)["metadata"]["resourceVersion"]
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self._watch()
        except Exception:
            if not self.stop.is_set():  # the API server going away at the end is expected
                raise

    def _watch(self) -> None:
        from kubernetes.watch.watch import iter_resp_lines

        while not self.stop.is_set():
            resp = self.core.list_namespaced_pod(
                self.namespace, watch=True, resource_version=self.rv, timeout_seconds=60,
                allow_watch_bookmarks=True, _preload_content=False)
            for line in iter_resp_lines(resp):  # type: ignore[no-untyped-call]
                now = time.perf_counter()
                event = json.loads(line)
                obj = event.get("object") or {}
                self.rv = (obj.get("metadata") or {}).get("resourceVersion", self.rv)
                name = (obj.get("metadata") or {}).get("name")
                if name and (obj.get("spec") or {}).get("nodeName") and name not in self.bound:
                    self.bound[name] = now
                if self.stop.is_set():
                    break
