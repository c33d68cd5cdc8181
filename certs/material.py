"""Reading PEM material into the facts :mod:`certs.renewal` decides on (pure: bytes in).

Everything here takes and returns bytes and plain values; files and Secrets are read by the
callers (:mod:`certs.files`, :mod:`certs.kube`).
"""

from __future__ import annotations

import ipaddress

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from certs.builder import KeyPair
from certs.errors import MaterialError
from certs.renewal import CaState, CertInfo, LeafState, Usage


def load_cert(pem: bytes, what: str) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(pem)
    except ValueError as exc:
        raise MaterialError(f"{what} is not a PEM certificate: {exc}") from exc


def load_certs(pem: bytes, what: str) -> list[x509.Certificate]:
    """Every certificate of a PEM bundle (a caBundle may hold several)."""
    try:
        return x509.load_pem_x509_certificates(pem)
    except ValueError as exc:
        raise MaterialError(f"{what} is not a PEM certificate bundle: {exc}") from exc


def load_key(pem: bytes, what: str) -> PrivateKeyTypes:
    try:
        return serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as exc:
        raise MaterialError(f"{what} is not an unencrypted PEM private key: {exc}") from exc


def _public_bytes(key: object) -> bytes:
    public = key.public_key() if hasattr(key, "public_key") else key
    if not isinstance(
        public,
        rsa.RSAPublicKey | ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey
        | ed448.Ed448PublicKey,
    ):
        raise MaterialError(f"unsupported key type {type(public).__name__}")
    return public.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def key_matches(cert: x509.Certificate, key: PrivateKeyTypes) -> bool:
    return _public_bytes(cert.public_key()) == _public_bytes(key)


def signed_by(cert: x509.Certificate, issuer: x509.Certificate) -> bool:
    """The certificate names ``issuer`` as its issuer and its signature verifies with it."""
    try:
        cert.verify_directly_issued_by(issuer)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def cert_info(cert: x509.Certificate) -> CertInfo:
    cn = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    dns: frozenset[str] = frozenset()
    ips: frozenset[str] = frozenset()
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        dns = frozenset(san.get_values_for_type(x509.DNSName))
        ips = frozenset(str(ip) for ip in san.get_values_for_type(x509.IPAddress))
    except x509.ExtensionNotFound:
        pass
    try:
        is_ca = cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        is_ca = False
    usages: set[Usage] = set()
    try:
        eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        if ExtendedKeyUsageOID.SERVER_AUTH in eku:
            usages.add(Usage.SERVER)
        if ExtendedKeyUsageOID.CLIENT_AUTH in eku:
            usages.add(Usage.CLIENT)
    except x509.ExtensionNotFound:
        # RFC 5280 4.2.1.12: without the extension the key may be used for any purpose.
        usages = {Usage.SERVER, Usage.CLIENT}
    return CertInfo(
        common_name=str(cn[0].value) if cn else "",
        not_before=cert.not_valid_before_utc,
        not_after=cert.not_valid_after_utc,
        dns_names=dns,
        ip_addresses=ips,
        is_ca=is_ca,
        usages=frozenset(usages),
    )


def ca_state(ca: KeyPair | None, where: str) -> CaState | None:
    """The CA's facts, or None when there is none. Unparseable material is an error."""
    if ca is None:
        return None
    cert = load_cert(ca.cert_pem, f"CA certificate in {where}")
    key = load_key(ca.key_pem, f"CA key in {where}")
    return CaState(cert=cert_info(cert), key_matches=key_matches(cert, key))


def leaf_state(leaf: KeyPair | None, ca_cert_pem: bytes | None, where: str
               ) -> LeafState | None:
    """The leaf's facts, or None when there is none.

    A leaf whose files are present but unparseable is reported as an error, not silently
    replaced: the operator may have pointed us at the wrong file.
    """
    if leaf is None:
        return None
    cert = load_cert(leaf.cert_pem, f"certificate in {where}")
    key = load_key(leaf.key_pem, f"key in {where}")
    issued = ca_cert_pem is not None and signed_by(cert, load_cert(ca_cert_pem, "CA certificate"))
    return LeafState(cert=cert_info(cert), key_matches=key_matches(cert, key),
                     signed_by_ca=issued)


def normalise_ip(text: str) -> str:
    """An IP address in the form :func:`cert_info` reports it (``::1``, ``127.0.0.1``)."""
    try:
        return str(ipaddress.ip_address(text))
    except ValueError as exc:
        raise ValueError(f"{text!r} is not an IP address") from exc
