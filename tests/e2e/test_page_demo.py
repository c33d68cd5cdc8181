"""The allocator's page on the real control plane, in headless Chromium: the demo's nodes and
pods (the demo's own), every card drawn with the pods the API server says hold it,
and the pod no node can take listed with the allocator's reasons.

The allocator demands a client certificate (mutual TLS), which a headless browser cannot
present: a loopback relay holding the admin's certificate passes the allocator's reply
through unchanged, headers (its Content-Security-Policy) included.

``TESSERA_PAGE_SCREENSHOT=docs/page.png`` also writes the screenshot there (the README's).
"""

from __future__ import annotations

import copy
import os
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By

from devcluster.binaries import repo_root
from devcluster.browser import colour_pixels, full_page_png, headless_chromium, relay
from devcluster.cluster import DevCluster
from devcluster.demo import NAMESPACE, demo_nodes, extra_pods
from devcluster.workloads import (
    delete_pods,
    ensure_namespace,
    list_objects,
    load_manifests,
    wait_settled,
)
from kubectl_tessera.report import card_usage

pytestmark = pytest.mark.e2e

CORE_BLUE = (0x2F, 0x7E, 0xD8)
MEMORY_PURPLE = (0x8E, 0x5B, 0xD6)


def allocator_context(cluster: DevCluster) -> ssl.SSLContext:
    pki = cluster.control_plane.pki_dir
    context = ssl.create_default_context(cafile=str(cluster.control_plane.ca_file))
    context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    return context


@pytest.fixture
def demo_namespace(core_v1: Any) -> Iterator[str]:
    """The demo's own namespace (the screenshot reads as the demo's), deleted afterwards with
    its pods, as the per-test namespaces are."""
    ensure_namespace(core_v1, NAMESPACE)
    yield NAMESPACE
    core_v1.delete_namespace(NAMESPACE)
    pods = list_objects(core_v1.list_namespaced_pod, NAMESPACE)
    delete_pods(core_v1, NAMESPACE, [p["metadata"]["name"] for p in pods])


def test_the_page_shows_the_demo_s_cards_who_holds_them_and_who_waits(
    cluster: DevCluster, core_v1: Any, demo_namespace: str, pool: Any, tmp_path: Path
) -> None:
    namespace = demo_namespace
    selector = pool(demo_nodes())
    pods = extra_pods() + load_manifests(repo_root() / "examples" / "pods")
    for pod in pods:
        pod = copy.deepcopy(pod)
        pod["spec"]["nodeSelector"] = {**pod["spec"].get("nodeSelector", {}), **selector}
        core_v1.create_namespaced_pod(namespace, pod)
    names = [p["metadata"]["name"] for p in pods]
    bound, pending = wait_settled(core_v1, namespace, names, timeout=120)
    assert set(pending) == {"genius-five-cards"}  # five cards: no demo node has them
    # Who holds which card, as the API server has it (never the allocator's own view).
    usage = card_usage(list_objects(core_v1.list_node),
                       list_objects(core_v1.list_namespaced_pod, namespace), cluster.vocabulary)
    expected = {(node.name, u.card.index): sorted(h.pod for h in u.holdings)
                for node in demo_nodes() for u in usage[node.name]}
    assert sum(len(v) for v in expected.values()) >= len(bound)

    url = f"https://127.0.0.1:{cluster.services.allocator_port}"
    with relay(url, allocator_context(cluster)) as local, headless_chromium() as driver:
        driver.get(local + "/")
        assert driver.title == "Tessera allocator"
        drawn: dict[tuple[str, int], list[str]] = {}
        models: dict[tuple[str, int], str] = {}
        for spec in demo_nodes():
            article = driver.find_element(By.CSS_SELECTOR, f'[data-node="{spec.name}"]')
            for card in article.find_elements(By.CSS_SELECTOR, ".card"):
                index = int(card.get_attribute("data-card"))
                models[(spec.name, index)] = card.find_element(By.CSS_SELECTOR, ".title").text
                drawn[(spec.name, index)] = sorted(
                    li.text.split(" (")[0]
                    for li in card.find_elements(By.CSS_SELECTOR, ".holders li"))
        waiting = {row.get_attribute("data-pod"): row.text for row in
                   driver.find_elements(By.CSS_SELECTOR, "#pending tbody tr")}
        png = full_page_png(driver)
    (tmp_path / "page.png").write_bytes(png)
    if os.environ.get("TESSERA_PAGE_SCREENSHOT"):
        Path(os.environ["TESSERA_PAGE_SCREENSHOT"]).write_bytes(png)

    # Every card of every demo node, with its model, and each pod on it once per container.
    assert {k: sorted(set(v)) for k, v in drawn.items()} == expected
    for spec in demo_nodes():
        for index, card in enumerate(spec.cards):
            assert models[(spec.name, index)] == f"#{index} {card.model}"
    refusal = waiting[f"{namespace}/genius-five-cards"]
    assert "3 nodes offered" in refusal
    for cards in (2, 3, 4):
        assert f"1: needs 5 whole cards (node has {cards})" in refusal
    # The bars are drawn: the held cards' compute and memory colours fill real pixels.
    assert colour_pixels(png, CORE_BLUE) > 2000
    assert colour_pixels(png, MEMORY_PURPLE) > 2000
