"""The allocator's exceptions. ``kubernetes.ApiException`` is wrapped into these once, in
:mod:`allocator.kube.client`; nothing else sees it."""

from __future__ import annotations

from tessera.vocabulary import TesseraError


class ApiError(TesseraError):
    """A Kubernetes API call failed."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class NotFound(ApiError):
    """404."""


class Conflict(ApiError):
    """409: optimistic concurrency failure, precondition failure, or already exists."""


class Gone(ApiError):
    """410: the watch's resourceVersion is too old; relist."""


class BindError(TesseraError):
    """A bind that did not happen; the message goes back to kube-scheduler verbatim."""


class NotReady(TesseraError):
    """The allocator cannot answer yet (not synced, or not the leader)."""


class WouldBlock(TesseraError):
    """The verb needs an API read, and its caller asked it not to block (it answers in the
    event loop first: :class:`allocator.service.app.VerbRoutes`)."""
