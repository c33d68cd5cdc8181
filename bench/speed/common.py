"""Shared helpers of the speed benchmarks: percentiles, tables, result files, HTTPS clients,
CPU time of process groups and of a process's threads."""

from __future__ import annotations

import csv
import http.client
import json
import os
import platform
import re
import shutil
import ssl
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parents[1] / "results"


def percentile(samples: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..1) of unsorted samples; NaN when empty."""
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def summary(samples_ms: Sequence[float]) -> dict[str, float]:
    return {
        "n": len(samples_ms),
        "p50_ms": round(percentile(samples_ms, 0.50), 3),
        "p90_ms": round(percentile(samples_ms, 0.90), 3),
        "p99_ms": round(percentile(samples_ms, 0.99), 3),
        "mean_ms": round(statistics.fmean(samples_ms), 3) if samples_ms else float("nan"),
    }


def machine() -> dict[str, Any]:
    load = os.getloadavg()
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "loadavg_at_end": [round(x, 2) for x in load],
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def print_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> None:
    widths = {c: max(len(c), *(len(_fmt(r.get(c))) for r in rows)) for c in columns}
    print("  ".join(c.ljust(widths[c]) for c in columns))
    for r in rows:
        print("  ".join(_fmt(r.get(c)).ljust(widths[c]) for c in columns), flush=True)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.2f}"
    return "" if value is None else str(value)


def write_results(stem: str, rows: Iterable[Mapping[str, Any]], meta: Mapping[str, Any]) -> None:
    """bench/results/<stem>.csv (rows) and <stem>.json (rows + how they were made)."""
    rows = list(rows)
    RESULTS.mkdir(parents=True, exist_ok=True)
    columns: list[str] = []
    for r in rows:
        columns.extend(k for k in r if k not in columns)
    with (RESULTS / f"{stem}.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    doc = {"meta": {**meta, "machine": machine()}, "rows": rows}
    (RESULTS / f"{stem}.json").write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {RESULTS / stem}.csv and .json")


class Client:
    """One kept-alive HTTPS connection (as kube-scheduler's extender client keeps one)."""

    def __init__(self, port: int, context: ssl.SSLContext, host: str = "127.0.0.1") -> None:
        self.host, self.port, self.context = host, port, context
        self.conn = self._connect()

    def _connect(self) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(self.host, self.port, context=self.context,
                                           timeout=30)

    def post(self, path: str, body: bytes) -> tuple[int, bytes, float]:
        """(status, body, seconds) of one POST; reconnects once on a dropped connection."""
        return self.send("POST", path, body)

    def get(self, path: str) -> tuple[int, bytes, float]:
        """(status, body, seconds) of one GET; reconnects once on a dropped connection."""
        return self.send("GET", path, None)

    def send(self, method: str, path: str, body: bytes | None) -> tuple[int, bytes, float]:
        for attempt in (0, 1):
            try:
                t0 = time.perf_counter()
                self.conn.request(method, path, body,
                                  {"Content-Type": "application/json"} if body is not None
                                  else {})
                resp = self.conn.getresponse()
                data = resp.read()
                return resp.status, data, time.perf_counter() - t0
            except (http.client.HTTPException, OSError):  # e.g. closed after keepalive
                self.conn.close()
                self.conn = self._connect()
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.conn.close()


def client_context(ca: Path, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca))
    if cert is not None and key is not None:
        ctx.load_cert_chain(str(cert), str(key))
    return ctx


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat_fields(path: str) -> list[bytes] | None:
    """The fields of a ``/proc`` stat file after the command name (which may hold spaces) in
    parentheses: state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime
    stime cutime cstime ... (proc(5)); None when the process or thread is gone."""
    try:
        with open(path, "rb") as fh:
            stat = fh.read()
    except OSError:
        return None
    return stat[stat.rindex(b")") + 2:].split()


