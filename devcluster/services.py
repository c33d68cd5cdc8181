"""Tessera's own services on the dev cluster: the webhook and the allocator, as subprocesses.

Both run through the real ``tessera`` console script (the same command lines a container
would run) on loopback ports. Wiring:

* webhook: serves TLS with a certificate from the cluster CA (IP SAN 127.0.0.1) and is
  registered by the MutatingWebhookConfiguration we ship (manifests/base), with
  ``clientConfig`` replaced by ``url: https://127.0.0.1:<port>/mutate`` + ``caBundle``, the way
  envtest registers webhooks (no cluster DNS here), and ``matchConditions`` generated for the
  webhook's own ``--dialects``/``--domain`` (webhook/registration.py; for the defaults they
  equal the shipped ones, which tests/deploy checks).
* allocator: runs as the ServiceAccount that manifests/base/allocator-rbac.yaml binds, with a
  token from the TokenRequest API, after those RBAC objects are applied unchanged. So it has
  exactly the permissions we ship, and a missing rule fails the e2e tests.
"""

from __future__ import annotations

import base64
import logging
import ssl
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from certs.builder import KeyPair
from devcluster import DevClusterError
from devcluster.binaries import repo_root
from devcluster.controlplane import ControlPlane
from devcluster.options import Options
from devcluster.pki import write_pair
from devcluster.process import (
    QUICK_POLL_S,
    ManagedProcess,
    free_port,
    http_ok,
    no_proxy_env,
    wait_until,
)
from devcluster.scheduler_config import ExtenderAddress, tls_data
from tessera.agent_profiles import AgentProfile
from tessera.vocabulary import Vocabulary

logger = logging.getLogger(__name__)

