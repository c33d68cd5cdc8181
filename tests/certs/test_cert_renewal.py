"""The pure renewal decisions: when a CA or a leaf is kept, and why it is re-issued."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from certs.builder import build_ca, build_leaf
from certs.plan import desired_bundle
from certs.renewal import (
    Action,
    CaState,
    CertInfo,
    LeafSpec,
    LeafState,
    Policy,
    Usage,
    decide_ca,
    decide_leaf,
)

NOW = datetime(2030, 6, 1, tzinfo=UTC)
DAY = timedelta(days=1)
POLICY = Policy(leaf_validity=365 * DAY, ca_validity=3650 * DAY, renew_before=30 * DAY)
NAMES = frozenset({"svc", "svc.ns", "svc.ns.svc"})
SPEC = LeafSpec(common_name="svc.ns.svc", usage=Usage.SERVER, dns_names=NAMES)


def make_ca(days_left: int = 3000, *, is_ca: bool = True, key_matches: bool = True,
            starts_in_days: int = -1) -> CaState:
    return CaState(
        cert=CertInfo(common_name="tessera-ca", not_before=NOW + starts_in_days * DAY,
                      not_after=NOW + days_left * DAY, is_ca=is_ca),
        key_matches=key_matches,
    )


def make_leaf(days_left: int = 200, **changes: object) -> LeafState:
    cert = CertInfo(common_name="svc.ns.svc", not_before=NOW - 10 * DAY,
                    not_after=NOW + days_left * DAY, dns_names=NAMES,
                    usages=frozenset({Usage.SERVER}))
    state = LeafState(cert=cert, key_matches=True, signed_by_ca=True)
    cert_changes = {k: v for k, v in changes.items() if k in CertInfo.__dataclass_fields__}
    state_changes = {k: v for k, v in changes.items() if k in LeafState.__dataclass_fields__}
    return replace(state, cert=replace(cert, **cert_changes), **state_changes)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("ca", "action", "reason_part"),
    [
        (None, Action.ISSUE, "no CA yet"),
        (make_ca(), Action.KEEP, "valid until"),
        (make_ca(is_ca=False), Action.ISSUE, "is not a CA"),
        (make_ca(key_matches=False), Action.ISSUE, "key does not match"),
        (make_ca(starts_in_days=2), Action.ISSUE, "not valid before"),
        # A leaf issued now lives 365 days; the CA must outlive it by the renewal margin.
        (make_ca(days_left=365 + 30 - 1), Action.ISSUE, "too soon"),
        (make_ca(days_left=365 + 30), Action.KEEP, "valid until"),
    ],
)
def test_the_ca_is_kept_unless_it_is_unusable_or_would_expire_before_a_new_leaf(
    ca: CaState | None, action: Action, reason_part: str
) -> None:
    decision = decide_ca(ca, NOW, POLICY)
    assert decision.action is action
    assert reason_part in decision.reason


@pytest.mark.parametrize(
    ("leaf", "ca_renewed", "action", "reason_part"),
    [
        (None, False, Action.ISSUE, "no certificate yet"),
        (make_leaf(), False, Action.KEEP, "valid until"),
        (make_leaf(), True, Action.ISSUE, "CA was renewed"),
        (make_leaf(days_left=31), False, Action.KEEP, "valid until"),
        (make_leaf(days_left=29), False, Action.ISSUE, "renewing 30 days before"),
        (make_leaf(days_left=-3), False, Action.ISSUE, "in 0 days"),
        (make_leaf(key_matches=False), False, Action.ISSUE, "key does not match"),
        (make_leaf(signed_by_ca=False), False, Action.ISSUE, "not signed by the current CA"),
        (make_leaf(is_ca=True), False, Action.ISSUE, "is a CA"),
        (make_leaf(usages=frozenset({Usage.CLIENT})), False, Action.ISSUE, "server auth"),
        (make_leaf(common_name="other"), False, Action.ISSUE, "common name"),
        (make_leaf(dns_names=frozenset({"svc"})), False, Action.ISSUE, "names"),
        (make_leaf(ip_addresses=frozenset({"127.0.0.1"})), False, Action.ISSUE, "names"),
        (make_leaf(not_before=NOW + DAY), False, Action.ISSUE, "not valid before"),
    ],
)
def test_a_leaf_is_reissued_only_when_missing_wrong_foreign_or_close_to_expiry(
    leaf: LeafState | None, ca_renewed: bool, action: Action, reason_part: str
) -> None:
    decision = decide_leaf(leaf, SPEC, NOW, POLICY, ca_renewed=ca_renewed)
    assert decision.action is action
    assert reason_part in decision.reason


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"renew_before": 365 * DAY}, "must be shorter than the leaf validity"),
        ({"leaf_validity": 0 * DAY}, "leaf validity must be positive"),
        ({"renew_before": -DAY}, "renew before must be positive"),
        ({"leaf_validity": 4000 * DAY}, "cannot outlive the CA"),
    ],
)
def test_a_policy_that_would_renew_on_every_run_or_never_is_refused(
    kwargs: dict[str, timedelta], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        Policy(**{"leaf_validity": 365 * DAY, "ca_validity": 3650 * DAY,
                  "renew_before": 30 * DAY, **kwargs})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"common_name": "", "usage": Usage.CLIENT}, "needs a common name"),
        ({"common_name": "svc", "usage": Usage.SERVER}, "at least one DNS name or IP"),
    ],
)
def test_a_leaf_spec_that_cannot_make_a_usable_certificate_is_refused(
    kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        LeafSpec(**kwargs)  # type: ignore[arg-type]


def test_the_bundle_is_only_the_current_ca_outside_a_ca_change() -> None:
    old, new = build_ca("old", now=NOW), build_ca("new", now=NOW)
    assert desired_bundle(new.cert_pem, old.cert_pem, NOW, keep_previous=False) == new.cert_pem


def test_during_a_ca_change_the_bundle_keeps_the_previous_ca_after_the_new_one() -> None:
    old, new = build_ca("old", now=NOW), build_ca("new", now=NOW)
    bundle = desired_bundle(new.cert_pem, old.cert_pem, NOW, keep_previous=True)
    assert bundle == new.cert_pem + old.cert_pem
    # Idempotent: running again over the combined bundle changes nothing.
    assert desired_bundle(new.cert_pem, bundle, NOW, keep_previous=True) == bundle


@pytest.mark.parametrize(
    "previous",
    [
        pytest.param("expired", id="an expired CA"),
        pytest.param("leaf", id="a leaf certificate"),
        pytest.param("garbage", id="garbage"),
    ],
)
def test_during_a_ca_change_nothing_but_valid_cas_is_kept_in_the_bundle(previous: str) -> None:
    new = build_ca("new", now=NOW)
    old_ca = build_ca("old", validity=10 * DAY, now=NOW - 20 * DAY)
    current = {
        "expired": old_ca.cert_pem,
        "leaf": build_leaf(new, "x", ["x"], now=NOW).cert_pem,
        "garbage": b"not a pem",
    }[previous]
    assert desired_bundle(new.cert_pem, current, NOW, keep_previous=True) == new.cert_pem
