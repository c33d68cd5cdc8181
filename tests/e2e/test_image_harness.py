"""The image harness's own parts without a container: how a chart's pod becomes ``podman run``
flags, and how pip's settings reach the build. (tests/e2e/test_image.py runs them for real.)"""

from __future__ import annotations

import resource
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster import DevClusterError
from devcluster.binaries import Binaries, repo_root
from devcluster.containers import image_values, pod_spec
from devcluster.image import named_paths, pip_conf, pip_settings, ulimits
from devcluster.kubelet import (
    SERVICE_ACCOUNT_DIR,
    PodContext,
    container_run,
    exec_probe,
    http_probe,
    memory_bytes,
)

PORTS = {"--host=0.0.0.0": "--host=127.0.0.1", "--port=8443": "--port=40001",
         "127.0.0.1:8443": "127.0.0.1:40001"}


@pytest.fixture(scope="module")
def rendered(binaries: Binaries) -> dict[str, dict[str, Any]]:
    result = subprocess.run(
        [str(binaries.helm), "template", "tessera", str(repo_root() / "charts" / "tessera"),
         "--namespace=tessera-system", *image_values("localhost/tessera:e2e")],
        capture_output=True, text=True, check=True, timeout=120)
    return {d["metadata"]["name"]: d for d in yaml.safe_load_all(result.stdout)
            if d and d["kind"] in ("Deployment", "Job")}


def context(tmp_path: Path) -> PodContext:
    return PodContext(
        name="tessera-allocator-abc123", namespace="tessera-system", api_host="127.0.0.1",
        api_port=6443,
        secrets={n: tmp_path / n for n in ("tessera-webhook-tls", "tessera-allocator-tls",
                                           "tessera-scheduler-client-tls")},
        service_account=tmp_path / "sa")


def test_the_webhook_runs_as_its_deployment_says(rendered: dict[str, Any],
                                                 tmp_path: Path) -> None:
    spec = pod_spec(rendered["tessera-webhook"])
    (container,) = spec["containers"]
    argv = container_run(spec, container, context(tmp_path), PORTS).podman_args(["--ulimit=x"])
    assert argv[-6:] == ["localhost/tessera:e2e", "webhook", "--host=127.0.0.1",
                         "--port=40001", "--tls-cert=/etc/tessera/tls/tls.crt",
                         "--tls-key=/etc/tessera/tls/tls.key"]
    for flag in ("--user=10001:10001", "--group-add=10001", "--read-only",
                 "--read-only-tmpfs=false", "--cap-drop=all", "--security-opt=no-new-privileges",
                 "--network=host", "--pull=never", "--memory=268435456",
                 f"--volume={tmp_path / 'tessera-webhook-tls'}:/etc/tessera/tls:ro",
                 "--tmpfs=/tmp:rw,size=16777216,mode=1777", "--env=TESSERA_LOG_LEVEL=INFO"):
        assert flag in argv
    # automountServiceAccountToken: false: the webhook gets no token.
    assert not any(SERVICE_ACCOUNT_DIR in a for a in argv)


def test_the_allocator_gets_its_token_its_pod_fields_and_localised_probes(
    rendered: dict[str, Any], tmp_path: Path
) -> None:
    spec = pod_spec(rendered["tessera-allocator"])
    (container,) = spec["containers"]
    run = container_run(spec, container, context(tmp_path), PORTS)
    assert "--identity=tessera-allocator-abc123" in run.args
    assert "--lease-namespace=tessera-system" in run.args
    assert ("KUBERNETES_SERVICE_PORT", "6443") in run.env
    assert (tmp_path / "sa", SERVICE_ACCOUNT_DIR) in run.mounts
    assert (tmp_path / "tessera-scheduler-client-tls", "/etc/tessera/probe-tls") in run.mounts
    command = exec_probe(container, "readinessProbe", PORTS)
    assert command is not None and command[-1] == "/readyz"
    assert "https://127.0.0.1:40001" in command[2] and "8443" not in command[2]
    assert http_probe(rendered_webhook(rendered), "livenessProbe") == ("https", "/healthz", 8443)


def rendered_webhook(rendered: dict[str, Any]) -> dict[str, Any]:
    (container,) = pod_spec(rendered["tessera-webhook"])["containers"]
    found: dict[str, Any] = container
    return found


