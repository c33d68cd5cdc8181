"""The allocator's page as HTML (the browser's view is tests/page): what it draws, what it
escapes, what it bounds, and the headers it is served with."""

from __future__ import annotations

import re
from typing import Any

import pytest
from alloc_harness import NOW, make_app
from builders import make_gpu_pod, make_node, request, share, whole
from fake_kube import FakeKube
from markupsafe import escape

from allocator.decisions import PodRef
from allocator.service import page
from allocator.service.pending import RecentRefusals

HOSTILE = '<script>window.pwned=1</script>"\'&'


def _status(**node: object) -> dict[str, object]:
    card = {"index": 0, "model": "T4", "memoryMiB": 16000, "coreUsedPercent": 25,
            "memoryUsedMiB": 4000, "whole": False,
            "pods": [{"uid": "u", "namespace": "ns", "name": "p", "container": "main",
                      "stage": "bound"}]}
    return {"synced": True, "leader": True, "identity": "allocator-0", "defaultPolicy": "binpack",
            "pods": 1, "nodes": [{"name": "n1", "source": "cards annotation", "problem": None,
                                  "cards": [card], **node}]}


def test_each_card_is_a_bar_of_compute_and_of_memory_with_its_holders() -> None:
    html = page.render(_status(), [], NOW)
    assert 'data-node="n1"' in html and 'data-card="0"' in html
    assert 'class="bar core" title="compute"><span style="width: 25%">' in html
    assert 'class="bar mem" title="memory"><span style="width: 25%">' in html
    assert "<li>ns/p (main)</li>" in html
    assert "memory 4000 / 16000 MiB" in html


@pytest.mark.parametrize(("stage", "shown"), [("bound", "main"), ("confirmed", "main"),
                                              ("inflight", "main, binding"),
                                              ("held", "main, held for its bind")])
def test_a_holder_s_stage_is_said_when_it_is_not_bound_yet(stage: str, shown: str) -> None:
    status = _status()
    status["nodes"][0]["cards"][0]["pods"][0]["stage"] = stage  # type: ignore[index]
    assert f"<li>ns/p ({shown})</li>" in page.render(status, [], NOW)


@pytest.mark.parametrize("where", ["name", "source", "problem", "model", "holder", "reason",
                                   "identity"])
def test_every_name_from_the_cluster_is_escaped(where: str) -> None:
    status = _status()
    node = status["nodes"][0]  # type: ignore[index]
    card = node["cards"][0]
    refusals = RecentRefusals(lambda: NOW)
    if where in ("name", "source", "problem"):
        node[where] = HOSTILE
    elif where == "model":
        card["model"] = HOSTILE
    elif where == "holder":
        card["pods"][0]["name"] = HOSTILE
    elif where == "identity":
        status["identity"] = HOSTILE
    else:
        refusals.refused(PodRef("ns", HOSTILE, "u"), {"n1": HOSTILE})
    html = page.render(status, refusals.recent(), NOW)
    assert "<script>" not in html
    assert "&lt;script&gt;window.pwned=1&lt;/script&gt;" in html


def test_a_node_s_problems_are_shown_with_it() -> None:
    html = page.render(_status(problem="annotation ignored: must be a JSON list",
                               overCommitted=["card 0: 120 percent core"]), [], NOW)
    assert '<p class="problem">annotation ignored: must be a JSON list</p>' in html
    assert '<p class="problem">over-committed: card 0: 120 percent core</p>' in html


def test_bars_stay_within_0_and_100_percent_whatever_the_numbers() -> None:
    card = {"index": 0, "model": "T4", "memoryMiB": 0, "coreUsedPercent": 250,
            "memoryUsedMiB": -5, "whole": True, "pods": []}
    html = page.render(_status(cards=[card]), [], NOW)
    widths = [int(w) for w in re.findall(r'style="width: (-?\d+)%"', html)]
    assert widths == [100, 0]


def test_a_huge_cluster_draws_a_bounded_page_and_says_so() -> None:
    nodes = [{"name": f"n{i:05d}", "cards": []} for i in range(page.MAX_NODES + 50)]
    html = page.render({**_status(), "nodes": nodes}, [], NOW)
    assert html.count('class="node"') == page.MAX_NODES
    assert "and 50 more nodes: see /status" in html


