"""Errors of the certs tooling: each one says what to fix."""

from __future__ import annotations

from tessera.vocabulary import TesseraError


class CertsError(TesseraError):
    """Root of the certs tooling's errors; the message is printed to the operator."""


class MaterialError(CertsError):
    """A file or Secret holds something that is not usable TLS material, or cannot be read."""


class KubeAccessError(CertsError):
    """A Kubernetes API call failed (wrapped once, in :mod:`certs.kube`)."""


class PermissionDenied(KubeAccessError):
    """HTTP 403: the identity running ``tessera certs`` lacks an RBAC rule."""


class NotFound(KubeAccessError):
    """HTTP 404: a named object (webhook configuration, namespace) does not exist."""