def machine_cpu_ticks(stat: str = "/proc/stat") -> tuple[int, int]:
    """(stolen, all) clock ticks of the machine's CPUs so far, from the first line of
    ``/proc/stat`` (proc(5): user nice system idle iowait irq softirq steal guest
    guest_nice; guest time is counted in user already). *Stolen* is the time a virtual
    machine's CPUs were ready to run while the host ran something else: a run on a busy host
    is slower for reasons no component's CPU shows."""
    with open(stat, "rb") as fh:
        fields = [int(x) for x in fh.readline().split()[1:]]
    return fields[7], sum(fields[:8])


def stolen_share(before: tuple[int, int], after: tuple[int, int]) -> float:
    """The share of the machine's CPU time between two :func:`machine_cpu_ticks` readings
    that the host took (0 when no time passed)."""
    elapsed = after[1] - before[1]
    return round((after[0] - before[0]) / elapsed, 3) if elapsed > 0 else 0.0


def group_cpu_seconds(pgid: int) -> float:
    """User + system CPU seconds of every live process in process group ``pgid`` (Linux
    ``/proc``), plus what their reaped children used. The dev cluster starts each component
    in its own group, so a server's main process and worker count together."""
    total = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            fields = _stat_fields(f"/proc/{entry.name}/stat")
            if fields is not None and int(fields[2]) == pgid:
                total += sum(int(x) for x in fields[11:15])
    return total / _CLOCK_TICKS


