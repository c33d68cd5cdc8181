"""Fixtures of the deploy tests, over the e2e harness (tessera.devcluster).

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
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tessera.devcluster.binaries import Binaries, ensure_binaries
from tessera.devcluster.controlplane import ControlPlane


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
