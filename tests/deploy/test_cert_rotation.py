"""Both services pick up rotated certificate files without a restart.

Each service runs its Deployment's own command (self-signed overlay, localised) and serves
from a directory laid out as the kubelet lays out a Secret volume. The certificate is renewed
with ``tessera certs files`` (same CA), and the files change the two ways they change in
practice:

* ``secret-volume``: the kubelet's atomic update of a Secret volume (new timestamped directory,
  ``..data`` symlink swapped by rename; kubernetes pkg/volume/util/atomic_writer.go), which is
  what the renewal CronJob's Secret update leads to in a pod;
* ``in-place``: ``tessera certs files`` rewriting the files where the service reads them.

A new TLS connection then gets the new certificate from the same process: the webhook's at
once (gunicorn's worker loads the files at the next handshake), the allocator's once a new
worker serves them (granian loads them when a worker starts:
tessera/serving/granian/server.py).
"""

from __future__ import annotations

import socket
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from deploy_helpers import (
    MANIFESTS,
    NAMESPACE,
    Doc,
    container,
    kubectl_env,
    kustomize,
    localise,
    one,
    tessera_command,
)

from certs.builder import CertificateAuthority, build_leaf
from devcluster.controlplane import ControlPlane
from devcluster.pod_runtime import SecretVolume
from devcluster.process import ManagedProcess, free_port, wait_until

pytestmark = pytest.mark.e2e

SERVICES = ["tessera-webhook", "tessera-allocator"]
STYLES = ["secret-volume", "in-place"]
#: The allocator's worker restarts for new files once it is 6 s old (granian_server
#: WORKER_MIN_AGE_SECONDS).
RENEWED_WITHIN_S = 40.0


def certs_files(ca: Path, out: Path, *extra: str) -> None:
    result = subprocess.run([*tessera_command(), "certs", "files", f"--ca-dir={ca}",
                             f"--out={out}", "--ip=127.0.0.1", *extra],
                            capture_output=True, text=True, check=False, timeout=60)
    assert result.returncode == 0, result.stderr


@pytest.fixture(scope="module")
def rendered(kubectl: Path) -> list[Doc]:
    return kustomize(kubectl, MANIFESTS / "overlays" / "self-signed")


def secret_files(directory: Path) -> dict[str, bytes]:
    return {name: (directory / name).read_bytes() for name in ("tls.crt", "tls.key", "ca.crt")}


def serial_of(path: Path) -> int:
    return x509.load_pem_x509_certificate(path.read_bytes()).serial_number


def client_context(ca_file: Path) -> ssl.SSLContext:
    """Trusts our CA and presents a client certificate it signed (the allocator requires one,
    as the scheduler presents; the webhook asks for none). The CA's key is next to its cert."""
    ca = CertificateAuthority(ca_file.read_bytes(), (ca_file.parent / "ca.key").read_bytes())
    client = build_leaf(ca, "kube-scheduler", server=False, client=True)
    cert, key = ca_file.parent / "client.crt", ca_file.parent / "client.key"
    cert.write_bytes(client.cert_pem)
    key.write_bytes(client.key_pem)
    context = ssl.create_default_context(cafile=str(ca_file))
    context.check_hostname = False
    context.load_cert_chain(str(cert), str(key))
    return context


def served_serial(port: int, ca_file: Path) -> int:
    """The serial of the certificate a brand-new TLS connection is given."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            client_context(ca_file).wrap_socket(raw) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def healthz(port: int, ca_file: Path) -> int:
    with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz",
                                context=client_context(ca_file), timeout=5) as resp:
        return int(resp.status)


@pytest.fixture
def serving(request: pytest.FixtureRequest, rendered: list[Doc], tmp_path: Path,
            control_plane: ControlPlane) -> Iterator[tuple[ManagedProcess, int, Path, Any]]:
    service, style = request.param
    ca, staging, volume = tmp_path / "ca", tmp_path / "staging", tmp_path / "volume"
    # A leaf with 20 days left: the next default run (renew 30 days ahead) renews it.
    certs_files(ca, staging, "--days=20", "--renew-before-days=5")
    if style == "secret-volume":
        writer = SecretVolume(volume)
        writer.publish(secret_files(staging))
        serve_dir = volume

        def rotate() -> None:
            certs_files(ca, staging)
            writer.publish(secret_files(staging))
    else:
        serve_dir = staging

        def rotate() -> None:
            certs_files(ca, staging)

    port = free_port()
    args = localise(container(one(rendered, "Deployment", service))["args"],
                    {"--host=0.0.0.0": "--host=127.0.0.1", "--port=8443": f"--port={port}",
                     "/etc/tessera/tls/": f"{serve_dir}/"},
                    {"POD_NAME": f"{service}-0", "POD_NAMESPACE": NAMESPACE})
    if service == "tessera-allocator":
        args.append(f"--kubeconfig={control_plane.admin_kubeconfig}")
    process = ManagedProcess(service, [*tessera_command(), *args],
                             tmp_path / f"{service}.log",
                             env={**kubectl_env(), "KUBERNETES_SERVICE_HOST": ""})
    process.start()
    try:
        wait_until(f"{service} /healthz", lambda: healthz(port, ca / "ca.crt") == 200, 60,
                   interval=0.3, watch=[process])
        yield process, port, serve_dir, rotate
    finally:
        process.stop()


@pytest.mark.parametrize(
    "serving", [(s, st) for s in SERVICES for st in STYLES],
    ids=[f"{s}-{st}" for s in SERVICES for st in STYLES], indirect=True,
)
def test_a_new_connection_gets_the_renewed_certificate_from_the_same_process(
    serving: tuple[ManagedProcess, int, Path, Any], tmp_path: Path
) -> None:
    process, port, serve_dir, rotate = serving
    ca_file = tmp_path / "ca" / "ca.crt"
    pid = process.pid
    old = serial_of(serve_dir / "tls.crt")
    assert served_serial(port, ca_file) == old
    rotate()
    new = serial_of(serve_dir / "tls.crt")
    assert new != old
    if process.name == "tessera-allocator":
        wait_until("the renewed certificate served",
                   lambda: _quietly(lambda: served_serial(port, ca_file)) == new,
                   RENEWED_WITHIN_S, interval=0.5, watch=[process])
    assert served_serial(port, ca_file) == new
    assert healthz(port, ca_file) == 200
    assert process.pid == pid and process.alive()


def _quietly(probe: Any) -> Any:
    """``probe()``, or None while the service is between workers."""
    try:
        return probe()
    except (OSError, urllib.error.URLError):
        return None
