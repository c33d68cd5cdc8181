"""The demo (``hack/demo.sh``, ``python -m devcluster``): Tessera on a real local control plane,
with a table of who got which card.

Builds (or reuses) etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and
KWOK; starts them on loopback with the webhook and the allocator wired in; creates fake GPU
nodes (one with mixed cards) that KWOK keeps Ready; submits the example pods (every request
form) and applies the example Deployments and Job with kubectl, as a user would; prints a
per-node, per-card table; then keeps the cluster up as a playground for kubectl until Ctrl-C
and cleans up.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from devcluster import DevClusterError
from devcluster.binaries import Binaries, ensure_binaries, repo_root
from devcluster.browser import relay
from devcluster.cluster import DevCluster
from devcluster.dcgm import CardFigures, FakeDcgmExporter
from devcluster.nodes import Card, GpuNodeSpec, Inventory, uniform
from devcluster.options import Options
from devcluster.prometheus import PrometheusServer, ensure_prometheus
from devcluster.workloads import (
    container,
    ensure_namespace,
    list_objects,
    load_documents,
    load_manifests,
    make_pod,
    wait_for,
    wait_settled,
    workload_pods,
)
from kubectl_tessera import inspection
from kubectl_tessera.picture import build_picture
from tessera.agent_profiles import (
    DEFAULT_PROFILE,
    HAMI_AGENTS,
    AgentProfile,
    hami_agent_problem,
)
from tessera.dialects import DialectConfig

logger = logging.getLogger(__name__)

NAMESPACE = "demo"


def demo_nodes() -> list[GpuNodeSpec]:
    """Three inventories: GFD labels, even split of totals, and mixed cards described per card."""
    return [
        uniform("gpu-a10", 4, "NVIDIA-A10", 24576, inventory=Inventory.GFD),
        uniform("gpu-t4", 2, "Tesla-T4", 15360, inventory=Inventory.EVEN),
        GpuNodeSpec(
            "gpu-mixed",
            (Card("NVIDIA-A100-80GB", 81920), Card("NVIDIA-A100-40GB", 40960),
             Card("Tesla-T4", 15360)),
            inventory=Inventory.CARDS,
        ),
    ]


def extra_pods() -> list[dict[str, Any]]:
    """Request forms the seed examples do not show: several containers, a model choice,
    a policy choice, and a request no node can satisfy."""
    return [
        make_pod(
            "two-containers",
            [
                container("trainer", limits={"elasticgpu.io/gpu-core": "100"}),
                container("sidecar", limits={"elasticgpu.io/gpu-core": "10",
                                             "elasticgpu.io/gpu-memory": "512"}),
            ],
        ),
        make_pod(
            "wants-a100",
            [container(limits={"elasticgpu.io/gpu-core": "50",
                               "elasticgpu.io/gpu-memory": "20480"})],
            annotations={"elasticgpu.io/gpu-model": "NVIDIA-A100-80GB|NVIDIA-A100-40GB"},
        ),
        make_pod(
            "spread-me",
            [container(limits={"elasticgpu.io/gpu-percent": "10"})],
            annotations={"elasticgpu.io/gpu-policy": "spread"},
        ),
        make_pod("genius-five-cards", labels={"genius/gpu-number": "5"}),
    ]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--examples", type=Path, default=repo_root() / "examples" / "pods",
        help="directory of example pod manifests to submit (default: examples/pods)",
    )
    parser.add_argument(
        "--apply", type=Path, action="append", default=None,
        help="a manifest file or directory to `kubectl apply` (repeatable; default: "
             "examples/deployments and examples/jobs)",
    )
    parser.add_argument(
        "--workdir", type=Path, default=None,
        help="keep certificates, kubeconfigs and logs here (default: a temporary directory, "
             "removed on exit)",
    )
    parser.add_argument(
        "--no-wait", action="store_true",
        help="print the table and stop at once instead of waiting for Ctrl-C",
    )
    parser.add_argument(
        "--agent-profile", choices=[p.value for p in AgentProfile], default=DEFAULT_PROFILE,
        help="the node agent the fake nodes stand for: they advertise its resources and "
             "both services run with this profile (default elastic; docs/agents.md)",
    )
    parser.add_argument(
        "--hami-agent", choices=list(HAMI_AGENTS), default="",
        help="with --agent-profile hami: an older HAMi release (both services and the node "
             "stand-ins; docs/hami.md)",
    )
    parser.add_argument(
        "--metrics", action="store_true",
        help="also run a real Prometheus scraping a stand-in dcgm-exporter (processes outside "
             "Tessera on gpu-mixed's first card, a busy A10) and point the allocator at it "
             "(docs/metrics.md; builds Prometheus on first use)",
    )
    parser.add_argument(
        "--timeout", type=float, default=120.0,
        help="seconds to wait for the pods to be placed (default 120)",
    )


def _pods_to_submit(examples: Path) -> list[dict[str, Any]]:
    pods = load_manifests(examples) if examples.is_dir() else []
    if not pods:
        print(f"tessera demo: no example pods in {examples}; using built-in ones only",
              file=sys.stderr)
    # The extra pods go first so that the model-constrained one finds its A100 still free.
    return extra_pods() + pods


def _submit(core_v1: Any, pods: Iterable[dict[str, Any]], out: TextIO) -> list[str]:
    from kubernetes.client.exceptions import ApiException

    names = []
    for pod in pods:
        name = pod["metadata"]["name"]
        try:
            core_v1.create_namespaced_pod(NAMESPACE, pod)
            names.append(name)
            print(f"  submitted {name}", file=out)
        except ApiException as exc:
            print(f"  refused   {name}: {exc.reason}: {exc.body}", file=out)
    return names


def _kubectl_apply(kubectl: Path, kubeconfig: Path, paths: Iterable[Path],
                   out: TextIO) -> int:
    """``kubectl apply -f`` each path into the demo namespace; returns the pods the applied
    workloads should make (Deployment replicas, Job parallelism), for the wait."""
    expected = 0
    for path in paths:
        if not path.exists():
            print(f"  skipped   {path}: not found", file=out)
            continue
        result = subprocess.run(
            [str(kubectl), "--kubeconfig", str(kubeconfig), "apply", "-n", NAMESPACE,
             "-f", str(path)],
            capture_output=True, text=True, check=False, timeout=60,
        )
        for line in (result.stdout + result.stderr).splitlines():
            print(f"  kubectl   {line}", file=out)
        if result.returncode == 0:
            expected += sum(workload_pods(doc) for doc in load_documents(path))
    return expected


def _pods_made_by_controllers(core_v1: Any, want: int, timeout: float) -> list[str]:
    """Names of the pods the Deployments' ReplicaSets and the Jobs created, once there are
    ``want`` of them (the controllers create them a moment after the apply)."""

    def owned() -> list[str] | None:
        names = [p["metadata"]["name"] for p in list_objects(core_v1.list_namespaced_pod,
                                                             NAMESPACE)
                 if p["metadata"].get("ownerReferences")]
        return names if len(names) >= want else None

    return wait_for(f"{want} pods from the applied Deployments and Jobs", owned, timeout)


def _say(stream: TextIO, text: str) -> None:
    """Print, unless the reader is gone (e.g. ``| tee`` killed by the same Ctrl-C)."""
    with contextlib.suppress(OSError):  # BrokenPipeError included
        print(text, file=stream, flush=True)


def _wait_for_ctrl_c() -> None:
    def stop(_signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass


def _inspect_table(core_v1: Any, cluster: DevCluster) -> str:
    """``kubectl tessera inspect``'s table of the cluster as it is now: the same code, the same
    definition of what a card has in use."""
    config = DialectConfig(vocabulary=cluster.vocabulary)
    picture = build_picture(list_objects(core_v1.list_node),
                            list_objects(core_v1.list_pod_for_all_namespaces), config)
    return inspection.render(picture, inspection.select_nodes(picture, None))


def _admin_context(cluster: DevCluster) -> ssl.SSLContext:
    """TLS to the allocator with the cluster admin's client certificate (it asks for one)."""
    pki = cluster.control_plane.pki_dir
    context = ssl.create_default_context(cafile=str(cluster.control_plane.ca_file))
    context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    return context


