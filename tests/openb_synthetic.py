"""A small synthetic trace in openb's own CSV format, for the replay machinery's tests.

The real trace (Alibaba's cluster-trace-gpu-v2023, alibaba/clusterdata) is not part of the
repository; the replay's own behaviour (sequence, invariants, deployed-mode scores, the live
replay on a dev cluster) does not depend on its numbers, so those tests read this one instead
and run in any clone. The columns are the trace's (cluster-trace-gpu-v2023/csv/
openb_node_list_gpu_node.csv and openb_pod_list_default.csv); the mix of node types and of
requests (CPU-only pods, shares of one card, one and several whole cards, an allowed model)
is a scaled-down copy of the default trace's, made from a seed, so every file is the same on
every run.
"""

from __future__ import annotations

import csv
import os
import random
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

import pytest

from bench.openb.trace import ENV_DIR, TRACES, TraceError, locate

#: Node types: (model, cards, cpu_milli, memory_mib, how many). 120 nodes, 416 cards.
NODE_TYPES: Final = (
    ("G2", 8, 96_000, 393_216, 24),
    ("T4", 2, 104_000, 524_288, 56),
    ("P100", 2, 16_000, 122_880, 20),
    ("V100M16", 4, 32_000, 131_072, 8),
    ("V100M32", 8, 96_000, 786_432, 4),
    ("A10", 1, 128_000, 1_048_576, 8),
)
NODES: Final = sum(t[4] for t in NODE_TYPES)
CARDS: Final = sum(t[1] * t[4] for t in NODE_TYPES)
PODS: Final = 1_000
NODE_HEADER: Final = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_HEADER: Final = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec",
                     "qos", "pod_phase", "creation_time", "deletion_time", "scheduled_time")


def write_trace(directory: Path, traces: tuple[str, ...] = ("default",),
                seed: int = 7) -> Path:
    """Write the node list and one pod list per name in ``traces``; return ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    with (directory / "openb_node_list_gpu_node.csv").open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(NODE_HEADER)
        i = 0
        for model, cards, cpu, memory, count in NODE_TYPES:
            for _ in range(count):
                out.writerow((f"openb-node-{i:04d}", cpu, memory, cards, model))
                i += 1
    for trace in traces:
        with (directory / f"openb_pod_list_{trace}.csv").open("w", newline="") as f:
            out = csv.writer(f)
            out.writerow(POD_HEADER)
            for i in range(PODS):
                out.writerow((f"openb-pod-{i:04d}", *_pod(rng), "LS", "Running", 0, 0, 0))
    return directory


def _pod(rng: random.Random) -> tuple[int, int, int, int, str]:
    """(cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec) in the default trace's mix."""
    cpu = rng.choice((3_152, 4_000, 8_000, 11_300, 12_000))
    memory = rng.choice((4_096, 12_288, 16_384, 32_768))
    kind = rng.random()
    if kind < 0.13:
        return cpu, memory, 0, 0, ""
    if kind < 0.51:
        return cpu, memory, 1, rng.choice((100, 250, 300, 460, 500, 700)), ""
    if kind < 0.95:
        return cpu, memory, 1, 1_000, "V100M16|V100M32" if rng.random() < 0.05 else ""
    return cpu, memory, rng.choice((2, 4, 8)), 1_000, ""


#: ``$TESSERA_OPENB_DIR`` as the test run was started, before :func:`synthetic_trace` points
#: it at a synthetic trace: the real trace is looked for where the user said.
REAL_TRACE_SETTING: Final = os.environ.get(ENV_DIR)


def real_trace_or_skip() -> Path:
    """The real trace's folder; a test that needs it skips with one line saying where it is."""
    try:
        return locate(REAL_TRACE_SETTING)
    except TraceError as exc:
        pytest.skip(str(exc))


@contextmanager
def synthetic_trace(directory: Path) -> Iterator[Path]:
    """Write the synthetic trace into ``directory`` and point ``TESSERA_OPENB_DIR`` at it."""
    write_trace(directory, TRACES)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(ENV_DIR, str(directory))
        yield directory
