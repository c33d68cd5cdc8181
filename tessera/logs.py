"""Structured logging: one JSON object per line, with the pod's identity when there is one.

Each server's own messages go through the same JSON handler (gunicorn's:
:class:`tessera.serving.gunicorn.server.JsonLogger`; granian's:
:mod:`tessera.serving.granian.server`), so a service's log is JSON from its first line to its
last.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Mapping
from typing import Any

#: Attributes passed through ``extra=`` that are copied into the JSON record.
#: ``pod`` rather than ``name``: LogRecord reserves ``name`` (``makeRecord`` raises KeyError).
CONTEXT_KEYS = ("namespace", "pod", "uid", "node", "verb", "policy", "outcome")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key in CONTEXT_KEYS:
            value = record.__dict__.get(key)
            if value is not None:
                doc[key] = value
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, separators=(",", ":"))


def configure(level: str = "INFO") -> None:
    """Install the JSON formatter on the root logger (idempotent)."""
    root = logging.getLogger()
    root.setLevel(level.upper())
    for handler in root.handlers:
        if isinstance(handler.formatter, JsonFormatter):
            return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root.addHandler(handler)


def pod_context(pod: Mapping[str, Any] | None, **more: Any) -> dict[str, Any]:
    """``extra=`` for a log call about a pod: namespace, pod (its name), uid.

    Only string values are taken: this runs in error paths too, on objects that may be forged
    (a ``metadata`` that is a string must not raise a second error while the first is logged).
    """
    meta = pod.get("metadata") if isinstance(pod, Mapping) else None
    if not isinstance(meta, Mapping):
        meta = {}

    def text(key: str) -> str | None:
        value = meta.get(key)
        return value if isinstance(value, str) and value else None

    return {
        "namespace": text("namespace"),
        "pod": text("name") or text("generateName"),
        "uid": text("uid"),
        **more,
    }


def pod_ids_context(namespace: str, name: str, uid: str, **more: Any) -> dict[str, Any]:
    """``extra=`` for a log call about a pod known only by its identity (e.g. a bind call)."""
    return {"namespace": namespace, "pod": name, "uid": uid, **more}
