"""Many concurrent binds on a few nodes never over-commit a card; a restart rebuilds the same
picture from the pods' annotations alone; the documents operators read (/status, /metrics)
are built without holding the state's lock."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest
from alloc_harness import make_app, sync
from builders import VOCAB, make_gpu_pod, make_node, request, share, whole
from fake_kube import FakeKube

import allocator.picture.state as state_module
from allocator.picture.inventory import read_inventory
from allocator.picture.state import ClusterState
from allocator.ranking.fit import build_node_state
from allocator.service import node_series
from tessera.vocabulary import PodRequest, decode_allocation

SHAPES: list[PodRequest] = [
    request(share(core=30, mem=3000)),
    request(share(core=50, pct=25)),
    request(whole()),
    request(share("a", core=40), share("b", mem=6000)),
    request(whole("w"), share("s", core=20, mem=1000)),
]


def _cluster(pods: int) -> FakeKube:
    fake = FakeKube()
    for i in range(3):
        fake.add_node(make_node(f"n{i}", count=2, memory_mib=16000))
    for i in range(pods):
        fake.add_pod(make_gpu_pod(f"p{i}", SHAPES[i % len(SHAPES)], uid=f"u{i}"))
    return fake


def _recorded_node_states(fake: FakeKube) -> dict[str, Any]:
    """Every node rebuilt from the API objects alone; fails on any over-commit."""
    by_node: dict[str, list[tuple[str, Any]]] = {}
    for pod in fake.pods.values():
        text = (pod["metadata"].get("annotations") or {}).get(VOCAB.allocation_annotation)
        if text and pod["spec"].get("nodeName"):
            alloc = decode_allocation(text)
            by_node.setdefault(pod["spec"]["nodeName"], []).append(
                (pod["metadata"]["uid"], alloc.containers))
    out = {}
    for name, node in fake.nodes.items():
        cards = read_inventory(node, VOCAB).cards
        state, problems = build_node_state(name, cards, sorted(by_node.get(name, [])))
        assert problems == (), problems
        for card in state.cards:
            assert card.free_core >= 0 and card.free_memory_mib >= 0
            assert not (card.whole and len(card.holders) > 1)
        out[name] = state
    return out


@pytest.mark.parametrize("threads", [4, 16])
def test_concurrent_binds_through_http_never_over_commit_a_card(threads: int) -> None:
    pods = 60
    fake = _cluster(pods)
    app, rt = make_app(fake)
    replies: dict[str, dict[str, Any]] = {}
    lock = threading.Lock()
    barrier = threading.Barrier(threads)

    def worker(k: int) -> None:
        client = app.test_client()
        barrier.wait()
        for i in range(k, pods, threads):
            node = f"n{i % 3}"
            body = {"PodName": f"p{i}", "PodNamespace": "default", "PodUID": f"u{i}",
                    "Node": node}
            resp = client.post("/scheduler/bind", json=body)
            assert resp.status_code == 200
            with lock:
                replies[f"p{i}"] = resp.get_json()

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()

    assert len(replies) == pods  # every reply accounted for
    ok = {p for p, r in replies.items() if r["Error"] == ""}
    refused = {p: r["Error"] for p, r in replies.items() if r["Error"]}
    bound = {m["name"] for (_ns, _n), pod in fake.pods.items()
             for m in [pod["metadata"]] if pod["spec"].get("nodeName")}
    assert ok == bound
    assert ok and refused  # the cluster is too small for all of them
    assert all("node n" in e for e in refused.values()), refused
    # every refused pod left nothing behind
    for p in refused:
        annotations = fake.pods[("default", p)]["metadata"]["annotations"]
        assert VOCAB.allocation_annotation not in annotations
    rebuilt = _recorded_node_states(fake)
    for name, state in rebuilt.items():
        view = rt.state.view(name)
        assert view is not None and view.state == state


def test_state_rebuilt_from_annotations_alone_equals_the_state_before_restart() -> None:
    fake = _cluster(30)
    _app, rt = make_app(fake)
    outcomes: Counter[str] = Counter()
    for i in range(30):
        try:
            rt.allocator.bind("default", f"p{i}", f"u{i}", f"n{i % 3}")
            outcomes["bound"] += 1
        except Exception:
            outcomes["refused"] += 1
    assert outcomes["bound"] > 0
    # one pod finished, one was deleted: both release their cards
    done = next(p for p in fake.pods.values() if p["spec"].get("nodeName"))
    fake.set_phase("default", done["metadata"]["name"], "Succeeded")
    gone = next(p for p in fake.pods.values()
                if p["spec"].get("nodeName") and p["status"]["phase"] != "Succeeded")
    fake.delete_pod("default", gone["metadata"]["name"])
    rt.state.replace_pods(fake.list_pods(VOCAB.gpu_pod_selector)[0])

    restarted = ClusterState(VOCAB)
    sync(restarted, fake)
    assert restarted.comparable() == rt.state.comparable()
    assert done["metadata"]["uid"] not in restarted.comparable()["pods"]


def test_a_pod_seen_before_its_node_is_counted_when_the_node_arrives() -> None:
    fake = FakeKube()
    fake.add_node(make_node("n1", count=1))
    fake.add_pod(make_gpu_pod("p", request(whole()), uid="u"))
    _app, rt = make_app(fake)
    rt.allocator.bind("default", "p", "u", "n1")
    state = ClusterState(VOCAB)
    state.replace_pods(fake.list_pods(VOCAB.gpu_pod_selector)[0])
    state.replace_nodes(fake.list_nodes()[0])
    view = state.view("n1")
    assert view is not None and view.state.idle_cards == 0


def test_status_and_metrics_documents_are_built_without_holding_the_state_lock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A large cluster's document takes a while to build; binds and watches must not wait for
    # it. While each holder entry and each node's series are written, another thread must
    # be able to take the state's lock at once.
    fake = FakeKube()
    fake.add_node(make_node("n1", count=2, memory_mib=16000))
    fake.add_pod(make_gpu_pod("a", request(share(core=30, mem=4096)), uid="u-a"))
    app, rt = make_app(fake)
    client = app.test_client()
    client.post("/scheduler/bind", json={"PodName": "a", "PodNamespace": "default",
                                         "PodUID": "u-a", "Node": "n1"})
    free: list[bool] = []

    def lock_is_free() -> None:
        def take() -> None:
            got = rt.state._lock.acquire(timeout=1.0)
            free.append(got)
            if got:
                rt.state._lock.release()

        t = threading.Thread(target=take)
        t.start()
        t.join()

    holder, node_lines = state_module._holder, node_series.node_lines

    def checked_holder(*args: Any) -> dict[str, str]:
        lock_is_free()
        return holder(*args)

    def checked_lines(*args: Any) -> tuple[str, ...]:
        lock_is_free()
        return node_lines(*args)

    monkeypatch.setattr(state_module, "_holder", checked_holder)
    monkeypatch.setattr(node_series, "node_lines", checked_lines)
    status = client.get("/status").get_json()
    assert [p["name"] for p in status["nodes"][0]["cards"][0]["pods"]] == ["a"]
    assert "tessera_allocator_pod_gpu_core_percent" in client.get("/metrics").get_data(
        as_text=True)
    assert free == [True, True]
