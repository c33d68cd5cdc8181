"""Tessera's services on the dev cluster from its container image, as the chart deploys them.

The alternative to :class:`devcluster.services.Services` (subprocesses) when the cluster's
options name an image (``Options.image``). The chart (charts/tessera, self-signed TLS) is
rendered with ``helm template`` for that image, and:

* its identities (namespace, ServiceAccounts, RBAC), its pod-keys policy and its
  MutatingWebhookConfiguration are applied unchanged but for the webhook's ``clientConfig``:
  ``url: https://127.0.0.1:<port>`` (no cluster network here; a Service would send the API
  server to a ClusterIP off this machine);
* the certs Job's container runs in the image (its ServiceAccount's token at the kubelet's
  path) and creates the CA, the leaf Secrets and the webhook's caBundle;
* the webhook and allocator Deployments' containers run in the image with podman
  (devcluster/kubelet.py: the rendered args and env, uid 10001, read-only root, every
  capability dropped, the Secret files at the same mount paths, laid out as the kubelet's
  AtomicWriter lays them out) on the host network, addresses localised: ``--host`` loopback,
  ``--port`` a free port (two pods cannot share 8443 on one network);
* kube-scheduler reaches the allocator over mutual TLS with the Job's CA and the client
  certificate of the Job's ``tessera-scheduler-client-tls`` Secret, checking the shipped
  ``serverName``.

The one difference in certificates: the API server dials the webhook at 127.0.0.1, so the
webhook's files hold a leaf of the Job's CA for its Service names *and* 127.0.0.1 (the Job's
own leaf names the Service only); its ca.crt is the Job's.
"""

from __future__ import annotations

import base64
import dataclasses
import logging
import secrets
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from certs.builder import CertificateAuthority, KeyPair, build_leaf, service_dns_names
from devcluster import DevClusterError
from devcluster.binaries import repo_root
from devcluster.controlplane import ControlPlane
from devcluster.image import Podman, ulimits
from devcluster.kubelet import PodContext, container_run, exec_probe, http_probe
from devcluster.pod_runtime import Container, SecretVolume
from devcluster.process import free_port, no_proxy_env, wait_until
from devcluster.scheduler_config import (
    SCHEDULER_CONFIG,
    ExtenderAddress,
    load_scheduler_configuration,
    tls_data,
)
from devcluster.services import wait_for_pod_keys_policy, webhook_configuration

if TYPE_CHECKING:
    from devcluster.options import Options

logger = logging.getLogger(__name__)

NAMESPACE = "tessera-system"
CHART = Path("charts/tessera")
#: The objects of the chart applied to the API server; the workloads run in podman instead
#: (Deployments, the Job) or are never started (CronJob: its command is run on demand).
APPLIED_KINDS = frozenset({"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
                           "Role", "RoleBinding", "MutatingWebhookConfiguration",
                           "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"})
START_TIMEOUT = 120.0
TOKEN_SECONDS = 48 * 3600
#: A Job's container finishes within the chart's activeDeadlineSeconds.
JOB_TIMEOUT = 600.0
#: The install Job issues leaves this short-lived (``--days``, with a ``--renew-before-days``
#: below it, added to its args), so they are already within the renewal CronJob's 30 days
#: and its unchanged command renews them: a rotation without waiting eleven months.
LEAF_DAYS = 20

Doc = dict[str, Any]


def pod_spec(workload: Doc) -> Doc:
    spec = workload["spec"]
    if workload["kind"] == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    template: Doc = spec["template"]["spec"]
    return template


def one(docs: list[Doc], kind: str, name: str) -> Doc:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    if len(found) != 1:
        raise DevClusterError(f"the chart renders {len(found)} {kind} {name}, not one")
    return found[0]


def image_values(image: str) -> list[str]:
    """``--set`` values that make the chart run ``image`` (REPOSITORY:TAG)."""
    repository, _, tag = image.rpartition(":")
    if not repository or "/" in tag:
        raise DevClusterError(f"image {image!r} must be REPOSITORY:TAG")
    return [f"--set=image.repository={repository}", f"--set=image.tag={tag}"]


