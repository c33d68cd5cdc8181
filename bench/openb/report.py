"""Plots and tables from the replay's CSVs, next to the published results.

Published: ``fgd_expected_results/analysis_allo_discrete.csv`` in the openb data directory —
the authors' cached results (hkust-adsl/kubernetes-scheduler-simulator,
experiments/analysis/expected_results/), 6 policies x 17 traces x seeds 42..51.

Usage: ``.venv/bin/python -m bench.openb.report bench/results/openb/allocation_full_mean.csv``,
or ``.venv/bin/python -m bench.openb.report --combine full TAG...`` to merge the results of
runs made with ``--tag TAG`` into the ``full`` files (and rewrite the report).
"""

from __future__ import annotations

import csv
import math
import sys
from collections.abc import Sequence
from pathlib import Path

from bench.openb.trace import TRACES, data_dir

PUBLISHED_FILE = "fgd_expected_results/analysis_allo_discrete.csv"
PUBLISHED = ("Random", "DotProd", "GpuClustering", "GpuPacking", "BestFit", "FGD")
FAMILIES: dict[str, tuple[str, ...]] = {
    "default": ("default",),
    "cpu": tuple(t for t in TRACES if t.startswith("cpu")),
    "gpushare": tuple(t for t in TRACES if t.startswith("gpushare")),
    "gpuspec": tuple(t for t in TRACES if t.startswith("gpuspec")),
    "multigpu": tuple(t for t in TRACES if t.startswith("multigpu")),
}
AT = 100  # arrived workload (% of GPU capacity) of the tables
TOTAL_GPUS = 6212

Curves = dict[tuple[str, str], list[float]]  # (trace, policy) -> allocation % per step


def _num(text: str) -> float:
    return float(text) if text not in ("", None) else math.nan


def load_published(path: Path | None = None) -> Curves:
    path = path or data_dir() / PUBLISHED_FILE
    sums: dict[tuple[str, str], list[list[float]]] = {}
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            trace = row["workload"].removeprefix("openb_pod_list_")
            policy = row["sc_policy"].split("-", 1)[1]
            sums.setdefault((trace, policy), []).append(
                [_num(row.get(str(k), "")) for k in range(131)])
    return {key: [_mean(col) for col in zip(*runs, strict=True)] for key, runs in sums.items()}


def load_ours(path: Path, profile: str | None = None) -> dict[str, Curves]:
    """profile -> curves, from an ``allocation_*_mean.csv``."""
    out: dict[str, Curves] = {}
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            if profile and row["profile"] != profile:
                continue
            out.setdefault(row["profile"], {})[(row["trace"], row["policy"])] = [
                _num(row[str(k)]) for k in range(131)]
    return out


def _mean(values: Sequence[float]) -> float:
    vals = [v for v in values if not math.isnan(v)]
    return sum(vals) / len(vals) if vals else math.nan


def _policies(curves: Curves) -> list[str]:
    order = ["random", "spread", "binpack", "fgd", "fgd-ff", "fgd-cpu"]
    names = {p for _, p in curves}
    return [p for p in order if p in names] + sorted(names - set(order))


def _traces(curves: Curves) -> list[str]:
    names = {t for t, _ in curves}
    return [t for t in TRACES if t in names]


def table(ours: Curves, published: Curves, at: int = AT) -> str:
    """Markdown: allocation % at ``at`` (and GPUs left unallocated), per trace."""
    policies = _policies(ours)
    head = ["trace", *(f"**{p}**" for p in policies), *PUBLISHED]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for trace in _traces(ours):
        cells = [trace]
        for p in policies:
            cells.append(_cell(ours.get((trace, p)), at))
        for p in PUBLISHED:
            cells.append(_cell(published.get((trace, p)), at))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def family_table(ours: Curves, published: Curves, at: int = AT) -> str:
    """Markdown: the mean over the traces of each family."""
    policies = _policies(ours)
    head = ["family (traces)", *(f"**{p}**" for p in policies), *PUBLISHED]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for family, traces in FAMILIES.items():
        present = [t for t in traces if any((t, p) in ours for p in policies)]
        if not present:
            continue
        cells = [f"{family} ({len(present)})"]
        for p in policies:
            cells.append(_fmt(_mean([_at(ours.get((t, p)), at) for t in present])))
        for p in PUBLISHED:
            cells.append(_fmt(_mean([_at(published.get((t, p)), at) for t in present])))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _at(curve: list[float] | None, at: int) -> float:
    return curve[at] if curve else math.nan


def _fmt(v: float) -> str:
    return "-" if math.isnan(v) else f"{v:.2f}"


def _cell(curve: list[float] | None, at: int) -> str:
    v = _at(curve, at)
    if math.isnan(v):
        return "-"
    return f"{v:.2f} ({round(TOTAL_GPUS * (1 - v / 100))})"


