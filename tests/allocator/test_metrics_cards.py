"""Per-card and per-pod metrics, labelled as DCGM exporter labels its own (gpu, modelName,
namespace, pod), read back through the Prometheus text format."""

from __future__ import annotations

from typing import Any

import pytest
from alloc_harness import make_app
from builders import make_gpu_pod, make_node, request, share, whole
from fake_kube import FakeKube
from prometheus_client.parser import text_string_to_metric_families

from allocator.service import node_series


def _samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {tuple(sorted(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples
            if s.name == name}


def _bind(client: object, name: str, uid: str, node: str) -> None:
    resp = client.post("/scheduler/bind", json={  # type: ignore[attr-defined]
        "PodName": name, "PodNamespace": "team", "PodUID": uid, "Node": node})
    assert resp.get_json() == {"Error": ""}


def test_each_card_and_each_pod_on_it_is_a_series_with_dcgm_labels() -> None:
    fake = FakeKube()
    fake.add_node(make_node("n1", cards_annotation=[
        {"index": 0, "model": "NVIDIA-A10", "memoryMiB": 24576},
        {"index": 1, "model": "NVIDIA-A10", "memoryMiB": 24576}]))
    fake.add_pod(make_gpu_pod("a", request(share("main", core=30, mem=4096),
                                       share("side", core=10, mem=1024)),
                          namespace="team", uid="u-a"))
    fake.add_pod(make_gpu_pod("b", request(whole(cards=1)), namespace="team", uid="u-b"))
    app, _rt = make_app(fake)
    client = app.test_client()
    _bind(client, "a", "u-a", "n1")
    _bind(client, "b", "u-b", "n1")
    text = client.get("/metrics").get_data(as_text=True)

    def card(gpu: str) -> tuple[tuple[str, str], ...]:
        return (("gpu", gpu), ("modelName", "NVIDIA-A10"), ("node", "n1"))

    def pod(name: str, gpu: str) -> tuple[tuple[str, str], ...]:
        return (("gpu", gpu), ("modelName", "NVIDIA-A10"), ("namespace", "team"),
                ("node", "n1"), ("pod", name))

    assert _samples(text, "tessera_allocator_gpu_memory_total_mib") == {
        card("0"): 24576, card("1"): 24576}
    core = _samples(text, "tessera_allocator_gpu_core_allocated_percent")
    memory = _samples(text, "tessera_allocator_gpu_memory_allocated_mib")
    # binpack: both of a's containers on one card, b's whole card the other.
    [shared] = [c for c, v in core.items() if v == 40]
    [full] = [c for c, v in core.items() if v == 100]
    assert memory[shared] == 5120 and memory[full] == 24576
    gpu_a, gpu_b = dict(shared)["gpu"], dict(full)["gpu"]
    assert _samples(text, "tessera_allocator_pod_gpu_core_percent") == {
        pod("a", gpu_a): 40, pod("b", gpu_b): 100}
    assert _samples(text, "tessera_allocator_pod_gpu_memory_mib") == {
        pod("a", gpu_a): 5120, pod("b", gpu_b): 24576}


def test_refused_pods_are_counted() -> None:
    fake = FakeKube()
    fake.add_node(make_node("n1", count=1, memory_mib=16000))
    app, _rt = make_app(fake)
    client = app.test_client()
    big = make_gpu_pod("big", request(whole(cards=2)), uid="u-big")
    client.post("/scheduler/filter", json={"Pod": big, "Nodes": None, "NodeNames": ["n1"]})
    text = client.get("/metrics").get_data(as_text=True)
    assert _samples(text, "tessera_allocator_refused_pods") == {(): 1.0}


def test_a_follower_exports_no_card_series_so_sums_over_both_replicas_stay_right() -> None:
    fake = FakeKube()
    fake.add_node(make_node("n1", count=2, memory_mib=16000))
    app, rt = make_app(fake)
    leading = [True]
    rt.is_leader = lambda: leading[0]  # type: ignore[method-assign]
    client = app.test_client()
    text = client.get("/metrics").get_data(as_text=True)
    assert len(_samples(text, "tessera_allocator_gpu_memory_total_mib")) == 2
    assert _samples(text, "tessera_allocator_leader") == {(): 1.0}
    leading[0] = False
    text = client.get("/metrics").get_data(as_text=True)
    assert _samples(text, "tessera_allocator_gpu_memory_total_mib") == {}
    assert _samples(text, "tessera_allocator_leader") == {(): 0.0}


def test_a_scrape_writes_again_only_the_nodes_whose_cards_changed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeKube()
    for name in ("n1", "n2"):
        fake.add_node(make_node(name, count=2, memory_mib=16000))
    fake.add_pod(make_gpu_pod("a", request(share("main", core=30, mem=4096)),
                              namespace="team", uid="u-a"))
    app, rt = make_app(fake)
    client = app.test_client()
    written: list[str] = []
    node_lines = node_series.node_lines

    def counting(name: str, *args: Any) -> tuple[str, ...]:
        written.append(name)
        return node_lines(name, *args)

    monkeypatch.setattr(node_series, "node_lines", counting)
    first = client.get("/metrics").get_data(as_text=True)
    assert sorted(written) == ["n1", "n2"]
    written.clear()
    assert client.get("/metrics").get_data(as_text=True) == first
    assert written == []

    _bind(client, "a", "u-a", "n2")
    text = client.get("/metrics").get_data(as_text=True)
    assert written == ["n2"]
    assert _samples(text, "tessera_allocator_node_gpu_core_percent") == {
        (("kind", "allocated"), ("node", "n1")): 0, (("kind", "total"), ("node", "n1")): 200,
        (("kind", "allocated"), ("node", "n2")): 30, (("kind", "total"), ("node", "n2")): 200}
    assert [dict(k)["pod"] for k in _samples(text, "tessera_allocator_pod_gpu_core_percent")
            ] == ["a"]

    written.clear()
    rt.state.remove_node("n1")
    text = client.get("/metrics").get_data(as_text=True)
    assert written == []
    assert {dict(k)["node"] for k in _samples(text, "tessera_allocator_gpu_memory_total_mib")
            } == {"n2"}


def test_label_values_a_node_reports_are_escaped_in_the_text_format() -> None:
    fake = FakeKube()
    odd = 'A10 "PCIe"\\x\ny'
    fake.add_node(make_node("n1", cards_annotation=[
        {"index": 0, "model": odd, "memoryMiB": 24576}]))
    app, _rt = make_app(fake)
    text = app.test_client().get("/metrics").get_data(as_text=True)
    assert _samples(text, "tessera_allocator_gpu_memory_total_mib") == {
        (("gpu", "0"), ("modelName", odd), ("node", "n1")): 24576}
