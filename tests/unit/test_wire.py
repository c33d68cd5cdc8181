"""The edge decoders: capped bodies (chunked or not), JSON that raises only ValueError,
object metadata typed as the API server sends it."""

from __future__ import annotations

import io
from typing import Any

import pytest

from tessera.wire import (
    MAX_JSON_DEPTH,
    BodyTooLarge,
    WireError,
    check_object_meta,
    load_json,
    read_body,
)


class Trickle(io.RawIOBase):
    """A WSGI input that returns at most ``step`` bytes per read, as sockets may."""

    def __init__(self, data: bytes, step: int = 7) -> None:
        self.data, self.step = data, step

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        n = self.step if size < 0 else min(size, self.step)
        part, self.data = self.data[:n], self.data[n:]
        return part


def environ(data: bytes, *, length: bool, terminated: bool = True) -> dict[str, Any]:
    env: dict[str, Any] = {"wsgi.input": Trickle(data)}
    if length:
        env["CONTENT_LENGTH"] = str(len(data))
    if terminated:
        env["wsgi.input_terminated"] = True
    return env


@pytest.mark.parametrize("length", [True, False], ids=["content-length", "chunked"])
def test_a_body_at_the_cap_is_read_whole_and_one_byte_more_is_413(length: bool) -> None:
    assert read_body(environ(b"x" * 100, length=length), 100) == b"x" * 100
    with pytest.raises(BodyTooLarge) as caught:
        read_body(environ(b"x" * 101, length=length), 100)
    assert caught.value.status == 413


def test_a_chunked_body_far_over_the_cap_is_refused_after_reading_one_byte_past_it() -> None:
    stream = Trickle(b"y" * 6 * 1024 * 1024, step=65536)
    with pytest.raises(BodyTooLarge):
        read_body({"wsgi.input": stream, "wsgi.input_terminated": True}, 1024 * 1024)
    assert len(stream.data) < 6 * 1024 * 1024 - 1024 * 1024  # stopped near the cap


def test_chunked_input_the_server_does_not_terminate_is_no_body() -> None:
    assert read_body(environ(b"{}", length=False, terminated=False), 100) == b""


@pytest.mark.parametrize("value", ["-1", "12x", "\u0661\u0662"])
def test_a_content_length_that_is_not_a_byte_count_is_a_400(value: str) -> None:
    with pytest.raises(WireError) as caught:
        read_body({"wsgi.input": io.BytesIO(b"{}"), "CONTENT_LENGTH": value}, 100)
    assert caught.value.status == 400


@pytest.mark.parametrize(
    "text",
    [b"[" * 100_000, b"{\"a\":" * 50_000, b"\xff\xfe", b"", b"{", "[" * 3000],
    ids=["brackets", "objects", "not-utf8", "empty", "truncated", "str-brackets"],
)
def test_load_json_raises_only_value_error(text: str | bytes) -> None:
    with pytest.raises(ValueError):
        load_json(text)


def test_load_json_takes_nesting_up_to_its_bound_and_no_deeper() -> None:
    deep_ok = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert load_json(deep_ok) is not None
    too_deep = "[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1)
    with pytest.raises(ValueError, match="nested deeper"):
        load_json(too_deep)
    # Siblings do not add up: wide is not deep.
    assert len(load_json("[" + ",".join(["[[1]]"] * 5000) + "]")) == 5000


@pytest.mark.parametrize(
    ("obj", "fragment"),
    [
        ("x", "must be a JSON object"),
        ({"metadata": "x"}, "metadata must be an object"),
        ({"metadata": {"uid": ["u"]}}, "metadata.uid must be a string"),
        ({"metadata": {"name": 5}}, "metadata.name must be a string"),
        ({"metadata": {"labels": ["a"]}}, "labels must map strings to strings"),
        ({"metadata": {"annotations": {"k": 1}}}, "annotations must map strings to strings"),
        ({"metadata": {}, "spec": []}, "spec must be an object"),
        ({"status": "Running"}, "status must be an object"),
    ],
)
def test_object_metadata_of_the_wrong_type_is_a_wire_error(obj: Any, fragment: str) -> None:
    with pytest.raises(WireError, match=fragment):
        check_object_meta(obj, "pod")


def test_object_metadata_as_the_api_server_sends_it_passes_unchanged() -> None:
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": {"a": "b"},
                        "annotations": {"c": "d"}, "generateName": None},
           "spec": {"containers": []}, "status": None}
    assert check_object_meta(pod, "pod") is pod
