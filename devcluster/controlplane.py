"""etcd, kube-apiserver, kube-controller-manager, KWOK and kube-scheduler on loopback, each
with its own identity.

Authentication: one cluster CA signs a client certificate per control-plane component and
kube-apiserver trusts it with ``--client-ca-file`` (CN = user, O = groups). We chose client
certificates over a static token file because (a) that is how real clusters identify
kube-scheduler (CN ``system:kube-scheduler``, bound to its built-in ClusterRole by the
bootstrap RBAC policy, so the scheduler runs with exactly upstream's rules and no binding of
ours), (b) the same CA then signs the serving certificates of the apiserver, the scheduler and
the webhook, so one ``certificate-authority`` verifies everything, and (c) --token-auth-file is
a legacy authenticator upstream keeps only for compatibility. The allocator is a workload, not a
control-plane component: it gets a ServiceAccount token (TokenRequest) so that the RBAC objects
we ship bind to it unchanged (see services.py).

Flags follow controller-runtime's envtest (pkg/internal/testing/controlplane/apiserver.go) with
RBAC on instead of AlwaysAllow, and the ServiceAccount admission plugin on: the controller-manager
creates every namespace's default ServiceAccount, as in any cluster.

kube-controller-manager runs as kubeadm runs it (CN ``system:kube-controller-manager``, bound by
the bootstrap ClusterRoleBinding; ``--use-service-account-credentials`` so that each controller
acts as its own ServiceAccount with its bootstrap ``system:controller:*`` role): Deployments,
ReplicaSets, Jobs, namespace lifecycle, garbage collection, ServiceAccount tokens, and the node
lifecycle that taints nodes whose Leases are no longer renewed. KWOK (see kwok.py) renews the
fake nodes' Leases and gives the pods their phases.
"""

from __future__ import annotations

import base64
import logging
import ssl
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from certs.builder import KeyPair
from devcluster import DevClusterError, kwok
from devcluster.binaries import Binaries
from devcluster.pki import ClusterCA, service_account_keys, write_pair
from devcluster.process import (
    QUICK_POLL_S,
    ManagedProcess,
    free_port,
    http_ok,
    no_proxy_env,
    wait_until,
)
from devcluster.scheduler_config import (
    ExtenderAddress,
    localise_scheduler_configuration,
    scheduler_client_connection,
)

logger = logging.getLogger(__name__)

#: User names of the component identities (CN of their client certificates).
ADMIN_USER = "tessera-admin"
SCHEDULER_USER = "system:kube-scheduler"  # matched by the bootstrap ClusterRoleBinding
CONTROLLER_MANAGER_USER = "system:kube-controller-manager"  # likewise
MASTERS_GROUP = "system:masters"  # superuser group, hard-wired in kube-apiserver

START_TIMEOUT = 120.0
#: kube-apiserver drains in about a second once its clients are gone; a client's watch still
#: open (the HAMi stand-in fleet's, a benchmark's bind watch: threads of the test process)
#: holds its graceful shutdown until that watch ends, up to a minute. A throwaway cluster has
#: nothing to drain: SIGKILL after this.
APISERVER_STOP_SECONDS = 1.5


def kubeconfig_document(
    server: str, ca_pem: bytes, user: str, *, cert: KeyPair | None = None, token: str | None = None
) -> dict[str, Any]:
    """A one-context kubeconfig (pure)."""
    credentials: dict[str, str] = {}
    if cert is not None:
        credentials["client-certificate-data"] = base64.b64encode(cert.cert_pem).decode()
        credentials["client-key-data"] = base64.b64encode(cert.key_pem).decode()
    if token is not None:
        credentials["token"] = token
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "tessera-dev",
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_pem).decode(),
                },
            }
        ],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": user, "context": {"cluster": "tessera-dev", "user": user}}],
        "current-context": user,
    }


