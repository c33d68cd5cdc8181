"""What arrives from outside, decoded at the edge: request bodies, JSON text, object shapes.

Anyone who reaches a port can send a body, and anyone who can create a pod or label a node
writes text that Tessera decodes. So every decoder here has one failure mode, a
:class:`WireError` (or a :class:`ValueError` for :func:`load_json`) with a message fit for the
sender; nothing else escapes, whatever the bytes. Pure: no Flask, no clock (the body reader
speaks plain WSGI).

- :func:`read_body`: the request body with a hard cap, chunked or not (Werkzeug's own cap
  silently truncates a chunked body at the limit: ``werkzeug/wsgi.py`` ``get_input_stream``
  wraps it in a ``LimitedStream`` that stops reading there).
- :func:`load_json`: JSON text to Python, whose only error is ``ValueError``, with a nesting
  bound; :func:`dump_json`: a reply's JSON bytes. Both are orjson's: strict JSON (no
  ``NaN``, no lone surrogates, invalid UTF-8 refused), 3x faster than the json module on the
  extender's bodies (docs/benchmarks.md), never a ``RecursionError``.
- :func:`check_object_meta`: the ``metadata`` of a Kubernetes object, typed as the API server
  would send it (a forged body may put a string or a list anywhere).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import orjson

from tessera.vocabulary import TesseraError

#: JSON nesting Tessera accepts. A pod nests under 20 levels (managedFields mirror its fields,
#: a few levels down), an AdmissionReview adds 3; deeper only comes from probing recursion.
MAX_JSON_DEPTH: Final = 64
_READ_CHUNK: Final = 64 * 1024


class WireError(TesseraError):
    """Input that is not what the sender's protocol allows; ``status`` is the HTTP code."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


class BodyTooLarge(WireError):
    def __init__(self, limit: int) -> None:
        super().__init__(f"request body larger than {limit} bytes", 413)


def read_body(environ: Mapping[str, Any], limit: int) -> bytes:
    """The body of a WSGI request, at most ``limit`` bytes; :class:`BodyTooLarge` otherwise.

    With a Content-Length the length is checked before reading. Without one (chunked), the
    body is read up to one byte past the cap: only then is it known to be too large. A server
    that does not terminate chunked input itself (no ``wsgi.input_terminated``) gives no body.
    """
    stream = environ.get("wsgi.input")
    if stream is None:
        return b""
    raw_length = environ.get("CONTENT_LENGTH") or ""
    if raw_length:
        if not (raw_length.isascii() and raw_length.isdigit()):
            raise WireError(f"Content-Length {raw_length[:32]!r} is not a byte count")
        length = int(raw_length)
        if length > limit:
            raise BodyTooLarge(limit)
        return _read(stream, length)
    if not environ.get("wsgi.input_terminated"):
        return b""
    data = _read(stream, limit + 1)
    if len(data) > limit:
        raise BodyTooLarge(limit)
    return data


def _read(stream: Any, size: int) -> bytes:
    """Up to ``size`` bytes; WSGI streams may return short reads before their end."""
    parts: list[bytes] = []
    left = size
    while left > 0:
        part = stream.read(min(left, _READ_CHUNK))
        if not part:
            break
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


def load_json(text: str | bytes, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """The document of JSON ``text``, raising only :class:`ValueError` (bad UTF-8, bad JSON,
    nested deeper than ``max_depth``).

    Differences from ``json.loads``, all refusals of what is not JSON (RFC 8259) or would
    fail later anyway: ``NaN``/``Infinity`` and numbers beyond a double are refused; so are
    strings with lone surrogates (they cannot be written back as UTF-8); integers beyond
    64 bits become floats (no Kubernetes field holds one)."""
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError as exc:  # a ValueError; its own depth cap is 1,024
        raise ValueError(str(exc)) from None
    # Nesting needs an opening bracket per level: counting them (C speed, strings included,
    # so never too few) spares the walk for most bodies, e.g. 5,000 node names.
    opening = (text.count(b"[") + text.count(b"{") if isinstance(text, bytes)
               else text.count("[") + text.count("{"))
    if opening > max_depth and isinstance(doc, dict | list) and _too_deep(doc, max_depth):
        raise ValueError(f"JSON nested deeper than {max_depth} levels")
    return doc


def dump_json(doc: Any) -> bytes:
    """Compact UTF-8 JSON of a reply built from dicts, lists, strings, ints and bools (keys in
    insertion order, as ``json.dumps(doc, separators=(",", ":"), ensure_ascii=False)``)."""
    return orjson.dumps(doc)


def _too_deep(doc: dict[str, Any] | list[Any], max_depth: int) -> bool:
    """Whether containers nest deeper than ``max_depth`` (iterative: no recursion limit)."""
    level: list[Any] = [doc]
    for _depth in range(max_depth):
        below: list[Any] = []
        for node in level:
            items = node.values() if type(node) is dict else node
            kinds = set(map(type, items))  # C-level: a list of 5,000 node names stays cheap
            if dict in kinds or list in kinds:
                below.extend(x for x in items if type(x) is dict or type(x) is list)
        if not below:
            return False
        level = below
    return True


#: metadata fields Tessera reads, and their JSON type.
_META_STRINGS: Final = ("name", "generateName", "namespace", "uid", "resourceVersion")
_META_MAPS: Final = ("labels", "annotations")


def check_object_meta(obj: Any, what: str) -> Mapping[str, Any]:
    """``obj`` if it is a JSON object whose ``metadata`` has the types Kubernetes gives it
    (strings; labels and annotations maps of string to string), else :class:`WireError`.
    Absent or null fields are fine."""
    if not isinstance(obj, Mapping):
        raise WireError(f"{what} must be a JSON object")
    for key in ("spec", "status"):
        value = obj.get(key)
        if value is not None and not isinstance(value, Mapping):
            raise WireError(f"{what}.{key} must be an object")
    meta = obj.get("metadata")
    if meta is None:
        return obj
    if not isinstance(meta, Mapping):
        raise WireError(f"{what}.metadata must be an object")
    for key in _META_STRINGS:
        value = meta.get(key)
        if value is not None and not isinstance(value, str):
            raise WireError(f"{what}.metadata.{key} must be a string")
    for key in _META_MAPS:
        value = meta.get(key)
        if value is None:
            continue
        if not isinstance(value, Mapping) or not all(
            isinstance(v, str) for v in value.values()
        ):
            raise WireError(f"{what}.metadata.{key} must map strings to strings")
    return obj
