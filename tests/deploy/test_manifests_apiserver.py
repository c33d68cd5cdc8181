"""The real kube-apiserver judges every shipped object, and runs what the overlays install.

1. Every overlay passes ``kubectl apply -k --server-side --dry-run=server`` (strict field
   validation, admission, CEL compilation of matchConditions); broken variants do not.
2. The self-signed overlay, installed for real, is exercised: the certs Job's command runs as
   its ServiceAccount under the shipped RBAC and creates the Secrets and the caBundle; and with
   no webhook pod running, the shipped failurePolicy and matchConditions decide which pods are
   refused.
"""

from __future__ import annotations

import base64
import copy
import json
import subprocess
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from builders import make_pod
from cryptography import x509
from deploy_helpers import (
    MANIFESTS,
    NAMESPACE,
    OVERLAYS,
    Doc,
    certs_job_command,
    combined_overlay,
    container,
    dump,
    kustomize,
    one,
    run,
    run_kubectl,
    service_account_kubeconfig,
    tessera_command,
)

from certs.material import signed_by

pytestmark = pytest.mark.e2e

ALL = [*OVERLAYS, "cert-manager+second-scheduler"]


def overlay_dir(name: str, tmp_path: Path) -> Path:
    if name == "cert-manager+second-scheduler":
        return combined_overlay(tmp_path / "combo")
    return MANIFESTS / "overlays" / name


@pytest.mark.parametrize("overlay", ALL)
def test_the_api_server_accepts_every_object_of_every_overlay(
    prepared: None, kubectl: Path, admin_kubeconfig: Path, tmp_path: Path, overlay: str
) -> None:
    directory = overlay_dir(overlay, tmp_path)
    expected = len(kustomize(kubectl, directory))
    result = run_kubectl(kubectl, admin_kubeconfig, "apply", "--server-side",
                         "--dry-run=server", f"--kustomize={directory}")
    applied = [line for line in result.stdout.splitlines() if "(server dry run)" in line]
    assert len(applied) == expected, result.stdout
    # tessera-system enforces (and warns about) the "restricted" Pod Security Standard; the
    # API server checks every workload's pod template against it and warns here.
    assert "PodSecurity" not in result.stderr, result.stderr


def _mwc(docs: list[Doc]) -> Doc:
    return one(docs, "MutatingWebhookConfiguration", "tessera")


def _hook(docs: list[Doc]) -> Doc:
    hook: Doc = _mwc(docs)["webhooks"][0]
    return hook


def _timeout_too_long(docs: list[Doc]) -> Doc:
    _hook(docs)["timeoutSeconds"] = 31
    return _mwc(docs)


def _cel_syntax_error(docs: list[Doc]) -> Doc:
    # Only syntax and types are checked at admission of the configuration: ``object`` is
    # untyped for webhook matchConditions, so a misspelt field would fail at run time (and,
    # under failurePolicy Fail, refuse pods). The webhook-down tests below run the expression
    # on GPU and non-GPU pods, which is what catches that.
    _hook(docs)["matchConditions"][0]["expression"] = "object.spec.containers.exists(c, "
    return _mwc(docs)


def _side_effects_some(docs: list[Doc]) -> Doc:
    _hook(docs)["sideEffects"] = "Some"
    return _mwc(docs)


def _misspelt_security_field(docs: list[Doc]) -> Doc:
    deployment = one(docs, "Deployment", "tessera-webhook")
    sc = container(deployment)["securityContext"]
    sc["readOnlyRootFileSystem"] = sc.pop("readOnlyRootFilesystem")
    return deployment


def _unknown_key_algorithm(docs: list[Doc]) -> Doc:
    cert = one(docs, "Certificate", "tessera-webhook-tls")
    cert["spec"]["privateKey"]["algorithm"] = "DSA"
    return cert


def _misspelt_certificate_field(docs: list[Doc]) -> Doc:
    cert = one(docs, "Certificate", "tessera-webhook-tls")
    cert["spec"]["dnsName"] = cert["spec"].pop("dnsNames")
    return cert


