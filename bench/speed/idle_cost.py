"""What the dev cluster's control plane costs at rest: CPU per component and the API requests
it serves per second, with N fake nodes and no pods, after it has settled.

Every component pays for the nodes' keep-alive (KWOK's Lease renewals, status reports)
whether or not anything is scheduled, so an end-to-end run pays it in proportion to its
length: a mode that takes twice as long pays it twice (docs/benchmarks.md, issue 13).

Usage: ``.venv/bin/python -m bench.speed.idle_cost [--nodes 1000] [--windows 4]
[--window-s 15] [--tessera]``
"""

from __future__ import annotations

import argparse
import time
from collections import Counter

from bench.speed.cluster import cpu_seconds, in_parallel
from bench.speed.common import api_requests, client_context, settle
from devcluster.binaries import ensure_binaries
from devcluster.cluster import DevCluster
from devcluster.nodes import create_nodes, uniform
from devcluster.options import Options


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--windows", type=int, default=4)
    parser.add_argument("--window-s", type=float, default=15.0)
    parser.add_argument("--tessera", action="store_true",
                        help="run the webhook and the allocator too")
    args = parser.parse_args()
    dev = DevCluster(ensure_binaries(), None,
                     Options(webhook=args.tessera, allocator=args.tessera))
    try:
        dev.start()
        specs = [uniform(f"n{i:05d}", 8, "T4", 16384) for i in range(args.nodes)]
        agent = dev.options.agent
        in_parallel(dev, specs, lambda core, part: create_nodes(core, part, dev.vocabulary, agent),
                    6)
        cp = dev.control_plane
        apiserver = f"127.0.0.1:{cp.apiserver_port}"
        context = client_context(cp.ca_file, cp.pki_dir / "admin.crt", cp.pki_dir / "admin.key")
        print(f"settled after {settle(apiserver, context)} s", flush=True)
        for window in range(args.windows):
            cpu0, req0, t0 = cpu_seconds(dev), api_requests(apiserver, context), time.perf_counter()
            time.sleep(args.window_s)
            cpu1, req1 = cpu_seconds(dev), api_requests(apiserver, context)
            dt = time.perf_counter() - t0
            cores = {name: (cpu1[name] - cpu0.get(name, 0.0)) / dt for name in cpu1}
            rates = Counter({k: (req1[k] - req0.get(k, 0.0)) / dt for k in req1})
            print(f"window {window + 1}: {sum(cores.values()):.2f} cores: "
                  + ", ".join(f"{n} {c:.3f}" for n, c in cores.items()), flush=True)
            print("  requests/s: " + ", ".join(f"{k} {v:.1f}" for k, v in rates.most_common(5)
                                               if v >= 0.05), flush=True)
    finally:
        dev.stop()


if __name__ == "__main__":
    main()