def test_the_certs_job_runs_with_its_service_account_and_namespace(
    rendered: dict[str, Any], tmp_path: Path
) -> None:
    spec = pod_spec(rendered["tessera-certs"])
    (container,) = spec["containers"]
    run = container_run(spec, container, context(tmp_path), {})
    assert "--namespace=tessera-system" in run.args
    assert run.mounts == ((tmp_path / "sa", SERVICE_ACCOUNT_DIR),)
    assert run.read_only_root and run.drop_all_capabilities and run.user == "10001:10001"


def base_spec(**container: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    c = {"name": "c", "image": "i:1", "args": ["x"],
         "securityContext": {"runAsUser": 10001, "runAsGroup": 10001}, **container}
    return {"automountServiceAccountToken": False, "containers": [c],
            "volumes": [{"name": "h", "hostPath": {"path": "/"}},
                        {"name": "s", "secret": {"secretName": "unknown"}}]}, c


@pytest.mark.parametrize(("container", "message"), [
    ({"command": ["sh"]}, "ENTRYPOINT"),
    ({"securityContext": {"runAsUser": 10001}}, "runAsGroup"),
    ({"securityContext": {"runAsUser": 1, "runAsGroup": 1,
                          "capabilities": {"add": ["NET_ADMIN"]}}}, "capabilities"),
    ({"env": [{"name": "N", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]},
     "not supported"),
    ({"volumeMounts": [{"name": "h", "mountPath": "/h"}]}, "only Secrets"),
    ({"volumeMounts": [{"name": "s", "mountPath": "/s"}]}, "not given"),
    ({"volumeMounts": [{"name": "s", "mountPath": "/s", "subPath": "a"}]}, "subPath"),
    ({"resources": {"limits": {"memory": "1.5G"}}}, "memory quantity"),
])
def test_what_the_runner_cannot_run_as_the_kubelet_would_is_refused(
    container: dict[str, Any], message: str, tmp_path: Path
) -> None:
    spec, c = base_spec(**container)
    with pytest.raises(DevClusterError, match=message):
        container_run(spec, c, context(tmp_path), {})


@pytest.mark.parametrize(("quantity", "expected"), [
    ("16Mi", 16 << 20), ("1Gi", 1 << 30), ("512Ki", 512 << 10), ("1000", 1000)])
def test_memory_quantities_of_the_chart_are_read(quantity: str, expected: int) -> None:
    assert memory_bytes(quantity) == expected


def test_pip_settings_come_from_pip_config_list_with_the_environment_in_global(
    tmp_path: Path
) -> None:
    (tmp_path / "ca.pem").write_text("x")
    listing = (f"global.cert='{tmp_path / 'ca.pem'}'\n"
               ":env:.find-links='/nonexistent/wheels'\n"
               "install.no-binary=\"pycurl\"\n"
               "not a setting\n")
    sections = pip_settings(listing)
    assert sections == {"global": {"cert": str(tmp_path / "ca.pem"),
                                   "find-links": "/nonexistent/wheels"},
                        "install": {"no-binary": "pycurl"}}
    assert pip_conf(sections) == (f"[global]\ncert = {tmp_path / 'ca.pem'}\n"
                                  "find-links = /nonexistent/wheels\n"
                                  "[install]\nno-binary = pycurl\n")
    # Only what exists is mounted into the build.
    assert named_paths(sections) == [tmp_path / "ca.pem"]


def test_ulimits_stay_within_this_process_s_hard_limits() -> None:
    flags = dict(f.removeprefix("--ulimit=").split("=") for f in ulimits())
    for name, limit in (("nofile", resource.RLIMIT_NOFILE), ("nproc", resource.RLIMIT_NPROC)):
        soft, hard = (int(v) for v in flags[name].split(":"))
        assert soft == hard
        maximum = resource.getrlimit(limit)[1]
        assert maximum == resource.RLIM_INFINITY or hard <= maximum


@pytest.mark.parametrize("image", ["tessera", "registry:5000/tessera"])
def test_an_image_without_a_tag_is_refused(image: str) -> None:
    with pytest.raises(DevClusterError, match="REPOSITORY:TAG"):
        image_values(image)
