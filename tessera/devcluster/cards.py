"""``tessera cards``: the demo's per-card table, printed again from the API on demand.

Reads nodes and pods with the caller's kubeconfig (the demo prints its path) and shows who
holds what on every card, computed from the API objects alone (:mod:`report`), the same table
the demo prints once its pods have settled.
"""

from __future__ import annotations

import argparse
import os
import sys

from kubectl_tessera.report import card_usage, render_table
from tessera.devcluster.workloads import list_objects
from tessera.vocabulary import Vocabulary


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kubeconfig", default=os.environ.get("KUBECONFIG"),
        help="kubeconfig of the cluster (default: $KUBECONFIG; the demo prints it)",
    )
    parser.add_argument(
        "--node", action="append", default=[],
        help="only this node (repeatable; default: every node with GPU cards)",
    )


def run(args: argparse.Namespace) -> int:
    if not args.kubeconfig:
        print("tessera cards: no kubeconfig: pass --kubeconfig or set KUBECONFIG",
              file=sys.stderr)
        return 2
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException

    try:
        api = config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=args.kubeconfig
        )
    except (OSError, config.ConfigException) as exc:
        print(f"tessera cards: cannot use {args.kubeconfig}: {exc}", file=sys.stderr)
        return 2
    try:
        core = client.CoreV1Api(api)
        nodes = list_objects(core.list_node)
        pods = list_objects(core.list_pod_for_all_namespaces)
    except (ApiException, OSError) as exc:
        print(f"tessera cards: reading nodes and pods failed: {exc}", file=sys.stderr)
        return 1
    finally:
        api.close()
    usage = {
        name: cards for name, cards in card_usage(nodes, pods, Vocabulary()).items()
        if cards and (not args.node or name in args.node)
    }
    if not usage:
        print("no node with GPU cards" + (f" among {', '.join(args.node)}" if args.node else ""))
        return 0
    print(render_table(usage), end="")
    return 0