@pytest.mark.parametrize(
    ("overlay", "break_it", "complaint"),
    [
        ("self-signed", _timeout_too_long, "timeoutSeconds"),
        ("self-signed", _cel_syntax_error, "compilation failed"),
        ("self-signed", _side_effects_some, "sideEffects"),
        ("self-signed", _misspelt_security_field, "readOnlyRootFileSystem"),
        ("cert-manager", _unknown_key_algorithm, "DSA"),
        ("cert-manager", _misspelt_certificate_field, "dnsName"),
    ],
)
def test_the_same_dry_run_rejects_a_broken_manifest(
    prepared: None, kubectl: Path, admin_kubeconfig: Path, overlay: str,
    break_it: Callable[[list[Doc]], Doc], complaint: str
) -> None:
    """The check bites: one wrong field and the API server refuses the apply."""
    docs = copy.deepcopy(kustomize(kubectl, MANIFESTS / "overlays" / overlay))
    broken = break_it(docs)
    result = run_kubectl(kubectl, admin_kubeconfig, "apply", "--server-side",
                         "--dry-run=server", "--filename=-", stdin=dump([broken]), check=False)
    assert result.returncode != 0
    assert complaint in result.stderr


def test_the_same_dry_run_warns_about_a_pod_template_that_breaks_the_restricted_policy(
    prepared: None, kubectl: Path, admin_kubeconfig: Path
) -> None:
    """The PodSecurity check above bites: a container allowed to escalate is reported."""
    docs = copy.deepcopy(kustomize(kubectl, MANIFESTS / "overlays" / "self-signed"))
    deployment = one(docs, "Deployment", "tessera-webhook")
    container(deployment)["securityContext"]["allowPrivilegeEscalation"] = True
    result = run_kubectl(kubectl, admin_kubeconfig, "apply", "--server-side",
                         "--dry-run=server", "--filename=-", stdin=dump([deployment]))
    assert 'would violate PodSecurity "restricted:latest"' in result.stderr
    assert "allowPrivilegeEscalation" in result.stderr


# ----------------------------------------------------------------------------- installed


@pytest.fixture(scope="module")
def core(api_client: Any) -> Any:
    from kubernetes import client

    return client.CoreV1Api(api_client)


@pytest.fixture(scope="module")
def admission(api_client: Any) -> Any:
    from kubernetes import client

    return client.AdmissionregistrationV1Api(api_client)


def secret(core: Any, name: str) -> Any:
    return core.read_namespaced_secret(name, NAMESPACE)


def test_the_certs_job_creates_the_secrets_and_the_ca_bundle_under_its_own_rbac(
    first_run: subprocess.CompletedProcess[str], core: Any, admission: Any
) -> None:
    assert first_run.returncode == 0, first_run.stderr
    assert "no CA yet" in first_run.stdout
    ca_pem = base64.b64decode(secret(core, "tessera-ca").data["tls.crt"])
    ca = x509.load_pem_x509_certificate(ca_pem)
    for name, dns in [("tessera-webhook-tls", "tessera-webhook.tessera-system.svc"),
                      ("tessera-allocator-tls", "tessera-allocator.tessera-system.svc"),
                      ("tessera-scheduler-client-tls", None)]:
        found = secret(core, name)
        assert found.type == "kubernetes.io/tls"
        data = {k: base64.b64decode(v) for k, v in found.data.items()}
        assert set(data) == {"tls.crt", "tls.key", "ca.crt"}
        assert data["ca.crt"] == ca_pem
        leaf = x509.load_pem_x509_certificate(data["tls.crt"])
        assert signed_by(leaf, ca)
        if dns:
            san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            assert dns in san.get_values_for_type(x509.DNSName)
    mwc = admission.read_mutating_webhook_configuration("tessera")
    assert [base64.b64decode(h.client_config.ca_bundle) for h in mwc.webhooks] == [ca_pem]


def test_running_the_certs_job_again_writes_nothing(
    first_run: subprocess.CompletedProcess[str], installed: list[Doc], certs_kubeconfig: Path,
    core: Any, admission: Any
) -> None:
    names = ["tessera-ca", "tessera-webhook-tls", "tessera-allocator-tls",
             "tessera-scheduler-client-tls"]

    def versions() -> list[str]:
        return [secret(core, n).metadata.resource_version for n in names] + [
            admission.read_mutating_webhook_configuration("tessera").metadata.resource_version]

    before = versions()
    again = run(certs_job_command(installed, certs_kubeconfig))
    assert again.returncode == 0, again.stderr
    assert again.stdout.count(": keep: ") == 4
    assert "already up to date" in again.stdout
    assert versions() == before


