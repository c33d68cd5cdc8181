"""The serving certificate files, as both servers see them: which files, whether they changed,
and whether they load as a pair.

Each server serves renewed files its own way (gunicorn's side switches the context of new
connections, :mod:`tessera.serving.gunicorn.handshakes`; granian's side starts a new worker,
:mod:`tessera.serving.granian.server`); both ask this module whether the files changed and
load.
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass
from typing import Any

#: What identifies a file's version without reading it: (inode, mtime, size), or None when
#: missing. A Secret volume's renewal swaps a symlink (new inode); an edit in place changes
#: mtime and size.
Stamp = tuple[Any, ...]


@dataclass(frozen=True)
class TlsFiles:
    """A serving certificate (chain), its key and, for mutual TLS, the CA clients must have
    a certificate from."""

    cert: str
    key: str
    client_ca: str | None = None

    def paths(self) -> list[str]:
        """The files given, in order (no client CA when none)."""
        return [p for p in (self.cert, self.key, self.client_ca) if p]

    def stamp(self) -> Stamp:
        stamps: list[Any] = []
        for path in self.paths():
            try:
                st = os.stat(path)
                stamps.append((st.st_ino, st.st_mtime_ns, st.st_size))
            except OSError:
                stamps.append(None)
        return tuple(stamps)

    def load(self) -> ssl.SSLContext:
        """A server context from the files (raises ``OSError``/``ssl.SSLError`` if they do
        not load): with a client CA, a client certificate it signed is required."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=self.client_ca)
        context.load_cert_chain(self.cert, self.key)
        context.verify_mode = ssl.CERT_REQUIRED if self.client_ca else ssl.CERT_NONE
        # No session tickets: our callers (kube-scheduler, the API server) are Go clients
        # without a session cache, which never resume, and issuing OpenSSL's two tickets per
        # handshake was a third of a handshake's CPU (docs/benchmarks.md, issue 13).
        context.num_tickets = 0
        context.options |= ssl.OP_NO_TICKET
        return context
