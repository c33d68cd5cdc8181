"""The openb trace (Alibaba cluster-trace-gpu-v2023): nodes, pods, the workload sequence.

Read in place, never copied into the repository: the ``csv/`` folder of
``cluster-trace-gpu-v2023`` in github.com/alibaba/clusterdata, found at ``$TESSERA_OPENB_DIR``
or else at ``../shared/data/openb`` next to the repository root.

Method (the ATC'23 FGD paper and its simulator, hkust-adsl/kubernetes-scheduler-simulator):

- pods sorted by name, then shuffled with the run's seed (``SortClusterPods`` with
  ``shufflePod: true``, pkg/simulator/simulator.go);
- then inflated: random copies of trace pods are appended until the next one would push the
  total GPU request past ``ratio`` x cluster capacity, or random pods are removed while the
  total exceeds it (``TunePodsByNodeTotalResource`` / ``tuneUpPods`` / ``tuneDownPods``,
  same file; ``-tune 1.3`` in experiments/run_scripts/generate_run_scripts.py);
- typical pods: request shapes (CPU, per-card GPU share, card count, GPU models) counted over
  the trace as given, most popular first until they cover 95% of the pods, weights renormalised
  (``GetTypicalPods`` in pkg/utils/frag.go with the typicalPodsConfig of
  scripts/generate_config_and_run.py: isInvolvedCpuPods true, podPopularityThreshold 95,
  podIncreaseStep 1, gpuResWeight 0).

A pod's GPU request becomes Tessera's :class:`~tessera.vocabulary.PodRequest`: ``gpu_milli``
m < 1000 on one card is a share with ``core_percent = m/10`` and ``memory_percent = m/10``
(the same fraction of whichever card is chosen, so the 2-D fit reduces to the paper's 1-D
share); ``num_gpu`` k >= 1 with m = 1000 is k whole cards; ``gpu_spec`` ``A|B`` is the allowed
models.
"""

from __future__ import annotations

import csv
import os
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from allocator.ranking.cards import Card
from tessera.vocabulary import ContainerRequest, PodRequest

ENV_DIR: Final = "TESSERA_OPENB_DIR"
NODE_FILE: Final = "openb_node_list_gpu_node.csv"
#: Where the trace comes from, said wherever it is missing.
SOURCE: Final = "alibaba/clusterdata on GitHub, folder cluster-trace-gpu-v2023/csv"
MILLI: Final = 1000

#: Memory per card, per model, in MiB. openb does not give it (G1/G2/G3 are undisclosed
#: models); shares ask for a percent of the card, so the value never changes a result. The
#: values are multiples of 100 so that any whole percent of a card is a whole number of MiB
#: and two shares of p% and (100-p)% fill a card exactly, as the paper's 1-D milli-GPU does.
CARD_MEMORY_MIB: Final[dict[str, int]] = {
    "P100": 16_000,
    "T4": 16_000,
    "V100M16": 16_000,
    "V100M32": 32_000,
    "A10": 24_000,
    "G1": 16_000,
    "G2": 32_000,
    "G3": 32_000,
}
DEFAULT_CARD_MEMORY_MIB: Final = 16_000

#: Trace families, as in the paper's experiments (run_scripts/generate_run_scripts.py).
TRACES: Final[tuple[str, ...]] = (
    "default",
    "cpu050", "cpu100", "cpu200", "cpu250",
    "gpushare40", "gpushare60", "gpushare80", "gpushare100",
    "gpuspec10", "gpuspec20", "gpuspec25", "gpuspec33",
    "multigpu20", "multigpu30", "multigpu40", "multigpu50",
)
SEEDS: Final[tuple[int, ...]] = tuple(range(42, 52))


class TraceError(Exception):
    """The trace files are missing or malformed."""


def repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


def default_dir() -> Path:
    return repo_root().parent / "shared" / "data" / "openb"


def data_dir() -> Path:
    return locate(os.environ.get(ENV_DIR))


def locate(setting: str | None) -> Path:
    """The trace's folder for a value of ``$TESSERA_OPENB_DIR`` (None or empty: the default)."""
    path = Path(setting) if setting else default_dir()
    if not (path / NODE_FILE).is_file():
        raise TraceError(f"openb trace not in {path}: get it from {SOURCE} and set "
                         f"{ENV_DIR} to that folder")
    return path


@dataclass(frozen=True, slots=True)
class TraceNode:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str
    #: Holders a card takes (HAMi's split count, ``Card.max_shares``); None: no cap (the trace).
    split_count: int | None = None

    @property
    def cards(self) -> tuple[Card, ...]:
        mem = CARD_MEMORY_MIB.get(self.model, DEFAULT_CARD_MEMORY_MIB)
        return tuple(Card(i, self.model, mem, self.split_count) for i in range(self.gpus))