def test_reapplying_the_manifests_keeps_the_ca_bundle(
    first_run: subprocess.CompletedProcess[str], installed: list[Doc], kubectl: Path,
    admin_kubeconfig: Path, admission: Any
) -> None:
    before = admission.read_mutating_webhook_configuration("tessera").webhooks[0]
    assert before.client_config.ca_bundle
    run_kubectl(kubectl, admin_kubeconfig, "apply", "--server-side", "--filename=-",
                stdin=dump(installed))
    after = admission.read_mutating_webhook_configuration("tessera").webhooks[0]
    assert after.client_config.ca_bundle == before.client_config.ca_bundle


@pytest.fixture
def nobody_kubeconfig(installed: list[Doc], core: Any, control_plane: Any, api_client: Any
                      ) -> Iterator[Path]:
    core.create_namespaced_service_account(NAMESPACE, {"metadata": {"name": "nobody"}})
    yield service_account_kubeconfig(control_plane, api_client, NAMESPACE, "nobody")
    core.delete_namespaced_service_account("nobody", NAMESPACE)


def test_an_identity_without_the_rbac_gets_a_clear_permission_error(
    first_run: subprocess.CompletedProcess[str], installed: list[Doc],
    nobody_kubeconfig: Path
) -> None:
    result = run(certs_job_command(installed, nobody_kubeconfig))
    assert result.returncode == 1
    assert "permission denied" in result.stderr
    assert "system:serviceaccount:tessera-system:nobody" in result.stderr
    assert "certs-rbac.yaml" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_shipped_rbac_reaches_no_other_webhook_configuration(
    first_run: subprocess.CompletedProcess[str], installed: list[Doc], certs_kubeconfig: Path
) -> None:
    result = run(certs_job_command(installed, certs_kubeconfig,
                                   "--webhook-configuration=someone-elses"))
    assert result.returncode == 1
    assert "permission denied" in result.stderr
    assert 'mutatingwebhookconfigurations.admissionregistration.k8s.io "someone-elses"' in (
        result.stderr)


def test_a_wrong_webhook_configuration_name_is_reported_as_not_found(
    first_run: subprocess.CompletedProcess[str], installed: list[Doc], admin_kubeconfig: Path
) -> None:
    result = run(certs_job_command(installed, admin_kubeconfig,
                                   "--webhook-configuration=tessera-typo"))
    assert result.returncode == 1
    assert "MutatingWebhookConfiguration tessera-typo: not found" in result.stderr


def test_ca_bundle_sets_the_bundle_from_a_file_once(
    first_run: subprocess.CompletedProcess[str], admin_kubeconfig: Path, admission: Any,
    core: Any, tmp_path: Path
) -> None:
    ca_pem = base64.b64decode(secret(core, "tessera-ca").data["tls.crt"])
    admission.patch_mutating_webhook_configuration("tessera", [
        {"op": "replace", "path": "/webhooks/0/clientConfig/caBundle", "value": ""}])
    ca_file = tmp_path / "ca.crt"
    ca_file.write_bytes(ca_pem)
    argv = [*tessera_command(), "certs", "ca-bundle", "--webhook-configuration=tessera",
            f"--ca-file={ca_file}", f"--kubeconfig={admin_kubeconfig}"]
    first, second = run(argv), run(argv)
    assert first.returncode == second.returncode == 0, first.stderr + second.stderr
    assert "updated pods.tessera.elasticgpu.io" in first.stdout
    assert "already up to date" in second.stdout
    hook = admission.read_mutating_webhook_configuration("tessera").webhooks[0]
    assert base64.b64decode(hook.client_config.ca_bundle) == ca_pem


# ----------------------------------------------------------------------------- webhook down

GPU = {"elasticgpu.io/gpu-core": "20", "elasticgpu.io/gpu-memory": "256"}


RESTRICTED = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
              "runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}


# Hardened like our own pods, so the "restricted" policy of tessera-system admits them too;
# no namespace: the API call names it.
restricted_pod = partial(make_pod, namespace=None, security_context=RESTRICTED)


