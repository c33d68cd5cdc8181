"""One run of ``tessera certs``: read what is there, decide, issue what is missing (no I/O).

Storage (files or Secrets) is behind :class:`Store`; issuing is behind :class:`Issuer`; the
clock is a parameter. The same :func:`ensure` therefore runs for ``tessera certs files``,
``tessera certs secret`` and the unit tests.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from cryptography.hazmat.primitives.serialization import Encoding

from certs.builder import KeyPair
from certs.errors import MaterialError
from certs.material import ca_state, cert_info, leaf_state, load_certs
from certs.renewal import Action, Decision, LeafSpec, Policy, decide_ca, decide_leaf


class Store(Protocol):
    """Where a CA and its leaves live. Missing material reads as None."""

    def load_ca(self) -> KeyPair | None: ...

    def save_ca(self, pair: KeyPair) -> None: ...

    def load_leaf(self, target: str) -> KeyPair | None: ...

    def save_leaf(self, target: str, pair: KeyPair, ca_cert_pem: bytes) -> None:
        """Store a leaf together with the CA certificate that verifies it (``ca.crt``)."""
        ...

    def describe(self, target: str | None) -> str:
        """Where ``target`` (or the CA, for None) lives, for messages."""
        ...


class Issuer(Protocol):
    def new_ca(self, common_name: str, now: datetime, policy: Policy) -> KeyPair: ...

    def new_leaf(self, ca: KeyPair, spec: LeafSpec, now: datetime, policy: Policy) -> KeyPair: ...


@dataclass(frozen=True)
class LeafTarget:
    """One leaf to maintain: where it is stored and what it must be."""

    target: str
    spec: LeafSpec


@dataclass(frozen=True)
class Outcome:
    """What one run found and did."""

    ca: Decision
    leaves: tuple[tuple[LeafTarget, Decision], ...]
    ca_cert_pem: bytes
    #: A leaf of this run was not signed by the current CA when the run started: some clients
    #: may still hold the old CA, so bundles should carry it a while longer.
    ca_transition: bool

    @property
    def changed(self) -> bool:
        return self.ca.action is Action.ISSUE or any(
            d.action is Action.ISSUE for _, d in self.leaves
        )


def ensure(
    store: Store,
    targets: Sequence[LeafTarget],
    issuer: Issuer,
    now: datetime,
    policy: Policy,
    ca_common_name: str = "tessera-ca",
    after_new_ca: Callable[[bytes], object] | None = None,
) -> Outcome:
    """Bring the CA and every leaf up to date; idempotent (a second run changes nothing).

    ``after_new_ca`` runs with the new CA certificate after it is stored and before any leaf
    of it is: the place to add it to trust bundles so that no client meets a leaf it cannot
    verify yet.
    """
    names = [t.target for t in targets]
    if len(set(names)) != len(names):
        raise MaterialError(f"each target may be named once, got {names}")
    # Read and parse everything before writing anything: broken material is reported with
    # the store left exactly as it was.
    ca_pair = store.load_ca()
    ca_decision = decide_ca(ca_state(ca_pair, store.describe(None)), now, policy)
    states = [
        leaf_state(store.load_leaf(t.target), ca_pair.cert_pem if ca_pair else None,
                   store.describe(t.target))
        for t in targets
    ]
    ca_renewed = ca_decision.action is Action.ISSUE
    if ca_renewed or ca_pair is None:
        ca_pair = issuer.new_ca(ca_common_name, now, policy)
        store.save_ca(ca_pair)
        if after_new_ca is not None:
            after_new_ca(ca_pair.cert_pem)
    results: list[tuple[LeafTarget, Decision]] = []
    transition = ca_renewed
    for t, state in zip(targets, states, strict=True):
        if state is not None and not state.signed_by_ca:
            transition = True
        decision = decide_leaf(state, t.spec, now, policy, ca_renewed=ca_renewed)
        if decision.action is Action.ISSUE:
            store.save_leaf(t.target, issuer.new_leaf(ca_pair, t.spec, now, policy),
                            ca_pair.cert_pem)
        results.append((t, decision))
    return Outcome(ca=ca_decision, leaves=tuple(results), ca_cert_pem=ca_pair.cert_pem,
                   ca_transition=transition)


def desired_bundle(ca_cert_pem: bytes, current_bundle: bytes, now: datetime,
                   keep_previous: bool) -> bytes:
    """The ``caBundle`` a webhook configuration should carry.

    Normally just the current CA. During a CA change (``keep_previous``) the still-valid CAs
    already in the bundle are kept after the new one: the serving pods pick up their new
    Secret only after the kubelet syncs it (about a minute), and until then they present a
    leaf of the old CA. The next run, with every leaf on the new CA, trims the bundle.
    """
    bundle = [ca_cert_pem.strip() + b"\n"]
    if keep_previous and current_bundle.strip():
        current = load_certs(ca_cert_pem, "CA certificate")[0]
        try:
            previous = load_certs(current_bundle, "existing caBundle")
        except MaterialError:
            previous = []  # a garbage bundle is simply replaced
        for cert in previous:
            info = cert_info(cert)
            if cert != current and info.is_ca and info.not_after > now:
                pem = cert.public_bytes(Encoding.PEM)
                if pem not in bundle:
                    bundle.append(pem)
    return b"".join(bundle)