class ContainerServices:
    """The chart's webhook and allocator in containers; the certs Job's command in one."""

    def __init__(self, control_plane: ControlPlane, options: Options,
                 api_client: Callable[[], Any]) -> None:
        if options.image is None:
            raise DevClusterError("ContainerServices runs an image: Options.image is unset")
        self.control_plane = control_plane
        self.options = options
        self.image = options.image
        self._api_client = api_client
        self.podman = Podman.find()
        self.docs: list[Doc] = []
        self.containers: dict[str, Container] = {}
        self.ports: dict[str, int] = {}
        self.volumes: dict[str, SecretVolume] = {}
        #: Seconds from ``podman run`` to the readiness probe's first success, by Deployment.
        self.ready_seconds: dict[str, float] = {}
        self._service_accounts: dict[str, Path] = {}

    @property
    def _cp(self) -> Any:
        return self.control_plane

    @property
    def api_client(self) -> Any:
        return self._api_client()

    @property
    def workdir(self) -> Path:
        return self.control_plane.workdir / "containers"

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self.docs = self.render()
        self.apply([d for d in self.docs if d["kind"] in APPLIED_KINDS],
                   f"https://127.0.0.1:{self.port('tessera-webhook')}")
        self.wait_for_pod_keys_policy()
        job = self.run_job(one(self.docs, "Job", "tessera-certs"), f"--days={LEAF_DAYS}",
                           "--renew-before-days=5")
        if job.returncode != 0:
            raise DevClusterError(f"the certs Job's container failed ({job.returncode}):\n"
                                  f"{job.stdout}{job.stderr}")
        self.publish_secrets()
        for name in ("tessera-webhook", "tessera-allocator"):
            self.start_deployment(name)

    def stop(self, meanwhile: Callable[[], None] | None = None) -> None:
        """Every container, then ``meanwhile`` (as :meth:`Services.stop`)."""
        for container in self.containers.values():
            container.stop()
        if meanwhile is not None:
            meanwhile()

    # ------------------------------------------------------------------ the chart
    def render(self) -> list[Doc]:
        result = subprocess.run(
            [str(self.control_plane.binaries.helm), "template", "tessera", str(repo_root() / CHART),
             f"--namespace={NAMESPACE}", *image_values(self.image),
             # As Options says, as the subprocess services do (docs/preemption.md).
             *(() if self.options.preemption else ("--set=allocator.preemption=false",))],
            capture_output=True, text=True, check=False, timeout=120)
        if result.returncode != 0:
            raise DevClusterError(f"helm template failed: {result.stderr}")
        return [d for d in yaml.safe_load_all(result.stdout) if d]

    def apply(self, docs: list[Doc], webhook_url: str) -> None:
        """``docs`` applied server-side, the webhook registration pointed at ``webhook_url``."""
        localised = []
        for doc in docs:
            if doc["kind"] == "MutatingWebhookConfiguration":
                doc = webhook_configuration(doc, webhook_url, b"")
                for hook in doc["webhooks"]:
                    del hook["clientConfig"]["caBundle"]  # the certs Job sets it
            localised.append(doc)
        result = subprocess.run(
            [str(self.control_plane.binaries.kubectl),
             f"--kubeconfig={self.control_plane.admin_kubeconfig}",
             "apply", "--server-side", "--filename=-"],
            input=yaml.safe_dump_all(localised), capture_output=True, text=True, check=False,
            timeout=120, env=no_proxy_env())
        if result.returncode != 0:
            raise DevClusterError(f"applying the chart's objects failed: {result.stderr}")

    def wait_for_pod_keys_policy(self) -> None:
        """Returns once the API server enforces the chart's pod-keys policy."""
        wait_for_pod_keys_policy(self.api_client, self.options.vocabulary, START_TIMEOUT)

    def service_account(self, name: str) -> Path:
        """The kubelet's projected ServiceAccount volume: a token (TokenRequest), the API
        server's CA and the namespace."""
        if name not in self._service_accounts:
            from kubernetes import client

            core: Any = client.CoreV1Api(self.api_client)
            token = core.create_namespaced_service_account_token(
                name, NAMESPACE, {"spec": {"expirationSeconds": TOKEN_SECONDS}}).status.token
            volume = SecretVolume(self.workdir / "serviceaccount" / name)
            volume.publish({"token": token.encode(), "ca.crt": self._cp.ca.cert_pem,
                            "namespace": NAMESPACE.encode()})
            self._service_accounts[name] = volume.path
        return self._service_accounts[name]

    def pod(self, workload: Doc, suffix: str) -> PodContext:
        spec = pod_spec(workload)
        account = spec.get("serviceAccountName", "default")
        mounted = spec.get("automountServiceAccountToken", True)
        return PodContext(
            name=f"{workload['metadata']['name']}-{suffix}", namespace=NAMESPACE,
            api_host="127.0.0.1", api_port=self._cp.apiserver_port,
            secrets={name: v.path for name, v in self.volumes.items()},
            service_account=self.service_account(account) if mounted else None)

    # ------------------------------------------------------------------ certificates
    def run_job(self, workload: Doc, *extra_args: str) -> subprocess.CompletedProcess[str]:
        """The Job's (or CronJob's) one container, run to completion in the image."""
        spec = pod_spec(workload)
        (container,) = spec["containers"]
        run = container_run(spec, container, self.pod(workload, secrets.token_hex(3)), {})
        run = dataclasses.replace(run, args=(*run.args, *extra_args))
        argv = self.podman.command("run", "--rm", *run.podman_args(ulimits()))
        result = subprocess.run(argv, capture_output=True, text=True, check=False,
                                timeout=JOB_TIMEOUT, env=no_proxy_env())
        log = self._cp.log_dir / f"{workload['metadata']['name']}.log"
        with log.open("a") as out:
            out.write(f"# {' '.join(argv)}\n{result.stdout}{result.stderr}")
        return result

    def read_secret(self, name: str) -> dict[str, bytes]:
        from kubernetes import client

        core: Any = client.CoreV1Api(self.api_client)
        data = core.read_namespaced_secret(name, NAMESPACE).data or {}
        return {k: base64.b64decode(v) for k, v in data.items()}

    def ca(self) -> CertificateAuthority:
        data = self.read_secret("tessera-ca")
        return CertificateAuthority(data["tls.crt"], data["tls.key"])

    def publish_secrets(self) -> None:
        """Every Secret the Deployments mount, as their volumes: the Job's, and the webhook's
        leaf with 127.0.0.1 added (see the module docstring)."""
        names = {v["secret"]["secretName"]
                 for name in ("tessera-webhook", "tessera-allocator")
                 for v in pod_spec(one(self.docs, "Deployment", name)).get("volumes") or []
                 if "secret" in v}
        for name in sorted(names):
            files = self.read_secret(name)
            if name == "tessera-webhook-tls":
                leaf = build_leaf(self.ca(), "tessera-webhook",
                                  service_dns_names("tessera-webhook", NAMESPACE), ["127.0.0.1"])
                files = {**files, "tls.crt": leaf.cert_pem, "tls.key": leaf.key_pem}
            volume = self.volumes.setdefault(name, SecretVolume(self.workdir / "secrets" / name))
            volume.publish(files)

    def renew_certificates(self) -> subprocess.CompletedProcess[str]:
        """The renewal CronJob's container, run as rendered (the leaves are due: see
        :data:`LEAF_DAYS`), then the new Secrets published to the volumes as the kubelet
        would."""
        result = self.run_job(one(self.docs, "CronJob", "tessera-certs-renew"))
        if result.returncode == 0:
            self.publish_secrets()
        return result

    # ------------------------------------------------------------------ the Deployments
    def port(self, name: str) -> int:
        """The loopback port Deployment ``name`` listens on here, in place of 8443."""
        return self.ports.setdefault(name, free_port())

    def replacements(self, name: str) -> dict[str, str]:
        port = self.port(name)
        return {"--host=0.0.0.0": "--host=127.0.0.1", "--port=8443": f"--port={port}",
                "127.0.0.1:8443": f"127.0.0.1:{port}"}

    def container_spec(self, name: str) -> Doc:
        """The one container of Deployment ``name``, as rendered."""
        containers: list[Doc] = pod_spec(one(self.docs, "Deployment", name))["containers"]
        if len(containers) != 1:
            raise DevClusterError(f"{name} has {len(containers)} containers; the chart has one")
        return containers[0]

    def start_deployment(self, name: str) -> None:
        workload = one(self.docs, "Deployment", name)
        spec = pod_spec(workload)
        run = container_run(spec, self.container_spec(name),
                            self.pod(workload, secrets.token_hex(3)), self.replacements(name))
        container = Container(self.podman, run, self._cp.log_dir / f"{name}.log")
        self.containers[name] = container
        container.start()
        wait_until(f"{name} readiness probe", lambda: self.probe(name, "readinessProbe"),
                   START_TIMEOUT, interval=0.3, watch=[container.process])
        self.ready_seconds[name] = time.monotonic() - container.started_at
        logger.info("%s ready %.1fs after podman run", name, self.ready_seconds[name])

    def termination_grace_seconds(self, name: str) -> float:
        spec = pod_spec(one(self.docs, "Deployment", name))
        return float(spec.get("terminationGracePeriodSeconds", 30))

    def probe(self, name: str, kind: str) -> bool:
        """The Deployment's probe ``kind`` as the kubelet runs it: an exec probe in the
        container, or an HTTPS GET to its port (the kubelet verifies no certificate; this
        verifies the chain and 127.0.0.1)."""
        spec = self.container_spec(name)
        command = exec_probe(spec, kind, self.replacements(name))
        if command is not None:
            return self.containers[name].exec(command).returncode == 0
        http = http_probe(spec, kind)
        if http is None:
            raise DevClusterError(f"{name} has no {kind}")
        scheme, path, _ = http
        context = ssl.create_default_context(cadata=self.ca().cert_pem.decode())
        url = f"{scheme}://127.0.0.1:{self.port(name)}{path}"
        try:
            with urllib.request.urlopen(url, context=context, timeout=3) as resp:
                return bool(200 <= resp.status < 400)
        except OSError:
            return False

    def extender_address(self) -> ExtenderAddress:
        """The allocator as kube-scheduler reaches it: loopback, the Job's CA, the client
        certificate of the scheduler's Secret, and the shipped ``serverName``."""
        shipped = load_scheduler_configuration(SCHEDULER_CONFIG)
        server_name = shipped["extenders"][0]["tlsConfig"]["serverName"]
        client = self.read_secret("tessera-scheduler-client-tls")
        return ExtenderAddress(
            f"https://127.0.0.1:{self.port('tessera-allocator')}",
            tls_data(client["ca.crt"], KeyPair(client["tls.crt"], client["tls.key"]),
                     server_name))
