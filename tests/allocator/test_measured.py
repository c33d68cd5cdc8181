"""Measured GPU figures (allocator/picture/measured.py, allocator/service/measured_source.py):
Prometheus's reply read into per-card figures, foreign memory taken off free memory, the ``usage``
policy, and the poller's fall back to bookings when Prometheus is gone."""

from __future__ import annotations

import json
from typing import Any

import pytest
from alloc_harness import NOW, make_app, synced_allocator
from builders import VOCAB, make_gpu_pod, make_node, request, share, whole
from fake_kube import FakeKube

from allocator.picture import measured
from allocator.picture.measured import (
    MeasuredCard,
    MeasuredConfig,
    MeasureError,
    Sample,
    apply_overlay,
    booked_before,
    overlay,
    parse_sample,
)
from allocator.picture.state import ClusterState
from allocator.ranking.cards import Card
from allocator.ranking.content_memo import content_key
from allocator.ranking.fit import unfit_reason
from allocator.service.config import Settings
from allocator.service.measured_source import MeasuredSource
from tessera.vocabulary import Allocation, ConfigError, ContainerAllocation

GIB = 1024
CONFIG = MeasuredConfig(url="http://127.0.0.1:9090")


def series(host: str, gpu: int, name: str, value: float | str, at: float = NOW,
           **labels: str) -> dict[str, Any]:
    """One series of dcgm-exporter's as Prometheus returns it (labels: render_metrics.go)."""
    metric = {"__name__": name, "gpu": str(gpu), "UUID": f"GPU-{host}-{gpu}",
              "pci_bus_id": f"00000000:0{gpu}:00.0", "device": f"nvidia{gpu}",
              "modelName": "NVIDIA A100-SXM4-80GB", "Hostname": host,
              "instance": "10.0.0.1:9400", "job": "dcgm-exporter", **labels}
    return {"metric": metric, "value": [at, str(value)]}


def reply(*items: dict[str, Any]) -> bytes:
    return json.dumps({"status": "success",
                       "data": {"resultType": "vector", "result": list(items)}}).encode()


def card_figures(node: str, gpu: int, used_mib: int, util: int,
                 total_mib: int = 80 * GIB) -> list[dict[str, Any]]:
    return [series(node, gpu, measured.FB_USED, used_mib),
            series(node, gpu, measured.FB_FREE, total_mib - used_mib),
            series(node, gpu, measured.GPU_UTIL, util)]


# ----------------------------------------------------------------------------- parsing


def test_a_dcgm_reply_becomes_each_nodes_cards_figures() -> None:
    sample = parse_sample(reply(*card_figures("n1", 0, 70 * GIB, 35),
                                *card_figures("n1", 3, 1000, 90),
                                *card_figures("n2", 0, 0, 0)))
    assert sample.at == NOW
    assert sorted(sample.nodes) == ["n1", "n2"]
    assert sample.nodes["n1"][0] == MeasuredCard(0, 70 * GIB, 10 * GIB, 35,
                                                 "GPU-n1-0", "NVIDIA A100-SXM4-80GB")
    assert sample.nodes["n1"][3].busy_percent == 90
    assert sample.cards == 3 and not sample.skipped


