"""Hostile bodies at the extender verbs (issue 9, items 4 and 5), through Flask's test client.

Every reply is JSON in the verb's own shape (filter and bind: ``Error``; prioritize: a
``HostPriorityList``), with status 200, or, for a body over the cap, 413 in the services' one
error shape ``{"code", "message"}``. None is an HTML 500, and none reports an internal error.
"""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from alloc_harness import make_app
from builders import make_gpu_pod, make_node, request, share, whole
from fake_kube import FakeKube
from flask import Flask


@pytest.fixture
def app() -> Flask:
    fake = FakeKube()
    fake.add_node(make_node("n1", count=1, memory_mib=16000))
    # n1's only card is taken: a filter that fails for room remembers the pod, by its uid,
    # to ask it again on a release (allocator/verbs/requeue.py).
    fake.add_pod(make_gpu_pod("holder", request(whole())))
    app, rt = make_app(fake)
    rt.allocator.bind("default", "holder", "uid-holder", "n1")
    return app


def _gpu_pod(**meta: Any) -> dict[str, Any]:
    pod = make_gpu_pod("p", request(share(core=10)))
    pod["metadata"].update(meta)
    return pod


FILTER_BODIES: dict[str, bytes] = {
    "brackets": b"[" * 100_000,
    "not-utf8": b"\xff\xfe{}",
    "nodes-items-strings": json.dumps({"Pod": {}, "Nodes": {"items": ["x"]}}).encode(),
    "nodes-items-null-metadata": json.dumps(
        {"Pod": {}, "Nodes": {"items": [{"metadata": None}]}}).encode(),
    "metadata-blank": json.dumps({"Pod": {"metadata": " ", "spec": {}},
                                  "NodeNames": ["n1"]}).encode(),
    "uid-list": json.dumps({"Pod": _gpu_pod(uid=["x"]), "NodeNames": ["n1"]}).encode(),
    "labels-list": json.dumps({"Pod": _gpu_pod(labels=["a"]), "NodeNames": ["n1"]}).encode(),
    "annotation-object": json.dumps({"Pod": _gpu_pod(annotations={"a": {"b": 1}}),
                                     "NodeNames": ["n1"]}).encode(),
    "request-brackets": json.dumps({"Pod": _gpu_pod(annotations={
        "elasticgpu.io/gpu-request": "[" * 3000}), "NodeNames": ["n1"]}).encode(),
    "genius-superscript": json.dumps({"Pod": {
        "metadata": {"name": "g", "uid": "u-g", "labels": {"genius/gpu-number": "²"}},
        "spec": {"containers": [{"name": "main"}]}}, "NodeNames": ["n1"]}).encode(),
    "spec-string": json.dumps({"Pod": {"metadata": {}, "spec": "x"},
                               "NodeNames": ["n1"]}).encode(),
}


@pytest.mark.parametrize("verb", ["filter", "prioritize"])
@pytest.mark.parametrize("body", list(FILTER_BODIES.values()), ids=list(FILTER_BODIES))
def test_a_hostile_verb_body_gets_a_json_reply_in_the_verbs_shape(
    app: Flask, verb: str, body: bytes,
) -> None:
    response = app.test_client().post(f"/scheduler/{verb}", data=body,
                                      content_type="application/json")
    assert response.status_code == 200
    reply = response.get_json()
    if verb == "filter":
        assert set(reply) == {"Nodes", "NodeNames", "FailedNodes",
                              "FailedAndUnresolvableNodes", "Error"}
        assert reply["NodeNames"] == []
        text = json.dumps(reply)
        assert "internal error" not in text
        assert reply["Error"] or reply["FailedAndUnresolvableNodes"]
    else:
        assert isinstance(reply, list)
        assert all(set(entry) == {"Host", "Score"} for entry in reply)


@pytest.mark.parametrize(
    "body",
    [b"[" * 100_000, b'{"PodName": ["p"], "Node": "n1"}', b'"x"', b""],
    ids=["brackets", "name-list", "string", "empty"],
)
def test_a_hostile_bind_body_gets_an_error(app: Flask, body: bytes) -> None:
    response = app.test_client().post("/scheduler/bind", data=body,
                                      content_type="application/json")
    assert response.status_code == 200
    (message,) = response.get_json().values()
    assert message and "internal error" not in message


