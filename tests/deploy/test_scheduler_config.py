"""The real kube-scheduler runs the shipped KubeSchedulerConfigurations; mutual TLS holds.

On the deploy control plane (see conftest.py) with the second-scheduler overlay installed and
its certs Job run, the allocator is started with the Deployment's own arguments (addresses and
mounted paths localised, as deploy_helpers.localise says) and the Secrets the Job made, as
ServiceAccount tessera-allocator. Then kube-scheduler is started with

* the ConfigMap of the second-scheduler overlay, as ServiceAccount tessera-scheduler (so the
  overlay's RBAC is what it runs under), and
* manifests/scheduler/kube-scheduler-config.yaml, as shipped and without its entry that
  scores CPU-only pods (as docs/deploy.md turns it off), as system:kube-scheduler (a control
  plane's own scheduler), localised by the dev cluster's own substitution
  (devcluster.scheduler_config.localise_scheduler_configuration),

each with only the allocator's address, the TLS files and the kubeconfig substituted.
Each places a GPU pod through the allocator over mutual TLS (and a CPU-only pod on its own).
"""

from __future__ import annotations

import base64
import contextlib
import socket
import ssl
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_helpers import (
    MANIFESTS,
    NAMESPACE,
    Doc,
    container,
    dump,
    kubectl_env,
    kustomize,
    localise,
    loopback_webhook,
    one,
    run_kubectl,
    service_account_kubeconfig,
    tessera_command,
)
from prometheus_client.parser import text_string_to_metric_families

from certs.builder import build_ca, build_leaf
from devcluster.binaries import Binaries
from devcluster.controlplane import ControlPlane
from devcluster.nodes import create_nodes, uniform
from devcluster.process import ManagedProcess, free_port, wait_until
from devcluster.scheduler_config import (
    SCHEDULER_CONFIG,
    ExtenderAddress,
    load_scheduler_configuration,
    localise_scheduler_configuration,
    without_cpu_only_scoring,
)
from devcluster.workloads import container as pod_container
from devcluster.workloads import make_pod, wait_for
from tessera.vocabulary import Vocabulary, decode_allocation

pytestmark = pytest.mark.e2e

VOCAB = Vocabulary()
USERS = "sched-users"
SERVICE_URL = "https://tessera-allocator.tessera-system.svc:443"


@pytest.fixture(scope="module")
def second_scheduler(first_run: subprocess.CompletedProcess[str], kubectl: Path,
                     admin_kubeconfig: Path, tmp_path_factory: pytest.TempPathFactory
                     ) -> list[Doc]:
    """The second-scheduler overlay installed for real, webhook registered on loopback."""
    assert first_run.returncode == 0, first_run.stderr
    docs = loopback_webhook(kustomize(kubectl, MANIFESTS / "overlays" / "second-scheduler"),
                            free_port())
    run_kubectl(kubectl, admin_kubeconfig, "apply", "--server-side", "--filename=-",
                stdin=dump(docs))
    return docs


def secret_volume(core: Any, name: str, directory: Path) -> Path:
    """Secret ``name`` as the kubelet mounts it: one file per key."""
    directory.mkdir(parents=True, exist_ok=True)
    for key, value in core.read_namespaced_secret(name, NAMESPACE).data.items():
        (directory / key).write_bytes(base64.b64decode(value))
    return directory


@pytest.fixture(scope="module")
def core(api_client: Any) -> Any:
    from kubernetes import client

    return client.CoreV1Api(api_client)


@pytest.fixture(scope="module")
def volumes(second_scheduler: list[Doc], core: Any, tmp_path_factory: pytest.TempPathFactory
            ) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("volumes")
    return {
        "allocator": secret_volume(core, "tessera-allocator-tls", root / "allocator-tls"),
        "scheduler": secret_volume(core, "tessera-scheduler-client-tls", root / "client-tls"),
    }