@pytest.mark.parametrize(("item", "why"), [
    (series("n1", 0, measured.FB_USED, 5, GPU_I_ID="1", GPU_I_PROFILE="1g.10gb"),
     "a MIG instance"),
    (series("", 0, measured.FB_USED, 5), "no Hostname label"),
    ({"metric": {"__name__": measured.FB_USED, "gpu": "0"}, "value": [NOW, "1"]},
     "no Hostname label"),
    (series("n1", 0, measured.FB_USED, 5) | {"metric": {"__name__": measured.FB_USED,
                                                        "gpu": "x", "Hostname": "n1"}},
     "no card index in gpu"),
    (series("n1", 99999, measured.FB_USED, 5), "no card index in gpu"),
    (series("n1", 0, measured.FB_USED, "NaN"), "out of range"),
    (series("n1", 0, measured.FB_USED, "-1"), "out of range"),
    (series("n1", 0, measured.FB_USED, "+Inf"), "out of range"),
    (series("n1", 0, measured.FB_USED, "lots"), "not a number"),
    (series("n1", 0, "DCGM_FI_DEV_SM_CLOCK", 1400), "another metric"),
    ({"metric": {}, "value": "1"}, "not a sample"),
    ("a string", "not an object"),
])
def test_a_series_that_cannot_be_read_is_skipped_and_counted(item: Any, why: str) -> None:
    sample = parse_sample(reply(item, *card_figures("n2", 1, 2 * GIB, 5)))
    assert sample.skipped == {why: 1}
    assert list(sample.nodes) == ["n2"]  # the rest is read


@pytest.mark.parametrize("body", [
    b"not json", b"[]", b'{"status": "error", "errorType": "bad_data", "error": "parse error"}',
    b'{"status": "success", "data": {"resultType": "matrix", "result": []}}',
    b'{"status": "success", "data": {"resultType": "vector", "result": {}}}',
    b"[" * 100_000,
])
def test_a_reply_that_is_not_a_successful_vector_is_an_error(body: bytes) -> None:
    with pytest.raises(MeasureError):
        parse_sample(body)


def test_a_reply_with_too_many_series_is_refused_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(measured, "MAX_SERIES", 2)
    with pytest.raises(MeasureError, match="more than 2"):
        parse_sample(reply(*card_figures("n1", 0, 1, 1)))


def test_another_node_label_can_name_the_node() -> None:
    item = series("pod-dcgm-abc", 0, measured.FB_USED, 3 * GIB, node="gpu-node-7")
    assert list(parse_sample(reply(item), node_label="node").nodes) == ["gpu-node-7"]


def test_the_query_asks_for_the_three_figures_with_the_configured_matchers() -> None:
    config = MeasuredConfig(url="http://p:9090", selector='job="dcgm-exporter"')
    assert config.query() == ('{__name__=~"DCGM_FI_DEV_FB_USED|DCGM_FI_DEV_FB_FREE|'
                              'DCGM_FI_DEV_GPU_UTIL",job="dcgm-exporter"}')


# ----------------------------------------------------------------------------- the picture

A100 = (Card(0, "A100", 80 * GIB), Card(1, "A100", 80 * GIB))


def test_memory_used_by_others_is_not_free_and_why_says_so() -> None:
    """The issue's case: 70 of 80 GB measured in use by others takes no 20 GB share."""
    reading = {0: MeasuredCard(0, used_mib=70 * GIB, busy_percent=40)}
    figures = overlay(A100[:1], {}, reading, CONFIG)
    assert figures == ((70 * GIB, 50),)
    from allocator.ranking.cards import empty_node
    node = apply_overlay(empty_node("n1", A100[:1]), figures)
    assert node.cards[0].free_memory_mib == 10 * GIB
    assert not node.cards[0].idle
    unfit = unfit_reason(request(share(core=20, mem=20 * GIB)), node)
    assert unfit is not None and unfit.resolvable
    assert "gpu 0: 70 GiB used by processes Tessera did not place" in unfit.reason
    whole_unfit = unfit_reason(request(whole()), node)
    assert whole_unfit is not None and "gpu 0: 70 GiB used" in whole_unfit.reason
    assert unfit_reason(request(share(core=20, mem=8 * GIB)), node) is None


def test_what_tessera_booked_and_the_sample_shows_is_not_foreign() -> None:
    reading = {0: MeasuredCard(0, used_mib=30 * GIB), 1: MeasuredCard(1, used_mib=0)}
    assert overlay(A100, {0: 30 * GIB}, reading, CONFIG) == ()  # all of it is ours
    assert overlay(A100, {0: 20 * GIB}, reading, CONFIG) == ((10 * GIB, 0), (0, 0))


