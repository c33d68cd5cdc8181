"""Hostile bodies at /mutate (issue 9, items 4, 5 and 6), through Flask's test client.

Every reply is JSON: a malformed review is a 400 ``{code, message}``, a pod we cannot honour a
200 refusal with our reason, never "internal error … this is a bug".
"""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from builders import make_pod
from flask.testing import FlaskClient
from test_webhook_http import (
    CONFIG,
    EXAMPLES,
    VOCABULARY,
    assert_valid_as_kubernetes,
    load_example,
    make_review,
    patched,
    post,
)

from tessera.dialects import DialectConfig
from tessera.vocabulary import ContainerRequest, PodRequest, decode_request, encode_request
from webhook.app import create_app
from webhook.config import WebhookConfig
from webhook.mutation import MutationConfig, mutate_pod

HAMI = WebhookConfig(MutationConfig(
    DialectConfig.from_env({"TESSERA_DIALECTS": "elastic,hami"})))


@pytest.fixture
def client() -> FlaskClient:
    return create_app(CONFIG).test_client()


# ----------------------------------------------------------------------------- item 4


@pytest.mark.parametrize(
    ("metadata", "fragment"),
    [
        ("x", "request.object.metadata must be an object"),
        ({"name": ["p"]}, "metadata.name must be a string"),
        ({"labels": ["genius/gpu-number"]}, "metadata.labels must map strings to strings"),
        ({"annotations": {VOCABULARY.request_annotation: {"v": 1}}},
         "metadata.annotations must map strings to strings"),
    ],
)
def test_a_pod_whose_metadata_is_not_what_the_api_server_sends_is_a_malformed_review(
    client: FlaskClient, metadata: Any, fragment: str,
) -> None:
    pod = make_pod({"elasticgpu.io/gpu-core": "10"})
    pod["metadata"] = metadata
    status, body = post(client, make_review(pod))
    assert status == 400
    assert fragment in body["message"]


@pytest.mark.parametrize("value", ["²", "\u0661", "\U0001d7d9"])  # ², Arabic-Indic one, math one
def test_a_genius_count_in_non_ascii_digits_is_refused_with_our_reason(
    client: FlaskClient, value: str,
) -> None:
    status, body = post(client, make_review(make_pod(labels={"genius/gpu-number": value})))
    assert status == 200
    response = body["response"]
    assert response["allowed"] is False
    assert response["status"]["code"] == 422  # was 500: "internal error ... this is a bug"
    assert "genius/gpu-number" in response["status"]["message"]


@pytest.mark.parametrize(
    "body",
    [b"[" * 100_000, json.dumps(make_review(make_pod())).encode()[:-1] + b"," + b"[" * 5000,
     json.dumps({**make_review(make_pod()), "x": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[
         [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]
     ]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}).encode()],
    ids=["brackets", "brackets-inside", "deeper-than-the-bound"],
)
def test_deeply_nested_bodies_are_a_400(client: FlaskClient, body: bytes) -> None:
    response = client.post("/mutate", data=body, content_type="application/json")
    assert response.status_code == 400
    assert "nested" in response.get_json()["message"] or "JSON" in response.get_json()["message"]


@pytest.mark.parametrize(("method", "path", "status"),
                         [("GET", "/mutate", 405), ("POST", "/nope", 404)])
def test_every_error_is_json(client: FlaskClient, method: str, path: str, status: int) -> None:
    response = client.open(path, method=method)
    assert response.status_code == status
    assert response.get_json()["code"] == status


# ----------------------------------------------------------------------------- item 5


def test_a_chunked_body_over_the_cap_is_413_not_truncated_and_admitted() -> None:
    app = create_app(WebhookConfig(max_body_bytes=4096))
    # A valid review followed by padding: a truncating reader would see only the review.
    review = json.dumps(make_review(make_pod({"elasticgpu.io/gpu-core": "10"}))).encode()
    body = review + b" " * 8192
    response = app.test_client().post(
        "/mutate", input_stream=io.BytesIO(body), content_type="application/json",
        headers={"Transfer-Encoding": "chunked"})
    assert response.status_code == 413
    assert response.get_json() == {"code": 413, "message": "request body larger than 4096 bytes"}


def test_a_chunked_body_under_the_cap_is_admitted() -> None:
    app = create_app(WebhookConfig(max_body_bytes=65536))
    pod = make_pod({"elasticgpu.io/gpu-core": "10"})
    body = json.dumps(make_review(pod)).encode()
    response = app.test_client().post(
        "/mutate", input_stream=io.BytesIO(body), content_type="application/json",
        headers={"Transfer-Encoding": "chunked"})
    assert response.status_code == 200
    assert response.get_json()["response"]["allowed"] is True


# ----------------------------------------------------------------------------- item 6


def _mutated(client: FlaskClient, pod: dict[str, Any]) -> dict[str, Any]:
    status, answer = post(client, make_review(pod))
    assert status == 200 and answer["response"]["allowed"], answer
    return patched(pod, answer) if "patch" in answer["response"] else pod


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.yaml")))
def test_mutating_a_mutated_seed_pod_gives_the_same_pod(client: FlaskClient,
                                                         example: str) -> None:
    once = _mutated(client, load_example(example))
    status, answer = post(client, make_review(once))
    assert status == 200 and answer["response"]["allowed"]
    assert "patch" not in answer["response"]  # nothing to change: the same pod


@pytest.mark.parametrize(
    ("limits", "config"),
    [({"elasticgpu.io/gpu": "0.25"}, CONFIG), ({"elasticgpu.io/gpu-percent": "30"}, CONFIG),
     ({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50",
       "nvidia.com/gpucores": "20"}, HAMI),
     ({"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-cores": "50",
       "volcano.sh/vgpu-memory-percentage": "30"}, CONFIG),
     ({"koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory-ratio": "30"}, CONFIG)],
    ids=["fraction", "percent", "hami", "volcano", "koordinator"],
)
def test_a_memory_percent_share_keeps_its_memory_when_admitted_again(
    limits: dict[str, str], config: WebhookConfig,
) -> None:
    client = create_app(config).test_client()
    once = _mutated(client, make_pod(limits))
    twice = _mutated(client, once)
    assert twice == once
    (container,) = decode_request(
        twice["metadata"]["annotations"][VOCABULARY.request_annotation]).containers
    assert container.memory_percent > 0  # was lost: compute only on re-admission
    assert_valid_as_kubernetes(twice, config)


@pytest.mark.parametrize(
    ("recorded", "config"),
    [(ContainerRequest("main", core_percent=10, memory_percent=100), MutationConfig(
        DialectConfig.from_env({"TESSERA_DIALECTS": "elastic,percent,fraction"}))),
     (ContainerRequest("main", core_percent=10, memory_percent=10), MutationConfig(
         DialectConfig.from_env({"TESSERA_DIALECTS": "elastic"})))],
    ids=["unequal-with-equal-dialects-only", "percent-dialects-off"],
)
def test_a_forged_memory_percent_no_enabled_dialect_could_ask_for_is_not_restored(
    recorded: ContainerRequest, config: MutationConfig,
) -> None:
    pod = make_pod({VOCABULARY.core_resource: "10"},
                   annotations={VOCABULARY.request_annotation:
                                encode_request(PodRequest((recorded,)))})
    mutation = mutate_pod(pod, config)
    assert mutation.request is not None
    (container,) = mutation.request.containers
    assert container == ContainerRequest("main", core_percent=10)
