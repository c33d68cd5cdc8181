"""Watch streams through libcurl (allocator/kube/curl_watch.py, via KubeClient) against a
loopback HTTP/1.1 server that streams as the API server does (chunked transfer encoding):
events split across chunks and chunks holding several events arrive whole and in order, a
refusal is the API error its status says, a stream cut mid-event is an ApiError, and events
that arrive later are handed over as they come."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest
from kubernetes import client

from allocator.errors import ApiError, Gone
from allocator.kube.client import KubeClient


def _event(name: str, version: int) -> bytes:
    return json.dumps({"type": "MODIFIED", "object": {"metadata": {
        "name": name, "resourceVersion": str(version),
        "annotations": {"big": "x" * 3000}}}}).encode() + b"\n"


class _Streamer(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    #: What the next watch answers: "split", "refused", "cut" or "slow".
    mode: ClassVar[str] = "split"
    #: Released by the test to let the slow stream's second event go.
    go_on: ClassVar[threading.Event] = threading.Event()

    def log_message(self, *args: Any) -> None:
        pass

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def do_GET(self) -> None:
        if self.mode == "refused":
            body = json.dumps({"kind": "Status", "code": 410,
                               "message": "too old resource version: 4"}).encode()
            self.send_response(410)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        stream = b"".join(_event(f"n{i}", 10 + i) for i in range(40))
        if self.mode == "split":
            for start in range(0, len(stream), 777):  # odd sizes: events cut anywhere
                self._chunk(stream[start:start + 777])
        elif self.mode == "cut":
            self._chunk(stream[:5000])
            self.wfile.flush()
            self.connection.shutdown(2)  # no closing chunk: the transfer is broken
            return
        else:  # slow: one event, then the next only when the test says so
            self._chunk(_event("first", 1))
            released = self.go_on.wait(10)  # by the test, once it has the first event
            self._chunk(_event("second" if released else "never-released", 2))
        self.wfile.write(b"0\r\n\r\n")


@pytest.fixture(scope="module")
def kube() -> Iterator[KubeClient]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Streamer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    cfg = client.Configuration()
    cfg.host = f"http://127.0.0.1:{server.server_port}"
    api_client = client.ApiClient(cfg)
    kube = KubeClient(api_client)
    assert kube.curl is not None  # a plain configuration: watches go through libcurl
    yield kube
    api_client.close()
    server.shutdown()
    server.server_close()


def test_events_cut_across_chunks_arrive_whole_and_in_order(kube: KubeClient) -> None:
    _Streamer.mode = "split"
    events = list(kube.watch_nodes("9", 5))
    assert [obj["metadata"]["name"] for _kind, obj in events] == [f"n{i}" for i in range(40)]
    assert all(len(obj["metadata"]["annotations"]["big"]) == 3000 for _k, obj in events)


def test_a_refused_watch_is_the_error_its_status_says(kube: KubeClient) -> None:
    _Streamer.mode = "refused"
    with pytest.raises(Gone, match="too old resource version"):
        list(kube.watch_nodes("4", 5))


def test_a_stream_cut_mid_event_is_an_api_error_after_the_whole_events(
        kube: KubeClient) -> None:
    _Streamer.mode = "cut"
    seen: list[str] = []
    with pytest.raises(ApiError, match="stream dropped"):
        for _kind, obj in kube.watch_nodes("9", 5):
            seen.append(obj["metadata"]["name"])
    assert seen == ["n0"]  # 5,000 bytes hold one whole event of ~3,070


def test_an_event_is_handed_over_when_it_arrives_not_at_the_streams_end(
        kube: KubeClient) -> None:
    _Streamer.mode = "slow"
    _Streamer.go_on.clear()
    events = kube.watch_nodes("0", 5)
    _kind, first = next(events)  # the server holds the second event until told
    assert first["metadata"]["name"] == "first"
    _Streamer.go_on.set()
    # Had the first event waited for more of the stream, the server would have given up
    # waiting and sent "never-released".
    assert [obj["metadata"]["name"] for _k, obj in events] == ["second"]