class Allocator:
    def __init__(self, port: int, probe: list[str], client_tls: Path) -> None:
        self.port = port
        self.probe = probe
        self.client_tls = client_tls

    def verb_calls(self, verb: str) -> float:
        """How often the allocator answered ``verb`` (its /metrics, as the scheduler's client)."""
        context = ssl.create_default_context(cafile=str(self.client_tls / "ca.crt"))
        context.check_hostname = False
        context.load_cert_chain(str(self.client_tls / "tls.crt"), str(self.client_tls / "tls.key"))
        with urllib.request.urlopen(f"https://127.0.0.1:{self.port}/metrics", context=context,
                                    timeout=5) as resp:
            text = resp.read().decode()
        return sum(s.value for family in text_string_to_metric_families(text)
                   for s in family.samples
                   if s.name == "tessera_allocator_verb_seconds_count"
                   and s.labels.get("verb") == verb)

    def probe_exit_code(self, path: str) -> int:
        """Run the Deployment's exec probe (localised) the way the kubelet would."""
        return subprocess.run([*self.probe[:-1], path], capture_output=True, check=False,
                              timeout=10).returncode


@pytest.fixture(scope="module")
def allocator(second_scheduler: list[Doc], volumes: dict[str, Path], control_plane: ControlPlane,
              api_client: Any) -> Iterator[Allocator]:
    deployment = one(second_scheduler, "Deployment", "tessera-allocator")
    main = container(deployment)
    port = free_port()
    paths = {"/etc/tessera/tls/": f"{volumes['allocator']}/",
             "/etc/tessera/probe-tls/": f"{volumes['scheduler']}/"}
    env = {"POD_NAME": "tessera-allocator-0", "POD_NAMESPACE": NAMESPACE}
    args = localise(main["args"], {"--host=0.0.0.0": "--host=127.0.0.1",
                                   "--port=8443": f"--port={port}", **paths}, env)
    kubeconfig = service_account_kubeconfig(control_plane, api_client, NAMESPACE,
                                            "tessera-allocator")
    process = ManagedProcess(
        "allocator", [*tessera_command(), *args, f"--kubeconfig={kubeconfig}"],
        control_plane.log_dir / "deploy-allocator.log",
        env={**deploy_env(), **env},
    )
    probe = localise(main["readinessProbe"]["exec"]["command"],
                     {**paths, "https://127.0.0.1:8443": f"https://127.0.0.1:{port}"})
    assert probe[0] == "python"  # the image's PATH leads to its virtualenv's python
    ready = Allocator(port, [sys.executable, *probe[1:]], volumes["scheduler"])
    process.start()
    try:
        wait_until("allocator ready (its own readiness probe)",
                   lambda: ready.probe_exit_code("/readyz") == 0, 60, interval=0.5,
                   watch=[process])
        yield ready
    finally:
        process.stop()


def deploy_env() -> dict[str, str]:
    return {**kubectl_env(), "KUBERNETES_SERVICE_HOST": ""}


@pytest.fixture(scope="module")
def gpu_nodes(second_scheduler: list[Doc], core: Any) -> list[str]:
    specs = [uniform(f"deploy-gpu-{i}", 2, "Tesla-T4", 15360) for i in range(2)]
    create_nodes(core, specs, VOCAB)
    core.create_namespace({"metadata": {"name": USERS}})
    return [s.name for s in specs]


