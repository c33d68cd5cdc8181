"""HAMi's ``nvidia.com/gpumem-percentage`` out of range or not a number, and ``nvidia.com/gpumem``
above any card, at admission (issue 46, "Bad input"): a 200 refusal naming the key and the
range, never a 500."""

from __future__ import annotations

import pytest
from builders import make_pod
from test_webhook_http import make_review, post

from tessera.dialects import DialectConfig
from webhook.app import create_app
from webhook.config import WebhookConfig
from webhook.mutation import MutationConfig

#: Under both the canonical agent and HAMi's own: the check is the dialect's, not the agent's.
CONFIGS = {
    profile: WebhookConfig(MutationConfig(DialectConfig.from_env(
        {"TESSERA_DIALECTS": "elastic,hami", "TESSERA_AGENT_PROFILE": profile})))
    for profile in ("elastic", "hami")
}


@pytest.mark.parametrize("profile", CONFIGS)
@pytest.mark.parametrize(("value", "why"), [
    ("0", "1-100"), ("101", "1-100"), ("-5", "1-100"), ("50.5", "1-100"),
    ("abc", "is not a Kubernetes quantity"), ("", "is not a Kubernetes quantity")])
def test_a_memory_percent_out_of_1_to_100_is_refused_with_the_key_and_reason(
        profile: str, value: str, why: str) -> None:
    client = create_app(CONFIGS[profile]).test_client()
    pod = make_pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": value,
                    "nvidia.com/gpucores": "20"})
    status, body = post(client, make_review(pod))
    assert status == 200
    response = body["response"]
    assert response["allowed"] is False
    assert response["status"]["code"] != 500
    message = response["status"]["message"]
    assert "nvidia.com/gpumem-percentage" in message and why in message


@pytest.mark.parametrize("profile", CONFIGS)
def test_gpumem_above_every_card_is_admitted_for_the_scheduler_to_refuse(profile: str) -> None:
    """Admission knows no cards: 999999 MiB is a valid number; filter refuses it, naming the
    largest card (tests/allocator/test_hami_bad_input.py)."""
    client = create_app(CONFIGS[profile]).test_client()
    pod = make_pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "999999",
                    "nvidia.com/gpucores": "20"})
    status, body = post(client, make_review(pod))
    assert status == 200 and body["response"]["allowed"] is True
