"""A stand-in for NVIDIA's dcgm-exporter: the figures a test sets, in its exposition format.

There are no GPUs here, so the dev cluster's Prometheus scrapes this instead: one loopback
HTTP server whose ``/metrics`` is what dcgm-exporter would serve for the cards the test
describes. Names, units and labels are dcgm-exporter's (NVIDIA/dcgm-exporter, tag
``4.5.3-4.8.2``): ``etc/default-counters.csv`` for the fields (``DCGM_FI_DEV_FB_USED`` and
``DCGM_FI_DEV_FB_FREE`` in MiB, ``DCGM_FI_DEV_GPU_UTIL`` in percent, all gauges) and
``internal/pkg/rendermetrics/render_metrics.go`` for the line's label set and order (``gpu``,
``UUID``, ``pci_bus_id``, ``device``, ``modelName``, ``Hostname``). ``Hostname`` is the Node's
name, as dcgm-exporter's chart makes it (``NODE_NAME`` from ``spec.nodeName``).
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final

#: (field, help, unit) as etc/default-counters.csv has them.
FIELDS: Final = (
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)."),
)


@dataclass(frozen=True)
class CardFigures:
    """One card as dcgm-exporter reports it."""

    node: str
    gpu: int
    used_mib: int
    total_mib: int
    util_percent: int = 0
    model: str = "NVIDIA A100-SXM4-80GB"

    @property
    def uuid(self) -> str:
        digest = zlib.crc32(f"{self.node}/{self.gpu}".encode())
        return f"GPU-{digest:08x}-0000-4000-8000-{self.gpu:012d}"

    def value(self, field: str) -> int:
        if field == "DCGM_FI_DEV_GPU_UTIL":
            return self.util_percent
        if field == "DCGM_FI_DEV_FB_FREE":
            return max(0, self.total_mib - self.used_mib)
        return self.used_mib


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def exposition(cards: Iterable[CardFigures]) -> str:
    """The text dcgm-exporter serves for ``cards`` (render_metrics.go's template)."""
    cards = sorted(cards, key=lambda c: (c.node, c.gpu))
    lines = []
    for field, help_text in FIELDS:
        lines.append(f"# HELP {field} {help_text}")
        lines.append(f"# TYPE {field} gauge")
        for c in cards:
            lines.append(
                f'{field}{{gpu="{c.gpu}",UUID="{_label(c.uuid)}",'
                f'pci_bus_id="00000000:{c.gpu + 1:02X}:00.0",device="nvidia{c.gpu}",'
                f'modelName="{_label(c.model)}",Hostname="{_label(c.node)}"}} '
                f"{c.value(field)}")
    return "\n".join(lines) + "\n"


class FakeDcgmExporter:
    """``/metrics`` on 127.0.0.1 with the figures last :meth:`set`; start, then stop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cards: dict[tuple[str, int], CardFigures] = {}
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404)
                    return
                body = exporter.text().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="fake-dcgm-exporter", daemon=True)

    @property
    def address(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{host!s}:{port}"

    def set(self, *cards: CardFigures) -> None:
        """Report these cards' figures from now on (others set before stay)."""
        with self._lock:
            for card in cards:
                self._cards[(card.node, card.gpu)] = card

    def text(self) -> str:
        with self._lock:
            cards = list(self._cards.values())
        return exposition(cards)

    def start(self) -> FakeDcgmExporter:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
