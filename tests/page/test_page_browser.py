"""The allocator's page in headless Chromium, served by the allocator app over HTTP on
loopback: hostile names from the cluster show as text and run nothing, the page fetches
nothing, its bars are drawn, and a preemption under way is listed with its victims. (The
demo's cards on the real control plane: tests/e2e.)"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from alloc_harness import make_app
from builders import make_gpu_pod, make_node, request, share, whole
from fake_kube import FakeKube
from flask import Flask
from selenium.webdriver.common.by import By
from werkzeug.serving import make_server

from allocator.verbs.config import AllocatorConfig
from devcluster.browser import colour_pixels, full_page_png, headless_chromium

NODE = "<script>window.pwned = 'node'</script>"
MODEL = "<img src=x onerror=\"window.pwned = 'model'\">"
HOLDER = "<svg onload=\"window.pwned = 'holder'\"></svg>"
REFUSED = "<iframe src=\"javascript:top.pwned = 'refused'\"></iframe>"
CORE_BLUE = (0x2F, 0x7E, 0xD8)
MEMORY_PURPLE = (0x8E, 0x5B, 0xD6)


@contextmanager
def served(app: Flask) -> Iterator[str]:
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()


def hostile_cluster() -> FakeKube:
    """Names the API server would refuse are fine here: the page must not trust it either."""
    fake = FakeKube()
    fake.add_node(make_node(NODE, count=2, memory_mib=16000))
    fake.add_node(make_node("gpu-x", cards_annotation=[
        {"index": 0, "model": MODEL, "memoryMiB": 24576},
        {"index": 1, "model": "NVIDIA-A10", "memoryMiB": 24576}]))
    fake.add_pod(make_gpu_pod(HOLDER, request(share(core=60, mem=12288)), uid="u-holder"))
    return fake


def test_hostile_names_are_text_and_no_script_runs_and_nothing_is_fetched(
    tmp_path: Any,
) -> None:
    fake = hostile_cluster()
    app, _rt = make_app(fake)
    client = app.test_client()
    bound = client.post("/scheduler/bind", json={"PodName": HOLDER, "PodNamespace": "default",
                                                  "PodUID": "u-holder", "Node": "gpu-x"})
    assert bound.get_json() == {"Error": ""}
    big = make_gpu_pod(REFUSED, request(share(core=50, mem=90_000)), uid="u-refused")
    client.post("/scheduler/filter", json={"Pod": big, "Nodes": None,
                                           "NodeNames": [NODE, "gpu-x"]})

    with served(app) as url, headless_chromium() as driver:
        driver.get(url + "/")
        assert driver.title == "Tessera allocator"
        assert driver.execute_script("return window.pwned === undefined && top.pwned === "
                                     "undefined")
        assert driver.find_elements(By.CSS_SELECTOR, "script, img, svg, iframe, object, "
                                                     "embed") == []
        headings = [e.text for e in driver.find_elements(By.CSS_SELECTOR, ".node h3")]
        assert any(h.startswith(NODE) for h in headings), headings
        titles = [e.text for e in driver.find_elements(By.CSS_SELECTOR, ".card .title")]
        assert f"#0 {MODEL}" in titles
        holders = [e.text for e in driver.find_elements(By.CSS_SELECTOR, ".holders li")]
        assert holders == [f"default/{HOLDER} (main)"]
        pending = driver.find_element(By.CSS_SELECTOR, "#pending tbody td").text
        assert pending == f"default/{REFUSED}"
        # No request but the page itself: no script, stylesheet, image or font was fetched.
        assert driver.execute_script(
            "return performance.getEntriesByType('resource').length") == 0
        png = full_page_png(driver)
    (tmp_path / "hostile.png").write_bytes(png)
    # The holder's 60 % compute and half the memory of card 0 of gpu-x are drawn.
    assert colour_pixels(png, CORE_BLUE) > 500
    assert colour_pixels(png, MEMORY_PURPLE) > 500


PREEMPTOR = "<img src=x onerror=\"window.pwned = 'preemptor'\">"


def test_a_preemption_in_flight_is_listed_with_its_victims_and_state() -> None:
    fake = FakeKube()
    fake.add_node(make_node("gpu-p", count=2, memory_mib=16000))
    app, rt = make_app(fake, core=AllocatorConfig(preemption=True))
    for name in ("a", "b", "c", "d"):  # two priority-1 halves on each card
        pod = make_gpu_pod(name, request(share(core=50, mem=4000)), uid=f"u-{name}")
        pod["spec"]["priority"] = 1
        fake.add_pod(pod)
        rt.allocator.bind("default", name, f"u-{name}", "gpu-p")
        rt.state.apply_pod(fake.get_pod("default", name))
    big = make_gpu_pod(PREEMPTOR, request(whole()), uid="u-big")
    big["spec"]["priority"] = 100
    fake.add_pod(big)
    rt.allocator.filter(fake.get_pod("default", PREEMPTOR), ["gpu-p"])
    assert rt.preempt is not None
    rt.preempt.worker.drain()  # the evictions (the worker's thread in a service)
    evicted = sorted(name for call, name in fake.calls if call == "create_eviction")
    assert len(evicted) == 2
    rt.state.remove_pod({"metadata": {"uid": f"u-{evicted[0]}"}})  # one victim gone so far

    with served(app) as url, headless_chromium() as driver:
        driver.get(url + "/")
        assert driver.execute_script("return window.pwned === undefined")
        rows = driver.find_elements(By.CSS_SELECTOR, "#preemptions tbody tr")
        assert len(rows) == 1
        cells = [td.text for td in rows[0].find_elements(By.TAG_NAME, "td")]
        assert cells[0] == f"default/{PREEMPTOR}"
        assert cells[1].startswith("gpu-p, card #")
        victims = [li.text for li in rows[0].find_elements(By.CSS_SELECTOR, "td li")]
        assert sorted(victims) == [f"default/{evicted[0]} (gone)", f"default/{evicted[1]}"]
        assert cells[3].startswith("in ") and cells[4] == "waiting for victims to go"
