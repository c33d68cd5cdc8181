"""A :class:`certs.plan.Store` on Kubernetes Secrets, and the caBundle update (no kubernetes).

Leaf Secrets have type ``kubernetes.io/tls`` with ``tls.crt``, ``tls.key`` and ``ca.crt`` (the
layout cert-manager writes, so the Deployments mount either unchanged). The CA lives in its
own ``kubernetes.io/tls`` Secret (``tls.crt`` = CA certificate, ``tls.key`` = CA key) that
only the certs Job can read; it is what lets a renewal keep the CA.

The API calls are behind :class:`Api` (implemented by :class:`certs.kube.KubeApi`), so this
module is tested with an in-memory fake.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Protocol

from certs.builder import KeyPair
from certs.errors import MaterialError
from certs.plan import desired_bundle

TLS_TYPE = "kubernetes.io/tls"
LABELS = {"app.kubernetes.io/name": "tessera", "app.kubernetes.io/managed-by": "tessera-certs"}


@dataclass(frozen=True)
class SecretData:
    type: str
    data: dict[str, bytes]
    resource_version: str | None = None
    labels: dict[str, str] = field(default_factory=dict)


class Api(Protocol):
    def get_secret(self, namespace: str, name: str) -> SecretData | None: ...

    def put_secret(self, namespace: str, name: str, secret: SecretData, exists: bool
                   ) -> None: ...

    def get_webhook_bundles(self, configuration: str) -> list[tuple[str, bytes]]: ...

    def set_webhook_bundles(self, configuration: str, changes: list[tuple[int, str, bytes]]
                            ) -> None: ...


class SecretStore:
    """CA in Secret ``ca_secret``; each target names a leaf Secret; all in one namespace."""

    def __init__(self, api: Api, namespace: str, ca_secret: str) -> None:
        self.api = api
        self.namespace = namespace
        self.ca_secret = ca_secret
        self._seen: dict[str, SecretData | None] = {}

    def _read_pair(self, name: str) -> KeyPair | None:
        secret = self.api.get_secret(self.namespace, name)
        self._seen[name] = secret
        if secret is None:
            return None
        if secret.type != TLS_TYPE:
            raise MaterialError(
                f"Secret {self.namespace}/{name} has type {secret.type}, not {TLS_TYPE}; "
                f"the type of a Secret cannot change: delete it and run again"
            )
        cert, key = secret.data.get("tls.crt"), secret.data.get("tls.key")
        if not cert and not key:
            return None
        if not cert or not key:
            raise MaterialError(
                f"Secret {self.namespace}/{name} has only one of tls.crt and tls.key"
            )
        return KeyPair(cert_pem=cert, key_pem=key)

    def _write(self, name: str, data: dict[str, bytes]) -> None:
        previous = self._seen.get(name)
        if previous is None:
            self.api.put_secret(self.namespace, name,
                                SecretData(type=TLS_TYPE, data=data, labels=dict(LABELS)),
                                exists=False)
        else:
            merged = replace(previous, data={**previous.data, **data},
                             labels={**previous.labels, **LABELS})
            self.api.put_secret(self.namespace, name, merged, exists=True)
        # A second write of the same Secret in this run would need the new resourceVersion.
        self._seen[name] = self.api.get_secret(self.namespace, name)

    def load_ca(self) -> KeyPair | None:
        return self._read_pair(self.ca_secret)

    def save_ca(self, pair: KeyPair) -> None:
        self._write(self.ca_secret, {"tls.crt": pair.cert_pem, "tls.key": pair.key_pem})

    def load_leaf(self, target: str) -> KeyPair | None:
        return self._read_pair(target)

    def save_leaf(self, target: str, pair: KeyPair, ca_cert_pem: bytes) -> None:
        self._write(target, {"tls.crt": pair.cert_pem, "tls.key": pair.key_pem,
                             "ca.crt": ca_cert_pem})

    def describe(self, target: str | None) -> str:
        return f"Secret {self.namespace}/{target or self.ca_secret}"


def sync_ca_bundle(api: Api, configuration: str, ca_cert_pem: bytes, now: datetime,
                   keep_previous: bool, webhooks: frozenset[str] = frozenset()) -> list[str]:
    """Make every webhook of ``configuration`` (or only those named) trust our CA.

    Returns the names of the webhooks that were changed (empty: already right, no write).
    """
    current = api.get_webhook_bundles(configuration)
    if webhooks:
        unknown = webhooks - {name for name, _ in current}
        if unknown:
            raise MaterialError(
                f"MutatingWebhookConfiguration {configuration} has no webhook named "
                f"{', '.join(sorted(unknown))}; it has {', '.join(n for n, _ in current)}"
            )
    if not current:
        raise MaterialError(f"MutatingWebhookConfiguration {configuration} has no webhooks")
    changes = []
    for index, (name, bundle) in enumerate(current):
        if webhooks and name not in webhooks:
            continue
        wanted = desired_bundle(ca_cert_pem, bundle, now, keep_previous)
        if wanted != bundle:
            changes.append((index, name, wanted))
    if changes:
        api.set_webhook_bundles(configuration, changes)
    return [name for _, name, _ in changes]