START_TIMEOUT = 60.0
#: Long enough for any demo session; the token is minted again on every allocator start.
TOKEN_SECONDS = 48 * 3600
#: What preemption needs in the allocator's ClusterRole (manifests/base/allocator-rbac.yaml;
#: manifests/components/no-preemption removes them): the Eviction API on its victims,
#: ``status.nominatedNodeName`` on the preemptor, the PodDisruptionBudgets it weighs.
PREEMPTION_RULES: list[dict[str, Any]] = [
    {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
    {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]},
    {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": ["list"]},
]


def manifests_dir() -> Path:
    return repo_root() / "manifests"


def load_documents(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise DevClusterError(f"{path} is missing; the dev cluster applies it unchanged")
    return [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]


def service_account_subject(rbac: list[dict[str, Any]]) -> tuple[str, str]:
    """The one ServiceAccount (namespace, name) the RBAC documents bind (pure)."""
    subjects = {
        (s.get("namespace", ""), s["name"])
        for d in rbac
        if d.get("kind") in ("RoleBinding", "ClusterRoleBinding")
        for s in d.get("subjects") or []
        if s.get("kind") == "ServiceAccount"
    }
    if len(subjects) != 1:
        raise DevClusterError(
            f"allocator RBAC should bind exactly one ServiceAccount, found {sorted(subjects)}"
        )
    return subjects.pop()


def webhook_configuration(
    shipped: dict[str, Any], url: str, ca_pem: bytes,
    match_conditions: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The shipped MutatingWebhookConfiguration with each clientConfig pointed at ``url`` and,
    when given, ``match_conditions`` in place of the shipped ones."""
    config = {**shipped, "metadata": {**shipped.get("metadata", {})}}
    webhooks = []
    for hook in shipped.get("webhooks") or []:
        path = ((hook.get("clientConfig") or {}).get("service") or {}).get("path", "/mutate")
        webhooks.append(
            {
                **hook,
                "clientConfig": {
                    "url": url.rstrip("/") + path,
                    "caBundle": base64.b64encode(ca_pem).decode(),
                },
                **({"matchConditions": match_conditions} if match_conditions is not None
                   else {}),
            }
        )
    config["webhooks"] = webhooks
    return config


def _tessera_command() -> list[str]:
    """The ``tessera`` console script next to this interpreter, else ``python -m``."""
    script = Path(sys.executable).parent / "tessera"
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-m", "tessera.cli"]


class Services:
    """The webhook and allocator processes of one dev cluster."""

    def __init__(self, control_plane: ControlPlane, options: Options,
                 api_client: Callable[[], Any]) -> None:
        self.control_plane = control_plane
        self.options = options
        #: the cluster's admin API client, made when first asked for
        self._api_client = api_client
        self.webhook: ManagedProcess | None = None
        self.allocator: ManagedProcess | None = None
        self.webhook_port = 0
        self.allocator_port = 0
        self._allocator_argv: list[str] = []
        self._webhook_argv: list[str] = []
        self._allocator_env: dict[str, str] = {}
        #: The allocator's TLS files and kubeconfig (its ServiceAccount), by flag name.
        self.allocator_files: dict[str, Path] = {}
        self.allocator_namespace = ""
        self.extender_client: KeyPair | None = None

    @property
    def api_client(self) -> Any:
        return self._api_client()

    @property
    def extender_url(self) -> str:
        return f"https://127.0.0.1:{self.allocator_port}/scheduler"

    def extender_address(self) -> ExtenderAddress:
        """The allocator as kube-scheduler reaches it here: loopback, our CA, the scheduler's
        client certificate (mutual TLS)."""
        if self.extender_client is None:
            raise DevClusterError("the allocator has not been started")
        return ExtenderAddress(
            f"https://127.0.0.1:{self.allocator_port}",
            tls_data(self.control_plane.ca.cert_pem, self.extender_client, "127.0.0.1"))

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """All begun, then each waited for (the policy's loading, each process's start)."""
        self.install_pod_keys_policy(wait=False)
        if self.options.webhook:
            self.start_webhook(wait=False)
        if self.options.allocator:
            self.start_allocator(wait=False)
        wait_for_pod_keys_policy(self.api_client, self.options.vocabulary, START_TIMEOUT)
        if self.webhook is not None:
            self._wait_webhook()
        if self.allocator is not None:
            self._wait_allocator()

    def stop(self, meanwhile: Callable[[], None] | None = None) -> None:
        """The allocator first (it releases its Lease through the API server), then
        ``meanwhile`` (the control plane's stop) while the webhook, signalled at once, stops:
        it needs nothing else, and gunicorn's workers see the signal within a second."""
        if self.webhook is not None:
            self.webhook.terminate()
        if self.allocator is not None:
            self.allocator.stop()
        if meanwhile is not None:
            meanwhile()
        if self.webhook is not None:
            self.webhook.stop()

    # ------------------------------------------------------------------ pod keys policy
    def install_pod_keys_policy(self, wait: bool = True) -> None:
        """The shipped ValidatingAdmissionPolicy (and binding) that keeps Tessera's pod keys to
        the allocator, unchanged; returns (``wait``) once the API server enforces it (policies
        load asynchronously), proven by a dry-run forgery it refuses."""
        from kubernetes import client

        docs = load_documents(manifests_dir() / "base" / "pod-keys-policy.yaml")
        admission: Any = client.AdmissionregistrationV1Api(self.api_client)
        for doc in docs:
            if doc["kind"] == "ValidatingAdmissionPolicy":
                admission.create_validating_admission_policy(doc)
            elif doc["kind"] == "ValidatingAdmissionPolicyBinding":
                admission.create_validating_admission_policy_binding(doc)
        if wait:
            wait_for_pod_keys_policy(self.api_client, self.options.vocabulary, START_TIMEOUT)

    # ------------------------------------------------------------------ webhook
    def start_webhook(self, wait: bool = True) -> None:
        """Started and registered; returns once it answers (``wait``)."""
        cp = self.control_plane
        self.webhook_port = free_port()
        cert, key = write_pair(cp.ca.serving("tessera-webhook"), cp.pki_dir, "webhook")
        argv = [*_tessera_command(), "webhook", "--host=127.0.0.1", f"--port={self.webhook_port}",
                f"--tls-cert={cert}", f"--tls-key={key}", *self.options.profile_args,
                *self.options.webhook_args]
        env = no_proxy_env()
        self._webhook_argv = argv
        self._run_webhook(wait)
        shipped = load_documents(manifests_dir() / "base" / "webhook-configuration.yaml")
        mwc = next(d for d in shipped if d.get("kind") == "MutatingWebhookConfiguration")
        from kubernetes import client

        from webhook.cli import dialects_from_args, parse_args
        from webhook.registration import match_conditions

        # The webhook started above with these flags and this environment, so it reads the
        # same dialects the conditions select.
        dialects = dialects_from_args(parse_args(
            [*self.options.profile_args, *self.options.webhook_args]), env)
        admission: Any = client.AdmissionregistrationV1Api(self.api_client)
        admission.create_mutating_webhook_configuration(
            webhook_configuration(mwc, f"https://127.0.0.1:{self.webhook_port}", cp.ca.cert_pem,
                                  match_conditions(dialects))
        )

    def _run_webhook(self, wait: bool = True) -> None:
        log = self.control_plane.log_dir / "webhook.log"
        self.webhook = ManagedProcess("webhook", self._webhook_argv, log, env=no_proxy_env())
        self.webhook.start()
        if wait:
            self._wait_webhook()

    def _wait_webhook(self) -> None:
        assert self.webhook is not None
        self._wait_https("webhook /readyz", self.webhook_port, "/readyz", self.webhook)

    def stop_webhook(self) -> None:
        """The webhook goes away (its registration stays): GPU pods are refused meanwhile."""
        if self.webhook is not None and self.webhook.alive():
            self.webhook.stop()

    def restart_webhook(self) -> None:
        """Start the webhook again on the same port with the same arguments."""
        self.stop_webhook()
        self._run_webhook()

    # ------------------------------------------------------------------ allocator
    def _allocator_identity(self) -> Path:
        """Apply the shipped namespace, ServiceAccount and RBAC; a token kubeconfig for it."""
        from kubernetes import client, utils

        api = self.api_client
        rbac_file = self.options.allocator_rbac or (
            manifests_dir() / "base" / "allocator-rbac.yaml"
        )
        rbac = load_documents(rbac_file)
        if self.options.agent_profile in (AgentProfile.HAMI, AgentProfile.VOLCANO_VGPU):
            # As manifests/components/agent-hami (-volcano-vgpu) grant: the node lock
            # (docs/hami.md).
            for doc in rbac:
                if doc.get("kind") == "ClusterRole":
                    doc["rules"].append({"apiGroups": [""], "resources": ["nodes"],
                                         "verbs": ["patch"]})
        if not self.options.preemption:
            # As manifests/components/no-preemption removes them (docs/preemption.md).
            for doc in rbac:
                if doc.get("kind") == "ClusterRole":
                    doc["rules"] = [r for r in doc["rules"] if r not in PREEMPTION_RULES]
        namespace, account = service_account_subject(rbac)
        self.allocator_namespace = namespace
        core: Any = client.CoreV1Api(api)
        create_from_dict: Any = utils.create_from_dict
        from kubernetes.client.exceptions import ApiException

        for doc in [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": account, "namespace": namespace},
            },
            *rbac,
        ]:
            try:
                create_from_dict(api, doc)
            except utils.FailToCreateError as exc:
                if not all(
                    isinstance(e, ApiException) and e.status == 409 for e in exc.api_exceptions
                ):
                    raise DevClusterError(f"applying allocator RBAC failed: {exc}") from exc
        token = core.create_namespaced_service_account_token(
            account, namespace, {"spec": {"expirationSeconds": TOKEN_SECONDS}}
        ).status.token
        user = f"system:serviceaccount:{namespace}:{account}"
        path: Path = self.control_plane.write_kubeconfig("tessera-allocator", user, token=token)
        return path

    def start_allocator(self, wait: bool = True) -> None:
        """The allocator over mutual TLS: kube-scheduler must present a cert from our CA;
        returns once its cache is synced (``wait``).

        Leader election stays on (as shipped) with a fixed identity, so its Lease RBAC is
        exercised and a restarted process reclaims its own Lease.
        """
        cp = self.control_plane
        kubeconfig = self._allocator_identity()
        self.allocator_port = free_port()
        cert, key = write_pair(cp.ca.serving("tessera-allocator"), cp.pki_dir, "allocator")
        self.extender_client = cp.ca.client("kube-scheduler-extender-client")
        self._allocator_argv = [
            *_tessera_command(), "allocator", "--host=127.0.0.1", f"--port={self.allocator_port}",
            f"--tls-cert={cert}", f"--tls-key={key}", f"--tls-client-ca={cp.ca_file}",
            f"--kubeconfig={kubeconfig}", f"--lease-namespace={self.allocator_namespace}",
            "--identity=devcluster-allocator", *self.options.profile_args,
            *(() if self.options.preemption else ("--preemption=false",)),
            *self.options.allocator_args]
        self._allocator_env = no_proxy_env()
        self.allocator_files = {"tls_cert": cert, "tls_key": key, "tls_client_ca": cp.ca_file,
                                "kubeconfig": kubeconfig}
        self._run_allocator(wait)

    @property
    def allocator_argv(self) -> tuple[str, ...]:
        """The allocator's command line as last started (a benchmark restarts it changed)."""
        return tuple(self._allocator_argv)

    def replace_allocator(self, argv: list[str]) -> None:
        """Serve the allocator's port with another program (a benchmark's stand-in), started
        like the allocator; it can use :attr:`allocator_files` (TLS files and identity)."""
        if self.allocator is not None and self.allocator.alive():
            self.allocator.stop()
        self._allocator_argv = argv
        self._run_allocator()

    def _run_allocator(self, wait: bool = True) -> None:
        self.allocator = ManagedProcess(
            "allocator", self._allocator_argv, self.control_plane.log_dir / "allocator.log",
            env=self._allocator_env,
        )
        self.allocator.start()
        if wait:
            self._wait_allocator()

    def _wait_allocator(self) -> None:
        assert self.allocator is not None
        self._wait_https("allocator /readyz (cache synced)", self.allocator_port, "/readyz",
                         self.allocator)

    def kill_allocator(self) -> None:
        """SIGKILL: a crash, no chance to clean up."""
        if self.allocator is not None:
            self.allocator.kill()

    def restart_allocator(self) -> None:
        """Start the allocator again on the same port with the same arguments."""
        if self.allocator is not None and self.allocator.alive():
            self.allocator.stop()
        self._run_allocator()

    # ------------------------------------------------------------------ helpers
    def _wait_https(self, what: str, port: int, path: str, proc: ManagedProcess) -> None:
        context = ssl.create_default_context(cafile=str(self.control_plane.ca_file))
        # The admin's client cert: the allocator demands one from our CA (mutual TLS).
        pki = self.control_plane.pki_dir
        context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))

        def ready() -> bool:
            return http_ok(f"https://127.0.0.1:{port}{path}", context, timeout=2)

        wait_until(what, ready, START_TIMEOUT, QUICK_POLL_S, watch=[proc])


def wait_for_pod_keys_policy(api_client: Any, vocabulary: Vocabulary, timeout: float) -> None:
    """Returns once the API server enforces the pod-keys policy (policies load
    asynchronously): a dry-run pod that forges the allocation annotation is refused."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    core: Any = client.CoreV1Api(api_client)
    forged = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "forged-",
                     "annotations": {vocabulary.allocation_annotation: "{}"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }

    def enforced() -> bool:
        try:
            core.create_namespaced_pod("default", forged, dry_run="All")
        except ApiException as exc:
            return exc.status in (400, 403, 422)
        return False

    wait_until("the pod keys policy enforced", enforced, timeout, QUICK_POLL_S)
