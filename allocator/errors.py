"""The allocator's exceptions, and how a reason or an error is spelled in its answers.
``kubernetes.ApiException`` is wrapped into these once, in :mod:`allocator.kube.client`;
nothing else sees it."""

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


class TooManyRequests(ApiError):
    """429: for an eviction, a PodDisruptionBudget forbids it now; stop and retry later,
    never delete instead."""


class BindError(TesseraError):
    """A bind that did not happen; the message goes back to kube-scheduler verbatim."""


class NotReady(TesseraError):
    """The allocator cannot answer yet (not synced, or not the leader)."""


def describe_error(exc: BaseException) -> str:
    """The message a verb returns in ``Error`` (never containing ``%``: see
    :func:`event_safe`)."""
    if isinstance(exc, TesseraError):
        return event_safe(str(exc))
    return event_safe(f"internal error in the GPU allocator: {type(exc).__name__}: {exc}")


def event_safe(text: str) -> str:
    """``text`` without ``%``, for every reason and error the extender returns.

    kube-scheduler passes the failure message to ``Eventf`` as the *format* string
    (kubernetes ``pkg/scheduler/schedule_one.go``, ``handleSchedulingFailure``, v1.34.4
    ~line 1120), so ``50% core`` would read ``50%!c(MISSING)ore`` in the pod's events.
    Escaping as ``%%`` is no answer: the same text goes verbatim into the PodScheduled
    condition, where it would show doubled. So the sign is spelled out.
    """
    return text.replace("%", " percent") if "%" in text else text
