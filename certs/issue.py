"""The :class:`certs.plan.Issuer` over the pure builder (:mod:`certs.builder`)."""

from __future__ import annotations

from datetime import datetime

from certs.builder import CertificateAuthority, CertificateError, KeyPair, build_ca, build_leaf
from certs.errors import MaterialError
from certs.renewal import LeafSpec, Policy, Usage


class BuilderIssuer:
    def new_ca(self, common_name: str, now: datetime, policy: Policy) -> KeyPair:
        try:
            return build_ca(common_name, validity=policy.ca_validity, now=now)
        except CertificateError as exc:
            raise MaterialError(f"cannot make a CA: {exc}") from exc

    def new_leaf(self, ca: KeyPair, spec: LeafSpec, now: datetime, policy: Policy) -> KeyPair:
        try:
            return build_leaf(
                CertificateAuthority(ca.cert_pem, ca.key_pem),
                spec.common_name,
                sorted(spec.dns_names),
                sorted(spec.ip_addresses),
                server=spec.usage is Usage.SERVER,
                client=spec.usage is Usage.CLIENT,
                validity=policy.leaf_validity,
                now=now,
            )
        except CertificateError as exc:
            raise MaterialError(f"cannot issue {spec.common_name!r}: {exc}") from exc