@pytest.fixture(scope="module")
def webhook_tls(second_scheduler: list[Doc], core: Any, tmp_path_factory: pytest.TempPathFactory
                ) -> Path:
    """A serving cert for 127.0.0.1 from the cluster's own CA (Secret tessera-ca), made with
    ``tessera certs files``: there is no cluster DNS here, so the API server dials the webhook
    by IP, and the caBundle the certs Job set must verify it."""
    root = tmp_path_factory.mktemp("webhook")
    ca = core.read_namespaced_secret("tessera-ca", NAMESPACE).data
    (root / "ca").mkdir()
    (root / "ca" / "ca.crt").write_bytes(base64.b64decode(ca["tls.crt"]))
    (root / "ca" / "ca.key").write_bytes(base64.b64decode(ca["tls.key"]))
    result = subprocess.run([*tessera_command(), "certs", "files", f"--ca-dir={root / 'ca'}",
                             f"--out={root / 'tls'}", "--ip=127.0.0.1"],
                            capture_output=True, text=True, check=False, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "CA" in result.stdout and ": keep:" in result.stdout  # the cluster's CA, kept
    return root / "tls"


@contextlib.contextmanager
def running_webhook(docs: list[Doc], tls: Path, api_client: Any, log_dir: Path
                    ) -> Iterator[None]:
    """The webhook Deployment's command of ``docs`` (localised), registered on loopback."""
    from kubernetes import client

    port = free_port()
    args = localise(container(one(docs, "Deployment", "tessera-webhook"))["args"],
                    {"--host=0.0.0.0": "--host=127.0.0.1", "--port=8443": f"--port={port}",
                     "/etc/tessera/tls/": f"{tls}/"})
    process = ManagedProcess("webhook", [*tessera_command(), *args],
                             log_dir / "deploy-webhook.log", env=deploy_env())
    context = ssl.create_default_context(cafile=str(tls / "ca.crt"))

    def ready() -> bool:
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/readyz", context=context,
                                    timeout=3) as resp:
            return bool(resp.status == 200)

    registrations = client.AdmissionregistrationV1Api(api_client)
    process.start()
    try:
        wait_until("webhook /readyz", ready, 60, interval=0.3, watch=[process])
        registrations.patch_mutating_webhook_configuration(
            "tessera", [{"op": "replace", "path": "/webhooks/0/clientConfig/url",
                         "value": f"https://127.0.0.1:{port}/mutate"}])
        # The API server reads webhook configurations from its own informer: until it has the
        # patch, pods still go to the previous test's (stopped) webhook. A dry-run create
        # passes through the webhooks (sideEffects: None) without storing anything.
        core = client.CoreV1Api(api_client)

        def mutated_by_the_new_webhook() -> bool:
            try:
                probe = core.create_namespaced_pod(
                    USERS, user_pod("webhook-probe", {"aliyun.com/gpu-mem": "1"}), dry_run="All")
            except client.ApiException as exc:
                if exc.status == 500 and "failed calling webhook" in str(exc.body):
                    return False
                raise
            return VOCAB.request_annotation in (probe.metadata.annotations or {})

        wait_until("the API server calling the webhook at its new address",
                   mutated_by_the_new_webhook, 30, interval=0.2, watch=[process])
        yield
    finally:
        process.stop()


# ----------------------------------------------------------------------------- mutual TLS


def handshake(port: int, context: ssl.SSLContext) -> int:
    """GET /healthz; the HTTP status, or raise when the TLS handshake is refused."""
    with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", context=context,
                                timeout=5) as resp:
        return int(resp.status)


def client_context(ca_file: Path, cert: tuple[bytes, bytes] | None, tmp: Path
                   ) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca_file))
    context.check_hostname = False
    if cert is not None:
        (tmp / "c.crt").write_bytes(cert[0])
        (tmp / "c.key").write_bytes(cert[1])
        context.load_cert_chain(str(tmp / "c.crt"), str(tmp / "c.key"))
    return context


def test_the_allocator_answers_a_client_with_the_schedulers_certificate(
    allocator: Allocator, volumes: dict[str, Path], tmp_path: Path
) -> None:
    client = volumes["scheduler"]
    cert = ((client / "tls.crt").read_bytes(), (client / "tls.key").read_bytes())
    assert handshake(allocator.port, client_context(client / "ca.crt", cert, tmp_path)) == 200
    assert allocator.probe_exit_code("/healthz") == 0


