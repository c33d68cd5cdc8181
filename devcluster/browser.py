"""A real browser for the allocator's page: Debian's chromium, headless, driven through its
chromedriver (selenium), and a loopback relay to a server that wants a client certificate.

Nothing leaves the machine: every request the browser makes to a non-loopback address goes
to a proxy on a closed loopback port and fails (Chromium never proxies loopback addresses),
and its background services (updates, sync, translation...) are switched off.

hack/test.sh installs ``chromium`` and ``chromium-driver`` when they are missing.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from devcluster import DevClusterError

#: A loopback port nobody listens on (discard): the browser's proxy for anything not local.
DEAD_PROXY = "http://127.0.0.1:9"
CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",  # tests run as root in CI, where Chromium's sandbox refuses to start
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-default-apps",
    "--disable-extensions",
    "--disable-sync",
    "--disable-features=Translate,OptimizationHints,MediaRouter,AutofillServerCommunication",
    f"--proxy-server={DEAD_PROXY}",
    "--hide-scrollbars",
    "--force-device-scale-factor=1",
)


def find_chromium() -> tuple[str, str]:
    """(chromium, chromedriver) paths; :class:`DevClusterError` when either is missing."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not browser or not driver:
        raise DevClusterError("chromium and chromedriver are needed: apt-get install -y "
                              "chromium chromium-driver (hack/test.sh does it as root)")
    return browser, driver


@contextlib.contextmanager
def headless_chromium(width: int = 1400, height: int = 1000) -> Iterator[Any]:
    """A selenium WebDriver on headless Chromium, quit on exit."""
    from selenium import webdriver

    browser, driver_path = find_chromium()
    # Selenium must use the given driver, never look for (or download) one of its own.
    os.environ.setdefault("SE_OFFLINE", "true")
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--window-size={width},{height}")
    driver = webdriver.Chrome(options=options,
                              service=webdriver.ChromeService(executable_path=driver_path))
    try:
        yield driver
    finally:
        driver.quit()


def full_page_png(driver: Any, width: int = 1400) -> bytes:
    """A screenshot of the whole document: the viewport set to the page's height through
    the DevTools protocol (a window size would include the headless window's frame)."""
    height = int(driver.execute_script(
        "return Math.max(document.body.scrollHeight, document.documentElement.scrollHeight)"))
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": width, "height": max(400, min(height, 8000)), "deviceScaleFactor": 1,
        "mobile": False})
    png: bytes = driver.get_screenshot_as_png()
    return png


def colour_pixels(png: bytes, rgb: tuple[int, int, int], tolerance: int = 8) -> int:
    """How many pixels of the PNG are within ``tolerance`` of ``rgb`` on each channel."""
    from PIL import Image

    with Image.open(io.BytesIO(png)) as image:
        rgb_image = image.convert("RGB")
        colours = rgb_image.getcolors(rgb_image.width * rgb_image.height) or []
    total = 0
    for count, colour in colours:
        if isinstance(colour, tuple) and all(
                abs(a - b) <= tolerance for a, b in zip(colour, rgb, strict=True)):
            total += count
    return total


@contextlib.contextmanager
def relay(upstream: str, context: ssl.SSLContext) -> Iterator[str]:
    """A plain-HTTP loopback server that forwards each GET to ``upstream`` (an https base
    URL) over ``context`` (with the client certificate the upstream demands), and returns
    its status, headers and body unchanged. Yields the relay's base URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            try:
                with urllib.request.urlopen(upstream.rstrip("/") + self.path, context=context,
                                            timeout=10) as resp:
                    status, headers, body = resp.status, resp.getheaders(), resp.read()
            except urllib.error.HTTPError as exc:
                status, headers, body = exc.code, list(exc.headers.items()), exc.read()
            self.send_response(status)
            for key, value in headers:
                if key.lower() not in ("connection", "transfer-encoding", "content-length",
                                       "date", "server"):
                    self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return  # quiet: the tests say what they fetch

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, name="page-relay", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
