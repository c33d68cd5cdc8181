"""A :class:`certs.plan.Store` on local files, in the layout of a mounted TLS Secret.

Leaf directory: ``tls.crt``, ``tls.key``, ``ca.crt`` (the keys of a ``kubernetes.io/tls``
Secret with ``ca.crt``, as cert-manager writes it), so a service reads the same paths whether
its files come from a Secret volume or from ``tessera certs files``. CA directory: ``ca.crt``,
``ca.key``.

Writes are atomic per file (temporary file + rename), so a server that re-reads its files
when they change (tessera.serving.tls) sees either the old or the new file, never half of
one. The key is written before the certificate: a reader between the two renames gets a key
that does not match and fails that one handshake; it never serves a cert with a foreign key.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from certs.builder import KeyPair
from certs.errors import MaterialError

CERT_FILE = "tls.crt"
KEY_FILE = "tls.key"
CA_FILE = "ca.crt"
CA_KEY_FILE = "ca.key"


def read_file(path: Path) -> bytes | None:
    """The file's bytes, None if it does not exist; any other failure is a clear error."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except IsADirectoryError as exc:
        raise MaterialError(f"{path} is a directory, not a PEM file") from exc
    except OSError as exc:
        raise MaterialError(f"cannot read {path}: {exc.strerror or exc}") from exc


def read_pair(cert_path: Path, key_path: Path) -> KeyPair | None:
    """Both files, or None when neither exists. One without the other is an error."""
    cert, key = read_file(cert_path), read_file(key_path)
    if cert is None and key is None:
        return None
    if cert is None or key is None:
        present, missing = (cert_path, key_path) if key is None else (key_path, cert_path)
        raise MaterialError(
            f"{present} exists but {missing} does not; remove {present} to start afresh or "
            f"restore {missing}"
        )
    return KeyPair(cert_pem=cert, key_pem=key)


def write_atomic(path: Path, data: bytes, mode: int) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as exc:
        raise MaterialError(f"cannot write into {path.parent}: {exc.strerror or exc}") from exc
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), mode)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise MaterialError(f"cannot write {path}: {exc.strerror or exc}") from exc


class FileStore:
    """CA in ``ca_dir``; each target is a leaf directory (the target string is its path)."""

    def __init__(self, ca_dir: Path) -> None:
        self.ca_dir = ca_dir

    def load_ca(self) -> KeyPair | None:
        return read_pair(self.ca_dir / CA_FILE, self.ca_dir / CA_KEY_FILE)

    def save_ca(self, pair: KeyPair) -> None:
        write_atomic(self.ca_dir / CA_KEY_FILE, pair.key_pem, 0o600)
        write_atomic(self.ca_dir / CA_FILE, pair.cert_pem, 0o644)

    def load_leaf(self, target: str) -> KeyPair | None:
        leaf = Path(target)
        return read_pair(leaf / CERT_FILE, leaf / KEY_FILE)

    def save_leaf(self, target: str, pair: KeyPair, ca_cert_pem: bytes) -> None:
        leaf = Path(target)
        # ca.crt first: a client of this directory that verifies peers must trust the new CA
        # before anyone presents a leaf of it.
        if leaf.resolve() != self.ca_dir.resolve():
            write_atomic(leaf / CA_FILE, ca_cert_pem, 0o644)
        write_atomic(leaf / KEY_FILE, pair.key_pem, 0o600)
        write_atomic(leaf / CERT_FILE, pair.cert_pem, 0o644)

    def describe(self, target: str | None) -> str:
        return str(self.ca_dir if target is None else Path(target))
