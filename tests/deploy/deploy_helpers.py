"""Helpers of the deploy tests: render the shipped manifests, find objects, localise commands.

"Localise" is the only liberty the tests take with a shipped command or configuration: the
in-cluster addresses and mounted file paths become loopback ports and temporary files, and
``$(VAR)`` is expanded the way the kubelet expands it. Everything else runs as shipped.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from devcluster.kubelet import localise
from devcluster.services import webhook_configuration

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
OVERLAYS = ("self-signed", "cert-manager", "second-scheduler")
NAMESPACE = "tessera-system"

Doc = dict[str, Any]


def kustomize(kubectl: Path, directory: Path) -> list[Doc]:
    """``kubectl kustomize DIR`` as documents."""
    result = subprocess.run([str(kubectl), "kustomize", str(directory)], capture_output=True,
                            text=True, check=False, timeout=120)
    assert result.returncode == 0, f"kubectl kustomize {directory} failed:\n{result.stderr}"
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def find(docs: Iterable[Doc], kind: str, name: str | None = None) -> list[Doc]:
    return [d for d in docs
            if d.get("kind") == kind and (name is None or d["metadata"]["name"] == name)]


def one(docs: Iterable[Doc], kind: str, name: str) -> Doc:
    found = find(docs, kind, name)
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]


def pod_spec(workload: Doc) -> Doc:
    spec = workload["spec"]
    if workload["kind"] == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    template: Doc = spec["template"]["spec"]
    return template


def container(workload: Doc, name: str | None = None) -> Doc:
    containers = pod_spec(workload)["containers"]
    if name is None:
        assert len(containers) == 1
        found: Doc = containers[0]
        return found
    return next(c for c in containers if c["name"] == name)


def tessera_command() -> list[str]:
    """The ``tessera`` console script of this environment: the image's ENTRYPOINT."""
    script = Path(sys.executable).parent / "tessera"
    assert script.is_file(), f"{script} missing: pip install -e ."
    return [str(script)]


def dump(docs: Iterable[Doc]) -> str:
    return yaml.safe_dump_all(list(docs), sort_keys=False)


def service_account_kubeconfig(cp: Any, api: Any, namespace: str, name: str) -> Path:
    """A kubeconfig authenticating as ServiceAccount ``namespace/name`` (TokenRequest)."""
    from kubernetes import client

    core: Any = client.CoreV1Api(api)
    token = core.create_namespaced_service_account_token(
        name, namespace, {"spec": {"expirationSeconds": 3600}}
    ).status.token
    path: Path = cp.write_kubeconfig(f"sa-{namespace}-{name}",
                                     f"system:serviceaccount:{namespace}:{name}", token=token)
    return path


def kubectl_env() -> dict[str, str]:
    """Our environment without proxies (everything is on loopback)."""
    env = {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy")}
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    return env


def ca_bundle_of(doc: dict[str, Any]) -> list[bytes]:
    return [base64.b64decode(h.get("clientConfig", {}).get("caBundle") or "")
            for h in doc.get("webhooks") or []]


def write_yaml(path: Path, docs: list[dict[str, Any]]) -> Path:
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return path


def run_kubectl(kubectl: Path, kubeconfig: Path, *args: str, stdin: str | None = None,
                check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([str(kubectl), f"--kubeconfig={kubeconfig}", *args],
                            input=stdin, capture_output=True, text=True, check=False,
                            timeout=120, env=kubectl_env())
    if check:
        assert result.returncode == 0, (
            f"kubectl {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
    return result


def combined_overlay(directory: Path) -> Path:
    """cert-manager TLS with the second scheduler, as docs/deploy.md shows it."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        # kustomize accepts only relative paths to other kustomizations.
        "resources": [os.path.relpath(MANIFESTS / "overlays" / "cert-manager", directory)],
        "components": [os.path.relpath(MANIFESTS / "components" / "second-scheduler",
                                       directory)],
    }))
    return directory


def certs_job_command(installed: list[Doc], kubeconfig: Path, *extra: str) -> list[str]:
    """The Job's command as the container runs it, pointed at our API server."""
    args = container(one(installed, "Job", "tessera-certs"))["args"]
    return [*tessera_command(), *localise(args, {}, {"POD_NAMESPACE": NAMESPACE}),
            f"--kubeconfig={kubeconfig}", *extra]


def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120,
                          env={**kubectl_env(), "KUBERNETES_SERVICE_HOST": ""})


def loopback_webhook(docs: list[Doc], port: int) -> list[Doc]:
    """The rendered objects with the webhook's clientConfig pointed at a loopback port.

    The only change to what is installed. There is no cluster network here: given a Service,
    kube-apiserver would dial its ClusterIP (10.0.0.x), an address outside this machine.
    Pointed at a port nobody listens on, the webhook is simply down.
    """
    result = []
    for doc in docs:
        if doc["kind"] == "MutatingWebhookConfiguration":
            doc = webhook_configuration(doc, f"https://127.0.0.1:{port}", b"")
            for hook in doc["webhooks"]:
                del hook["clientConfig"]["caBundle"]  # filled in by the certs Job
        result.append(doc)
    return result