def worker_pid(pid: int) -> int:
    """The first child of process ``pid`` (a server's worker under its main process), else
    ``pid`` itself."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            children = fh.read().split()
    except OSError:
        return pid
    return int(children[0]) if children else pid


def thread_cpu_seconds(pid: int) -> dict[int, float]:
    """User + system CPU seconds of each live thread of process ``pid``, by OS thread id."""
    out: dict[int, float] = {}
    for entry in os.scandir(f"/proc/{pid}/task"):
        fields = _stat_fields(f"/proc/{pid}/task/{entry.name}/stat")
        if fields is not None:
            out[int(entry.name)] = (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS
    return out


def python_thread_names(pid: int) -> dict[int, str]:
    """The Python name of each OS thread of process ``pid`` (``py-spy dump``), numbered
    threads under one name (``request_3``: ``request``; granian's ``Dummy-4``: ``Dummy``);
    empty without py-spy."""
    exe = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    try:
        done = subprocess.run([exe, "dump", "--pid", str(pid), "--json", "--nonblocking"],
                              capture_output=True, timeout=60, check=True)
        threads = json.loads(done.stdout)
    except (OSError, subprocess.SubprocessError, ValueError):
        return {}
    return {int(t["os_thread_id"]): re.sub(r"[-_]\d+$", "", str(t["thread_name"]))
            for t in threads if t.get("os_thread_id") and t.get("thread_name")}


def cpu_by_thread_name(before: Mapping[int, float], after: Mapping[int, float],
                       names: Mapping[int, str]) -> dict[str, float]:
    """CPU seconds each named thread (or group of them) used between two
    :func:`thread_cpu_seconds` reads; threads py-spy did not name count as ``other``."""
    used: dict[str, float] = {}
    for tid, seconds in after.items():
        name = names.get(tid, "other")
        used[name] = used.get(name, 0.0) + seconds - before.get(tid, 0.0)
    return dict(sorted(used.items(), key=lambda item: -item[1]))


def https_text(server: str, context: ssl.SSLContext, path: str) -> str:
    """A server's answer to ``GET path`` over HTTPS, read with ``context``."""
    conn = http.client.HTTPSConnection(server, context=context, timeout=30)
    try:
        conn.request("GET", path)
        return conn.getresponse().read().decode()
    finally:
        conn.close()


def metrics_text(server: str, context: ssl.SSLContext) -> str:
    """A server's Prometheus text (its /metrics over HTTPS, read with ``context``)."""
    return https_text(server, context, "/metrics")


def request_key(labels: Mapping[str, str]) -> str | None:
    """``VERB resource[/subresource]`` of an API server request sample; ``None`` for a
    request that names no resource."""
    if not labels.get("resource"):
        return None
    sub = labels.get("subresource") or ""
    return f"{labels['verb']} {labels['resource']}" + (f"/{sub}" if sub else "")


def _sums(text: str, slots: Mapping[str, int], key: Callable[[Mapping[str, str]], str | None]
          ) -> dict[str, list[float]]:
    """The samples in Prometheus ``text`` named in ``slots`` (sample name -> its index, 0, 1,
    ...), added up by ``key`` of their labels (``None``: not counted) into the key's list."""
    from prometheus_client.parser import text_string_to_metric_families

    totals: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            slot = slots.get(s.name)
            if slot is None:
                continue
            k = key(s.labels)
            if k is not None:
                totals.setdefault(k, [0.0] * len(slots))[slot] += s.value
    return totals


def counter_totals(text: str, metric: str, key: Callable[[Mapping[str, str]], str | None]
                   ) -> dict[str, float]:
    """Counter ``metric``'s samples in Prometheus ``text``, added up by ``key`` of each
    sample's labels (``None``: not counted)."""
    return {k: v[0] for k, v in _sums(text, {metric: 0}, key).items()}


def api_requests(apiserver: str, context: ssl.SSLContext) -> dict[str, float]:
    """The API server's ``apiserver_request_total`` by ``VERB resource[/subresource]``
    (its /metrics, read as the admin)."""
    return counter_totals(metrics_text(apiserver, context), "apiserver_request_total",
                          request_key)


#: (count, seconds) of a latency histogram so far: its ``_count`` and ``_sum``.
Timed = tuple[float, float]


def histogram_totals(text: str, metric: str, key: Callable[[Mapping[str, str]], str | None]
                     ) -> dict[str, Timed]:
    """``metric``'s ``_count`` and ``_sum`` in Prometheus ``text``, added up by ``key`` of
    each sample's labels (``None``: not counted)."""
    totals = _sums(text, {f"{metric}_count": 0, f"{metric}_sum": 1}, key)
    return {k: (v[0], v[1]) for k, v in totals.items()}


def api_request_seconds(apiserver: str, context: ssl.SSLContext) -> dict[str, Timed]:
    """The API server's own time on requests so far (``apiserver_request_duration_seconds``:
    from reading the request to writing the answer, admission and etcd included) by
    ``VERB resource[/subresource]``."""
    return histogram_totals(metrics_text(apiserver, context),
                            "apiserver_request_duration_seconds", request_key)


def mean_ms_between(before: Mapping[str, Timed], after: Mapping[str, Timed], key: str
                    ) -> float | None:
    """Mean milliseconds of the ``key`` requests timed between two readings; ``None`` when
    there were none."""
    count0, seconds0 = before.get(key, (0.0, 0.0))
    count1, seconds1 = after.get(key, (0.0, 0.0))
    if count1 <= count0:
        return None
    return round((seconds1 - seconds0) * 1000 / (count1 - count0), 3)


def _node_writes(apiserver: str, context: ssl.SSLContext) -> float:
    """Node writes other than status (the TTL controller's annotation, taints): a settled
    cluster's status reports and Lease renewals are not among them."""
    counts = api_requests(apiserver, context)
    return counts.get("PATCH nodes", 0.0) + counts.get("PUT nodes", 0.0)


def settle(apiserver: str, context: ssl.SSLContext, quiet_s: float = 10.0,
           timeout_s: float = 300.0, *, clock: Callable[[], float] = time.monotonic,
           sleep: Callable[[float], None] = time.sleep) -> float:
    """Wait until no node has been written (besides its status) for ``quiet_s``: after
    nodes are registered, kube-controller-manager's TTL controller annotates each of them
    again as the cluster grows (about 100 s at 1,000 nodes), which a long-running cluster does
    not do. Returns the seconds waited; gives up (returns them too) after ``timeout_s``.
    ``clock`` and ``sleep`` are injected for tests."""
    start = last_change = clock()
    seen = _node_writes(apiserver, context)
    while clock() - last_change < quiet_s and clock() - start < timeout_s:
        sleep(1.0)
        now = _node_writes(apiserver, context)
        if now != seen:
            seen, last_change = now, clock()
    return round(clock() - start, 1)
