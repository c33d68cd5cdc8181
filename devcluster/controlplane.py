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
import copy
import logging
import os
import ssl
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from certs.builder import KeyPair
from devcluster import DevClusterError, kwok
from devcluster.binaries import Binaries
from devcluster.pki import ClusterCA, service_account_keys, write_pair
from devcluster.process import ManagedProcess, free_port, http_ok, wait_until
from tessera.agent_profiles import ManagedResource

logger = logging.getLogger(__name__)

#: User names of the component identities (CN of their client certificates).
ADMIN_USER = "tessera-admin"
SCHEDULER_USER = "system:kube-scheduler"  # matched by the bootstrap ClusterRoleBinding
CONTROLLER_MANAGER_USER = "system:kube-controller-manager"  # likewise
MASTERS_GROUP = "system:masters"  # superuser group, hard-wired in kube-apiserver

START_TIMEOUT = 120.0


#: The KubeSchedulerConfiguration Tessera ships for a cluster's own kube-scheduler; the dev
#: cluster runs it with only addresses and credentials substituted.
SCHEDULER_CONFIG = Path("manifests/scheduler/kube-scheduler-config.yaml")
#: The verb of the shipped entry that scores CPU-only pods; docs/deploy.md turns it off by
#: deleting that entry, and so does :func:`without_cpu_only_scoring`.
CPU_ONLY_SCORING_VERB = "prioritize-cpu-only"
#: kube-scheduler's client towards the API server in the dev cluster. ``clientConnection`` is
#: the host's own block (the shipped file says "keep whatever your kube-scheduler uses today"):
#: the dev cluster puts its kubeconfig there and raises upstream's qps 50 / burst 100, so that
#: on loopback the scheduler's DefaultBinder (the no-extender baseline of
#: bench/speed/e2e_throughput.py, CPU-only pods) is not throttled by its own client; the same
#: values in every mode keep the baseline comparable.
SCHEDULER_CLIENT_QPS = 200
SCHEDULER_CLIENT_BURST = 400


@dataclass(frozen=True)
class ExtenderAddress:
    """Where kube-scheduler finds the allocator, and the TLS material to reach it: what the
    dev cluster substitutes in every extender entry of the shipped configuration."""

    #: scheme, host and port (``https://127.0.0.1:<port>``); the shipped path is kept.
    base_url: str
    #: ``tlsConfig`` in place of the shipped files and serverName (restclient.TLSClientConfig
    #: field names: ``caData``, ``certData``, ``keyData``, or the ``*File`` ones).
    tls: dict[str, str]


def tls_data(ca_pem: bytes, client: KeyPair, server_name: str) -> dict[str, str]:
    """``tlsConfig`` carrying our CA (without one kube-scheduler does not verify the extender:
    pkg/scheduler/extender.go makeTransport) and the mTLS client certificate inline."""
    return {
        "serverName": server_name,
        "caData": base64.b64encode(ca_pem).decode(),
        "certData": base64.b64encode(client.cert_pem).decode(),
        "keyData": base64.b64encode(client.key_pem).decode(),
    }


def load_scheduler_configuration(path: Path) -> dict[str, Any]:
    """A shipped KubeSchedulerConfiguration (``path`` relative to the repository)."""
    from devcluster.binaries import repo_root

    full = repo_root() / path
    if not full.is_file():
        raise DevClusterError(f"{full} is missing; the dev cluster runs it as shipped")
    doc = yaml.safe_load(full.read_text())
    if not isinstance(doc, dict) or doc.get("kind") != "KubeSchedulerConfiguration":
        raise DevClusterError(f"{full} is not a KubeSchedulerConfiguration")
    return doc


def localise_scheduler_configuration(
    shipped: dict[str, Any], client_connection: dict[str, Any],
    extender: ExtenderAddress | None,
) -> dict[str, Any]:
    """``shipped`` with only addresses and credentials substituted (pure): the whole
    ``clientConnection`` (the host's own), and in every extender entry the scheme, host and
    port of ``urlPrefix`` and the ``tlsConfig``. ``extender`` None: no extenders at all (a
    plain control plane, the baseline of the speed benchmark)."""
    config = copy.deepcopy(shipped)
    config["clientConnection"] = dict(client_connection)
    if extender is None:
        config.pop("extenders", None)
        return config
    for entry in config.get("extenders") or []:
        path = urllib.parse.urlsplit(entry["urlPrefix"]).path
        entry["urlPrefix"] = extender.base_url.rstrip("/") + path
        entry["tlsConfig"] = dict(extender.tls)
    return config


