"""Pure X.509 building with ``cryptography``: a CA and certificates it signs, as PEM bytes.

No files, no clock unless you pass none: give ``now`` for reproducible validity windows. Keys
are ECDSA P-256: small, fast to generate, and accepted by Go's crypto/tls (the API server and
kube-scheduler) and by Python's ``ssl`` (gunicorn).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tessera.vocabulary import TesseraError

#: Start validity a little in the past: clocks in a cluster are not perfectly in step.
CLOCK_SKEW: Final = timedelta(minutes=5)
DEFAULT_CA_VALIDITY: Final = timedelta(days=3650)
DEFAULT_LEAF_VALIDITY: Final = timedelta(days=365)
_DNS_NAME: Final = re.compile(
    r"^(\*\.)?[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$"
)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class CertificateError(TesseraError):
    """Inputs that cannot make a usable certificate."""


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key, both PEM."""

    cert_pem: bytes
    key_pem: bytes

    @property
    def certificate(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_pem)


@dataclass(frozen=True)
class CertificateAuthority(KeyPair):
    """A self-signed CA able to sign leaves."""

    def private_key(self) -> ec.EllipticCurvePrivateKey:
        key = serialization.load_pem_private_key(self.key_pem, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise CertificateError("CA key is not an EC key")
        return key


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _window(now: datetime | None, validity: timedelta) -> tuple[datetime, datetime]:
    if validity <= timedelta(0):
        raise CertificateError(f"validity must be positive, got {validity}")
    start = (now or datetime.now(UTC)) - CLOCK_SKEW
    return start, start + CLOCK_SKEW + validity


def _name(common_name: str) -> x509.Name:
    if not common_name or len(common_name) > 64:
        raise CertificateError(f"common name must be 1-64 characters, got {common_name!r}")
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def build_ca(
    common_name: str = "tessera-ca",
    *,
    validity: timedelta = DEFAULT_CA_VALIDITY,
    now: datetime | None = None,
) -> CertificateAuthority:
    """A new self-signed CA (may sign leaves only: path length 0)."""
    key = ec.generate_private_key(ec.SECP256R1())
    start, end = _window(now, validity)
    name = _name(common_name)
    public = key.public_key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .sign(key, hashes.SHA256())
    )
    return CertificateAuthority(cert.public_bytes(serialization.Encoding.PEM), _pem_key(key))


def _dns_names(names: Iterable[str]) -> list[str]:
    result = []
    for name in names:
        clean = name.strip().lower().rstrip(".")
        if len(clean) > 253 or not _DNS_NAME.match(clean):
            raise CertificateError(f"{name!r} is not a DNS name")
        result.append(clean)
    return result


def _ips(addresses: Iterable[str | IPAddress]) -> list[IPAddress]:
    result = []
    for address in addresses:
        try:
            result.append(ipaddress.ip_address(address))
        except ValueError as exc:
            raise CertificateError(f"{address!r} is not an IP address") from exc
    return result


def build_leaf(
    ca: CertificateAuthority,
    common_name: str,
    dns_names: Iterable[str] = (),
    ip_addresses: Iterable[str | IPAddress] = (),
    *,
    server: bool = True,
    client: bool = False,
    validity: timedelta = DEFAULT_LEAF_VALIDITY,
    now: datetime | None = None,
) -> KeyPair:
    """A certificate signed by ``ca`` for a server (SANs required), a client, or both.

    Go checks only the SANs of a server certificate, never its common name, so a server
    certificate without any DNS name or IP address is refused here.
    """
    if not (server or client):
        raise CertificateError("a certificate must be for a server, a client, or both")
    dns = _dns_names(dns_names)
    ips = _ips(ip_addresses)
    if server and not (dns or ips):
        raise CertificateError("a server certificate needs at least one DNS name or IP address")
    ca_cert = ca.certificate
    ca_key = ca.private_key()
    start, end = _window(now, validity)
    ca_end = ca_cert.not_valid_after_utc
    if end > ca_end:
        end = ca_end  # a leaf outliving its CA would fail verification anyway
    key = ec.generate_private_key(ec.SECP256R1())
    public = key.public_key()
    usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + (
        [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
    )
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca_cert.subject)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=False,
                crl_sign=False, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    if dns or ips:
        sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns]
        sans += [x509.IPAddress(ip) for ip in ips]
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _pem_key(key))


def service_dns_names(service: str, namespace: str) -> tuple[str, ...]:
    """The names a Service is reached by in-cluster (the API server uses ``svc.ns.svc``)."""
    return (
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    )