def test_refused_pods_are_listed_with_their_reasons_most_frequent_first() -> None:
    clock = [NOW]
    refusals = RecentRefusals(lambda: clock[0])
    refusals.refused(PodRef("ns", "big", "u1"), {"a": "full", "b": "full", "c": "model"})
    clock[0] += 90
    refusals.refused(PodRef("ns", "big", "u1"), {"a": "full", "b": "full", "c": "model"})
    html = page.render(_status(), refusals.recent(), clock[0])
    row = html[html.index('data-pod="ns/big"'):]
    assert "2&times;, last 0 s ago" in row and "first 90 s ago, 3 nodes offered" in row
    assert row.index("<li>2: full</li>") < row.index("<li>1: model</li>")


def test_recent_refusals_are_forgotten_when_the_pod_fits_is_bound_or_goes_stale() -> None:
    clock = [NOW]
    refusals = RecentRefusals(lambda: clock[0], limit=3, ttl_seconds=600)
    pods = [PodRef("ns", f"p{i}", f"u{i}") for i in range(5)]
    for pod in pods:
        refusals.refused(pod, {"n": "full"})
    assert [r.pod for r in refusals.recent()] == pods[:1:-1]  # bounded: the 3 latest
    refusals.fits(pods[4])
    refusals.allocated(pods[3], "n", (0,), "binpack")
    assert [r.pod for r in refusals.recent()] == [pods[2]]
    clock[0] += 601
    assert refusals.recent() == []


def test_the_route_serves_html_that_may_run_no_script_and_fetch_nothing() -> None:
    fake = FakeKube()
    fake.add_node(make_node("n1", count=2, memory_mib=16000))
    fake.add_pod(make_gpu_pod("p", request(whole(cards=1)), uid="u-1"))
    app, _rt = make_app(fake)
    client = app.test_client()
    client.post("/scheduler/bind", json={"PodName": "p", "PodNamespace": "default",
                                         "PodUID": "u-1", "Node": "n1"})
    big = make_gpu_pod("big", request(share(core=30, mem=99_000)), uid="u-2")
    client.post("/scheduler/filter", json={"Pod": big, "Nodes": None, "NodeNames": ["n1"]})
    resp = client.get("/")
    assert resp.status_code == 200 and resp.mimetype == "text/html"
    csp = resp.headers["Content-Security-Policy"]
    assert "default-src 'none'" in csp and "script-src" not in csp
    html = resp.get_data(as_text=True)
    assert (f'<meta http-equiv="Content-Security-Policy" content="{escape(page.META_POLICY)}">'
            in html)
    assert "<li>default/p (main)</li>" in html
    assert 'data-pod="default/big"' in html
    assert not re.search(r"<script|src=|href=|@import|url\(", html)
    status = client.get("/status").get_json()
    [refused] = status["refused"]
    assert (refused["name"], refused["uid"], refused["nodes"]) == ("big", "u-2", 1)


def test_the_route_builds_only_the_nodes_it_draws_and_counts_them_all() -> None:
    fake = FakeKube()
    extra = 5
    for i in range(page.MAX_NODES + extra):
        fake.add_node(make_node(f"n{i:05d}", count=1, memory_mib=16000))
    app, rt = make_app(fake)
    client = app.test_client()
    asked: list[int | None] = []
    snapshot = rt.state.snapshot

    def recorded(max_nodes: int | None = None) -> dict[str, Any]:
        asked.append(max_nodes)
        return snapshot(max_nodes)

    rt.state.snapshot = recorded  # type: ignore[method-assign]
    html = client.get("/").get_data(as_text=True)
    assert asked == [page.MAX_NODES]
    assert f"{page.MAX_NODES + extra} nodes, {page.MAX_NODES} cards drawn" in html
    assert f"and {extra} more nodes: see /status" in html
    assert html.count('class="node"') == page.MAX_NODES
    # The page's document stops at the nodes it draws, the first by name; /status has all.
    drawn = rt.state.snapshot(page.MAX_NODES)
    assert drawn["nodeCount"] == page.MAX_NODES + extra
    assert [n["name"] for n in drawn["nodes"]] == [f"n{i:05d}" for i in range(page.MAX_NODES)]
    status = client.get("/status").get_json()
    assert status["nodeCount"] == len(status["nodes"]) == page.MAX_NODES + extra
