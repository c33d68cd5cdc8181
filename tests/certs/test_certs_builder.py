"""The pure certificate builder (certs.builder)."""

from __future__ import annotations

import contextlib
import ipaddress
import ssl
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from certs.builder import (
    CLOCK_SKEW,
    CertificateAuthority,
    CertificateError,
    build_ca,
    build_leaf,
    service_dns_names,
)

NOW = datetime(2030, 1, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
def ca() -> CertificateAuthority:
    return build_ca("tessera-test-ca", now=NOW)


def test_the_ca_is_a_ca_that_signs_only_leaves(ca: CertificateAuthority) -> None:
    cert = ca.certificate
    constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert constraints.ca is True and constraints.path_length == 0
    assert cert.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign
    assert cert.issuer == cert.subject
    assert b"PRIVATE KEY" in ca.key_pem


def test_a_serving_cert_carries_the_service_names_and_is_signed_by_the_ca(
    ca: CertificateAuthority,
) -> None:
    names = service_dns_names("tessera-webhook", "tessera-system")
    leaf = build_leaf(ca, "tessera-webhook", names, ["127.0.0.1", "::1"], now=NOW)
    cert = leaf.certificate
    cert.verify_directly_issued_by(ca.certificate)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == list(names)
    assert sans.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1")
    ]
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usages) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False


@pytest.mark.parametrize(
    ("server", "client", "expected"),
    [
        (True, False, [ExtendedKeyUsageOID.SERVER_AUTH]),
        (False, True, [ExtendedKeyUsageOID.CLIENT_AUTH]),
        (True, True, [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
    ],
)
def test_the_extended_key_usage_follows_the_role(
    ca: CertificateAuthority, server: bool, client: bool, expected: list[x509.ObjectIdentifier]
) -> None:
    leaf = build_leaf(ca, "kube-scheduler", ["scheduler.local"], server=server, client=client)
    usages = leaf.certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usages) == expected


def test_a_client_cert_needs_no_names(ca: CertificateAuthority) -> None:
    leaf = build_leaf(ca, "system:kube-scheduler", server=False, client=True)
    with pytest.raises(x509.ExtensionNotFound):
        leaf.certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)


def test_validity_starts_before_now_and_never_outlives_the_ca(ca: CertificateAuthority) -> None:
    leaf = build_leaf(ca, "w", ["w.local"], validity=timedelta(days=30), now=NOW)
    assert leaf.certificate.not_valid_before_utc == NOW - CLOCK_SKEW
    assert leaf.certificate.not_valid_after_utc == NOW + timedelta(days=30)
    long = build_leaf(ca, "w", ["w.local"], validity=timedelta(days=100000), now=NOW)
    assert long.certificate.not_valid_after_utc == ca.certificate.not_valid_after_utc


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"dns_names": [], "ip_addresses": []}, "at least one DNS name"),
        ({"dns_names": ["not a name"]}, "not a DNS name"),
        ({"ip_addresses": ["300.1.1.1"]}, "not an IP address"),
        ({"dns_names": ["a.local"], "server": False, "client": False}, "server, a client"),
        ({"dns_names": ["a.local"], "validity": timedelta(0)}, "validity"),
        ({"dns_names": ["a.local"], "common_name": ""}, "common name"),
    ],
)
def test_unusable_inputs_are_refused(
    ca: CertificateAuthority, kwargs: dict[str, object], fragment: str
) -> None:
    args: dict[str, object] = {"common_name": "w", **kwargs}
    with pytest.raises(CertificateError, match=fragment):
        build_leaf(ca, **args)  # type: ignore[arg-type]


def test_pythons_ssl_accepts_the_pair_and_trusts_the_ca(tmp_path: Path) -> None:
    ca = build_ca()  # valid now, unlike the fixture's
    leaf = build_leaf(ca, "w", ["w.local"])
    (tmp_path / "tls.crt").write_bytes(leaf.cert_pem)
    (tmp_path / "tls.key").write_bytes(leaf.key_pem)
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    client = ssl.create_default_context(cadata=ca.cert_pem.decode())
    server_in, server_out = ssl.MemoryBIO(), ssl.MemoryBIO()
    client_in, client_out = ssl.MemoryBIO(), ssl.MemoryBIO()
    s = server.wrap_bio(server_in, server_out, server_side=True)
    c = client.wrap_bio(client_in, client_out, server_hostname="w.local")
    for _ in range(10):  # drive the handshake in memory
        for side in (c, s):
            with contextlib.suppress(ssl.SSLWantReadError):
                side.do_handshake()
        server_in.write(client_out.read())
        client_in.write(server_out.read())
    der = c.getpeercert(binary_form=True)
    assert der is not None
    assert x509.load_der_x509_certificate(der) == leaf.certificate