def plot(ours: Curves, published: Curves, out: Path, title: str) -> list[Path]:
    """One PNG per trace family: our policies (solid) and the published ones (dashed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    colours = {"random": "tab:gray", "spread": "tab:olive", "binpack": "tab:brown",
               "fgd": "tab:blue", "fgd-ff": "tab:red", "fgd-cpu": "tab:orange"}
    pub_colours = {"Random": "silver", "DotProd": "tab:purple", "GpuClustering": "tab:pink",
                   "GpuPacking": "tab:cyan", "BestFit": "tab:green", "FGD": "navy"}
    xs = list(range(131))
    for family, traces in FAMILIES.items():
        present = [t for t in traces if any(k[0] == t for k in ours)]
        if not present:
            continue
        fig, axes = plt.subplots(1, len(present), figsize=(4.2 * len(present), 4.2),
                                 squeeze=False, sharey=True)
        for ax, trace in zip(axes[0], present, strict=True):
            for p in PUBLISHED:
                curve = published.get((trace, p))
                if curve:
                    ax.plot(xs, curve, "--", lw=1, color=pub_colours[p], label=f"{p} (published)")
            for p in _policies(ours):
                curve = ours.get((trace, p))
                if curve:
                    ax.plot(xs, curve, "-", lw=1.6, color=colours.get(p, "black"),
                            label=f"{p} (Tessera)")
            ax.plot(xs, xs, ":", lw=0.8, color="black")
            ax.set_xlim(50, 130)
            ax.set_ylim(50, 100)
            ax.set_title(trace)
            ax.set_xlabel("arrived GPU request (% of 6,212 GPUs)")
            ax.grid(alpha=0.3)
        axes[0][0].set_ylabel("GPUs allocated (%)")
        axes[0][-1].legend(fontsize=7, loc="lower right")
        fig.suptitle(title)
        fig.tight_layout()
        path = out / f"quality_{family}.png" if not title else out / (
            f"quality_{_slug(title)}_{family}.png")
        fig.savefig(path, dpi=90)
        plt.close(fig)
        written.append(path)
    return written


def _slug(text: str) -> str:
    return text.split()[0].lower()


def write_report(mean_csv: Path, out: Path, suffix: str) -> Path:
    published = load_published()
    sections = []
    for profile, curves in load_ours(mean_csv).items():
        pngs = plot(curves, published, out, f"{profile} profile")
        sections.append(
            f"## profile {profile}\n\nAllocation % at {AT}% arrived (GPUs left unallocated), "
            f"mean over seeds; Tessera's policies in bold, then the published ones.\n\n"
            f"{table(curves, published)}\n\n### by family (mean over its traces)\n\n"
            f"{family_table(curves, published)}\n\nPlots: "
            + ", ".join(p.name for p in pngs) + "\n")
    path = out / f"quality_{suffix}.md"
    path.write_text("# openb scheduling quality\n\n" + "\n".join(sections))
    return path


def combine(directory: Path, into: str, tags: Sequence[str]) -> Path:
    """Append the rows of runs tagged ``tags`` to the ``into`` files (rows of the same
    profile/trace/policy/seed are replaced), then rewrite the report."""
    for kind in ("allocation_{}.csv", "allocation_{}_mean.csv", "runs_{}.csv"):
        target = directory / kind.format(into)
        header, rows = _read(target)
        width = 3 if "mean" in kind else 4  # the columns that identify a row
        index = {tuple(r[:width]): i for i, r in enumerate(rows)}
        for tag in tags:
            h, extra = _read(directory / kind.format(tag))
            if h != header:
                raise SystemExit(f"{kind.format(tag)}: columns differ from {target.name}")
            for r in extra:
                key = tuple(r[:width])
                if key in index:
                    rows[index[key]] = r
                else:
                    index[key] = len(rows)
                    rows.append(r)
        rows.sort(key=lambda r: r[:width])
        with target.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(header)
            w.writerows(rows)
    return write_report(directory / f"allocation_{into}_mean.csv", directory, into)


def _read(path: Path) -> tuple[list[str], list[list[str]]]:
    with path.open(newline="") as f:
        rows = list(csv.reader(f))
    return rows[0], rows[1:]


def main(argv: Sequence[str] | None = None) -> int:
    """``report MEAN_CSV`` rewrites the report of one run; ``report --combine INTO TAG...``
    merges the results of runs tagged TAG into the INTO files first."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) >= 3 and args[0] == "--combine":
        directory = Path(__file__).resolve().parents[1] / "results" / "openb"
        print(combine(directory, args[1], args[2:]))
        return 0
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    mean_csv = Path(args[0])
    suffix = mean_csv.stem.removeprefix("allocation_").removesuffix("_mean")
    print(write_report(mean_csv, mean_csv.parent, suffix))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