@pytest.mark.parametrize(
    ("method", "path", "status", "allow", "words"),
    [("GET", "/scheduler/filter", 405, "POST", "the extender verbs take POST"),
     ("PUT", "/scheduler/bind", 405, "POST", "method PUT not allowed"),
     ("POST", "/nope", 404, None, "not found"),
     ("GET", "/scheduler/nope", 404, None, "not found"),
     ("POST", "/status", 405, "GET", "not allowed")],
    ids=["verb-get", "verb-put", "unknown", "unknown-verb", "page-post"],
)
def test_every_allocator_error_outside_a_verbs_answer_is_the_services_error_shape(
    app: Flask, method: str, path: str, status: int, allow: str | None, words: str,
) -> None:
    # The webhook's and the servers' own shape (tessera.serving.policy.error_doc): kube-
    # scheduler reads no body of a status but 200, so no Error field is owed here.
    response = app.test_client().open(path, method=method)
    assert response.status_code == status
    assert response.content_type == "application/json"
    reply = response.get_json()
    assert set(reply) == {"code", "message"} and reply["code"] == status
    assert words in reply["message"]
    if allow is not None:
        assert allow in response.headers["Allow"]


def test_a_malformed_length_on_a_verb_is_400_in_the_services_error_shape(app: Flask) -> None:
    response = app.test_client().post("/scheduler/filter", data=b"{}",
                                      environ_overrides={"CONTENT_LENGTH": "12abc"})
    assert response.status_code == 400
    reply = response.get_json()
    assert reply == {"code": 400, "message": "Content-Length '12abc' is not a byte count"}


def test_a_malformed_verb_body_is_still_200_with_error_as_kube_scheduler_reads_it(
    app: Flask,
) -> None:
    # ExtenderFilterResult / ExtenderBindingResult: Error reaches the pod's events.
    for verb in ("filter", "bind"):
        response = app.test_client().post(f"/scheduler/{verb}", data=b"{not json",
                                          content_type="application/json")
        assert response.status_code == 200
        reply = response.get_json()
        assert reply["Error"] and "code" not in reply


def test_a_bug_outside_the_verbs_is_a_logged_500_in_the_services_error_shape(
    app: Flask, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    from allocator.service import page

    def broken(*_args: Any) -> str:
        raise KeyError("bug")

    monkeypatch.setattr(page, "render", broken)
    response = app.test_client().get("/")
    assert response.status_code == 500
    reply = response.get_json()
    assert reply["code"] == 500
    assert reply["message"].startswith("internal error in the GPU allocator: KeyError")
    assert "unexpected error serving GET /" in caplog.text


def test_a_chunked_verb_body_over_the_cap_is_413() -> None:
    fake = FakeKube()
    fake.add_node(make_node("n1"))
    app, _ = make_app(fake, max_body_bytes=4096)
    body = json.dumps({"Pod": make_gpu_pod(), "NodeNames": ["n1"]}).encode() + b" " * 8192
    response = app.test_client().post(
        "/scheduler/filter", input_stream=io.BytesIO(body), content_type="application/json",
        headers={"Transfer-Encoding": "chunked"})
    assert response.status_code == 413
    assert response.get_json() == {"code": 413, "message": "request body larger than 4096 bytes"}


def test_a_bug_in_a_verb_is_logged_and_answered_200_with_error(
        app: Flask, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from allocator.service import extender

    def broken(*_args: Any) -> None:
        raise KeyError("bug")

    monkeypatch.setattr(extender, "bind_reply", broken)
    response = app.test_client().post("/scheduler/bind", data=b"{}",
                                      content_type="application/json")
    assert response.status_code == 200
    assert response.get_json()["Error"].startswith("internal error in the GPU allocator")
    assert "unexpected error serving POST /scheduler/bind" in caplog.text


def test_the_verbs_do_not_go_through_flask(app: Flask) -> None:
    # Flask runs before_request hooks for every request it serves: the verbs never reach it.
    seen: list[str] = []
    app.before_request(lambda: seen.append("flask") and None)
    body = json.dumps({"Pod": _gpu_pod(), "NodeNames": ["n1"]}).encode()
    assert app.test_client().post("/scheduler/filter", data=body).status_code == 200
    assert seen == []
    assert app.test_client().get("/healthz").status_code == 200
    assert seen == ["flask"]
