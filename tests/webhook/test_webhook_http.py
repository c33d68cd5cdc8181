"""The webhook's HTTP contract, through Flask's test client with real AdmissionReview bodies.

Every admitted pod is patched with the returned JSON Patch and then checked the way the API
server would validate it: extended resources are integers, requested == limited.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml
from builders import make_pod
from flask import Flask
from flask.testing import FlaskClient

from tessera.dialects import Dialect, DialectConfig
from tessera.quantity import parse_quantity
from tessera.serving import ServingConfig
from tessera.serving.gunicorn.bridge import WsgiBridge
from tessera.serving.policy import BodyPolicy
from tessera.vocabulary import ConfigError, Vocabulary, decode_request
from webhook import admission
from webhook.app import create_app
from webhook.config import WebhookConfig
from webhook.mutation import MutationConfig

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "pods"
CONFIG = WebhookConfig()
VOCABULARY = Vocabulary()


# ----------------------------------------------------------------------------- builders


def make_review(
    obj: dict[str, Any] | None,
    *,
    operation: str = "CREATE",
    kind: str = "Pod",
    group: str = "",
    sub_resource: str | None = None,
    dry_run: bool = False,
    uid: str | None = None,
) -> dict[str, Any]:
    request: dict[str, Any] = {
        "uid": uid or str(uuid.uuid4()),
        "kind": {"group": group, "version": "v1", "kind": kind},
        "resource": {"group": group, "version": "v1", "resource": kind.lower() + "s"},
        "requestKind": {"group": group, "version": "v1", "kind": kind},
        "namespace": "default",
        "operation": operation,
        "userInfo": {"username": "alice"},
        "object": obj,
        "oldObject": None,
        "dryRun": dry_run,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
    }
    if sub_resource:
        request["subResource"] = sub_resource
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def load_example(name: str) -> dict[str, Any]:
    pod: dict[str, Any] = yaml.safe_load((EXAMPLES / name).read_text())
    return pod


@pytest.fixture
def app() -> Flask:
    return create_app(CONFIG)


@pytest.fixture
def client(app: Flask) -> Iterator[FlaskClient]:
    with app.test_client() as client:
        yield client


def post(client: FlaskClient, review: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    response = client.post("/mutate", json=review)
    body: dict[str, Any] = response.get_json()
    return response.status_code, body


def patched(pod: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    response = answer["response"]
    assert response["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(response["patch"]))
    result: dict[str, Any] = jsonpatch.apply_patch(copy.deepcopy(pod), ops)
    return result


def is_extended_resource(name: str) -> bool:
    # k8s.io/kubernetes pkg/apis/core/helper: a domain-prefixed name outside kubernetes.io.
    return "/" in name and not name.split("/")[0].endswith("kubernetes.io")


def assert_valid_as_kubernetes(pod: dict[str, Any], config: WebhookConfig = CONFIG) -> None:
    """What pod validation says about extended resources, plus: no dialect key survives."""
    canonical = set(config.mutation.dialects.vocabulary.managed_resources)
    leftovers = config.mutation.dialects.resource_keys - canonical
    spec = pod["spec"]
    for container in spec.get("initContainers", []) + spec["containers"]:
        resources = container.get("resources", {})
        limits, requests = resources.get("limits", {}), resources.get("requests", {})
        for key in set(limits) | set(requests):
            assert key not in leftovers, f"{container['name']}: dialect key {key} left behind"
            if not is_extended_resource(key):
                continue
            assert key in limits, f"{container['name']}: extended resource {key} has no limit"
            limit = parse_quantity(limits[key])
            assert limit.is_integer, f"{container['name']}: {key}={limits[key]} not an integer"
            if key in requests:
                assert parse_quantity(requests[key]).value == limit.value, (
                    f"{container['name']}: {key} request != limit"
                )


def limits_of(pod: dict[str, Any], container: str) -> dict[str, str]:
    spec = pod["spec"]
    for c in spec.get("initContainers", []) + spec["containers"]:
        if c["name"] == container:
            result: dict[str, str] = c.get("resources", {}).get("limits", {})
            return result
    raise AssertionError(f"no container {container}")


def assert_echoes(review: dict[str, Any], answer: dict[str, Any]) -> None:
    assert answer["apiVersion"] == "admission.k8s.io/v1"
    assert answer["kind"] == "AdmissionReview"
    assert answer["response"]["uid"] == review["request"]["uid"]


# ----------------------------------------------------------------------------- admitted pods


@pytest.mark.parametrize(
    ("example", "expected_limits", "mode"),
    [
        ("elastic-share-256mib.yaml", {"cuda": {"elasticgpu.io/gpu-memory": "256"}}, "shared"),
        ("elastic-two-cards.yaml", {"cuda": {"elasticgpu.io/gpu-core": "200"}}, "whole"),
        ("nano-gpu-share.yaml",
         {"cuda": {"elasticgpu.io/gpu-core": "20", "elasticgpu.io/gpu-memory": "1024"}}, "shared"),
        ("aliyun-gpu-mem.yaml", {"cuda": {"elasticgpu.io/gpu-memory": "5120"}}, "shared"),
        ("genius-one-card.yaml", {"cuda": {"elasticgpu.io/gpu-core": "100"}}, "whole"),
        ("percent-share.yaml", {"cuda": {"elasticgpu.io/gpu-core": "25"}}, "shared"),
        ("fraction-share.yaml",
         {"warmup": {"elasticgpu.io/gpu-core": "25"}, "cuda": {"elasticgpu.io/gpu-core": "25"}},
         "shared"),
        ("volcano-vgpu-share.yaml",
         {"cuda": {"elasticgpu.io/gpu-core": "50", "elasticgpu.io/gpu-memory": "3000"}}, "shared"),
        ("gpu-manager-vcuda-share.yaml",
         {"cuda": {"elasticgpu.io/gpu-core": "50", "elasticgpu.io/gpu-memory": "7680"}}, "shared"),
        ("koordinator-share.yaml",
         {"cuda": {"elasticgpu.io/gpu-core": "60", "elasticgpu.io/gpu-memory": "4096"}}, "shared"),
    ],
)
def test_every_seed_pod_comes_out_canonical(
    client: FlaskClient, example: str, expected_limits: dict[str, dict[str, str]], mode: str
) -> None:
    pod = load_example(example)
    review = make_review(pod)
    status, answer = post(client, review)
    assert status == 200
    assert_echoes(review, answer)
    assert answer["response"]["allowed"] is True
    result = patched(pod, answer)
    assert_valid_as_kubernetes(result)
    for container, limits in expected_limits.items():
        assert limits_of(result, container) == limits
    meta = result["metadata"]
    assert meta["labels"][VOCABULARY.gpu_pod_label] == "true"
    assert meta["labels"][VOCABULARY.mode_label] == mode
    assert meta["labels"]["app"] == "tessera-example"  # other fields untouched
    request = decode_request(meta["annotations"][VOCABULARY.request_annotation])
    # An init container runs on its app container's card (elastic-gpu-agent serves it there),
    # so the request as placed holds the app containers only.
    assert {c.name for c in request.containers} == set(expected_limits) - {"warmup"}


def test_a_percent_share_keeps_its_memory_percent_in_the_annotation(client: FlaskClient) -> None:
    pod = make_pod({"elasticgpu.io/gpu-percent": "30"})
    _, answer = post(client, make_review(pod))
    result = patched(pod, answer)
    request = decode_request(result["metadata"]["annotations"][VOCABULARY.request_annotation])
    assert (request.containers[0].core_percent, request.containers[0].memory_percent) == (30, 30)
    assert limits_of(result, "main") == {"elasticgpu.io/gpu-core": "30"}


def test_requests_and_other_resources_are_kept_and_made_equal(client: FlaskClient) -> None:
    pod = make_pod()
    pod["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "500m", "nano-gpu.io/gpu-core": "20"},
        "limits": {"memory": "1Gi", "nano-gpu.io/gpu-core": "20"},
    }
    _, answer = post(client, make_review(pod))
    result = patched(pod, answer)
    assert_valid_as_kubernetes(result)
    resources = result["spec"]["containers"][0]["resources"]
    assert resources["requests"] == {"cpu": "500m", "elasticgpu.io/gpu-core": "20"}
    assert resources["limits"] == {"memory": "1Gi", "elasticgpu.io/gpu-core": "20"}


def test_the_configured_scheduler_name_is_set_on_gpu_pods_only() -> None:
    app = create_app(WebhookConfig(MutationConfig(scheduler_name="tessera-scheduler")))
    with app.test_client() as client:
        gpu = make_pod({"elasticgpu.io/gpu-core": "50"})
        _, answer = post(client, make_review(gpu))
        assert patched(gpu, answer)["spec"]["schedulerName"] == "tessera-scheduler"
        _, plain = post(client, make_review(make_pod({"cpu": "1"})))
        assert "patch" not in plain["response"]


def test_hami_pods_are_rewritten_only_when_opted_in() -> None:
    pod = make_pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000",
                    "nvidia.com/gpucores": "30"})
    with create_app(CONFIG).test_client() as client:
        _, answer = post(client, make_review(pod))
        assert "patch" not in answer["response"]
    hami = WebhookConfig(MutationConfig(DialectConfig(enabled=frozenset(Dialect))))
    with create_app(hami).test_client() as client:
        _, answer = post(client, make_review(pod))
        result = patched(pod, answer)
        assert_valid_as_kubernetes(result, hami)
        assert limits_of(result, "main") == {
            "elasticgpu.io/gpu-core": "30", "elasticgpu.io/gpu-memory": "3000"
        }


@pytest.mark.parametrize(
    ("limits", "annotations", "expected_limits"),
    [
        ({"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "3000",
          "volcano.sh/vgpu-cores": "50"}, {},
         {"elasticgpu.io/gpu-core": "50", "elasticgpu.io/gpu-memory": "3000"}),
        ({"tencent.com/vcuda-core": "50", "tencent.com/vcuda-memory": "30"}, {},
         {"elasticgpu.io/gpu-core": "50", "elasticgpu.io/gpu-memory": "7680"}),
        ({"tencent.com/vcuda-core": "200", "tencent.com/vcuda-memory": "60"}, {},
         {"elasticgpu.io/gpu-core": "200"}),
        ({"koordinator.sh/gpu-core": "60", "koordinator.sh/gpu-memory": "4Gi"}, {},
         {"elasticgpu.io/gpu-core": "60", "elasticgpu.io/gpu-memory": "4096"}),
        ({"koordinator.sh/gpu": "50", "cpu": "1"}, {},
         {"elasticgpu.io/gpu-core": "50", "cpu": "1"}),
        (None, {"gpu-fraction": "0.5"}, {"elasticgpu.io/gpu-core": "50"}),
        (None, {"gpu-memory": "2000"}, {"elasticgpu.io/gpu-memory": "2000"}),
    ],
)
def test_pods_of_the_newer_front_doors_come_out_canonical(
    limits: dict[str, str] | None, annotations: dict[str, str],
    expected_limits: dict[str, str],
) -> None:
    # KAI is opt-in; with every dialect on, each pod is read by exactly one of them.
    config = WebhookConfig(MutationConfig(DialectConfig(enabled=frozenset(Dialect))))
    pod = make_pod(limits, annotations=annotations)
    with create_app(config).test_client() as client:
        _, answer = post(client, make_review(pod))
    result = patched(pod, answer)
    assert_valid_as_kubernetes(result, config)
    assert limits_of(result, "main") == expected_limits
    assert result["metadata"]["labels"][VOCABULARY.gpu_pod_label] == "true"
    # KAI's annotations stay: they are not resources and nothing schedules by them any more.
    assert {k: result["metadata"]["annotations"][k] for k in annotations} == annotations


def test_a_custom_domain_writes_its_own_keys() -> None:
    custom = DialectConfig(vocabulary=Vocabulary("gpu.example.com"))
    config = WebhookConfig(MutationConfig(custom))
    pod = make_pod({"elasticgpu.io/gpu-core": "100"})
    with create_app(config).test_client() as client:
        _, answer = post(client, make_review(pod))
    result = patched(pod, answer)
    assert limits_of(result, "main") == {"gpu.example.com/gpu-core": "100"}
    assert result["metadata"]["labels"]["gpu.example.com/gpu-pod"] == "true"


# ----------------------------------------------------------------------------- left alone


@pytest.mark.parametrize(
    "review",
    [
        make_review(make_pod({"cpu": "1"})),
        make_review(make_pod()),
        make_review(make_pod({"elasticgpu.io/gpu-core": "50"}), operation="UPDATE"),
        make_review(None, operation="DELETE"),
        make_review({"kind": "PodExecOptions", "command": ["sh"]}, operation="CONNECT",
                    sub_resource="exec"),
        make_review({"kind": "Deployment", "spec": {}}, kind="Deployment", group="apps"),
        make_review({"kind": "Binding", "target": {"name": "n1"}}, sub_resource="binding"),
    ],
    ids=["no-gpu", "no-resources", "update", "delete", "connect", "deployment", "binding"],
)
def test_pods_without_gpu_and_other_requests_are_allowed_without_a_patch(
    client: FlaskClient, review: dict[str, Any]
) -> None:
    status, answer = post(client, review)
    assert status == 200
    assert_echoes(review, answer)
    assert answer["response"] == {"uid": review["request"]["uid"], "allowed": True}


def test_a_dry_run_gets_the_same_answer(client: FlaskClient) -> None:
    pod = make_pod({"elasticgpu.io/gpu": "0.5"})
    _, real = post(client, make_review(pod, uid="u-1"))
    _, dry = post(client, make_review(pod, uid="u-1", dry_run=True))
    assert dry == real


FORGED = '{"v":1,"containers":[{"name":"main","cards":8}]}'


def test_forged_tessera_annotations_are_removed_from_pods_without_gpu(client: FlaskClient) -> None:
    pod = make_pod(
        {"cpu": "1"},
        annotations={VOCABULARY.request_annotation: FORGED},
        labels={VOCABULARY.gpu_pod_label: "true", "app": "x"},
    )
    _, answer = post(client, make_review(pod))
    result = patched(pod, answer)
    assert VOCABULARY.request_annotation not in result["metadata"].get("annotations", {})
    assert result["metadata"]["labels"] == {"app": "x"}


# ----------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("limits", "labels", "fragments"),
    [
        ({"elasticgpu.io/gpu-core": "150"}, None, ["'main'", "elasticgpu.io/gpu-core=150"]),
        ({"elasticgpu.io/gpu-memory": "-1"}, None, ["'main'", "elasticgpu.io/gpu-memory", ">= 0"]),
        ({"elasticgpu.io/gpu-percent": "0"}, None, ["'main'", "gpu-percent=0", "1-100"]),
        ({"elasticgpu.io/gpu-percent": "101"}, None, ["'main'", "gpu-percent=101", "1-100"]),
        ({"elasticgpu.io/gpu": "1.5"}, None, ["'main'", "elasticgpu.io/gpu=1.5"]),
        ({"elasticgpu.io/gpu-core": "20", "nano-gpu.io/gpu-core": "30"}, None,
         ["'main'", "elasticgpu.io/gpu-core", "nano-gpu.io/gpu-core"]),
        ({"elasticgpu.io/gpu-memory": "5GB"}, None, ["'main'", "'5GB'", "quantity"]),
        ({"aliyun.com/gpu-mem": "2Gi"}, None, ["'main'", "aliyun.com/gpu-mem", "binary"]),
        (None, {"genius/gpu-number": "many"}, ["genius/gpu-number", "'many'"]),
        ({"volcano.sh/vgpu-number": "2", "volcano.sh/vgpu-cores": "30"}, None,
         ["'main'", "on each of 2 cards", "elastic-gpu-agent"]),
        ({"tencent.com/vcuda-core": "150"}, None, ["'main'", "tencent.com/vcuda-core=150"]),
        ({"koordinator.sh/gpu-core": "50"}, None,
         ["'main'", "koordinator.sh/gpu-core", "not a combination Koordinator accepts"]),
    ],
)
def test_impossible_requests_are_refused_with_200_and_a_clear_message(
    client: FlaskClient,
    limits: dict[str, Any] | None,
    labels: dict[str, str] | None,
    fragments: list[str],
) -> None:
    review = make_review(make_pod(limits, labels=labels))
    status, answer = post(client, review)
    assert status == 200
    assert_echoes(review, answer)
    response = answer["response"]
    assert response["allowed"] is False
    assert "patch" not in response
    assert response["status"]["code"] == 422
    assert response["status"]["reason"] == "Invalid"
    for fragment in fragments:
        assert fragment in response["status"]["message"]


def test_an_internal_error_is_a_clear_refusal_not_a_500(
    client: FlaskClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    def explode(pod: Any, config: Any) -> Any:
        raise KeyError("surprise")

    monkeypatch.setattr(admission, "mutate_pod", explode)
    review = make_review(make_pod({"elasticgpu.io/gpu-core": "20"}))
    status, answer = post(client, review)
    assert status == 200
    assert_echoes(review, answer)
    assert answer["response"]["allowed"] is False
    assert "internal error" in answer["response"]["status"]["message"]
    assert "KeyError" in answer["response"]["status"]["message"]


# ----------------------------------------------------------------------------- malformed


def _review_without(path: tuple[str, ...]) -> bytes:
    review = make_review(make_pod({"elasticgpu.io/gpu-core": "20"}))
    target: dict[str, Any] = review
    for key in path[:-1]:
        target = target[key]
    del target[path[-1]]
    return json.dumps(review).encode()


def _review_with(**changes: Any) -> bytes:
    review = make_review(make_pod({"elasticgpu.io/gpu-core": "20"}))
    review.update(changes)
    return json.dumps(review).encode()


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"not json", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b"[1, 2, 3]", "JSON object"),
        (b"", "not JSON"),
        (_review_with(apiVersion="admission.k8s.io/v1beta1"), "admission.k8s.io/v1"),
        (_review_with(kind="Pod"), "AdmissionReview"),
        (_review_without(("request",)), "no request"),
        (_review_without(("request", "uid")), "no uid"),
        (_review_without(("request", "object")), "no object"),
        (_review_without(("request", "operation")), "operation"),
        (b"[" * 100000 + b"]" * 100000, "not JSON"),
    ],
    ids=["text", "bad-utf8", "array", "empty", "v1beta1", "wrong-kind", "no-request", "no-uid",
         "no-object", "no-operation", "deep"],
)
def test_a_malformed_review_is_a_400_with_a_message(
    client: FlaskClient, body: bytes, fragment: str
) -> None:
    response = client.post("/mutate", data=body, content_type="application/json")
    assert response.status_code == 400
    assert fragment in response.get_json()["message"]


def test_an_oversize_body_is_refused_with_413() -> None:
    app = create_app(WebhookConfig(max_body_bytes=2048))
    with app.test_client() as client:
        pod = make_pod({"elasticgpu.io/gpu-core": "20"}, annotations={"big": "x" * 4096})
        response = client.post("/mutate", json=make_review(pod))
    assert response.status_code == 413
    assert "2048" in response.get_json()["message"]


@pytest.mark.parametrize(("method", "path", "status"), [("GET", "/mutate", 405),
                                                          ("POST", "/nowhere", 404)])
def test_wrong_routes_get_json_errors(
    client: FlaskClient, method: str, path: str, status: int
) -> None:
    response = client.open(path, method=method)
    assert response.status_code == status
    assert response.get_json()["code"] == status


# ----------------------------------------------------------------------------- health, config


def test_health_and_readiness(client: FlaskClient, tmp_path: Path) -> None:
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").status_code == 200
    missing = ServingConfig(tls_cert=str(tmp_path / "missing.crt"),
                            tls_key=str(tmp_path / "missing.key"))
    gone = create_app(WebhookConfig(serving=missing))
    assert gone.test_client().get("/readyz").status_code == 503


def test_the_gunicorn_target_reads_its_configuration_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TESSERA_SCHEDULER_NAME", "tessera-scheduler")
    monkeypatch.setenv("TESSERA_ALIYUN_MEMORY_UNIT", "MiB")
    monkeypatch.setenv("TESSERA_WEBHOOK_MAX_BODY_BYTES", "65536")
    app = create_app()
    config: WebhookConfig = app.extensions["tessera.webhook"]
    assert config.mutation.scheduler_name == "tessera-scheduler"
    assert config.mutation.dialects.aliyun_memory_unit_mib == 1
    assert app.config["MAX_CONTENT_LENGTH"] == 65536


def test_a_bad_environment_fails_at_start_naming_each_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TESSERA_WEBHOOK_PORT", "eighty")
    monkeypatch.setenv("TESSERA_SCHEDULER_NAME", "Not_Valid")
    monkeypatch.setenv("TESSERA_DIALECTS", "elastic,kueue")
    with pytest.raises(ConfigError) as caught:
        create_app()
    for name in ("TESSERA_WEBHOOK_PORT", "TESSERA_SCHEDULER_NAME", "kueue"):
        assert name in str(caught.value)


@pytest.mark.parametrize(
    ("limits", "outcome"),
    [({"elasticgpu.io/gpu-core": "20"}, "mutated"), ({"elasticgpu.io/gpu-core": "150"}, "refused")],
)
def test_admissions_are_logged_with_the_pods_identity(
    client: FlaskClient, caplog: pytest.LogCaptureFixture, limits: dict[str, Any], outcome: str
) -> None:
    review = make_review(make_pod(limits, name="trainer"), uid="review-7")
    with caplog.at_level(logging.INFO, logger="webhook.admission"):
        post(client, review)
    records = [r for r in caplog.records if getattr(r, "outcome", None) == outcome]
    assert len(records) == 1
    record = records[0]
    assert (record.__dict__["namespace"], record.__dict__["pod"], record.__dict__["uid"]) == (
        "default", "trainer", "review-7"
    )
    assert "default/trainer" in record.getMessage()


def test_admission_is_answered_in_the_servers_event_loop_as_through_flask(app: Flask) -> None:
    """The app declares /mutate inline (tessera.serving.gunicorn.bridge): the bridge answers
    it in its event loop thread, with the same review Flask gives."""
    review = json.dumps(make_review(load_example("aliyun-gpu-mem.yaml"), uid="u-inline")).encode()
    bridge = WsgiBridge(app, threads=1, body=BodyPolicy(CONFIG.max_body_bytes))
    assert bridge.inline_paths == {"/mutate"}
    sent: list[dict[str, Any]] = []

    async def main() -> None:
        messages = [{"type": "http.request", "body": review, "more_body": False}]

        async def receive() -> dict[str, Any]:
            return messages.pop(0) if messages else {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await bridge({"type": "http", "method": "POST", "path": "/mutate", "headers": [
            (b"content-type", b"application/json")], "query_string": b""}, receive, send)

    asyncio.run(main())
    assert sent[0]["status"] == 200
    through_flask = app.test_client().post("/mutate", data=review,
                                           content_type="application/json").get_json()
    assert json.loads(sent[1]["body"]) == through_flask
    assert through_flask["response"]["allowed"] is True
    assert through_flask["response"].get("patch")  # the example asks for GPU: a mutation
