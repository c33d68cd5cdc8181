"""Whether TLS material is fine, needs a new leaf, or needs a new CA (pure).

Renewal keeps the CA: a serving or client cert near expiry is re-issued by the same CA, so the
``caBundle`` in the webhook configuration and every ``caFile`` pointing at the CA stay valid.
A new CA is made only when there is none usable (missing, not a CA, key does not match, about
to expire); then every leaf is re-issued and the bundle changes.

No I/O, no clock: the caller reads the material (see :mod:`certs.material`) and passes ``now``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum


class Usage(StrEnum):
    """What a leaf certificate is for (its extended key usage)."""

    SERVER = "server"
    CLIENT = "client"


class Action(StrEnum):
    KEEP = "keep"
    ISSUE = "issue"


@dataclass(frozen=True)
class CertInfo:
    """The facts of one certificate that renewal decisions look at."""

    common_name: str
    not_before: datetime
    not_after: datetime
    dns_names: frozenset[str] = frozenset()
    ip_addresses: frozenset[str] = frozenset()
    is_ca: bool = False
    usages: frozenset[Usage] = frozenset()


@dataclass(frozen=True)
class CaState:
    cert: CertInfo
    key_matches: bool


@dataclass(frozen=True)
class LeafState:
    cert: CertInfo
    key_matches: bool
    #: The leaf's signature verifies with the current CA's public key.
    signed_by_ca: bool


@dataclass(frozen=True)
class LeafSpec:
    """The leaf we want: its names and what it is for."""

    common_name: str
    usage: Usage
    dns_names: frozenset[str] = frozenset()
    ip_addresses: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if not self.common_name:
            raise ValueError("a certificate needs a common name")
        if self.usage is Usage.SERVER and not (self.dns_names or self.ip_addresses):
            raise ValueError(
                f"serving certificate {self.common_name!r} needs at least one DNS name or IP"
            )


@dataclass(frozen=True)
class Decision:
    action: Action
    reason: str


@dataclass(frozen=True)
class Policy:
    """How long things live and how early they are renewed."""

    leaf_validity: timedelta = timedelta(days=365)
    ca_validity: timedelta = timedelta(days=3650)
    #: Re-issue when less than this is left. Must be shorter than the validity, or every run
    #: would re-issue.
    renew_before: timedelta = timedelta(days=30)

    def __post_init__(self) -> None:
        for name in ("leaf_validity", "ca_validity", "renew_before"):
            if getattr(self, name) <= timedelta(0):
                raise ValueError(f"{name.replace('_', ' ')} must be positive")
        if self.renew_before >= self.leaf_validity:
            raise ValueError(
                f"renew-before ({self.renew_before.days} days) must be shorter than the leaf "
                f"validity ({self.leaf_validity.days} days), or every run would renew"
            )
        if self.leaf_validity > self.ca_validity:
            raise ValueError("a leaf cannot outlive the CA that signs it")


def _remaining(cert: CertInfo, now: datetime) -> timedelta:
    return cert.not_after - now


def decide_ca(ca: CaState | None, now: datetime, policy: Policy) -> Decision:
    """Keep the CA unless it is unusable or would expire before a leaf issued now."""
    if ca is None:
        return Decision(Action.ISSUE, "no CA yet")
    if not ca.cert.is_ca:
        return Decision(Action.ISSUE, f"CA certificate {ca.cert.common_name!r} is not a CA")
    if not ca.key_matches:
        return Decision(Action.ISSUE, "CA key does not match the CA certificate")
    if ca.cert.not_before > now:
        return Decision(Action.ISSUE, f"CA is not valid before {ca.cert.not_before:%Y-%m-%d}")
    # A leaf issued now lives leaf_validity; the CA must outlive it by the renewal margin.
    if _remaining(ca.cert, now) < policy.leaf_validity + policy.renew_before:
        return Decision(
            Action.ISSUE, f"CA expires {ca.cert.not_after:%Y-%m-%d}, too soon to sign for"
        )
    return Decision(Action.KEEP, f"CA valid until {ca.cert.not_after:%Y-%m-%d}")


def decide_leaf(
    leaf: LeafState | None,
    spec: LeafSpec,
    now: datetime,
    policy: Policy,
    *,
    ca_renewed: bool = False,
) -> Decision:
    """Keep the leaf unless it is missing, wrong, from another CA or close to expiry."""
    if leaf is None:
        return Decision(Action.ISSUE, "no certificate yet")
    if ca_renewed:
        return Decision(Action.ISSUE, "the CA was renewed")
    cert = leaf.cert
    if not leaf.key_matches:
        return Decision(Action.ISSUE, "key does not match the certificate")
    if not leaf.signed_by_ca:
        return Decision(Action.ISSUE, "certificate was not signed by the current CA")
    if cert.is_ca:
        return Decision(Action.ISSUE, "certificate is a CA, not a leaf")
    if spec.usage not in cert.usages:
        return Decision(Action.ISSUE, f"certificate is not valid for {spec.usage.value} auth")
    if cert.common_name != spec.common_name:
        return Decision(
            Action.ISSUE, f"common name {cert.common_name!r} is not {spec.common_name!r}"
        )
    if cert.dns_names != spec.dns_names or cert.ip_addresses != spec.ip_addresses:
        have = sorted(cert.dns_names | cert.ip_addresses)
        want = sorted(spec.dns_names | spec.ip_addresses)
        return Decision(Action.ISSUE, f"names {have} are not {want}")
    if cert.not_before > now:
        return Decision(Action.ISSUE, f"not valid before {cert.not_before:%Y-%m-%d %H:%M}")
    left = _remaining(cert, now)
    if left < policy.renew_before:
        return Decision(
            Action.ISSUE,
            f"expires {cert.not_after:%Y-%m-%d} (in {max(left.days, 0)} days, renewing "
            f"{policy.renew_before.days} days before)",
        )
    return Decision(Action.KEEP, f"valid until {cert.not_after:%Y-%m-%d}")