def _playground(cluster: DevCluster, kubectl: Path, page: str) -> str:
    examples = repo_root() / "examples"
    return (
        "A playground: point kubectl at it (in another terminal):\n"
        f"  export KUBECONFIG={cluster.kubeconfig}\n"
        f"  export PATH={Path(sys.executable).parent}:$PATH   # kubectl finds the plugin\n"
        f"  alias kubectl={kubectl}\n"
        f"  kubectl get pods -n {NAMESPACE} -o wide\n"
        f"  kubectl get pod -n {NAMESPACE} <name> -o yaml   # annotations: the allocation\n"
        f"  kubectl apply -n {NAMESPACE} -f {examples / 'deployments' / 'cuda-10c.yaml'}\n"
        f"  kubectl scale -n {NAMESPACE} deployment/cuda-10c --replicas=6\n"
        f"  kubectl delete -n {NAMESPACE} job/quarter-card-job   # its cards come back\n"
        "The kubectl plugin (docs/operators.md):\n"
        "  kubectl tessera inspect -o wide        # this table again, as it is now\n"
        f"  kubectl tessera why -n {NAMESPACE} genius-five-cards   # every node's verdict\n"
        "  kubectl tessera what-if                # the same pods under each policy\n"
        "  kubectl tessera defrag-plan --cards 2  # fewest moves to free cards (dry run)\n"
        f"The allocator's page, every card and who holds it: {page}/ (docs/allocator.md)\n"
        f"Logs of every component: {cluster.control_plane.log_dir}\n"
        "\nPress Ctrl-C to stop and clean up."
    )


