"""The one body policy and error shape both servers answer with (tessera/serving/policy.py):
the same refusal, byte for byte, from the webhook's bridge and the allocator's bodies."""

from __future__ import annotations

import asyncio
import io
import json
from typing import Any

import pytest

from tessera.serving.granian.bodies import CompleteBodies
from tessera.serving.gunicorn.bridge import WsgiBridge
from tessera.serving.policy import BodyPolicy, Refusal, error_body, error_doc


def never(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    raise AssertionError("the app ran on a refused body")


def gunicorn_side(policy: BodyPolicy, length: int) -> tuple[int, bytes]:
    sent: list[dict[str, Any]] = []
    scope = {"type": "http", "method": "POST", "path": "/x",
             "headers": [(b"content-length", str(length).encode())]}

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"x" * length, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(WsgiBridge(never, threads=1, body=policy)(scope, receive, send))
    return sent[0]["status"], sent[1]["body"]


def granian_side(policy: BodyPolicy, length: int) -> tuple[int, bytes]:
    started: list[str] = []
    environ = {"REQUEST_METHOD": "POST", "PATH_INFO": "/x", "SERVER_PROTOCOL": "HTTP/1.1",
               "CONTENT_LENGTH": str(length), "wsgi.input": io.BytesIO(b"x" * length)}
    out = b"".join(CompleteBodies(never, threads=1, body=policy)(
        environ, lambda status, headers: started.append(status)))
    return int(started[0].split()[0]), out


@pytest.mark.parametrize("length", [101, 10_000])
def test_both_servers_refuse_a_body_over_the_cap_with_the_same_answer(length: int) -> None:
    policy = BodyPolicy(100)
    expected = (413, b'{"code": 413, "message": "request body larger than 100 bytes"}')
    assert gunicorn_side(policy, length) == granian_side(policy, length) == expected


def test_the_policy_reads_a_declared_length_and_one_byte_past_the_cap_without_one() -> None:
    policy = BodyPolicy(100, seconds=2.5)
    assert [policy.declared_over_cap(d) for d in (None, "", "100", "101", "1e9", "²")] == [
        False, False, False, True, False, False]
    assert (policy.read_limit(None), policy.read_limit(40)) == (101, 40)
    assert (policy.over_cap(100), policy.over_cap(101)) == (False, True)
    assert policy.too_slow() == Refusal(408, "request body not received within 2.5 s")


def test_the_error_shape_is_code_and_message() -> None:
    assert error_doc(404, "no") == {"code": 404, "message": "no"}
    assert json.loads(error_body(404, "no")) == error_doc(404, "no")
    assert Refusal(503, "busy").body == error_body(503, "busy")
