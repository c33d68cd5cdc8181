"""The image a user installs, built from the Dockerfile and run as the chart deploys it.

The image is built with podman (devcluster/image.py: the Dockerfile's every step, on a
stand-in for python:3.11-slim made from Debian's packages, because no image registry is
reachable here). The dev cluster then runs Tessera from it (devcluster/containers.py): the
certs Job's container makes the CA, the Secrets and the webhook's caBundle; the webhook and
allocator Deployments' containers run with the chart's args and env, uid 10001, a read-only
root, no capabilities and the Secret files at their mount paths, on the host network; the
real API server calls the containerised webhook and kube-scheduler calls the containerised
allocator over mutual TLS.

Marked ``image`` as well as ``e2e``: a separate command (hack/test-image.sh) runs it, since its
first build would push the README's test command past half an hour on a fresh machine
(docs/deploy.md, "The image").
"""

from __future__ import annotations

import base64
import json
import socket
import ssl
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from dev_clusters import running

from devcluster.binaries import Binaries
from devcluster.checks import admission_problems, allocation_problems
from devcluster.cluster import DevCluster
from devcluster.containers import NAMESPACE, ContainerServices
from devcluster.image import Podman, build_image
from devcluster.kubelet import memory_bytes
from devcluster.nodes import GpuNodeSpec, uniform
from devcluster.options import Options
from devcluster.process import wait_until
from devcluster.workloads import container, get_object, make_pod, wait_for
from kubectl_tessera.report import node_cards
from tessera.vocabulary import ContainerRequest, decode_request

pytestmark = [pytest.mark.e2e, pytest.mark.image]

IMAGE = "localhost/tessera:e2e"
#: The allocator's worker restarts for new files once it is 6 s old
#: (tessera/serving/granian/server.py); the webhook reads them at the next handshake.
RENEWED_WITHIN_S = 40.0
NodePool = Callable[[list[GpuNodeSpec]], dict[str, str]]


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> str:
    return build_image(Podman.find(), IMAGE, tmp_path_factory.mktemp("image-build"))


@pytest.fixture(scope="module")
def cluster(binaries: Binaries, image: str, request: pytest.FixtureRequest
            ) -> Iterator[DevCluster]:
    """This module's own dev cluster: Tessera from the image (the session's runs it as
    subprocesses)."""
    dev = DevCluster(binaries, None, Options(image=image))
    with running(dev, request, "image dev cluster"):
        yield dev


@pytest.fixture(scope="module")
def services(cluster: DevCluster) -> ContainerServices:
    assert isinstance(cluster.services, ContainerServices)
    return cluster.services


INSPECT = """
import errno, json, os
status = dict(line.split(":\\t", 1) for line in open("/proc/1/status").read().splitlines())
try:
    open("/opt/tessera/written", "w")
    write = "written"
except OSError as exc:
    write = errno.errorcode[exc.errno]
tls = sorted(n for n in os.listdir("/etc/tessera/tls") if not n.startswith(".."))
limit = "/sys/fs/cgroup/memory/memory.limit_in_bytes"  # cgroup v1; v2 names it memory.max
limit = limit if os.path.exists(limit) else "/sys/fs/cgroup/memory.max"
print(json.dumps({"uid": status["Uid"].split(), "gid": status["Gid"].split(),
                  "cap_eff": status["CapEff"], "cap_bnd": status["CapBnd"],
                  "no_new_privs": status["NoNewPrivs"], "write_root": write,
                  "tmp_writable": os.access("/tmp", os.W_OK), "tls": tls,
                  "memory_limit": open(limit).read().strip(),
                  "argv": open("/proc/1/cmdline").read().split("\\0")[1:3]}))
"""


