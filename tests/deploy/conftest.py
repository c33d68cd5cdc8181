"""Fixtures of the deploy tests, over the e2e harness (devcluster).

Binaries come from the harness (hack/build-controlplane.sh, cached). The API-server-backed
tests get their **own** etcd + kube-apiserver from the harness's ``ControlPlane`` rather than
the e2e session cluster, because they install the shipped manifests for real under their real
names (MutatingWebhookConfiguration ``tessera``, namespace ``tessera-system``, ClusterRoles)
and run kube-scheduler with the shipped configurations, one of them as ``default-scheduler``.
On the e2e cluster those names are already taken by its loopback-wired webhook (a server-side
apply would merge ``service`` into its ``url`` clientConfig and be rejected) and its scheduler
would race ours for every pod. No scheduler runs here unless a test starts one.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deploy_helpers import (
    MANIFESTS,
    NAMESPACE,
    Doc,
    certs_job_command,
    dump,
    kustomize,
    loopback_webhook,
    run,
    run_kubectl,
    service_account_kubeconfig,
)

from devcluster.binaries import Binaries, ensure_binaries
from devcluster.controlplane import ControlPlane
from devcluster.process import free_port

CRDS = Path(__file__).parent / "crds"


@pytest.fixture(scope="session")
def binaries() -> Binaries:
    return ensure_binaries()


@pytest.fixture(scope="session")
def kubectl(binaries: Binaries) -> Path:
    return binaries.kubectl


@pytest.fixture(scope="session")
def control_plane(binaries: Binaries, request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    workdir = Path(tempfile.mkdtemp(prefix="tessera-deploy-"))
    cp = ControlPlane(binaries, workdir)
    failed_before = request.session.testsfailed
    try:
        cp.start()
        yield cp
    finally:
        cp.stop()
        if request.session.testsfailed > failed_before:
            print(f"\ndeploy: control plane logs kept in {workdir / 'logs'}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="session")
def api_client(control_plane: ControlPlane) -> Iterator[Any]:
    from kubernetes import config

    api = config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(control_plane.admin_kubeconfig)
    )
    yield api
    api.close()


@pytest.fixture(scope="session")
def admin_kubeconfig(control_plane: ControlPlane) -> Path:
    path: Path = control_plane.admin_kubeconfig
    return path


@pytest.fixture(scope="session")
def prepared(kubectl: Path, admin_kubeconfig: Path) -> None:
    """What an operator's cluster has before `kubectl apply -k`: cert-manager's CRDs (for the
    cert-manager overlays), the Prometheus Operator's ServiceMonitor (monitoring) and,
    because a server-side dry run persists nothing, the namespace that the namespaced
    objects of the same dry run need to exist."""
    run_kubectl(kubectl, admin_kubeconfig, "apply", "--server-side", f"--filename={CRDS}")
    run_kubectl(kubectl, admin_kubeconfig, "wait", "--for=condition=Established",
                "--timeout=60s", "crd/issuers.cert-manager.io", "crd/certificates.cert-manager.io",
                "crd/servicemonitors.monitoring.coreos.com")
    run_kubectl(kubectl, admin_kubeconfig, "apply", "--server-side",
                f"--filename={MANIFESTS / 'base' / 'namespace.yaml'}")


@pytest.fixture(scope="session")
def installed(prepared: None, kubectl: Path, admin_kubeconfig: Path) -> list[Doc]:
    """The self-signed overlay applied for real (no controllers run: no pods, no endpoints)."""
    docs = loopback_webhook(kustomize(kubectl, MANIFESTS / "overlays" / "self-signed"),
                            free_port())
    result = run_kubectl(kubectl, admin_kubeconfig, "apply", "--server-side", "--filename=-",
                         stdin=dump(docs))
    assert "PodSecurity" not in result.stderr, result.stderr
    return docs


@pytest.fixture(scope="session")
def certs_kubeconfig(installed: list[Doc], control_plane: Any, api_client: Any) -> Path:
    return service_account_kubeconfig(control_plane, api_client, NAMESPACE, "tessera-certs")


@pytest.fixture(scope="session")
def first_run(installed: list[Doc], certs_kubeconfig: Path) -> subprocess.CompletedProcess[str]:
    return run(certs_job_command(installed, certs_kubeconfig))