def test_bookings_after_the_sample_are_counted_on_top_of_it() -> None:
    old = ContainerAllocation("a", (0,), core_percent=10, memory_mib=8 * GIB)
    new = ContainerAllocation("b", (0,), core_percent=10, memory_mib=16 * GIB)
    held = ContainerAllocation("c", (1,), core_percent=10, memory_mib=4 * GIB)
    seen = booked_before([(NOW - 600, (old,)), (NOW - 5, (new,)), (0.0, (held,)),
                          (NOW - 700, (ContainerAllocation("w", (1,)),))],
                         A100, before=NOW - 120)
    assert seen == {0: 8 * GIB, 1: 80 * GIB}


def test_noise_is_ignored_and_foreign_memory_is_stepped_up() -> None:
    reading = {0: MeasuredCard(0, used_mib=300), 1: MeasuredCard(1, used_mib=GIB + 1)}
    assert overlay(A100, {}, reading, CONFIG) == ((0, 0), (2 * GIB, 0))


def test_busy_percent_is_stepped_to_quarters_and_capped() -> None:
    reading = {0: MeasuredCard(0, busy_percent=94), 1: MeasuredCard(1, busy_percent=12)}
    assert overlay(A100, {}, reading, CONFIG) == ((0, 100), (0, 0))
    reading = {0: MeasuredCard(0, busy_percent=13), 1: MeasuredCard(1, busy_percent=100)}
    assert overlay(A100, {}, reading, CONFIG) == ((0, 25), (0, 100))


def test_foreign_memory_never_makes_free_memory_negative() -> None:
    from allocator.ranking.cards import build_node_state
    booked, _ = build_node_state("n", A100, [("u", (ContainerAllocation(
        "a", (0,), core_percent=50, memory_mib=60 * GIB),))])
    after = apply_overlay(booked, ((40 * GIB, 0), (0, 0)))
    assert after.cards[0].free_memory_mib == 0


def test_an_overlay_for_other_cards_changes_nothing() -> None:
    from allocator.ranking.cards import empty_node
    node = empty_node("n", A100)
    assert apply_overlay(node, ((GIB, 0),)) is node


# ----------------------------------------------------------------------------- the state


def _state(*names: str) -> ClusterState:
    state = ClusterState(VOCAB)
    for name in names:
        state.apply_node(make_node(name, count=2, memory_mib=80 * GIB))
    return state


def test_alike_nodes_part_when_one_is_measured_busy_and_meet_again_without_metrics() -> None:
    state = _state("n1", "n2")
    views = state.views(["n1", "n2"])
    assert views[0] is not None and views[1] is not None
    assert content_key(views[0].state) == content_key(views[1].state)
    sample = Sample(NOW, {"n1": {0: MeasuredCard(0, used_mib=70 * GIB)}})
    assert state.apply_sample(sample, CONFIG) == 1
    assert state.apply_sample(sample, CONFIG) == 0  # the same figures: nothing recomputed
    n1, n2 = state.views(["n1", "n2"])
    assert n1 is not None and n2 is not None and content_key(n1.state) != content_key(n2.state)
    assert n1.state.cards[0].foreign_memory_mib == 70 * GIB
    card = state.snapshot()["nodes"][0]["cards"][0]
    assert card["foreignMemoryMiB"] == 70 * GIB and card["memoryUsedMiB"] == 0
    assert state.apply_sample(None, CONFIG) == 1
    n1, n2 = state.views(["n1", "n2"])
    assert n1 is not None and n2 is not None and content_key(n1.state) == content_key(n2.state)


