"""HAMi's pod annotations through the real server (``tessera webhook``, gunicorn, TLS on
loopback), in the hami profile: an honoured policy pair reaches the request annotation, an
annotation Tessera cannot honour is refused (HTTP 200, ``allowed: false``) with a message
naming it."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from test_webhook_gunicorn_tls import Server, make_review, served_webhook

from tessera.vocabulary import Vocabulary, decode_request

HAMI_POD = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000"}


@pytest.fixture
def hami_webhook(tmp_path: Path) -> Iterator[tuple[Server, requests.Session]]:
    with served_webhook(tmp_path, env={"TESSERA_AGENT_PROFILE": "hami"}) as served:
        yield served


def _review(annotations: dict[str, str]) -> dict[str, Any]:
    review = make_review(HAMI_POD)
    review["request"]["object"]["metadata"]["annotations"] = annotations
    return review


def _answer(hami_webhook: tuple[Server, requests.Session],
            annotations: dict[str, str]) -> dict[str, Any]:
    server, client = hami_webhook
    response = client.post(server.url("/mutate"), json=_review(annotations), timeout=10)
    assert response.status_code == 200
    answer: dict[str, Any] = response.json()["response"]
    return answer


def test_hamis_policy_annotations_become_the_pods_hami_policy_and_the_rest_are_refused(
        hami_webhook: tuple[Server, requests.Session]) -> None:
    # A chain led by binpack is binpack (HAMi's lessByChain: later keys only break ties).
    admitted = _answer(hami_webhook, {"hami.io/gpu-scheduler-policy": "binpack,numa",
                                      "nvidia.com/vgpu-mode": "mps",
                                      "nvidia.com/numa-bind": "true",
                                      "nvidia.com/use-gputype": "A100",
                                      "nvidia.com/nouse-gpuuuid": "GPU-1,GPU-2"})
    assert admitted["allowed"] is True
    patch = json.loads(base64.b64decode(admitted["patch"]))
    key = Vocabulary().request_annotation.replace("/", "~1")
    [written] = [op["value"] for op in patch if op["path"].endswith(key)]
    record = decode_request(written)
    assert record.policy == "hami-binpack-binpack"  # node: HAMi's default
    # The card choice travels in the request record, for the allocator's eligible cards.
    assert (record.use_types, record.nouse_uuids) == (("A100",), ("GPU-1", "GPU-2"))
    # So do the sharing mode and the NUMA binding (HAMi's checkType and assertNuma).
    assert record.card_modes == ("mps",) and record.one_numa_node

    refused = _answer(hami_webhook, {"hami.io/gpu-scheduler-policy": "mutex",
                                     "nvidia.com/numa-bind": "yes",
                                     "nvidia.com/vgpu-mode": "mig"})
    assert refused["allowed"] is False
    message = refused["status"]["message"]
    assert ("pod annotation hami.io/gpu-scheduler-policy='mutex': with mutex, HAMi takes idle "
            "cards only") in message
    assert "write binpack or spread" in message
    assert "pod annotation nvidia.com/numa-bind='yes' is not a boolean" in message
    assert "pod annotation nvidia.com/vgpu-mode='mig' allows mig cards only" in message
