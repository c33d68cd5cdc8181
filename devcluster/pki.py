"""TLS material and identities of the local control plane.

The CA and the serving certificates come from Tessera's own pure builder (certs/builder.py).
Control-plane components authenticate with client certificates signed by that one CA, which
kube-apiserver trusts through ``--client-ca-file``: the subject's CN is the user name and each
O is a group (k8s.io/apiserver: pkg/authentication/request/x509/x509.go,
CommonNameUserConversion). That is how kubeadm clusters identify kube-scheduler
(CN=system:kube-scheduler, bound by the bootstrap ClusterRoleBinding of the same name), so the
scheduler runs with its real RBAC and no binding of ours. Workloads (the allocator) use a
ServiceAccount token instead, see services.py.
"""

from __future__ import annotations

import datetime
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from certs.builder import KeyPair, build_ca, build_leaf

#: Long enough for any test run or demo session, short enough not to matter if leaked.
VALIDITY = datetime.timedelta(days=2)


def write_pair(pair: KeyPair, directory: Path, stem: str) -> tuple[Path, Path]:
    """Write ``<stem>.crt`` and ``<stem>.key`` (mode 0600) and return their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    cert = directory / f"{stem}.crt"
    key = directory / f"{stem}.key"
    cert.write_bytes(pair.cert_pem)
    key.touch(mode=0o600)
    key.write_bytes(pair.key_pem)
    return cert, key


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


class ClusterCA:
    """The dev cluster's one CA: serving certs for every server, client certs for every user."""

    def __init__(self, common_name: str = "tessera-devcluster-ca") -> None:
        self.authority = build_ca(common_name, validity=VALIDITY)

    @property
    def cert_pem(self) -> bytes:
        return self.authority.cert_pem

    def serving(self, common_name: str, dns_names: tuple[str, ...] = ("localhost",),
                ips: tuple[str, ...] = ("127.0.0.1",)) -> KeyPair:
        """A server certificate; the apiserver dials webhooks by IP, so IP SANs are needed."""
        return build_leaf(self.authority, common_name, dns_names, ips, validity=VALIDITY)

    def client(self, user: str, groups: tuple[str, ...] = ()) -> KeyPair:
        """A client certificate for Kubernetes user ``user`` in ``groups`` (subject O)."""
        if not groups:
            return build_leaf(self.authority, user, server=False, client=True, validity=VALIDITY)
        # certs.builder makes CN-only subjects; group membership needs O attributes, so the
        # admin's certificate (group system:masters) is signed here with the same CA.
        ca_key = self.authority.private_key()
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        subject = x509.Name(
            [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
            + [x509.NameAttribute(NameOID.COMMON_NAME, user)]
        )
        cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self.authority.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def service_account_keys() -> KeyPair:
    """The key pair kube-apiserver signs ServiceAccount tokens with (ES256).

    ``cert_pem`` holds the public key (PEM ``PUBLIC KEY``), as --service-account-key-file takes it.
    """
    key = ec.generate_private_key(ec.SECP256R1())
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return KeyPair(public, _key_pem(key))
