"""``extra=`` for allocator log calls about a pod.

``tessera.logs.pod_context`` puts the pod name under ``name``, which ``logging.LogRecord``
reserves (``Logger.makeRecord`` raises KeyError for it), so the name moves to ``pod``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tessera.logs import pod_context


def log_context(pod: Mapping[str, Any] | None, **more: Any) -> dict[str, Any]:
    context = pod_context(dict(pod) if pod is not None else None, **more)
    context["pod"] = context.pop("name", None)
    return context


def ids_context(namespace: str, name: str, uid: str, **more: Any) -> dict[str, Any]:
    return {"namespace": namespace, "pod": name, "uid": uid, **more}
