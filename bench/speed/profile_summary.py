"""Where the allocator's CPU goes: a py-spy profile (collapsed stacks) summed into buckets.

``e2e_throughput --py-spy DIR`` records the allocator (gunicorn master and worker) while
kube-scheduler works through the pods; this reads those files and prints, per bucket (a
verb's decode / decision / reply / API call, the watches, the event loop that does TLS and
HTTP), the share of on-CPU samples, and the functions with the most samples of their own.
A sample belongs to the first bucket whose frames all appear in its stack.

Usage: ``.venv/bin/python -m bench.speed.profile_summary FILE... [--top 25]``
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

#: (bucket, frames that must all appear in the stack), first match wins.
BUCKETS: list[tuple[str, tuple[str, ...]]] = [
    ("bind: label PATCH (API call)", ("bind_verb", "KubeClient.patch_pod")),
    ("bind: Binding (API call)", ("bind_verb", "KubeClient.bind_pod")),
    ("bind: pod read (API call)", ("bind_verb", "KubeClient.get_pod")),
    ("bind: API call", ("bind_verb", "Kube")),
    ("bind: decision, cache, log", ("bind_verb",)),
    ("filter: request decode + checks", ("filter_verb", "decode_args")),
    ("filter: decision", ("filter_verb", "Filter.__call__")),
    ("filter: reply encode", ("filter_verb",)),
    ("prioritize: request decode + checks", ("prioritize_verb", "decode_args")),
    ("prioritize: decision", ("prioritize_verb", "Prioritize.scores")),
    ("prioritize: reply encode", ("prioritize_verb",)),
    ("Flask/WSGI around the verbs", ("call_wsgi",)),
    ("pod watch: state update", ("Reflector", "apply_pod")),
    ("node watch: state update", ("Reflector", "apply_node")),
    ("watches: read and decode events", ("Reflector", "_watch")),
    ("watches: other", ("Reflector",)),
    ("leader election", ("LeaderElector",)),
    ("events", ("EventRecorder",)),
    ("event loop: TLS, HTTP parsing, bridge", ("run_until_complete",)),
    ("event loop: TLS, HTTP parsing, bridge", ("_run_once",)),
    ("event loop: TLS, HTTP parsing, bridge", ("WsgiBridge",)),
]

_LINE = re.compile(r"^(?P<stack>.*) (?P<count>\d+)$")


def read_stacks(paths: Iterable[Path]) -> Counter[str]:
    stacks: Counter[str] = Counter()
    for path in paths:
        for line in path.read_text(errors="replace").splitlines():
            match = _LINE.match(line)
            if match:
                stacks[match["stack"]] += int(match["count"])
    return stacks


def bucket_of(stack: str) -> str:
    for label, frames in BUCKETS:
        if all(frame in stack for frame in frames):
            return label
    return "other"


def leaf(stack: str) -> str:
    frame = stack.rsplit(";", 1)[-1]
    return re.sub(r":\d+\)$", ")", frame)  # one row per function, not per line


def summarise(stacks: Counter[str], top: int) -> tuple[list[tuple[str, int]], list[tuple[str, int]],
                                                       int]:
    buckets: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    for stack, count in stacks.items():
        buckets[bucket_of(stack)] += count
        leaves[leaf(stack)] += count
    return buckets.most_common(), leaves.most_common(top), sum(stacks.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    buckets, leaves, total = summarise(read_stacks(args.files), args.top)
    print(f"{total} on-CPU samples")
    print(f"{'bucket':45} {'samples':>8} {'share':>6}")
    for label, count in buckets:
        print(f"{label:45} {count:8d} {100 * count / total:5.1f}%")
    print()
    print(f"{'function (own samples)':90} {'samples':>8} {'share':>6}")
    for name, count in leaves:
        print(f"{name[:90]:90} {count:8d} {100 * count / total:5.1f}%")


if __name__ == "__main__":
    main()
