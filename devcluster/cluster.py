"""The whole local cluster: control plane, Tessera's services, and API access for callers."""

from __future__ import annotations

import logging
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from certs.builder import KeyPair
from devcluster import DevClusterError
from devcluster.binaries import Binaries
from devcluster.controlplane import ControlPlane, ExtenderSpec, ManagedResource
from devcluster.nodes import GpuNodeSpec, create_nodes
from tessera.vocabulary import Vocabulary

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Options:
    #: Start Tessera's webhook and register it; False = plain control plane.
    webhook: bool = True
    #: Start Tessera's allocator and give kube-scheduler its extender entry.
    allocator: bool = True
    vocabulary: Vocabulary = field(default_factory=Vocabulary)
    #: Extra flags for ``tessera allocator`` (e.g. a placement policy).
    allocator_args: tuple[str, ...] = ()
    #: Extra flags for ``tessera webhook``.
    webhook_args: tuple[str, ...] = ()
    #: The allocator's RBAC documents (default: manifests/base/allocator-rbac.yaml).
    allocator_rbac: Path | None = None


def extender_spec(url_prefix: str, vocabulary: Vocabulary, ca_pem: bytes | None = None,
                  client: KeyPair | None = None) -> ExtenderSpec:
    """Our extender entry. Both GPU resources are ``ignoredByScheduler``.

    Why: kube-scheduler's NodeResourcesFit compares the pod's request with node *totals*; it
    cannot see cards (two 50% shares on two cards leave "100 free" but no whole card), so it is
    at best a coarse pre-filter that the allocator repeats exactly anyway. Worse, a node it
    rejects never reaches the extender, so the user would read "Insufficient
    elasticgpu.io/gpu-core" instead of the allocator's actionable per-card reason, and a node
    described only per card would need matching totals. The scheduler still calls the extender
    only for pods that request a managed resource (pkg/scheduler/extender.go IsInterested).
    """
    return ExtenderSpec(
        url_prefix=url_prefix,
        managed_resources=tuple(ManagedResource(r) for r in vocabulary.managed_resources),
        ca_pem=ca_pem,
        client=client,
    )


class DevCluster:
    """Start with :meth:`start`, always :meth:`stop` (it is also a context manager)."""

    def __init__(self, binaries: Binaries, workdir: Path | None = None,
                 options: Options | None = None) -> None:
        self.options = options or Options()
        self._own_workdir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="tessera-devcluster-"))
        self.binaries = binaries
        self.control_plane = ControlPlane(binaries, self.workdir)
        self.services: Any = None  # services.Services once started
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
        create_nodes(self.core_v1(), specs, self.vocabulary)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        try:
            self.control_plane.start()
            extender = None
            if self.options.webhook or self.options.allocator:
                from devcluster.services import Services

                self.services = Services(self)
                self.services.start()
                if self.options.allocator:
                    extender = extender_spec(
                        self.services.extender_url,
                        self.vocabulary,
                        ca_pem=self.control_plane.ca.cert_pem,
                        client=self.services.extender_client,
                    )
            self.control_plane.start_scheduler(extender)
        except BaseException:
            self.stop(keep_files=True)
            raise

    def stop(self, keep_files: bool = False) -> None:
        """Stop everything; keep the work directory (logs) when asked or not ours to delete.

        The scheduler goes first so that it stops calling the services, which then shut
        down without waiting on its kept-alive connections.
        """
        self.control_plane.stop_scheduler()
        if self.services is not None:
            self.services.stop()
        self.control_plane.stop()
        if self._api_client is not None:
            self._api_client.close()
            self._api_client = None
        if keep_files or not self._own_workdir:
            logger.info("dev cluster files kept in %s", self.workdir)
        else:
            shutil.rmtree(self.workdir, ignore_errors=True)

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
