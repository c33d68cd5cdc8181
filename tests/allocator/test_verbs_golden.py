"""Every verb answers as before the node agent became a port: on seeded random clusters,
under the plain agent's three profiles and HAMi's, filter, prioritize and bind reply byte for
byte as main a282917 did, and each bind writes the same pod metadata
(tests/allocator/golden/verbs_record.py says how the fixture was recorded).

One change since is intended and checked apart: in the hami profile a bound pod carries the
label ``hami.io/vgpu-node`` (HAMi's monitor lists pods by it; issue 46), naming its node."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from golden.verbs_record import CASES, record

GOLDEN = Path(__file__).parent / "golden" / "verbs.json"


def _recorded() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(GOLDEN.read_text())
    return doc


@pytest.mark.parametrize("case", [f"{p}-{s}" for p, seeds in CASES for s in seeds])
def test_the_verbs_answer_as_recorded_before_the_port(case: str) -> None:
    profile, seed = case.rsplit("-", 1)
    expected = _recorded()[case]
    got = json.loads(json.dumps(record(profile, int(seed))))  # the fixture's JSON form
    if profile == "hami":
        got = [_without_monitor_label(reply) for reply in got]
    for k, (now, then) in enumerate(zip(got, expected, strict=True)):
        assert now == then, f"{case}: pod p{k} (filter, prioritize, bind, written)"


def _without_monitor_label(reply: list[Any]) -> list[Any]:
    """The reply as before issue 46: the monitor label, checked to name the bound node, left
    out."""
    written = reply[3]
    if not written:
        return reply
    labels = dict(written["labels"])
    node = json.loads(written["annotations"]["elasticgpu.io/gpu-allocation"])["node"]
    assert labels.pop("hami.io/vgpu-node") == node
    return [*reply[:3], {**written, "labels": labels}]


def test_the_fixture_covers_refusals_ties_and_every_profile() -> None:
    doc = _recorded()
    filters = [json.loads(reply[0]) for run in doc.values() for reply in run]
    assert any(not f["NodeNames"] for f in filters)  # refused pods
    assert any(len(f["NodeNames"]) > 1 for f in filters)  # several nodes answered
    assert {case.rsplit("-", 1)[0] for case in doc} == {"elastic", "nano-gpu", "aliyun", "hami"}