def test_filter_skips_the_node_whose_card_others_fill_and_says_why() -> None:
    fake = FakeKube()
    fake.add_node(make_node("busy", count=1, memory_mib=80 * GIB))
    fake.add_node(make_node("free", count=1, memory_mib=80 * GIB))
    alloc = synced_allocator(fake, filter_best=False)
    alloc.state.apply_sample(Sample(NOW, {"busy": {0: MeasuredCard(0, used_mib=70 * GIB)}}),
                             CONFIG)
    pod = make_gpu_pod("p", request(share(core=20, mem=20 * GIB)))
    out = alloc.filter(pod, ["busy", "free"])
    assert out.nodes == ["free"]
    assert "70 GiB used by processes Tessera did not place" in out.failed["busy"]


def test_a_pod_booked_after_the_sample_stays_booked_until_the_next() -> None:
    """A bind between two samples: its memory is not measured yet, and counts in full."""
    fake = FakeKube()
    fake.add_node(make_node("n1", count=1, memory_mib=80 * GIB))
    alloc = synced_allocator(fake)
    alloc.state.apply_sample(Sample(NOW, {"n1": {0: MeasuredCard(0, used_mib=40 * GIB)}}),
                             CONFIG)
    pod = make_gpu_pod("p", request(share(core=20, mem=30 * GIB)), uid="u1")
    bound = make_gpu_pod("p", request(share(core=20, mem=30 * GIB)), uid="u1", node="n1",
                         allocation=Allocation("n1", (ContainerAllocation(
                             "main", (0,), core_percent=20, memory_mib=30 * GIB),),
                             NOW + 1, "u1"))
    alloc.state.apply_pod(bound)
    view = alloc.state.view("n1")
    assert view is not None and view.state.cards[0].free_memory_mib == 10 * GIB
    assert not alloc.filter(make_gpu_pod("q", request(share(core=20, mem=20 * GIB)),
                                         uid="u2"), ["n1"]).nodes
    assert pod  # the same pod, seen by the next sample with its 30 GiB in use:
    later = Sample(NOW + 300, {"n1": {0: MeasuredCard(0, used_mib=70 * GIB)}})
    alloc.state.apply_sample(later, CONFIG)
    view = alloc.state.view("n1")
    assert view is not None and view.state.cards[0].foreign_memory_mib == 40 * GIB
    assert view.state.cards[0].free_memory_mib == 10 * GIB


# ----------------------------------------------------------------------------- usage policy


def test_usage_sends_the_pod_to_the_idle_node_of_two_equal_ones() -> None:
    fake = FakeKube()
    fake.add_node(make_node("hot", count=1, memory_mib=80 * GIB))
    fake.add_node(make_node("idle", count=1, memory_mib=80 * GIB))
    alloc = synced_allocator(fake, default_policy="usage")
    alloc.state.apply_sample(Sample(NOW, {"hot": {0: MeasuredCard(0, 0, busy_percent=90)},
                                          "idle": {0: MeasuredCard(0, 0, busy_percent=0)}}),
                             CONFIG)
    pod = make_gpu_pod("p", request(share(core=20, mem=4 * GIB)), uid="u")
    assert alloc.filter(pod, ["hot", "idle"]).nodes == ["idle"]
    scores = dict(alloc.prioritize(pod, ["hot", "idle"]))
    assert scores["idle"] > scores["hot"]


def test_usage_prefers_the_card_with_more_measured_free_memory() -> None:
    fake = FakeKube()
    fake.add_node(make_node("n1", count=2, memory_mib=80 * GIB))
    alloc = synced_allocator(fake, default_policy="usage")
    alloc.state.apply_sample(Sample(NOW, {"n1": {0: MeasuredCard(0, 50 * GIB, busy_percent=10),
                                                 1: MeasuredCard(1, 2 * GIB, busy_percent=10)}}),
                             CONFIG)
    fake.add_pod(make_gpu_pod("p", request(share(core=20, mem=4 * GIB)), uid="u"))
    assert alloc.bind("default", "p", "u", "n1").cards == (1,)


