"""The Secret store and caBundle logic of ``tessera certs secret``, over an in-memory API.

The same code runs against the real API server in test_manifests_apiserver.py; here each
branch (create, keep, renew, CA change, wrong type, unknown webhook, 403/404) is a unit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

import pytest
from kubernetes.client.exceptions import ApiException

from certs.errors import KubeAccessError, MaterialError, NotFound, PermissionDenied
from certs.issue import BuilderIssuer
from certs.kube import wrap
from certs.material import load_certs
from certs.plan import LeafTarget, Outcome, ensure
from certs.renewal import Action, LeafSpec, Policy, Usage
from certs.secret import TLS_TYPE, SecretData, SecretStore, sync_ca_bundle

NS = "tessera-system"
NOW = datetime(2030, 6, 1, tzinfo=UTC)
POLICY = Policy()
TARGETS = [
    LeafTarget("tessera-webhook-tls",
               LeafSpec("tessera-webhook.tessera-system.svc", Usage.SERVER,
                        frozenset({"tessera-webhook.tessera-system.svc"}))),
    LeafTarget("tessera-scheduler-client-tls", LeafSpec("tessera-scheduler", Usage.CLIENT)),
]


@dataclass
class FakeApi:
    """Secrets and one webhook configuration, with resourceVersions like the API server."""

    secrets: dict[str, SecretData] = field(default_factory=dict)
    webhooks: list[tuple[str, bytes]] = field(default_factory=lambda: [("pods.tessera", b"")])
    writes: list[str] = field(default_factory=list)
    version: int = 0

    def get_secret(self, namespace: str, name: str) -> SecretData | None:
        assert namespace == NS
        return self.secrets.get(name)

    def put_secret(self, namespace: str, name: str, secret: SecretData, exists: bool) -> None:
        assert exists == (name in self.secrets)
        if exists:
            assert secret.resource_version == self.secrets[name].resource_version
        self.version += 1
        self.secrets[name] = replace(secret, resource_version=str(self.version))
        self.writes.append(f"secret/{name}")

    def get_webhook_bundles(self, configuration: str) -> list[tuple[str, bytes]]:
        return list(self.webhooks)

    def set_webhook_bundles(self, configuration: str, changes: list[tuple[int, str, bytes]]
                            ) -> None:
        for index, name, bundle in changes:
            assert self.webhooks[index][0] == name
            self.webhooks[index] = (name, bundle)
            self.writes.append(f"webhook/{name}")


def run(api: FakeApi, now: datetime = NOW, policy: Policy = POLICY) -> Outcome:
    store = SecretStore(api, NS, "tessera-ca")
    outcome = ensure(
        store, TARGETS, BuilderIssuer(), now, policy,
        after_new_ca=lambda pem: sync_ca_bundle(api, "tessera", pem, now, keep_previous=True),
    )
    sync_ca_bundle(api, "tessera", outcome.ca_cert_pem, now, keep_previous=outcome.ca_transition)
    return outcome


def test_the_first_run_creates_ca_and_tls_secrets_and_sets_the_bundle() -> None:
    api = FakeApi()
    outcome = run(api)
    assert outcome.changed
    assert set(api.secrets) == {"tessera-ca", "tessera-webhook-tls",
                                "tessera-scheduler-client-tls"}
    for name in ("tessera-webhook-tls", "tessera-scheduler-client-tls"):
        secret = api.secrets[name]
        assert secret.type == TLS_TYPE
        assert set(secret.data) == {"tls.crt", "tls.key", "ca.crt"}
        assert secret.data["ca.crt"] == outcome.ca_cert_pem
        assert secret.labels["app.kubernetes.io/managed-by"] == "tessera-certs"
    assert api.webhooks == [("pods.tessera", outcome.ca_cert_pem)]
    # The bundle trusts the new CA before any leaf of it exists.
    assert api.writes.index("webhook/pods.tessera") < api.writes.index("secret/tessera-webhook-tls")


def test_a_second_run_writes_nothing() -> None:
    api = FakeApi()
    run(api)
    api.writes.clear()
    outcome = run(api)
    assert not outcome.changed
    assert api.writes == []


def test_renewal_near_expiry_keeps_the_ca_and_the_bundle() -> None:
    api = FakeApi()
    run(api)
    ca_before = api.secrets["tessera-ca"].data
    api.writes.clear()
    later = NOW + timedelta(days=340)  # 25 days before the leaves expire
    outcome = run(api, now=later)
    assert outcome.ca.action is Action.KEEP
    assert [d.action for _, d in outcome.leaves] == [Action.ISSUE, Action.ISSUE]
    assert api.secrets["tessera-ca"].data == ca_before
    assert sorted(api.writes) == ["secret/tessera-scheduler-client-tls",
                                  "secret/tessera-webhook-tls"]


def test_a_ca_change_keeps_the_old_ca_in_the_bundle_until_the_next_run() -> None:
    api = FakeApi()
    first = run(api)
    del api.secrets["tessera-ca"]  # the CA is lost: a new one must be made
    second = run(api)
    bundle = load_certs(api.webhooks[0][1], "bundle")
    assert len(bundle) == 2
    assert api.webhooks[0][1].startswith(second.ca_cert_pem.strip())
    third = run(api)
    assert not third.changed
    assert api.webhooks[0][1] == second.ca_cert_pem != first.ca_cert_pem


def test_a_secret_of_another_type_is_not_overwritten() -> None:
    api = FakeApi(secrets={"tessera-webhook-tls": SecretData(type="Opaque", data={})})
    with pytest.raises(MaterialError, match=r"has type Opaque, not kubernetes\.io/tls"):
        run(api)
    assert api.writes == []


def test_other_keys_and_labels_of_an_existing_secret_are_kept() -> None:
    api = FakeApi(secrets={"tessera-webhook-tls": SecretData(
        type=TLS_TYPE, data={"extra": b"1"}, resource_version="7", labels={"team": "gpu"})})
    run(api)
    secret = api.secrets["tessera-webhook-tls"]
    assert secret.data["extra"] == b"1"
    assert secret.labels["team"] == "gpu"


def test_naming_a_webhook_the_configuration_lacks_is_an_error() -> None:
    with pytest.raises(MaterialError, match=r"has no webhook named nope; it has pods\.tessera"):
        sync_ca_bundle(FakeApi(), "tessera", b"", NOW, False, webhooks=frozenset({"nope"}))


def _api_exception(status: int, message: str) -> ApiException:
    exc = ApiException(status=status, reason="Reason")
    exc.body = json.dumps({"kind": "Status", "message": message})
    return exc


@pytest.mark.parametrize(
    ("status", "error", "parts"),
    [
        (403, PermissionDenied, ["permission denied", 'cannot get resource "secrets"',
                                 "manifests/overlays/self-signed/certs-rbac.yaml"]),
        (404, NotFound, ["not found", "check the name and namespace"]),
        (409, KubeAccessError, ["changed by someone else", "run again"]),
        (500, KubeAccessError, ["HTTP 500"]),
    ],
)
def test_api_errors_become_messages_an_operator_can_act_on(
    status: int, error: type[Exception], parts: list[str]
) -> None:
    wrapped = wrap(_api_exception(status, 'User "x" cannot get resource "secrets"'),
                   "get Secret tessera-system/tessera-ca")
    assert type(wrapped) is error
    text = str(wrapped)
    assert text.startswith("get Secret tessera-system/tessera-ca: ")
    for part in parts:
        assert part in text
