"""Two of HAMi's webhook rules through the real server (``tessera webhook``, gunicorn, TLS on
loopback) in the hami profile (Project-HAMi/HAMi v2.10.0):

- a GPU pod with a privileged container is refused (HTTP 200, ``allowed: false``) naming the
  container, as ``pkg/scheduler/webhook.go:99-102`` denies it;
- with ``--hami-overwrite-env=true`` (HAMi's ``scheduler.overwriteEnv``, ``pkg/device/nvidia/
  device.go:380-385``) every container of a GPU pod that asks for no GPU gets
  ``NVIDIA_VISIBLE_DEVICES=none``, and the mutated pod sent again comes back unchanged."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import requests
from test_webhook_gunicorn_tls import Server, make_review, served_webhook

SHARE = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000", "nvidia.com/gpucores": "30"}


@pytest.fixture
def hami_webhook(tmp_path: Path) -> Iterator[tuple[Server, requests.Session]]:
    with served_webhook(tmp_path, "--hami-overwrite-env=true",
                        env={"TESSERA_AGENT_PROFILE": "hami"}) as served:
        yield served


def _review(spec: dict[str, Any]) -> dict[str, Any]:
    review = make_review({})
    review["request"]["object"]["spec"] = spec
    return review


def _answer(hami_webhook: tuple[Server, requests.Session],
            review: dict[str, Any]) -> dict[str, Any]:
    server, client = hami_webhook
    response = client.post(server.url("/mutate"), json=review, timeout=10)
    assert response.status_code == 200
    answer: dict[str, Any] = response.json()["response"]
    return answer


def _admitted(answer: dict[str, Any], pod: dict[str, Any]) -> dict[str, Any]:
    assert answer["allowed"] is True, answer
    if "patch" not in answer:
        return pod
    ops = json.loads(base64.b64decode(answer["patch"]))
    result: dict[str, Any] = jsonpatch.apply_patch(copy.deepcopy(pod), ops)
    return result


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", [])}


def test_a_gpu_pod_with_a_privileged_container_is_refused_naming_it(
        hami_webhook: tuple[Server, requests.Session]) -> None:
    spec = {"containers": [
        {"name": "main", "image": "busybox", "resources": {"limits": dict(SHARE)}},
        {"name": "tool", "image": "busybox", "securityContext": {"privileged": True}}]}
    refused = _answer(hami_webhook, _review(spec))
    assert refused["allowed"] is False
    message = refused["status"]["message"]
    assert "container 'tool' is privileged" in message
    assert "HAMi's webhook refuses" in message
    # Without the privileged flag the same pod is admitted (the refusal is that flag's).
    del spec["containers"][1]["securityContext"]
    assert _answer(hami_webhook, _review(spec))["allowed"] is True


def test_overwrite_env_hides_the_cards_from_every_container_asking_none_and_is_idempotent(
        hami_webhook: tuple[Server, requests.Session]) -> None:
    spec = {
        "initContainers": [{"name": "fetch", "image": "busybox"}],
        "containers": [
            {"name": "main", "image": "busybox", "resources": {"limits": dict(SHARE)}},
            {"name": "side", "image": "busybox",
             "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
                     {"name": "KEEP", "value": "x"}]}]}
    review = _review(spec)
    once = _admitted(_answer(hami_webhook, review), review["request"]["object"])
    init, = once["spec"]["initContainers"]
    main, side = once["spec"]["containers"]
    assert _env(init) == {"NVIDIA_VISIBLE_DEVICES": "none"}
    assert _env(side) == {"KEEP": "x", "NVIDIA_VISIBLE_DEVICES": "none"}
    assert [e["name"] for e in side["env"]].count("NVIDIA_VISIBLE_DEVICES") == 1
    assert "NVIDIA_VISIBLE_DEVICES" not in _env(main)  # the GPU container: the plugin's
    again = make_review({})
    again["request"]["object"] = copy.deepcopy(once)
    answer = _answer(hami_webhook, again)
    assert _admitted(answer, once) == once


def test_a_pod_asking_for_no_gpu_is_left_alone_even_when_privileged(
        hami_webhook: tuple[Server, requests.Session]) -> None:
    # The API server sends it only when matchConditions are off; the webhook leaves it be.
    spec = {"containers": [{"name": "tool", "image": "busybox", "securityContext":
                            {"privileged": True}}]}
    answer = _answer(hami_webhook, _review(spec))
    assert answer["allowed"] is True and "patch" not in answer