def test_usage_without_metrics_spreads_on_bookings() -> None:
    from allocator.ranking.policies import get_policy
    from allocator.ranking.policies.usage import Usage
    assert isinstance(get_policy("usage"), Usage)
    fake = FakeKube()
    fake.add_node(make_node("n1", count=1, memory_mib=80 * GIB))
    fake.add_node(make_node("n2", count=1, memory_mib=80 * GIB))
    fake.add_pod(make_gpu_pod("x", request(share(core=50, mem=40 * GIB)), uid="x", node="n1",
                              allocation=Allocation("n1", (ContainerAllocation(
                                  "main", (0,), core_percent=50, memory_mib=40 * GIB),),
                                  NOW - 900, "x")))
    alloc = synced_allocator(fake, default_policy="usage")
    pod = make_gpu_pod("p", request(share(core=20, mem=4 * GIB)), uid="u")
    assert alloc.filter(pod, ["n1", "n2"]).nodes == ["n2"]


# ----------------------------------------------------------------------------- the poller


class Prometheus:
    """Answers the poller like Prometheus, or fails like a stopped one."""

    def __init__(self) -> None:
        self.body = reply()
        self.down = False
        self.urls: list[str] = []

    def __call__(self, url: str, timeout: float) -> bytes:
        self.urls.append(url)
        if self.down:
            raise ConnectionRefusedError(111, "Connection refused")
        return self.body


def test_the_poller_applies_figures_then_falls_back_to_bookings_when_prometheus_stops(
) -> None:
    clock = [NOW]
    state = _state("n1")
    prometheus = Prometheus()
    prometheus.body = reply(*card_figures("n1", 0, 70 * GIB, 50))
    config = MeasuredConfig(url="http://127.0.0.1:9/", stale_seconds=60)
    source = MeasuredSource(config, state, fetch=prometheus, clock=lambda: clock[0])
    assert source.status()["note"].startswith("measured GPU figures from http://127.0.0.1:9/ "
                                              "not read yet")
    assert source.poll_once()
    assert prometheus.urls[0].startswith("http://127.0.0.1:9/api/v1/query?query=")
    assert source.fresh and source.status()["note"] == ""
    assert source.status()["cards"] == 1
    view = state.view("n1")
    assert view is not None and view.state.cards[0].foreign_memory_mib == 70 * GIB
    prometheus.down = True
    clock[0] += 30
    assert not source.poll_once()  # within stale_seconds: the figures stay
    view = state.view("n1")
    assert view is not None and view.state.cards[0].foreign_memory_mib == 70 * GIB
    clock[0] += 60
    assert not source.poll_once()
    view = state.view("n1")
    assert view is not None and view.state.cards[0].foreign_memory_mib == 0
    status = source.status()
    assert not status["fresh"] and "Connection refused" in status["lastError"]
    assert "stale" in status["note"] and "placing by bookings alone" in status["note"]
    assert source.queries == {"ok": 1, "failed": 2}
    prometheus.down = False
    assert source.poll_once() and source.fresh


def test_the_status_page_and_metrics_say_when_the_figures_are_stale() -> None:
    fake = FakeKube()
    fake.add_node(make_node("n1", count=1, memory_mib=80 * GIB))
    app, runtime = make_app(fake, measured=MeasuredConfig(url="http://127.0.0.1:9"))
    assert runtime.measured is not None
    prometheus = Prometheus()
    prometheus.down = True
    runtime.measured._fetch = prometheus
    runtime.measured.poll_once()
    client = app.test_client()
    doc = client.get("/status").get_json()
    assert doc["measured"]["fresh"] is False
    assert "placing by bookings alone" in doc["measured"]["note"]
    assert "placing by bookings alone" in client.get("/").get_data(as_text=True)
    text = client.get("/metrics").get_data(as_text=True)
    assert "tessera_allocator_measured_fresh 0.0" in text
    assert 'tessera_allocator_measured_queries_total{outcome="failed"} 1.0' in text
    pod = make_gpu_pod("p", request(share(core=20, mem=4 * GIB)), uid="u")
    fake.add_pod(pod)
    reply_doc = client.post("/scheduler/filter", json={"Pod": pod, "NodeNames": ["n1"]})
    assert reply_doc.status_code == 200 and reply_doc.get_json()["NodeNames"] == ["n1"]


