"""``kubectl tessera``: Tessera's GPU cards for operators (the ``kubectl-tessera`` executable).

kubectl runs any ``kubectl-<name>`` executable on PATH as ``kubectl <name>`` and passes the
remaining arguments through, global flags included, so this parses ``--kubeconfig`` and
``--context`` itself. Everything it prints is computed by the pure modules of this package;
this module only parses, reads, and prints. Bad input (no cluster, a pod that does not exist,
an unknown policy) is one line on stderr and a non-zero exit.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO

import yaml

from allocator.errors import ApiError, NotFound
from allocator.picture.measured import HOSTNAME_LABEL, MeasuredConfig, parse_sample
from allocator.ranking.policies import DEFAULT_POLICY, REGISTRY, get_policy
from allocator.service.measured_source import http_get
from kubectl_tessera import defrag, inspection, whatif, why
from kubectl_tessera.picture import (
    Picture,
    build_picture,
    measure,
    parse_selector,
    read_pod,
    selector_matches,
)
from kubectl_tessera.source import Objects, Reader, read_cluster, read_with_pod
from tessera import __version__
from tessera.dialects import DialectConfig
from tessera.vocabulary import ConfigError, TesseraError

PROG = "kubectl tessera"

#: Exit codes: 1 = the cluster said no (unreachable, not found); 2 = bad flags or input.
EXIT_API, EXIT_USAGE = 1, 2

ReaderFactory = Callable[[argparse.Namespace], Reader]


class UsageError(TesseraError):
    """Input the user can fix (a flag, a name)."""


def _kube_reader(args: argparse.Namespace) -> Reader:
    from allocator.kube.client import KubeClient  # imports kubernetes: only when a command runs

    return KubeClient.from_config(args.kubeconfig, args.context)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--kubeconfig", default=None,
                        help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or the "
                             "in-cluster service account)")
    common.add_argument("--context", default=None, help="kubeconfig context to use")
    common.add_argument("-l", "--selector", default="",
                        help="only nodes with these labels (k=v,k!=v,k,!k)")
    common.add_argument("--domain", default=None,
                        help="Tessera's resource domain (default: $TESSERA_DOMAIN or "
                             "elasticgpu.io)")
    common.add_argument("--default-policy", default=DEFAULT_POLICY,
                        help=f"the allocator's --policy (default {DEFAULT_POLICY})")
    common.add_argument("--seed", type=int, default=0, help="the allocator's --seed")
    common.add_argument("--prometheus", default=os.environ.get("TESSERA_PROMETHEUS_URL", ""),
                        help="Prometheus base URL: put dcgm-exporter's measured figures on "
                             "the cards as the allocator does (default: "
                             "$TESSERA_PROMETHEUS_URL; none)")
    common.add_argument("--prometheus-node-label", default=HOSTNAME_LABEL,
                        help=f"label naming the node on those series (default "
                             f"{HOSTNAME_LABEL})")
    common.add_argument("-o", "--output", default="table",
                        choices=("table", "wide", "json", "yaml"), help="output format")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("inspect", parents=[common],
                       help="nodes x cards: model, core and memory used, who holds what")
    p.add_argument("node", nargs="?", help="only this node")
    p.add_argument("--color", "--colour", dest="color", default="auto",
                   choices=("auto", "always", "never"), help="colour the table")

    p = sub.add_parser("why", parents=[common],
                       help="every node's verdict on a GPU pod, or why it holds its cards")
    p.add_argument("pod", help="POD or NAMESPACE/POD")
    p.add_argument("-n", "--namespace", default="default", help="the pod's namespace")

    p = sub.add_parser("what-if", parents=[common],
                       help="replay today's GPU pods under each policy: cards left free")
    p.add_argument("--policy", action="append", default=[], dest="policies",
                   help=f"a policy to replay (repeatable, or several joined by commas; "
                        f"default all: "
                        f"{', '.join(sorted(REGISTRY))}); '{whatif.AS_IS}' keeps each "
                        f"pod's own policy and the default for the rest")
    p.add_argument("--no-pending", action="store_true",
                   help="replay only bound pods, not the Pending ones after them")

    p = sub.add_parser("defrag-plan", parents=[common],
                       help="dry run: the fewest pod moves that leave N whole cards idle")
    p.add_argument("--cards", type=int, default=1, help="idle cards wanted (default 1)")
    p.add_argument("--model", default="", help="count only cards of this model")
    p.add_argument("--on-one-node", action="store_true",
                   help="the N cards must be idle on one node (room for one pod that needs "
                        "them together)")
    p.add_argument("--policy", default=DEFAULT_POLICY,
                   help=f"policy that re-places the moved pods (default {DEFAULT_POLICY})")
    return parser


def _config(args: argparse.Namespace) -> DialectConfig:
    env = dict(os.environ)
    if args.domain:
        env["TESSERA_DOMAIN"] = args.domain
    try:
        return DialectConfig.from_env(env)
    except ConfigError as exc:
        raise UsageError(str(exc)) from exc


def _picture(objects: Objects, args: argparse.Namespace, config: DialectConfig) -> Picture:
    try:
        selector = parse_selector(args.selector)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    nodes = [n for n in objects.nodes
             if selector_matches(selector, ((n.get("metadata") or {}).get("labels") or {}))]
    picture = build_picture(nodes, objects.pods, config)
    if not args.prometheus:
        return picture
    measured = MeasuredConfig(url=args.prometheus, node_label=args.prometheus_node_label)
    try:
        sample = parse_sample(http_get(measured.query_url(), measured.timeout_seconds),
                              measured.node_label)
    except (OSError, ValueError) as exc:
        # The picture is still right by the bookings; say what is missing and go on.
        args.warn(f"{PROG}: measured figures from {args.prometheus} not read "
                  f"({type(exc).__name__}: {exc}); by bookings alone\n")
        return picture
    return measure(picture, sample, measured)


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value


def _emit(out: TextIO, fmt: str, doc: Any, text: Callable[[], str]) -> None:
    if fmt == "json":
        out.write(json.dumps(_plain(doc), indent=2, sort_keys=False) + "\n")
    elif fmt == "yaml":
        out.write(yaml.safe_dump(json.loads(json.dumps(_plain(doc))), sort_keys=False))
    else:
        out.write(text())


def _colour(args: argparse.Namespace, out: TextIO) -> bool:
    if args.color == "always":
        return True
    if args.color == "never" or os.environ.get("NO_COLOR"):
        return False
    return out.isatty()


def cmd_inspect(args: argparse.Namespace, api: Reader, out: TextIO) -> int:
    config = _config(args)
    picture = _picture(read_cluster(api, config.vocabulary), args, config)
    nodes = inspection.select_nodes(picture, args.node)
    if args.node and not nodes:
        raise UsageError(f"node {args.node} not found, or it has no GPU cards")
    if not nodes and args.output in ("table", "wide"):
        out.write("no node with GPU cards\n")
        return 0
    _emit(out, args.output, inspection.document(picture, nodes),
          lambda: inspection.render(picture, nodes, wide=args.output == "wide",
                                 colour=_colour(args, out),
                                 measured=bool(args.prometheus)))
    return 0


def cmd_why(args: argparse.Namespace, api: Reader, out: TextIO) -> int:
    config = _config(args)
    namespace, name = args.namespace, args.pod
    if "/" in name:
        namespace, name = name.split("/", 1)
    try:
        objects, raw = read_with_pod(api, config.vocabulary, namespace, name)
    except NotFound as exc:
        raise UsageError(f"pod {namespace}/{name} not found") from exc
    picture = _picture(objects, args, config)
    pod = read_pod(raw, config)
    if pod is None:
        raise UsageError(f"pod {namespace}/{name} asks for no GPU and holds no card")
    pod = picture.pod_by_uid(pod.uid) or pod
    pdbs = (_optional(args, "PodDisruptionBudgets", api.list_pod_disruption_budgets)
            if pod.pending and pod.request is not None else [])
    events = (_optional(args, "the pod's Events",
                        lambda: api.list_pod_events(pod.namespace, pod.uid))
              if pod.preemption_note else [])
    explanation = why.explain(picture, pod, _policy(args.default_policy), args.seed,
                              pdbs=pdbs, events=events, now=time.time())
    _emit(out, args.output, explanation, lambda: why.render(explanation))
    return 0


def _optional(args: argparse.Namespace, what: str,
              read: Callable[[], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """A read ``why`` can do without (RBAC may refuse it): a line on stderr, then nothing."""
    try:
        return [item for item in read() if isinstance(item, dict)]
    except ApiError as exc:
        args.warn(f"{PROG}: {what} not read ({exc}); preemption judged without them\n")
        return []


def cmd_what_if(args: argparse.Namespace, api: Reader, out: TextIO) -> int:
    config = _config(args)
    names = [n.strip() for value in args.policies for n in value.split(",") if n.strip()]
    policies = [p if p == whatif.AS_IS else _policy(p) for p in names] or sorted(REGISTRY)
    picture = _picture(read_cluster(api, config.vocabulary), args, config)
    result = whatif.what_if(picture, policies, _policy(args.default_policy),
                            include_pending=not args.no_pending, seed=args.seed)
    _emit(out, args.output, result, lambda: whatif.render(result))
    return 0


def cmd_defrag(args: argparse.Namespace, api: Reader, out: TextIO) -> int:
    config = _config(args)
    if args.cards < 1:
        raise UsageError("--cards must be at least 1")
    picture = _picture(read_cluster(api, config.vocabulary), args, config)
    result = defrag.plan(picture, args.cards, _policy(args.policy), model=args.model,
                         seed=args.seed, on_one_node=args.on_one_node)
    _emit(out, args.output, result, lambda: defrag.render(result))
    return 0 if result.feasible else 3


def _policy(name: str) -> str:
    try:
        get_policy(name)
    except TesseraError as exc:
        raise UsageError(str(exc)) from exc
    return name


COMMANDS: dict[str, Callable[[argparse.Namespace, Reader, TextIO], int]] = {
    "inspect": cmd_inspect,
    "why": cmd_why,
    "what-if": cmd_what_if,
    "defrag-plan": cmd_defrag,
}


def main(argv: Sequence[str] | None = None, *, reader: ReaderFactory = _kube_reader,
         out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    args.warn = err.write  # what goes wrong on the side (measured figures): a line on stderr
    try:
        return COMMANDS[args.command](args, reader(args), out)
    except BrokenPipeError:
        # The reader (head, less) went away: not an error worth a traceback. Python would
        # complain again flushing stdout at exit, so stdout is pointed at nothing first.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        return 130
    except UsageError as exc:
        err.write(f"error: {exc}\n")
        return EXIT_USAGE
    except ApiError as exc:
        err.write(f"error: {exc}\n")
        return EXIT_API
    except TesseraError as exc:
        err.write(f"error: {exc}\n")
        return EXIT_API



if __name__ == "__main__":  # python -m kubectl_tessera.cli: the krew launcher's entry
    sys.exit(main())