@pytest.mark.parametrize("who", ["no certificate", "a certificate of another CA"])
def test_the_allocator_refuses_a_client_without_a_certificate_of_our_ca(
    allocator: Allocator, volumes: dict[str, Path], tmp_path: Path, who: str
) -> None:
    cert = None
    if who != "no certificate":
        stranger = build_leaf(build_ca("stranger"), "tessera-scheduler", server=False,
                              client=True)
        cert = (stranger.cert_pem, stranger.key_pem)
    context = client_context(volumes["scheduler"] / "ca.crt", cert, tmp_path)
    with pytest.raises((ssl.SSLError, ConnectionError, socket.timeout, OSError)):
        handshake(allocator.port, context)


# ----------------------------------------------------------------------------- schedulers


def start_scheduler(binaries: Binaries, control_plane: ControlPlane, name: str,
                    command: list[str], config: str, kubeconfig: Path) -> ManagedProcess:
    """kube-scheduler with the shipped command, the localised config, loopback serving."""
    config_path = control_plane.workdir / f"{name}.yaml"
    config_path.write_text(config)
    assert command[0] == "kube-scheduler"
    flags = [f if not f.startswith("--config=") else f"--config={config_path}"
             for f in command[1:]]
    port = free_port()
    process = ManagedProcess(
        name,
        [str(binaries.kube_scheduler), *flags, "--bind-address=127.0.0.1",
         f"--secure-port={port}", f"--authentication-kubeconfig={kubeconfig}",
         f"--authorization-kubeconfig={kubeconfig}"],
        control_plane.log_dir / f"{name}.log", env=deploy_env(),
    )
    process.start()
    insecure = ssl.create_default_context()
    insecure.check_hostname = False
    insecure.verify_mode = ssl.CERT_NONE  # its self-signed serving cert is not under test

    def healthy() -> bool:
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", context=insecure,
                                    timeout=3) as resp:
            return bool(resp.status == 200)

    wait_until(f"{name} /healthz", healthy, 60, interval=0.5, watch=[process])
    return process


def user_pod(name: str, limits: dict[str, str]) -> Doc:
    """A pod as a user writes it; the webhook normalises it."""
    return make_pod(name, [pod_container(limits=limits)])


def bound_through_allocator(core: Any, name: str, nodes: list[str]) -> Any:
    def allocation() -> str | None:
        pod = core.read_namespaced_pod(name, USERS)
        if not pod.spec.node_name:
            return None
        return str((pod.metadata.annotations or {}).get(VOCAB.allocation_annotation) or "")

    record = wait_for(f"pod {name} bound", allocation, timeout=60)
    assert record, "bound without an allocation record: not by our extender"
    pod = core.read_namespaced_pod(name, USERS)
    assert pod.spec.node_name in nodes
    assert decode_allocation(record).node == pod.spec.node_name
    assert pod.metadata.labels[VOCAB.gpu_pod_label] == "true"  # normalised by the webhook
    return pod


def test_the_second_scheduler_places_gpu_pods_through_the_allocator_under_its_own_rbac(
    binaries: Binaries, control_plane: ControlPlane, api_client: Any, core: Any,
    second_scheduler: list[Doc], allocator: Allocator, volumes: dict[str, Path],
    gpu_nodes: list[str], webhook_tls: Path
) -> None:
    config_map = next(d for d in second_scheduler if d["kind"] == "ConfigMap"
                      and d["metadata"]["name"].startswith("tessera-scheduler-config"))
    kubeconfig = service_account_kubeconfig(control_plane, api_client, NAMESPACE,
                                            "tessera-scheduler")
    text = config_map["data"]["kube-scheduler-config.yaml"]
    text = text.replace(SERVICE_URL, f"https://127.0.0.1:{allocator.port}")
    text = text.replace("/etc/tessera/scheduler-tls/", f"{volumes['scheduler']}/")
    config = yaml.safe_load(text)
    # In a pod: the in-cluster config of ServiceAccount tessera-scheduler; here the same
    # identity through a token kubeconfig.
    config["clientConnection"] = {"kubeconfig": str(kubeconfig)}
    command = container(one(second_scheduler, "Deployment", "tessera-scheduler"))["command"]
    scheduler = start_scheduler(binaries, control_plane, "tessera-scheduler", command,
                                yaml.safe_dump(config), kubeconfig)
    try:
        with running_webhook(second_scheduler, webhook_tls, api_client, control_plane.log_dir):
            # The seed pod "a 256 MiB share"; the webhook gives it schedulerName.
            core.create_namespaced_pod(
                USERS, user_pod("via-second-scheduler", {"elasticgpu.io/gpu-memory": "256"}))
        pod = bound_through_allocator(core, "via-second-scheduler", gpu_nodes)
        assert pod.spec.scheduler_name == "tessera-scheduler"
        from kubernetes import client

        lease: Any = client.CoordinationV1Api(api_client).read_namespaced_lease(
            "tessera-scheduler", NAMESPACE)
        assert lease.spec.holder_identity
    finally:
        scheduler.stop()