@pytest.mark.parametrize("deployment", ["tessera-webhook", "tessera-allocator"])
def test_each_service_runs_as_its_deployment_says(services: ContainerServices,
                                                  deployment: str) -> None:
    result = services.containers[deployment].exec(["python", "-c", INSPECT])
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen["uid"] == ["10001"] * 4 and seen["gid"] == ["10001"] * 4
    assert int(seen["cap_eff"], 16) == 0 and int(seen["cap_bnd"], 16) == 0
    assert seen["no_new_privs"] == "1"
    assert seen["write_root"] == "EROFS"
    assert seen["tmp_writable"] is True  # the chart's emptyDir for gunicorn's heartbeat
    assert seen["tls"] == ["ca.crt", "tls.crt", "tls.key"]
    limit = services.container_spec(deployment)["resources"]["limits"]["memory"]
    assert int(seen["memory_limit"]) == memory_bytes(limit)
    # The image's ENTRYPOINT (the tessera console script) with the Deployment's subcommand.
    assert seen["argv"][0].endswith("/tessera")
    assert seen["argv"][1] == deployment.removeprefix("tessera-")


def test_the_certs_jobs_container_made_the_secrets_and_the_ca_bundle(
    cluster: DevCluster, services: ContainerServices
) -> None:
    from kubernetes import client

    ca = services.ca().cert_pem
    for name in ("tessera-webhook-tls", "tessera-allocator-tls", "tessera-scheduler-client-tls"):
        secret = services.read_secret(name)
        assert secret["ca.crt"] == ca
        leaf = x509.load_pem_x509_certificate(secret["tls.crt"])
        assert leaf.issuer == x509.load_pem_x509_certificate(ca).subject
    admission: Any = client.AdmissionregistrationV1Api(cluster.api_client)
    mwc = admission.read_mutating_webhook_configuration("tessera")
    assert [base64.b64decode(h.client_config.ca_bundle) for h in mwc.webhooks] == \
        [ca] * len(mwc.webhooks)


@pytest.mark.parametrize("kind", ["readinessProbe", "livenessProbe"])
@pytest.mark.parametrize("deployment", ["tessera-webhook", "tessera-allocator"])
def test_the_probes_are_answered(services: ContainerServices, deployment: str,
                                 kind: str) -> None:
    assert services.probe(deployment, kind)


DIALECT_PODS = [
    pytest.param(make_pod("volcano", [container(limits={
        "volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-cores": "50",
        "volcano.sh/vgpu-memory": "3000"})]),
        ContainerRequest("main", core_percent=50, memory_mib=3000), id="volcano"),
    pytest.param(make_pod("gpu-manager", [container(
        limits={"tencent.com/vcuda-core": "50", "tencent.com/vcuda-memory": "30"},
        requests={"tencent.com/vcuda-core": "50", "tencent.com/vcuda-memory": "30"})]),
        ContainerRequest("main", core_percent=50, memory_mib=7680), id="gpu-manager"),
    pytest.param(make_pod("koordinator", [container(requests={
        "koordinator.sh/gpu-core": "60", "koordinator.sh/gpu-memory": "4Gi"})]),
        ContainerRequest("main", core_percent=60, memory_mib=4096), id="koordinator"),
]


def bound_and_right(cluster: DevCluster, core_v1: Any, namespace: str, pod: dict[str, Any],
                    selector: dict[str, str]) -> dict[str, Any]:
    """Create ``pod`` on ``selector``'s nodes; it is admitted, bound, and its record and agent
    annotations agree with the node's cards."""
    pod = {**pod, "spec": {**pod["spec"], "nodeSelector": selector}}
    name = pod["metadata"]["name"]
    core_v1.create_namespaced_pod(namespace, pod)

    def bound() -> dict[str, Any] | None:
        obj = get_object(core_v1.read_namespaced_pod, name, namespace)
        return obj if obj["spec"].get("nodeName") else None

    obj = wait_for(f"{name} to be bound", bound, timeout=60)
    assert admission_problems(obj, cluster.vocabulary) == []
    node = get_object(core_v1.read_node, obj["spec"]["nodeName"])
    assert allocation_problems(obj, node_cards(node, cluster.vocabulary),
                               cluster.vocabulary) == []
    return obj


