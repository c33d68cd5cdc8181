"""Bad input under the HAMi profile (issue 46, "Bad input"): a malformed register annotation,
an unknown card UUID in ``use-gpuuuid``, a ``gpumem`` above every card. Each gets a reason on
``/status`` and the page, or in filter's answer; nothing stops the allocator. (Percentages at
admission: tests/webhook/test_hami_bad_percentages.py.)"""

from __future__ import annotations

import json
from typing import Any

import pytest
from alloc_harness import make_app
from builders import make_gpu_pod, make_node, request, share
from fake_kube import FakeKube
from flask import Flask
from test_hami_bind import UUIDS, hami_node

from allocator.hami.codec import HAMI
from allocator.verbs.core import AllocatorConfig
from tessera.agent_profiles import AgentProfile
from tessera.dialects import DialectConfig
from tessera.vocabulary import PodRequest

HAMI_PROFILE = AllocatorConfig(dialects=DialectConfig(agent_profile=AgentProfile.HAMI),
                               filter_best=False)


def _device(**fields: Any) -> dict[str, Any]:
    return {"id": "GPU-bad", "index": 0, "count": 10, "devmem": 16384, "devcore": 100,
            "type": "NVIDIA-Tesla T4", "numa": 0, "health": True, **fields}


#: (register annotation, what the reason says), one per kind of damage.
MALFORMED = {
    "not-json": ("[{broken", "not JSON"),
    "not-a-list": (json.dumps({"id": "GPU-bad"}), "expected 7 or 9"),  # read as the text form
    "not-objects": ("[1, 2]", "must be a JSON object"),
    "wrong-type": (json.dumps([_device(devmem="16384")]), "devmem must be an integer"),
    "negative-memory": (json.dumps([_device(devmem=-1)]), "devmem"),
    "huge-count": (json.dumps([_device(count=10**30)]), "count"),
    "huge-list": (json.dumps([_device(id=f"GPU-{i}", index=i) for i in range(1025)]),
                  "more than 1024"),
    "one-megabyte": ("x" * 1_000_000, "too long"),
}


def _cluster(register: str) -> FakeKube:
    fake = FakeKube()
    bad = make_node("bad", count=2)
    bad["metadata"]["annotations"][HAMI.register_key] = register
    fake.add_node(bad)
    fake.add_node(hami_node("good", count=2))
    return fake


def _filter(app: Flask, req: PodRequest, nodes: list[str]) -> dict[str, Any]:
    pod = make_gpu_pod("p", req, uid="u-1")
    resp = app.test_client().post("/scheduler/filter",
                                  json={"Pod": pod, "Nodes": None, "NodeNames": nodes})
    assert resp.status_code == 200, resp.get_data(as_text=True)
    body: dict[str, Any] = resp.get_json()
    return body


@pytest.mark.parametrize(("register", "why"), MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_register_is_a_problem_on_status_and_the_page_and_others_serve(
        register: str, why: str) -> None:
    app, _ = make_app(_cluster(register), core=HAMI_PROFILE)
    client = app.test_client()
    doc = client.get("/status").get_json()
    nodes = {n["name"]: n for n in doc["nodes"]}
    problem = nodes["bad"]["problem"]
    assert problem and HAMI.register_key in problem and why in problem
    assert len(problem) < 1000  # the reason, not the value echoed back
    assert nodes["good"]["problem"] is None and len(nodes["good"]["cards"]) == 2
    page = client.get("/")
    assert page.status_code == 200
    html = page.get_data(as_text=True)
    assert HAMI.register_key in html and why in html
    # The allocator keeps serving: the healthy node takes the pod.
    body = _filter(app, request(share(core=10, mem=1024)), ["bad", "good"])
    assert "good" in body["NodeNames"] and not body["Error"]
    assert client.get("/healthz").status_code == 200


def test_an_unknown_uuid_in_use_gpuuuid_is_unresolvable_naming_the_annotation() -> None:
    app, _ = make_app(_cluster("[{broken"), core=HAMI_PROFILE)
    req = PodRequest((share(core=10, mem=1024),), use_uuids=("GPU-unknown",))
    body = _filter(app, req, ["good"])
    assert body["NodeNames"] == [] and not body["Error"]
    reason = body["FailedAndUnresolvableNodes"]["good"]
    assert reason == "no card allowed by pod annotation nvidia.com/use-gpuuuid (node has Tesla T4)"
    # A known UUID still places.
    known = PodRequest((share(core=10, mem=1024),), use_uuids=(UUIDS[1],))
    assert _filter(app, known, ["good"])["NodeNames"] == ["good"]


@pytest.mark.parametrize("best", [False, True])
def test_gpumem_above_every_card_is_unresolvable_naming_the_largest_card(best: bool) -> None:
    core = AllocatorConfig(dialects=HAMI_PROFILE.dialects, filter_best=best)
    app, _ = make_app(_cluster("[{broken"), core=core)
    body = _filter(app, request(share(mem=999_999)), ["good"])
    assert body["NodeNames"] == [] and not body["Error"], body
    # Unresolvable: kube-scheduler does not preempt for it (was a resolvable "no card with
    # 999999 MiB free", as if evicting could make room).
    assert body["FailedAndUnresolvableNodes"] == {
        "good": "no card with 999999 MiB memory (largest card 16384 MiB)"}