REFUSED = [
    restricted_pod(GPU, name="canonical"),
    restricted_pod({"elasticgpu.com/gpu-memory": "256"}, name="com-twin"),
    restricted_pod({"elasticgpu.io/gpu-percent": "25"}, name="percent"),
    restricted_pod({"elasticgpu.io/gpu": "0.25"}, name="fraction"),
    restricted_pod({"nano-gpu.io/gpu-core": "20", "nano-gpu.io/gpu-memory": "1"},
                   name="nano-gpu"),
    restricted_pod({"nano-gpu/gpu-percent": "30"}, name="nano-gpu-percent"),
    restricted_pod({"aliyun.com/gpu-mem": "5"}, name="aliyun"),
    restricted_pod(labels={"genius/gpu-number": "1"}, name="genius"),
    restricted_pod({"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "3000"},
                   name="volcano"),
    restricted_pod({"tencent.com/vcuda-core": "50", "tencent.com/vcuda-memory": "30"},
                   name="gpu-manager"),
    restricted_pod({"koordinator.sh/gpu-memory-ratio": "50"}, name="koordinator"),
    restricted_pod(requests={"koordinator.sh/gpu-memory": "4Gi"}, name="koordinator-bytes"),
    restricted_pod(GPU, init=True, name="init-container"),
    restricted_pod(requests={"elasticgpu.io/gpu-core": "100"}, name="requests-only"),
]
ADMITTED = [
    restricted_pod(name="no-gpu"),
    restricted_pod({"cpu": "1"}, name="cpu-only"),
    # Plain nvidia.com/gpu belongs to NVIDIA's device plugin unless HAMi is enabled, and
    # KAI's unprefixed annotations are read only when KAI is (both opt-in).
    restricted_pod({"nvidia.com/gpu": "1"}, name="nvidia"),
    restricted_pod(annotations={"gpu-fraction": "0.5"}, name="kai"),
    restricted_pod(labels={"app": "genius"}, name="other-label"),
    restricted_pod({"volcano.sh/gpu-memory": "1024"}, name="other-volcano-key"),
]


@pytest.fixture(scope="module")
def user_namespace(installed: list[Doc], core: Any) -> str:
    core.create_namespace({"metadata": {"name": "gpu-users"}})
    return "gpu-users"


def create_dry_run(core: Any, namespace: str, pod: Doc) -> None:
    core.create_namespaced_pod(namespace, pod, dry_run="All")


@pytest.mark.parametrize("pod", REFUSED, ids=lambda p: p["metadata"]["name"])
def test_with_the_webhook_down_a_gpu_pod_is_refused_naming_the_webhook(
    first_run: subprocess.CompletedProcess[str], core: Any, user_namespace: str, pod: Doc
) -> None:
    from kubernetes.client.exceptions import ApiException

    # The Service exists but no pod backs it (nothing runs Deployments here): the webhook is
    # down, exactly as when both replicas are gone.
    with pytest.raises(ApiException) as refused:
        create_dry_run(core, user_namespace, pod)
    assert refused.value.status == 500
    message = json.loads(refused.value.body or "{}")["message"]
    assert 'failed calling webhook "pods.tessera.elasticgpu.io"' in message
    assert "connection refused" in message


@pytest.mark.parametrize("pod", ADMITTED, ids=lambda p: p["metadata"]["name"])
def test_with_the_webhook_down_every_other_pod_is_still_created(
    first_run: subprocess.CompletedProcess[str], core: Any, user_namespace: str, pod: Doc
) -> None:
    create_dry_run(core, user_namespace, pod)


@pytest.mark.parametrize("namespace", ["kube-system", NAMESPACE])
def test_gpu_pods_in_system_namespaces_never_wait_for_the_webhook(
    first_run: subprocess.CompletedProcess[str], core: Any, namespace: str
) -> None:
    create_dry_run(core, namespace, restricted_pod(GPU, name="system-gpu"))


def test_the_installed_objects_are_the_rendered_ones(installed: list[Doc], kubectl: Path,
                                                      admin_kubeconfig: Path) -> None:
    """`kubectl diff` against the live objects finds nothing: the apply was complete."""
    result = run_kubectl(kubectl, admin_kubeconfig, "diff", "--server-side", "--filename=-",
                         stdin=dump(installed), check=False)
    assert result.returncode == 0, result.stdout + result.stderr
