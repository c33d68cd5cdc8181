"""The extender over HTTP (Flask test client) with bodies shaped as kube-scheduler sends them.

kube-scheduler marshals ExtenderArgs / ExtenderBindingArgs with Go's encoding/json and no JSON
tags (staging/src/k8s.io/kube-scheduler/extender/v1/types.go): keys are Go field names, and
with nodeCacheCapable the Nodes field is null.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from alloc_harness import make_app
from builders import VOCAB, make_gpu_pod, make_node, request, share, whole
from fake_kube import FakeKube

from allocator.verbs.core import AllocatorConfig
from tessera.vocabulary import decode_allocation


def _cluster() -> FakeKube:
    fake = FakeKube()
    fake.add_node(make_node("n1", count=2, memory_mib=16000))
    fake.add_node(make_node("n2", count=1, memory_mib=16000))
    return fake


def _args(pod: dict[str, Any], names: list[str]) -> dict[str, Any]:
    return {"Pod": pod, "Nodes": None, "NodeNames": names}


def test_filter_replies_with_every_upstream_key_and_a_reason_per_failed_node() -> None:
    fake = _cluster()
    app, _ = make_app(fake, core=AllocatorConfig(filter_best=False))
    pod = make_gpu_pod("p", request(whole(cards=2)))
    resp = app.test_client().post("/scheduler/filter", json=_args(pod, ["n1", "n2", "ghost"]))
    assert resp.status_code == 200
    body = resp.get_json()
    assert set(body) == {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes",
                         "Error"}
    assert body["NodeNames"] == ["n1"]
    assert body["FailedAndUnresolvableNodes"] == {"n2": "needs 2 whole cards (node has 1)"}
    assert "unknown to the GPU allocator" in body["FailedNodes"]["ghost"]
    assert body["Error"] == ""


def test_filter_reports_a_full_node_as_failed_so_preemption_may_help() -> None:
    fake = _cluster()
    fake.add_pod(make_gpu_pod("holder", request(whole())))
    app, rt = make_app(fake)
    rt.allocator.bind("default", "holder", "uid-holder", "n2")
    pod = make_gpu_pod("p", request(share(core=10)))
    body = app.test_client().post("/scheduler/filter", json=_args(pod, ["n2"])).get_json()
    assert body["NodeNames"] == []
    assert body["FailedNodes"] == {
        "n2": "no card with 10 percent core free (all cards taken whole)"}


@pytest.mark.parametrize(
    ("used", "req", "expected"),
    [
        # one case per reason fit.unfit_reason words with a percentage
        ([(60, 0)], request(share(core=50, mem=1000)),
         "no card with 50 percent core and 1000 MiB free (most free: 40 percent core"),
        ([(80, 0)], request(share(core=30)), "no card with 30 percent core free "
         "(largest 20 percent)"),
        ([(10, 15000)], request(share(pct=25)), "no card with 25 percent of its memory free"),
        ([(90, 0)], request(share(core=20, pct=10)),
         "no card with 20 percent core and 10 percent of its memory free"),
        (["whole"], request(share(core=10)), "no card with 10 percent core free (all cards"),
        ([(0, 0)], request(share("a", core=60), share("b", core=60)),
         "2 GPU containers do not fit together"),
        ([(0, 0)], request(whole(cards=2)), "needs 2 whole cards (node has 1)"),
        ([(0, 0)], request(share(core=10), models=("A100",)), "no card of model A100"),
    ],
)
def test_no_filter_reason_contains_a_percent_sign_kube_scheduler_would_garble(
    used: list[Any], req: Any, expected: str
) -> None:
    """kube-scheduler uses the reason as an Eventf format string (schedule_one.go)."""
    fake = FakeKube()
    fake.add_node(make_node("n1", count=1, memory_mib=16000))
    app, rt = make_app(fake)
    for i, u in enumerate(u for u in used if u != (0, 0)):
        fake.add_pod(make_gpu_pod(f"h{i}", request(whole()) if u == "whole"
                              else request(share(core=u[0], mem=u[1]))))
        rt.allocator.bind("default", f"h{i}", f"uid-h{i}", "n1")
    body = app.test_client().post("/scheduler/filter",
                                  json=_args(make_gpu_pod("p", req), ["n1"])).get_json()
    reasons = {**body["FailedNodes"], **body["FailedAndUnresolvableNodes"]}
    assert body["NodeNames"] == [] and set(reasons) == {"n1"}
    assert expected in reasons["n1"]
    assert "%" not in reasons["n1"]


def test_request_errors_and_bind_errors_carry_no_percent_sign_either() -> None:
    fake = _cluster()
    app, _ = make_app(fake)
    client = app.test_client()
    bad = make_gpu_pod("bad", extra_annotations={VOCAB.request_annotation: '{"v": "9%"}'})
    body = client.post("/scheduler/filter", json=_args(bad, ["n1", "n2"])).get_json()
    assert body["FailedAndUnresolvableNodes"]["n1"].endswith("version '9 percent' (want 1)")
    fake.add_pod(make_gpu_pod("holder", request(share(core=95)), uid="u-h"))
    fake.add_pod(make_gpu_pod("p", request(share(core=10)), uid="u-p"))
    for name, uid in (("holder", "u-h"), ("p", "u-p")):
        reply = client.post("/scheduler/bind", json={
            "PodName": name, "PodNamespace": "default", "PodUID": uid, "Node": "n2"}).get_json()
    assert reply["Error"] == ("node n2: no card with 10 percent core free "
                              "(largest 5 percent)")


def test_prioritize_names_only_the_nodes_above_the_lowest_score_0_to_10() -> None:
    fake = _cluster()
    app, rt = make_app(fake)
    fake.add_pod(make_gpu_pod("first", request(share(core=50, mem=8000))))
    rt.allocator.bind("default", "first", "uid-first", "n2")
    pod = make_gpu_pod("p", request(share(core=10, mem=1000), policy="binpack"))
    resp = app.test_client().post("/scheduler/prioritize", json=_args(pod, ["n1", "n2"]))
    assert resp.status_code == 200
    body = resp.get_json()
    assert body == [{"Host": "n2", "Score": 10}]  # n1 scored 0: left out, the same to the scheduler


def test_prioritize_names_no_node_when_every_node_scores_the_same() -> None:
    fake = FakeKube()
    for name in ("n1", "n2"):
        fake.add_node(make_node(name, count=2, memory_mib=16000))
    app, _ = make_app(fake)
    # binpack: two empty nodes score the same (the default's fixed node order would not)
    pod = make_gpu_pod("p", request(share(core=10, mem=1000), policy="binpack"))
    resp = app.test_client().post("/scheduler/prioritize", json=_args(pod, ["n1", "n2"]))
    assert resp.status_code == 200
    assert resp.get_json() == []


def test_a_pod_may_choose_its_policy_by_annotation() -> None:
    fake = _cluster()
    app, rt = make_app(fake)
    fake.add_pod(make_gpu_pod("first", request(share(core=50, mem=8000))))
    rt.allocator.bind("default", "first", "uid-first", "n2")
    pod = make_gpu_pod("p", request(share(core=10, mem=1000), policy="spread"))
    body = app.test_client().post("/scheduler/prioritize",
                                  json=_args(pod, ["n1", "n2"])).get_json()
    assert body == [{"Host": "n1", "Score": 10}]


def test_bind_writes_the_allocation_in_the_binding_alone() -> None:
    fake = _cluster()
    app, _ = make_app(fake)
    fake.add_pod(make_gpu_pod("p", request(share(core=30, mem=2000)), uid="u-1"))
    resp = app.test_client().post("/scheduler/bind", json={
        "PodName": "p", "PodNamespace": "default", "PodUID": "u-1", "Node": "n1"})
    assert resp.status_code == 200
    assert resp.get_json() == {"Error": ""}
    pod = fake.pods[("default", "p")]
    assert pod["spec"]["nodeName"] == "n1"
    allocation = decode_allocation(pod["metadata"]["annotations"][VOCAB.allocation_annotation])
    assert allocation.node == "n1" and allocation.pod_uid == "u-1"
    assert pod["metadata"]["annotations"]["elasticgpu.io/container-main"] == "0"
    assert pod["metadata"]["annotations"]["elasticgpu.io/assumed"] == "true"
    assert "elasticgpu.io/assumed" not in pod["metadata"]["labels"]
    methods = [c[0] for c in fake.calls if c[0] in ("patch_pod", "bind_pod")]
    assert methods == ["bind_pod"]  # the webhook's pod has every label it needs


@pytest.mark.parametrize("verb", ["filter", "bind"])
@pytest.mark.parametrize(
    "body",
    [b"not json", b"[]", b'{"Pod": "x", "NodeNames": ["n1"]}', b'{"Pod": {}, "NodeNames": 3}',
     b'{"PodName": 5}'],
)
def test_malformed_bodies_get_http_200_with_an_error(verb: str, body: bytes) -> None:
    app, _ = make_app(_cluster())
    resp = app.test_client().post(f"/scheduler/{verb}", data=body,
                                  content_type="application/json")
    assert resp.status_code == 200
    reply = resp.get_json()
    assert reply["Error"]
    if verb == "filter":
        assert reply["NodeNames"] == []


def test_malformed_prioritize_gets_http_200_and_an_empty_list() -> None:
    app, _ = make_app(_cluster())
    resp = app.test_client().post("/scheduler/prioritize", data=b"{",
                                  content_type="application/json")
    assert resp.status_code == 200
    assert resp.get_json() == []


def test_an_invalid_gpu_request_is_unresolvable_on_every_node_with_the_reason() -> None:
    app, _ = make_app(_cluster())
    pod = make_gpu_pod("p", extra_annotations={VOCAB.request_annotation: '{"v": 99}'})
    body = app.test_client().post("/scheduler/filter",
                                  json=_args(pod, ["n1", "n2"])).get_json()
    assert body["NodeNames"] == []
    assert set(body["FailedAndUnresolvableNodes"]) == {"n1", "n2"}
    assert "unsupported version" in body["FailedAndUnresolvableNodes"]["n1"]


def test_an_unknown_policy_is_reported_on_every_node() -> None:
    app, _ = make_app(_cluster())
    pod = make_gpu_pod("p", request(share(core=10), policy="fastest"))
    body = app.test_client().post("/scheduler/filter", json=_args(pod, ["n1"])).get_json()
    assert "unknown placement policy 'fastest'" in body["FailedAndUnresolvableNodes"]["n1"]


def test_verbs_refuse_and_readyz_fails_until_the_first_sync() -> None:
    fake = _cluster()
    app, rt = make_app(fake, synced=False)
    client = app.test_client()
    assert client.get("/readyz").status_code == 503
    body = client.post("/scheduler/filter", json=_args(make_gpu_pod(), ["n1"])).get_json()
    assert "syncing" in body["Error"] and body["NodeNames"] == []
    bind = client.post("/scheduler/bind", json={"PodName": "p1", "PodNamespace": "default",
                                                "PodUID": "uid-p1", "Node": "n1"}).get_json()
    assert "syncing" in bind["Error"]
    rt.state.replace_nodes(fake.list_nodes()[0])
    rt.state.mark_synced()
    assert client.get("/readyz").status_code == 200
    assert client.get("/healthz").status_code == 200


def test_a_follower_is_not_ready_and_refuses_verbs() -> None:
    app, rt = make_app(_cluster())
    rt.allocator.reader.is_leader = lambda: False
    rt.is_leader = lambda: False  # type: ignore[method-assign]
    client = app.test_client()
    assert client.get("/readyz").status_code == 503
    body = client.post("/scheduler/filter", json=_args(make_gpu_pod(), ["n1"])).get_json()
    assert "not the leader" in body["Error"]


def test_status_shows_every_card_and_who_holds_it() -> None:
    fake = _cluster()
    app, rt = make_app(fake)
    fake.add_pod(make_gpu_pod("p", request(share(core=30, mem=2000)), uid="u-1"))
    rt.allocator.bind("default", "p", "u-1", "n2")
    doc = app.test_client().get("/status").get_json()
    n2 = next(n for n in doc["nodes"] if n["name"] == "n2")
    assert n2["coreUsed"] == 30 and n2["memoryTotalMiB"] == 16000
    assert n2["cards"][0]["pods"] == [{"uid": "u-1", "namespace": "default", "name": "p",
                                       "container": "main", "stage": "bound"}]
    assert doc["synced"] is True and doc["leader"] is True


def test_metrics_expose_verb_latency_bind_outcomes_and_per_node_usage() -> None:
    fake = _cluster()
    app, _ = make_app(fake)
    client = app.test_client()
    fake.add_pod(make_gpu_pod("p", request(share(core=30, mem=2000)), uid="u-1"))
    client.post("/scheduler/filter", json=_args(
        make_gpu_pod("p", request(share(core=30, mem=2000)), uid="u-1"), ["n1"]))
    client.post("/scheduler/bind", json={"PodName": "p", "PodNamespace": "default",
                                         "PodUID": "u-1", "Node": "n1"})
    text = client.get("/metrics").get_data(as_text=True)
    assert 'tessera_allocator_verb_seconds_count{verb="filter"} 1.0' in text
    assert 'tessera_allocator_binds_total{outcome="bound"} 1.0' in text
    assert 'tessera_allocator_node_gpu_core_percent{kind="allocated",node="n1"} 30.0' in text
    assert 'tessera_allocator_node_gpu_memory_mib{kind="total",node="n1"} 32000.0' in text


def test_an_oversized_body_is_refused_before_it_is_read() -> None:
    app, _ = make_app(_cluster(), max_body_bytes=2048)
    resp = app.test_client().post("/scheduler/filter", data=b"x" * 4096,
                                  content_type="application/json")
    assert resp.status_code == 413
    assert resp.get_json() == {"code": 413, "message": "request body larger than 2048 bytes"}


def test_the_url_prefix_is_configurable() -> None:
    app, _ = make_app(_cluster(), url_prefix="/tessera/v1")
    client = app.test_client()
    assert client.post("/tessera/v1/filter",
                       json=_args(make_gpu_pod(), ["n1"])).get_json()["NodeNames"] == ["n1"]
    assert client.post("/scheduler/filter", json=_args(make_gpu_pod(), ["n1"])).status_code == 404


def test_a_non_cache_capable_body_with_full_nodes_is_understood() -> None:
    app, _ = make_app(_cluster(), core=AllocatorConfig(filter_best=False))
    body = {"Pod": make_gpu_pod(), "Nodes": {"items": [make_node("n1"), make_node("n2")]},
            "NodeNames": None}
    reply = app.test_client().post("/scheduler/filter", data=json.dumps(body),
                                   content_type="application/json").get_json()
    assert reply["NodeNames"] == ["n1", "n2"]


def test_settings_carry_the_core_configuration() -> None:
    app, rt = make_app(_cluster(), core=AllocatorConfig(default_policy="spread"))
    assert rt.allocator.config.default_policy == "spread"
    assert app.test_client().get("/status").get_json()["defaultPolicy"] == "spread"
