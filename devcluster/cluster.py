"""The whole local cluster: control plane, Tessera's services, and API access for callers."""

from __future__ import annotations

import logging
import shutil
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from devcluster import DevClusterError
from devcluster.binaries import Binaries
from devcluster.containers import ContainerServices
from devcluster.controlplane import ControlPlane
from devcluster.nodes import GpuNodeSpec, create_nodes
from devcluster.options import Options
from devcluster.process import ManagedProcess, no_proxy_env
from devcluster.scheduler_config import (
    SCHEDULER_CONFIG,
    ExtenderAddress,
    load_scheduler_configuration,
    managed_resources,
    with_managed_resources,
    with_nodes_to_score,
    without_cpu_only_scoring,
)
from devcluster.services import Services
from tessera.agent_profiles import DEFAULT_PROFILE, NodeAgent
from tessera.vocabulary import Vocabulary

logger = logging.getLogger(__name__)


def scheduler_setup(options: Options, vocabulary: Vocabulary, extender: ExtenderAddress | None
                    ) -> tuple[dict[str, Any], ExtenderAddress | None]:
    """The shipped KubeSchedulerConfiguration this cluster runs (without its CPU-only scoring
    entry, or with another ``percentageOfNodesToScore``, when asked; with the managed
    resources of another agent profile, as the chart's ``agentProfile`` renders them) and
    where its extenders are; refuses a vocabulary whose resources the shipped entries do not
    manage (the dev cluster substitutes addresses and credentials only)."""
    shipped = load_scheduler_configuration(SCHEDULER_CONFIG)
    if not options.score_cpu_only_pods:
        shipped = without_cpu_only_scoring(shipped)
    if options.nodes_to_score is not None:
        shipped = with_nodes_to_score(shipped, options.nodes_to_score)
    agent = NodeAgent(options.agent_profile, vocabulary)
    if options.agent_profile is not DEFAULT_PROFILE:
        shipped = with_managed_resources(shipped, agent.managed_resources())
    wanted = {r.name for r in agent.managed_resources()}
    if extender is not None and managed_resources(shipped) != wanted:
        raise DevClusterError(
            f"the shipped KubeSchedulerConfiguration manages {sorted(managed_resources(shipped))},"
            f" this dev cluster's agent profile {sorted(wanted)}")
    return shipped, extender