def _start_metrics(workdir: Path | None) -> tuple[FakeDcgmExporter, PrometheusServer]:
    """The stand-in dcgm-exporter with the demo's figures, and a Prometheus scraping it."""
    exporter = FakeDcgmExporter().start()
    exporter.set(
        CardFigures("gpu-mixed", 0, used_mib=61 * 1024, total_mib=81920, util_percent=90),
        *(CardFigures("gpu-a10", i, used_mib=0, total_mib=24576, util_percent=80 if i else 5)
          for i in range(4)))
    base = workdir or Path(tempfile.mkdtemp(prefix="tessera-demo-prometheus-"))
    try:
        server = PrometheusServer(ensure_prometheus(), base / "prometheus",
                                  [exporter.address]).start()
    except BaseException:
        exporter.stop()
        raise
    return exporter, server


def _stop_metrics(measured: tuple[FakeDcgmExporter, PrometheusServer] | None) -> None:
    if measured:
        measured[1].stop()
        measured[0].stop()
        if measured[1].workdir.parent.name.startswith("tessera-demo-prometheus-"):
            shutil.rmtree(measured[1].workdir.parent, ignore_errors=True)


def run(args: argparse.Namespace) -> int:
    out = sys.stdout
    started = _start(args, out)
    if isinstance(started, int):
        return started
    cluster, binaries, measured = started
    failed = False
    try:
        _play(args, cluster, binaries, measured, out)
    except DevClusterError as exc:
        failed = True
        print(f"tessera demo: {exc}", file=sys.stderr)
    finally:
        # Whatever happened (a second Ctrl-C, a closed stdout pipe), the children live in
        # their own sessions and would outlive us: stop them before saying anything.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        cluster.stop(keep_files=failed or args.workdir is not None)
        _stop_metrics(measured)
        _say(sys.stderr, "tessera demo: stopped and cleaned up" + (
            f"; logs kept in {cluster.control_plane.log_dir}" if failed else ""))
    return 1 if failed else 0


_Metrics = tuple[FakeDcgmExporter, PrometheusServer] | None