def with_nodes_to_score(shipped: dict[str, Any], percentage: int) -> dict[str, Any]:
    """``shipped`` with kube-scheduler's ``percentageOfNodesToScore`` set to ``percentage``
    (pure): what a cluster that lowers it runs (docs/deploy.md); 0 is upstream's adaptive
    default. The range is checked where it is asked for (:class:`devcluster.cluster.Options`)."""
    config = copy.deepcopy(shipped)
    config["percentageOfNodesToScore"] = percentage
    return config


def without_cpu_only_scoring(shipped: dict[str, Any]) -> dict[str, Any]:
    """``shipped`` without its CPU-only scoring entry (pure): what a cluster that turns it off
    runs (docs/deploy.md, "Scoring CPU-only pods")."""
    config = copy.deepcopy(shipped)
    config["extenders"] = [e for e in config.get("extenders") or []
                           if e.get("prioritizeVerb") != CPU_ONLY_SCORING_VERB]
    return config


def scheduler_client_connection(kubeconfig: Path) -> dict[str, Any]:
    return {"kubeconfig": str(kubeconfig), "qps": SCHEDULER_CLIENT_QPS,
            "burst": SCHEDULER_CLIENT_BURST}


def with_managed_resources(shipped: dict[str, Any],
                           resources: Sequence[ManagedResource]) -> dict[str, Any]:
    """``shipped`` with ``resources`` as the ``managedResources`` of the entry that has them
    (pure): the extender entry of another agent profile (charts/tessera ``agentProfile``)."""
    config = copy.deepcopy(shipped)
    for entry in config.get("extenders") or []:
        if entry.get("managedResources"):
            entry["managedResources"] = [
                {"name": r.name, "ignoredByScheduler": r.ignored_by_scheduler}
                for r in resources]
    return config


def managed_resources(config: dict[str, Any]) -> set[str]:
    """Every resource an extender entry of ``config`` manages (pure)."""
    return {r["name"] for e in config.get("extenders") or []
            for r in e.get("managedResources") or []}


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


def _no_proxy_env() -> dict[str, str]:
    """Our environment minus proxies: every address here is loopback."""
    env = {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy")}
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    return env


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
        """etcd, then kube-apiserver; returns when the apiserver is ready."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.ca_file.parent.mkdir(parents=True, exist_ok=True)
        self.ca_file.write_bytes(self.ca.cert_pem)
        self._start_etcd()
        self._start_apiserver()
        self.write_kubeconfig("admin", ADMIN_USER, groups=(MASTERS_GROUP,))
        self._start_controller_manager()
        self._start_kwok()

    def _start_etcd(self) -> None:
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
            env=_no_proxy_env(),
        )
        etcd.start()
        self.processes.append(etcd)

        def healthy() -> bool:
            with urllib.request.urlopen(f"{client_url}/health", timeout=2) as resp:
                return b'"health":"true"' in resp.read()

        wait_until("etcd /health", healthy, START_TIMEOUT, watch=[etcd])

    def _start_apiserver(self) -> None:
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
            env=_no_proxy_env(),
        )
        apiserver.start()
        self.processes.append(apiserver)
        admin_cert = self.ca.client(ADMIN_USER, (MASTERS_GROUP,))
        client_cert, client_key = write_pair(admin_cert, self.pki_dir, "admin")
        context = ssl.create_default_context(cafile=str(self.ca_file))
        context.load_cert_chain(str(client_cert), str(client_key))

        def ready() -> bool:
            return http_ok(f"{self.server}/readyz", context)

        wait_until("kube-apiserver /readyz", ready, START_TIMEOUT, interval=0.5, watch=[apiserver])

    def _https_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))

    def _start_controller_manager(self) -> None:
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
            env=_no_proxy_env(),
        )
        manager.start()
        self.processes.append(manager)
        context = self._https_context()

        def healthy() -> bool:
            return http_ok(f"https://127.0.0.1:{self.controller_manager_port}/healthz", context)

        wait_until("kube-controller-manager /healthz", healthy, START_TIMEOUT, watch=[manager])

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
            env=_no_proxy_env(),
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
            env=_no_proxy_env(),
        )
        scheduler.start()
        self.processes.append(scheduler)
        self.scheduler = scheduler
        context = ssl.create_default_context(cafile=str(self.ca_file))

        def healthy() -> bool:
            return http_ok(f"https://127.0.0.1:{self.scheduler_port}/healthz", context)

        wait_until("kube-scheduler /healthz", healthy, START_TIMEOUT, watch=[scheduler])

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
