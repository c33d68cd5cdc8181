"""What the verbs read of a pod object besides its GPU request (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from allocator.picture.requests import ResourceError, pod_requests

#: A pod's (milli-CPU, memory bytes) requests as a node counts them, or None when node
#: resources are not tracked.
Requests = tuple[int, int] | None


def uid_of(pod: Mapping[str, Any]) -> str:
    uid = (pod.get("metadata") or {}).get("uid")
    return uid if isinstance(uid, str) else ""


def pod_key(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}/{meta.get('uid', '')}"


def requests_or_zero(pod: Mapping[str, Any]) -> tuple[int, int]:
    """(milli-CPU, memory bytes) the pod requests; (0, 0) if unreadable (the API server
    validates them, so only a hand-made pod gets here)."""
    try:
        return pod_requests(pod)
    except (ResourceError, TypeError, ValueError, ArithmeticError):
        return 0, 0


def pod_cpu_milli(pod: Mapping[str, Any]) -> int:
    return requests_or_zero(pod)[0]