@pytest.mark.parametrize(("pod", "expected"), DIALECT_PODS)
def test_a_gpu_pod_of_each_dialect_is_admitted_scheduled_and_bound(
    cluster: DevCluster, core_v1: Any, namespace: str, pool: NodePool,
    pod: dict[str, Any], expected: ContainerRequest,
) -> None:
    selector = pool([uniform(f"{namespace}-t4", 2, "Tesla-T4", 15360)])
    obj = bound_and_right(cluster, core_v1, namespace, pod, selector)
    request = decode_request(obj["metadata"]["annotations"][
        cluster.vocabulary.request_annotation])
    assert request.containers == (expected,)


def served_serial(services: ContainerServices, deployment: str) -> int | None:
    """The serial of the certificate a new TLS connection gets (None between workers)."""
    context = ssl.create_default_context(cadata=services.ca().cert_pem.decode())
    client = services.volumes["tessera-scheduler-client-tls"].path
    context.load_cert_chain(str(client / "tls.crt"), str(client / "tls.key"))
    context.check_hostname = False
    try:
        with socket.create_connection(("127.0.0.1", services.port(deployment)), timeout=5) \
                as raw, context.wrap_socket(raw) as tls:
            der = tls.getpeercert(binary_form=True)
    except OSError:
        return None
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def file_serial(path: Path) -> int:
    return x509.load_pem_x509_certificate(path.read_bytes()).serial_number


def test_a_certificate_rotation_is_picked_up_without_a_restart(
    cluster: DevCluster, services: ContainerServices, core_v1: Any, namespace: str,
    pool: NodePool,
) -> None:
    deployments = {"tessera-webhook": "tessera-webhook-tls",
                   "tessera-allocator": "tessera-allocator-tls"}
    before = {d: served_serial(services, d) for d in deployments}
    for deployment, secret in deployments.items():
        assert before[deployment] == file_serial(services.volumes[secret].path / "tls.crt")
    pids = {d: services.containers[d].process.pid for d in deployments}

    renewal = services.renew_certificates()  # the CronJob's container, every leaf due
    assert renewal.returncode == 0, renewal.stderr

    for deployment, secret in deployments.items():
        new = file_serial(services.volumes[secret].path / "tls.crt")
        assert new != before[deployment]
        wait_until(f"{deployment} serving its renewed certificate",
                   lambda d=deployment, n=new: served_serial(services, d) == n,
                   RENEWED_WITHIN_S, interval=0.5,
                   watch=[services.containers[deployment].process])
        assert services.containers[deployment].process.pid == pids[deployment]
    # Through the renewed certificates: the API server to the webhook, kube-scheduler to the
    # allocator.
    selector = pool([uniform(f"{namespace}-a10", 1, "A10", 24576)])
    pod = make_pod("after-rotation", [container(limits={"volcano.sh/vgpu-number": "1",
                                                        "volcano.sh/vgpu-cores": "30"})])
    bound_and_right(cluster, core_v1, namespace, pod, selector)


def test_sigterm_stops_each_service_cleanly_and_the_leader_lets_its_lease_go(
    cluster: DevCluster, services: ContainerServices
) -> None:
    """Last in this module: the containers are gone afterwards."""
    from kubernetes import client

    coordination: Any = client.CoordinationV1Api(cluster.api_client)
    lease = coordination.read_namespaced_lease("tessera-allocator", NAMESPACE)
    assert lease.spec.holder_identity.startswith("tessera-allocator-")
    for deployment in ("tessera-allocator", "tessera-webhook"):
        grace = services.termination_grace_seconds(deployment)
        assert services.containers[deployment].terminate(grace) == 0
    lease = coordination.read_namespaced_lease("tessera-allocator", NAMESPACE)
    assert not lease.spec.holder_identity
