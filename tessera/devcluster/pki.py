"""TLS material and identities of the local control plane (``cryptography``; no I/O but files).

Control-plane components authenticate with client certificates signed by one cluster CA that
kube-apiserver trusts through ``--client-ca-file``: the subject's CN is the user name and each
O is a group (k8s.io/apiserver: pkg/authentication/request/x509/x509.go, CommonNameUserConversion).
That is how kubeadm clusters identify kube-scheduler (CN=system:kube-scheduler, bound by the
bootstrap ClusterRoleBinding of the same name), so the scheduler runs with its real RBAC and no
binding of ours. Workloads (the allocator) use a ServiceAccount token instead, see services.py.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: Long enough for any test run or demo session, short enough not to matter if leaked.
VALIDITY = datetime.timedelta(days=2)


@dataclass(frozen=True)
class KeyPair:
    cert_pem: bytes
    key_pem: bytes

    def write(self, directory: Path, stem: str) -> tuple[Path, Path]:
        """Write ``<stem>.crt`` and ``<stem>.key`` (0600) and return their paths."""
        directory.mkdir(parents=True, exist_ok=True)
        cert = directory / f"{stem}.crt"
        key = directory / f"{stem}.key"
        cert.write_bytes(self.cert_pem)
        key.touch(mode=0o600)
        key.write_bytes(self.key_pem)
        return cert, key


def _new_key() -> ec.EllipticCurvePrivateKey:
    # P-256: accepted by Go's crypto/tls everywhere and much faster to make than RSA.
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(common_name: str, groups: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attrs)


class CertificateAuthority:
    """A self-signed CA that issues serving and client certificates."""

    def __init__(self, common_name: str = "tessera-devcluster-ca") -> None:
        self._key = _new_key()
        now = datetime.datetime.now(datetime.UTC)
        name = _name(common_name)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True, content_commitment=False, key_encipherment=False,
                    data_encipherment=False, key_agreement=False, key_cert_sign=True,
                    crl_sign=True, encipher_only=False, decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()), critical=False
            )
            .sign(self._key, hashes.SHA256())
        )

    @property
    def pair(self) -> KeyPair:
        return KeyPair(self._cert.public_bytes(serialization.Encoding.PEM), _key_pem(self._key))

    @property
    def cert_pem(self) -> bytes:
        return self._cert.public_bytes(serialization.Encoding.PEM)

    def _issue(
        self,
        subject: x509.Name,
        usage: x509.ObjectIdentifier,
        dns_names: tuple[str, ...] = (),
        ips: tuple[str, ...] = (),
    ) -> KeyPair:
        key = _new_key()
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                critical=False,
            )
        )
        sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
        sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))

    def serving(self, common_name: str, dns_names: tuple[str, ...] = ("localhost",),
                ips: tuple[str, ...] = ("127.0.0.1",)) -> KeyPair:
        """A server certificate; the apiserver dials webhooks by IP, so IP SANs are needed."""
        return self._issue(_name(common_name), ExtendedKeyUsageOID.SERVER_AUTH, dns_names, ips)

    def client(self, user: str, groups: tuple[str, ...] = ()) -> KeyPair:
        """A client certificate for Kubernetes user ``user`` in ``groups``."""
        return self._issue(_name(user, groups), ExtendedKeyUsageOID.CLIENT_AUTH)


def service_account_keys() -> KeyPair:
    """The key pair kube-apiserver signs ServiceAccount tokens with (ES256).

    ``cert_pem`` holds the public key (PEM ``PUBLIC KEY``), as --service-account-key-file takes it.
    """
    key = _new_key()
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return KeyPair(public, _key_pem(key))
