"""``--prometheus``: the plugin puts dcgm-exporter's figures on the cards as the allocator does,
``why`` names the card others fill, ``inspect -o wide`` shows measured next to booked, and an
unreachable Prometheus is one line on stderr, the rest by bookings."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from plugin_builders import gpu_node, gpu_pod, shares
from test_plugin_cli import FakeApi, run

GIB = 1024
NOW = 1_800_000_000.0


def _series(node: str, gpu: int, name: str, value: int) -> dict[str, Any]:
    return {"metric": {"__name__": name, "gpu": str(gpu), "UUID": f"GPU-{gpu}",
                       "modelName": "NVIDIA A100-SXM4-80GB", "Hostname": node},
            "value": [NOW, str(value)]}


@pytest.fixture
def prometheus() -> Iterator[str]:
    """A loopback server answering /api/v1/query as Prometheus does (the e2e tests run the
    real one)."""
    body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
        _series("n1", 0, "DCGM_FI_DEV_FB_USED", 61 * GIB),
        _series("n1", 0, "DCGM_FI_DEV_GPU_UTIL", 87),
        _series("n1", 1, "DCGM_FI_DEV_FB_USED", 0),
        _series("n1", 1, "DCGM_FI_DEV_GPU_UTIL", 3)]}}).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            ok = self.path.startswith("/api/v1/query?query=")
            self.send_response(200 if ok else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body if ok else b"{}")

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _api() -> FakeApi:
    nodes = [gpu_node("n1", count=2, memory_mib=80 * GIB)]
    pods = [gpu_pod("big", shares(30, 20 * GIB))]
    return FakeApi(nodes, pods)


def test_why_names_the_card_processes_outside_tessera_fill(prometheus: str) -> None:
    api = FakeApi([gpu_node("n1", count=1, memory_mib=80 * GIB)],
                  [gpu_pod("big", shares(30, 20 * GIB))])
    code, out, err = run(["why", "big", "--prometheus", prometheus], api)
    assert code == 0 and err == ""
    assert "no node has room now" in out
    assert "gpu 0: 61 GiB used by processes Tessera did not place" in out
    assert "19456 MiB" in out  # the free memory the verdict is read against
    code, out, _ = run(["why", "big"], api)  # without metrics: it fits
    assert "61 GiB used by processes" not in out and "fits" in out


def test_inspect_wide_shows_measured_next_to_booked(prometheus: str) -> None:
    code, out, err = run(["inspect", "-o", "wide", "--prometheus", prometheus], _api())
    assert code == 0 and err == ""
    assert "measured: others / busy" in out
    assert "62464 MiB / 75%" in out and "0 MiB / 0%" in out
    assert "19456 MiB" in out  # card 1's free memory, others' use taken off
    code, out, _ = run(["inspect", "-o", "json", "--prometheus", prometheus], _api())
    cards = json.loads(out)["nodes"][0]["cards"]
    assert [(c["foreignMemoryMiB"], c["busyPercent"]) for c in cards] == [(61 * GIB, 75),
                                                                          (0, 0)]


def test_an_unreachable_prometheus_is_a_line_on_stderr_and_the_rest_by_bookings() -> None:
    code, out, err = run(["inspect", "-o", "wide", "--prometheus", "http://127.0.0.1:9"],
                         _api())
    assert code == 0
    assert "measured figures from http://127.0.0.1:9 not read" in err
    assert "by bookings alone" in err
    assert "n1" in out