class DevCluster:
    """Start with :meth:`start`, always :meth:`stop` (it is also a context manager)."""

    def __init__(self, binaries: Binaries, workdir: Path | None = None,
                 options: Options | None = None) -> None:
        self.options = options or Options()
        self._own_workdir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="tessera-devcluster-"))
        self.binaries = binaries
        self.control_plane = ControlPlane(binaries, self.workdir)
        self.services: Any = None  # Services or ContainerServices once started
        #: The HAMi node stand-ins (hami and volcano-vgpu profiles), and how to stop them.
        self.hami_fleet: Any = None
        self._standins_stop: threading.Event | None = None
        #: The stand-in fleet's processes (``Options.hami_standin_processes``).
        self.hami_processes: list[ManagedProcess] = []
        self._api_client: Any = None

    # ------------------------------------------------------------------ access
    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig (system:masters) for users and tests."""
        return self.control_plane.admin_kubeconfig

    @property
    def vocabulary(self) -> Vocabulary:
        return self.options.vocabulary

    @property
    def api_client(self) -> Any:
        """A kubernetes.client.ApiClient authenticated as the admin."""
        if self._api_client is None:
            from kubernetes import config

            self._api_client = config.new_client_from_config(  # type: ignore[no-untyped-call]
                config_file=str(self.kubeconfig)
            )
        return self._api_client

    def core_v1(self) -> Any:
        from kubernetes import client

        return client.CoreV1Api(self.api_client)

    def add_nodes(self, specs: list[GpuNodeSpec]) -> None:
        create_nodes(self.core_v1(), specs, self.vocabulary, self.options.agent)

    # ------------------------------------------------------------------ lifecycle
    def start(self, nodes: Sequence[GpuNodeSpec] = ()) -> None:
        """Control plane, ``nodes``, services, scheduler. Nodes made here are in the
        allocator's first list (its /readyz then means it knows them) and in the scheduler's
        first sync."""
        try:
            self.control_plane.start()
            if nodes:
                self.add_nodes(list(nodes))
            extender = None
            if self.options.webhook or self.options.allocator:
                if self.options.image is not None:
                    services: Services | ContainerServices = ContainerServices(
                        self.control_plane, self.options, lambda: self.api_client)
                else:
                    services = Services(self.control_plane, self.options,
                                        lambda: self.api_client)
                self.services = services
                services.start()
                if self.options.allocator:
                    extender = services.extender_address()
            self._start_hami_standins()
            self.control_plane.start_scheduler(
                *scheduler_setup(self.options, self.vocabulary, extender))
        except BaseException:
            self.stop(keep_files=True)
            raise

    def stop(self, keep_files: bool = False) -> None:
        """Stop everything; keep the work directory (logs) when asked or not ours to delete.

        The scheduler goes first so that it stops calling the services, which then shut
        down without waiting on its kept-alive connections.
        """
        self.control_plane.stop_scheduler()
        if self._standins_stop is not None:
            self._standins_stop.set()
        for proc in self.hami_processes:
            proc.stop()
        if self.services is not None:
            self.services.stop(meanwhile=self.control_plane.stop)
        else:
            self.control_plane.stop()
        if self._api_client is not None:
            self._api_client.close()
            self._api_client = None
        if keep_files or not self._own_workdir:
            logger.info("dev cluster files kept in %s", self.workdir)
        else:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def _start_hami_standins(self) -> None:
        from allocator.hami.codec import FLAVORS
        from allocator.kube.client import KubeClient
        from devcluster.hami_fleet import HamiFleet

        flavor = FLAVORS.get(self.options.hami_agent or str(self.options.agent_profile))
        if flavor is None or not self.options.hami_standin:
            return
        opts = self.options
        if opts.hami_standin_processes > 0:
            self._start_standin_processes(flavor)
            return
        api = KubeClient.from_config(str(self.kubeconfig))
        self.hami_fleet = HamiFleet(api, flavor, rate=opts.hami_client_rate,
                                    preferred_allocation=opts.hami_preferred_allocation)
        self._standins_stop = self.hami_fleet.start()

    def _start_standin_processes(self, flavor: Any) -> None:
        """The plugins as processes, the nodes sharded among them; the pod watch, here,
        tells each which of its nodes has a pod to start (devcluster/hami_fleet.py)."""
        from allocator.kube.client import KubeClient
        from devcluster.binaries import repo_root
        from devcluster.hami_fleet import HamiFleet, fleet_argv, shard_of

        opts = self.options
        for index in range(opts.hami_standin_processes):
            argv = [sys.executable, "-m", "devcluster.hami_fleet",
                    *fleet_argv(str(self.kubeconfig), flavor, opts.hami_client_rate,
                                opts.hami_preferred_allocation)]
            proc = ManagedProcess(f"hami-standin-{index}", argv,
                                  self.control_plane.log_dir / f"hami-standin-{index}.log",
                                  env=no_proxy_env(), cwd=repo_root(), pipe_stdin=True)
            proc.start()
            self.hami_processes.append(proc)
        pipes = [(threading.Lock(), proc.stdin) for proc in self.hami_processes]

        def dispatch(node: str) -> None:
            lock, pipe = pipes[shard_of(node, len(pipes))]
            if pipe is None:
                return
            try:
                with lock:
                    pipe.write(f"{node}\n".encode())
                    pipe.flush()
            except OSError as exc:  # the process died: its log says why
                logger.warning("HAMi stand-in process for node %s: %s", node, exc)

        api = KubeClient.from_config(str(self.kubeconfig))
        self.hami_fleet = HamiFleet(api, flavor, dispatch=dispatch)
        self._standins_stop = self.hami_fleet.start()

    def logs_hint(self) -> str:
        return f"logs in {self.control_plane.log_dir}"

    def __enter__(self) -> DevCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop(keep_files=exc[0] is not None)


def require(condition: bool, message: str) -> None:
    if not condition:
        raise DevClusterError(message)