def _start(args: argparse.Namespace, out: TextIO
           ) -> int | tuple[DevCluster, Binaries, _Metrics]:
    """The started cluster (and metrics, when asked for), or the exit code of why not."""
    if problem := hami_agent_problem(AgentProfile(args.agent_profile), args.hami_agent):
        print(f"tessera demo: {problem}", file=sys.stderr)
        return 2
    print("tessera demo: finding or building the control plane (first build: many minutes)...",
          file=out, flush=True)
    try:
        binaries = ensure_binaries()
    except DevClusterError as exc:
        print(f"tessera demo: {exc}", file=sys.stderr)
        return 1
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
    try:
        measured = _start_metrics(args.workdir) if args.metrics else None
    except DevClusterError as exc:
        print(f"tessera demo: {exc}", file=sys.stderr)
        return 1
    allocator_args = (f"--prometheus-url={measured[1].url}",) if measured else ()
    cluster = DevCluster(binaries, args.workdir,
                         Options(agent_profile=AgentProfile(args.agent_profile),
                                 hami_agent=args.hami_agent, allocator_args=allocator_args))
    print(f"tessera demo: starting etcd, kube-apiserver, kube-controller-manager, KWOK, "
          f"webhook, allocator, kube-scheduler "
          f"({binaries.versions or binaries.directory})", file=out, flush=True)
    try:
        cluster.start()
    except DevClusterError as exc:
        print(f"tessera demo: {exc}\n(files kept in {cluster.workdir})", file=sys.stderr)
        _stop_metrics(measured)
        return 1
    return cluster, binaries, measured


def _play(args: argparse.Namespace, cluster: DevCluster, binaries: Binaries,
          measured: _Metrics, out: TextIO) -> None:
    """Nodes, pods and workloads in; who got which card out; then the playground."""
    core_v1 = cluster.core_v1()
    names = _submit_everything(args, cluster, binaries, core_v1, out)
    bound, pending = wait_settled(core_v1, NAMESPACE, names, timeout=args.timeout)
    print(f"\nWho got which card ({len(bound)} pods placed; `kubectl tessera inspect`'s "
          "table):\n", file=out)
    print(_inspect_table(core_v1, cluster), file=out)
    if pending:
        print("Still Pending (kube-scheduler's message, with our allocator's reasons):",
              file=out)
        for name in sorted(pending):
            print(f"  {name}: {pending[name]}", file=out)
        print("", file=out)
    if measured:
        print("Measured GPU figures (docs/metrics.md), from a real Prometheus at "
              f"{measured[1].url}:\n"
              f"  kubectl tessera inspect -o wide --prometheus {measured[1].url}\n"
              "  the allocator's page and /status: measured figures per card",
              file=out, flush=True)
    if args.no_wait:
        print("The allocator's decisions, its page and `kubectl tessera`: docs/allocator.md, "
              "docs/operators.md.", file=out, flush=True)
    else:
        with relay(f"https://127.0.0.1:{cluster.services.allocator_port}",
                   _admin_context(cluster)) as page:
            print(_playground(cluster, binaries.kubectl, page), file=out, flush=True)
            _wait_for_ctrl_c()


def _submit_everything(args: argparse.Namespace, cluster: DevCluster, binaries: Binaries,
                       core_v1: Any, out: TextIO) -> list[str]:
    """Adds the fake GPU nodes, submits the example pods and applies the Deployments and
    Jobs; the names of every pod to wait for."""
    nodes = demo_nodes()
    cluster.add_nodes(nodes)
    print("tessera demo: fake GPU nodes:", file=out)
    for n in nodes:
        cards = ", ".join(f"{c.model} {c.memory_mib} MiB" for c in n.cards)
        print(f"  {n.name:<10} [{n.inventory.value:>5}] {cards}", file=out)
    ensure_namespace(core_v1, NAMESPACE)
    print(f"tessera demo: submitting pods to namespace {NAMESPACE!r}:", file=out)
    names = _submit(core_v1, _pods_to_submit(args.examples), out)
    applied = args.apply or [repo_root() / "examples" / "deployments",
                             repo_root() / "examples" / "jobs"]
    print("tessera demo: applying Deployments and Jobs with kubectl:", file=out)
    want = _kubectl_apply(binaries.kubectl, cluster.kubeconfig, applied, out)
    return names + (_pods_made_by_controllers(core_v1, want, args.timeout) if want else [])