def test_metrics_off_by_default_and_the_settings_read_from_the_environment() -> None:
    assert not Settings.from_env({}).measured.enabled
    settings = Settings.from_env({"TESSERA_PROMETHEUS_URL": "http://prom.monitoring:9090",
                                  "TESSERA_PROMETHEUS_NODE_LABEL": "node",
                                  "TESSERA_PROMETHEUS_SELECTOR": 'job="dcgm-exporter"',
                                  "TESSERA_PROMETHEUS_INTERVAL_SECONDS": "30"})
    assert settings.measured.enabled and settings.measured.node_label == "node"
    assert settings.measured.interval_seconds == 30 and settings.measured.stale_seconds == 90


@pytest.mark.parametrize(("name", "value"), [
    ("TESSERA_PROMETHEUS_URL", "ftp://x"), ("TESSERA_PROMETHEUS_URL", "http://a b"),
    ("TESSERA_PROMETHEUS_NODE_LABEL", "no-dashes"),
    ("TESSERA_PROMETHEUS_SELECTOR", 'job="x"} or vector(1) {'),
    ("TESSERA_PROMETHEUS_INTERVAL_SECONDS", "0"),
])
def test_a_bad_measured_setting_is_a_config_error(name: str, value: str) -> None:
    with pytest.raises(ConfigError, match=name):
        Settings.from_env({name: value})


# ----------------------------------------------------------------------------- over HTTP


@pytest.fixture
def server() -> Any:
    """A loopback HTTP server whose answer each test sets: (status, body, delay seconds)."""
    import threading
    import time as _time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    answer: dict[str, Any] = {"status": 200, "body": reply(), "delay": 0.0}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            _time.sleep(answer["delay"])
            try:
                self.send_response(answer["status"])
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(answer["body"])
            except (BrokenPipeError, ConnectionResetError):
                pass  # the slow answer's client gave up (the timeout test)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    answer["url"] = f"http://127.0.0.1:{httpd.server_address[1]}"
    yield answer
    httpd.shutdown()
    httpd.server_close()


def _source(url: str, **config: Any) -> tuple[MeasuredSource, ClusterState]:
    state = _state("n1")
    return MeasuredSource(MeasuredConfig(url=url, **config), state), state


def test_figures_read_over_http_reach_the_cards(server: dict[str, Any]) -> None:
    server["body"] = reply(*card_figures("n1", 0, 70 * GIB, 50))
    source, state = _source(server["url"])
    assert source.poll_once()
    view = state.view("n1")
    assert view is not None and view.state.cards[0].foreign_memory_mib == 70 * GIB


def test_prometheus_s_error_reply_is_a_failed_query_with_its_message(
        server: dict[str, Any]) -> None:
    server["status"] = 400
    server["body"] = b'{"status":"error","errorType":"bad_data","error":"parse error at char 3"}'
    source, _ = _source(server["url"])
    assert not source.poll_once()
    assert "bad_data: parse error at char 3" in source.status()["lastError"]


def test_a_slow_prometheus_times_out_and_never_hangs_the_poller(server: dict[str, Any]) -> None:
    server["delay"] = 2.0
    source, _ = _source(server["url"], timeout_seconds=0.3)
    assert not source.poll_once()
    assert "timed out" in source.status()["lastError"]


def test_an_oversized_reply_is_refused(server: dict[str, Any],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from allocator.service import measured_source

    monkeypatch.setattr(measured_source, "MAX_REPLY_BYTES", 64)
    server["body"] = reply(*card_figures("n1", 0, 1, 1))
    source, _ = _source(server["url"])
    assert not source.poll_once()
    assert "larger than 64 bytes" in source.status()["lastError"]