@pytest.mark.parametrize("score_cpu_only_pods", [True, False],
                         ids=["snippet", "snippet-without-cpu-only-scoring"])
def test_the_control_plane_snippet_places_gpu_pods_through_the_allocator(
    binaries: Binaries, control_plane: ControlPlane, api_client: Any, core: Any,
    kubectl: Path, allocator: Allocator, volumes: dict[str, Path], gpu_nodes: list[str],
    webhook_tls: Path, score_cpu_only_pods: bool
) -> None:
    # The identity a kubeadm control plane gives its scheduler (CN system:kube-scheduler).
    kubeconfig = control_plane.write_kubeconfig("deploy-kube-scheduler", "system:kube-scheduler")
    # The dev cluster's own substitution (addresses and credentials only), with the mounted
    # TLS files of the Secret in place of the control-plane host's.
    client_tls = volumes["scheduler"]
    address = ExtenderAddress(
        f"https://127.0.0.1:{allocator.port}",
        {"serverName": "tessera-allocator.tessera-system.svc",
         "caFile": str(client_tls / "ca.crt"), "certFile": str(client_tls / "tls.crt"),
         "keyFile": str(client_tls / "tls.key")})
    shipped = load_scheduler_configuration(SCHEDULER_CONFIG)
    if not score_cpu_only_pods:
        shipped = without_cpu_only_scoring(shipped)
    config = localise_scheduler_configuration(shipped, {"kubeconfig": str(kubeconfig)}, address)
    command = ["kube-scheduler", "--config=/etc/kubernetes/kube-scheduler-config.yaml"]
    stem = "snippet" if score_cpu_only_pods else "snippet-without-cpu-only"
    name = f"kube-scheduler-{stem}"
    scheduler = start_scheduler(binaries, control_plane, name, command,
                                yaml.safe_dump(config), kubeconfig)
    # The webhook as the self-signed overlay runs it: no schedulerName of its own.
    plain = kustomize(kubectl, MANIFESTS / "overlays" / "self-signed")
    try:
        with running_webhook(plain, webhook_tls, api_client, control_plane.log_dir):
            core.create_namespaced_pod(
                USERS, user_pod(f"via-{stem}", {"aliyun.com/gpu-mem": "2"}))
        pod = bound_through_allocator(core, f"via-{stem}", gpu_nodes)
        assert pod.spec.scheduler_name == "default-scheduler"
        # A CPU-only pod is filtered and bound by the scheduler itself; with the shipped
        # second entry the allocator scores it (two GPU nodes fit, so the scheduler scores).
        scored_before = allocator.verb_calls("prioritize-cpu-only")
        cpu_pod = make_pod(f"cpu-{stem}", [pod_container(requests={"cpu": "100m"})])
        core.create_namespaced_pod(USERS, cpu_pod)
        wait_for(f"CPU-only pod {stem} bound",
                 lambda: core.read_namespaced_pod(f"cpu-{stem}", USERS).spec.node_name,
                 timeout=60)
        scored = allocator.verb_calls("prioritize-cpu-only") - scored_before
        assert (scored >= 1) if score_cpu_only_pods else (scored == 0), scored
    finally:
        scheduler.stop()