@dataclass
class ControlPlane:
    """The three upstream processes and the files they share, under one work directory."""

    binaries: Binaries
    workdir: Path
    ca: ClusterCA = field(default_factory=ClusterCA)
    processes: list[ManagedProcess] = field(default_factory=list)
    etcd_port: int = 0
    apiserver_port: int = 0
    scheduler_port: int = 0
    controller_manager_port: int = 0
    scheduler: ManagedProcess | None = None
    #: What kube-scheduler runs: a shipped configuration and the allocator's address.
    scheduler_setup: tuple[dict[str, Any], ExtenderAddress | None] | None = None
    #: KWOK posts each node's unchanged status this often (a kubelet's
    #: nodeStatusReportFrequency) and renews its Lease every quarter of ``node_lease_seconds``;
    #: the node lifecycle controller taints a node whose Lease is older than
    #: ``node_monitor_grace_seconds``. Large clusters on a small machine raise the grace
    #: (bench/openb/live.py).
    node_status_report_seconds: float = kwok.STATUS_REPORT_SECONDS
    node_lease_seconds: int = kwok.LEASE_SECONDS
    node_monitor_grace_seconds: int = 50
    #: How long a Job's pod runs before KWOK marks it Succeeded (pods may say otherwise with
    #: the kwok.RUN_FOR_ANNOTATION annotation).
    job_run_seconds: float = 10.0

    # ------------------------------------------------------------------ paths
    @property
    def pki_dir(self) -> Path:
        return self.workdir / "pki"

    @property
    def log_dir(self) -> Path:
        return self.workdir / "logs"

    @property
    def ca_file(self) -> Path:
        return self.pki_dir / "ca.crt"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.apiserver_port}"

    def kubeconfig_path(self, name: str) -> Path:
        return self.workdir / "kubeconfig" / f"{name}.yaml"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.kubeconfig_path("admin")

    # ------------------------------------------------------------------ identities
    def write_kubeconfig(
        self, name: str, user: str, *, groups: tuple[str, ...] = (), token: str | None = None
    ) -> Path:
        """A kubeconfig for ``user``: a client cert from our CA, or ``token`` when given."""
        cert = None if token is not None else self.ca.client(user, groups)
        path = self.kubeconfig_path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        doc = kubeconfig_document(self.server, self.ca.cert_pem, user, cert=cert, token=token)
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return path

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """etcd and kube-apiserver together (it retries etcd until etcd answers, as when
        kubeadm's static pods start), then the controller-manager and KWOK; returns when each
        says it is ready (KWOK has no endpoint: its nodes show it)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.ca_file.parent.mkdir(parents=True, exist_ok=True)
        self.ca_file.write_bytes(self.ca.cert_pem)
        etcd_healthy = self._start_etcd()
        apiserver_ready = self._start_apiserver()
        etcd_healthy()
        apiserver_ready()
        self.write_kubeconfig("admin", ADMIN_USER, groups=(MASTERS_GROUP,))
        manager_healthy = self._start_controller_manager()
        self._start_kwok()
        manager_healthy()

    def _start_etcd(self) -> Callable[[], None]:
        """Started; returns the wait for its health."""
        self.etcd_port, peer_port = free_port(), free_port()
        client_url = f"http://127.0.0.1:{self.etcd_port}"
        peer_url = f"http://127.0.0.1:{peer_port}"
        etcd = ManagedProcess(
            "etcd",
            [
                str(self.binaries.etcd),
                "--name=default",
                f"--data-dir={self.workdir / 'etcd-data'}",
                f"--listen-client-urls={client_url}",
                f"--advertise-client-urls={client_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=default={peer_url}",
                # Throwaway data: durability buys nothing and fsync dominates on small disks.
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
            self.log_dir / "etcd.log",
            env=no_proxy_env(),
        )
        etcd.start()
        self.processes.append(etcd)

        def healthy() -> bool:
            with urllib.request.urlopen(f"{client_url}/health", timeout=2) as resp:
                return b'"health":"true"' in resp.read()

        return lambda: wait_until("etcd /health", healthy, START_TIMEOUT, QUICK_POLL_S, [etcd])

    def _start_apiserver(self) -> Callable[[], None]:
        """Started; returns the wait for its readiness."""
        self.apiserver_port = free_port()
        serving = self.ca.serving(
            "kube-apiserver",
            dns_names=("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"),
            ips=("127.0.0.1", "10.0.0.1"),
        )
        cert, key = write_pair(serving, self.pki_dir, "apiserver")
        sa_pub, sa_key = write_pair(service_account_keys(), self.pki_dir, "service-account")
        apiserver = ManagedProcess(
            "kube-apiserver",
            [
                str(self.binaries.kube_apiserver),
                f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.apiserver_port}",
                f"--cert-dir={self.pki_dir}",
                f"--tls-cert-file={cert}",
                f"--tls-private-key-file={key}",
                f"--client-ca-file={self.ca_file}",
                "--authorization-mode=RBAC",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--allow-privileged=true",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={sa_pub}",
                f"--service-account-signing-key-file={sa_key}",
                "--endpoint-reconciler-type=none",
                "--v=1",
            ],
            self.log_dir / "kube-apiserver.log",
            env=no_proxy_env(),
            stop_seconds=APISERVER_STOP_SECONDS,
        )
        apiserver.start()
        self.processes.append(apiserver)
        admin_cert = self.ca.client(ADMIN_USER, (MASTERS_GROUP,))
        client_cert, client_key = write_pair(admin_cert, self.pki_dir, "admin")
        context = ssl.create_default_context(cafile=str(self.ca_file))
        context.load_cert_chain(str(client_cert), str(client_key))

        def ready() -> bool:
            return http_ok(f"{self.server}/readyz", context)

        return lambda: wait_until("kube-apiserver /readyz", ready, START_TIMEOUT, watch=[apiserver])

    def _https_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))

    def _start_controller_manager(self) -> Callable[[], None]:
        """Started; returns the wait for its health."""
        kubeconfig = self.write_kubeconfig("kube-controller-manager", CONTROLLER_MANAGER_USER)
        self.controller_manager_port = free_port()
        cert, key = write_pair(self.ca.serving("kube-controller-manager"), self.pki_dir,
                               "kube-controller-manager")
        manager = ManagedProcess(
            "kube-controller-manager",
            [
                str(self.binaries.kube_controller_manager),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.controller_manager_port}",
                f"--tls-cert-file={cert}",
                f"--tls-private-key-file={key}",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={self.pki_dir / 'service-account.key'}",
                f"--root-ca-file={self.ca_file}",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--leader-elect=false",
                f"--node-monitor-grace-period={self.node_monitor_grace_seconds}s",
                "--v=1",
            ],
            self.log_dir / "kube-controller-manager.log",
            env=no_proxy_env(),
        )
        manager.start()
        self.processes.append(manager)
        context = self._https_context()

        def healthy() -> bool:
            return http_ok(f"https://127.0.0.1:{self.controller_manager_port}/healthz", context)

        return lambda: wait_until("kube-controller-manager /healthz", healthy, START_TIMEOUT,
                                  QUICK_POLL_S, watch=[manager])

    def _start_kwok(self) -> None:
        """KWOK, managing only the nodes annotated as fake (a test may add real-looking ones)."""
        from kubernetes import config, utils

        api = config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(self.admin_kubeconfig)
        )
        create_from_dict: Any = utils.create_from_dict
        try:
            for doc in kwok.rbac_documents():
                create_from_dict(api, doc)
        finally:
            api.close()
        kubeconfig = self.write_kubeconfig("kwok", kwok.USER)
        config_path = self.workdir / "kwok.yaml"
        config_path.write_text(
            yaml.safe_dump_all(kwok.node_stages(self.node_status_report_seconds)
                              + kwok.pod_stages(self.job_run_seconds),
                              sort_keys=False)
        )
        process = ManagedProcess(
            "kwok",
            [
                str(self.binaries.kwok),
                f"--kubeconfig={kubeconfig}",
                f"--config={config_path}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector="
                f"{kwok.MANAGED_ANNOTATION}={kwok.MANAGED_VALUE}",
                # Room for every pod of the benchmarks (the default /24 holds 254 addresses).
                "--cidr=10.64.0.0/10",
                f"--node-lease-duration-seconds={self.node_lease_seconds}",
            ],
            self.log_dir / "kwok.log",
            env=no_proxy_env(),
        )
        process.start()
        self.processes.append(process)

    def start_scheduler(self, shipped: dict[str, Any] | None = None,
                        extender: ExtenderAddress | None = None) -> None:
        """kube-scheduler running ``shipped`` (a shipped KubeSchedulerConfiguration) localised
        for this cluster and ``extender`` (None: no extenders); without arguments, what it ran
        last. Returns when it reports healthy."""
        kubeconfig = self.write_kubeconfig("kube-scheduler", SCHEDULER_USER)
        if shipped is not None:
            self.scheduler_setup = (shipped, extender)
        if self.scheduler_setup is None:
            raise DevClusterError("no scheduler configuration to start kube-scheduler with")
        document = localise_scheduler_configuration(
            self.scheduler_setup[0], scheduler_client_connection(kubeconfig),
            self.scheduler_setup[1])
        config_path = self.workdir / "kube-scheduler.yaml"
        config_path.write_text(yaml.safe_dump(document, sort_keys=False))
        self.scheduler_port = free_port()
        cert, key = write_pair(self.ca.serving("kube-scheduler"), self.pki_dir, "kube-scheduler")
        scheduler = ManagedProcess(
            "kube-scheduler",
            [
                str(self.binaries.kube_scheduler),
                f"--config={config_path}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.scheduler_port}",
                f"--tls-cert-file={cert}",
                f"--tls-private-key-file={key}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                # One scheduler, no HA to arbitrate; electing would only delay a restart. A
                # flag, as kubeadm passes it: kube-scheduler applies the leader-election flags
                # over its --config (cmd/kube-scheduler/app/options ApplyLeaderElectionTo).
                "--leader-elect=false",
                "--v=2",
            ],
            self.log_dir / "kube-scheduler.log",
            env=no_proxy_env(),
        )
        scheduler.start()
        self.processes.append(scheduler)
        self.scheduler = scheduler
        context = ssl.create_default_context(cafile=str(self.ca_file))

        def healthy() -> bool:
            return http_ok(f"https://127.0.0.1:{self.scheduler_port}/healthz", context)

        wait_until("kube-scheduler /healthz", healthy, START_TIMEOUT, QUICK_POLL_S,
                   watch=[scheduler])

    def stop_scheduler(self) -> None:
        if self.scheduler is not None:
            self.scheduler.stop()
            self.processes.remove(self.scheduler)
            self.scheduler = None

    def stop(self) -> None:
        """Stop every process, newest first (scheduler, KWOK, controller-manager, apiserver,
        etcd)."""
        while self.processes:
            self.processes.pop().stop()