@dataclass(frozen=True, slots=True)
class TracePod:
    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    gpu_spec: str

    @property
    def gpu_request_milli(self) -> int:
        """Total GPU request in milli-GPU (what "arrived" and "allocated" count)."""
        return self.num_gpu * self.gpu_milli if self.num_gpu else 0

    @property
    def shape(self) -> tuple[int, int, str]:
        """The GPU part of the request (card count, per-card milli, allowed models)."""
        return (self.num_gpu, self.gpu_milli, self.gpu_spec)


def _int(row: dict[str, str], key: str, where: str) -> int:
    try:
        return int(row.get(key) or 0)
    except ValueError as exc:
        raise TraceError(f"{where}: {key}={row.get(key)!r} is not an integer") from exc


def load_nodes(directory: Path | None = None) -> list[TraceNode]:
    path = (directory or data_dir()) / NODE_FILE
    with path.open(newline="") as f:
        return [
            TraceNode(r["sn"], _int(r, "cpu_milli", r["sn"]), _int(r, "memory_mib", r["sn"]),
                      _int(r, "gpu", r["sn"]), r["model"])
            for r in csv.DictReader(f)
        ]


def load_pods(trace: str, directory: Path | None = None) -> list[TracePod]:
    path = (directory or data_dir()) / f"openb_pod_list_{trace}.csv"
    if not path.is_file():
        raise TraceError(f"no trace {trace!r}: {path} does not exist")
    pods = []
    with path.open(newline="") as f:
        for r in csv.DictReader(f):
            pod = TracePod(r["name"], _int(r, "cpu_milli", r["name"]),
                           _int(r, "memory_mib", r["name"]), _int(r, "num_gpu", r["name"]),
                           _int(r, "gpu_milli", r["name"]), (r.get("gpu_spec") or "").strip())
            if pod.num_gpu and not (0 < pod.gpu_milli <= MILLI):
                raise TraceError(f"{pod.name}: gpu_milli {pod.gpu_milli} out of range")
            if pod.num_gpu > 1 and pod.gpu_milli != MILLI:
                raise TraceError(f"{pod.name}: a multi-GPU pod must use whole cards")
            if pod.num_gpu == 1 and pod.gpu_milli < MILLI and pod.gpu_milli % 10:
                raise TraceError(f"{pod.name}: gpu_milli {pod.gpu_milli} is not a whole percent")
            pods.append(pod)
    return pods


def gpu_request(shape: tuple[int, int, str]) -> PodRequest | None:
    """Tessera's request for a trace pod's GPU part; None for a CPU-only pod."""
    num, milli, spec = shape
    if num <= 0:
        return None
    models = tuple(dict.fromkeys(m for m in spec.split("|") if m))
    if num == 1 and milli < MILLI:
        pct = milli // 10
        c = ContainerRequest("main", core_percent=pct, memory_percent=pct)
    else:
        c = ContainerRequest("main", cards=num)
    return PodRequest((c,), models=models)


def workload_sequence(pods: Sequence[TracePod], seed: int, capacity_milli: int,
                      ratio: float = 1.3) -> list[TracePod]:
    """The arrival order for one run: shuffled, then inflated (or deflated) to ``ratio``."""
    rng = random.Random(seed)
    ordered = sorted(pods, key=lambda p: p.name)
    seq = list(ordered)
    rng.shuffle(seq)
    target = ratio * capacity_milli
    total = sum(p.gpu_request_milli for p in seq)
    if total < target:
        while True:
            pick = ordered[rng.randrange(len(ordered))]
            if total + pick.gpu_request_milli > target:
                break
            seq.append(pick)
            total += pick.gpu_request_milli
    while total > target and seq:
        gone = seq.pop(rng.randrange(len(seq)))
        total -= gone.gpu_request_milli
    return seq


@dataclass(frozen=True, slots=True)
class TypicalPod:
    shape: tuple[int, int, str]
    cpu_milli: int
    weight: float


def typical_pods(pods: Sequence[TracePod], threshold: float = 0.95) -> list[TypicalPod]:
    """The most popular request shapes covering ``threshold`` of the pods, renormalised."""
    counts = Counter((p.cpu_milli, p.gpu_milli if p.num_gpu else 0, p.num_gpu, p.gpu_spec)
                     for p in pods)
    # Most popular first; equal counts in the Go code's PodResource order, reversed.
    ranked = sorted(counts.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
    total = sum(counts.values())
    chosen: list[tuple[tuple[int, int, int, str], int]] = []
    covered = 0
    for key, n in ranked:
        if covered >= threshold * total:
            break
        chosen.append((key, n))
        covered += n
    return [TypicalPod((num, milli, spec), cpu, n / covered)
            for (cpu, milli, num, spec), n in chosen]
