"""The Grafana dashboard asks only for series the allocator exports (read from a real app's
/metrics), with the labels they carry, and the chart ships the same file as the component."""

from __future__ import annotations

import json
import re
import sys
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from devcluster.binaries import repo_root

ROOT = repo_root()
DASHBOARD = ROOT / "manifests" / "components" / "monitoring" / "tessera-allocator-dashboard.json"
CHART_COPY = ROOT / "charts" / "tessera" / "dashboards" / "tessera-allocator-dashboard.json"
#: Label names DCGM exporter puts on its per-GPU series (dcgm-exporter's default
#: counters and its Kubernetes pod mapping).
DCGM_LABELS = {"gpu", "UUID", "device", "modelName", "Hostname", "namespace", "pod",
               "container"}

sys.path.insert(0, str(ROOT / "tests" / "allocator"))
from alloc_harness import make_app  # noqa: E402
from builders import make_gpu_pod, make_node, request, share  # noqa: E402
from fake_kube import FakeKube  # noqa: E402


def dashboard() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return doc


def expressions(doc: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in doc["panels"] for t in p["targets"]]


@pytest.fixture(scope="module")
def exported() -> dict[str, set[str]]:
    """Sample name -> label names, from a synced app with a bound pod and a refusal."""
    fake = FakeKube()
    fake.add_node(make_node("n1", count=2, memory_mib=16000))
    fake.add_pod(make_gpu_pod("p", request(share(core=30, mem=1024)), uid="u-p"))
    app, rt = make_app(fake)
    client = app.test_client()
    client.post("/scheduler/bind", json={"PodName": "p", "PodNamespace": "default",
                                         "PodUID": "u-p", "Node": "n1"})
    big = make_gpu_pod("big", request(share(core=30, mem=99_000)), uid="u-big")
    client.post("/scheduler/filter", json={"Pod": big, "Nodes": None, "NodeNames": ["n1"]})
    client.post("/scheduler/prioritize", json={"Pod": big, "Nodes": None, "NodeNames": ["n1"]})
    rt.recorder.process()
    text = client.get("/metrics").get_data(as_text=True)
    out: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, set()).update(sample.labels)
    return out


def test_the_chart_ships_the_component_s_dashboard_byte_for_byte() -> None:
    assert CHART_COPY.read_bytes() == DASHBOARD.read_bytes()


def test_every_tessera_series_the_dashboard_asks_for_is_exported_with_its_labels(
    exported: dict[str, set[str]],
) -> None:
    asked = set()
    for expr in expressions(dashboard()):
        for name in re.findall(r"\b(tessera_allocator_[a-z_]+)", expr):
            asked.add(name)
            assert name in exported, f"{name} is not exported (in: {expr})"
            for label in re.findall(r"\b(\w+)\s*=~?", _selectors(expr, name)):
                assert label in exported[name] or label == "le", (name, label)
            for group in re.findall(r"by \(([^)]*)\)", expr):
                for label in (g.strip() for g in group.split(",")):
                    assert any(label in exported[n] for n in _names(expr)), (expr, label)
    # The dashboard covers the per-card, per-pod, verb, bind, event and refusal series.
    assert {"tessera_allocator_gpu_core_allocated_percent",
            "tessera_allocator_pod_gpu_core_percent", "tessera_allocator_verb_seconds_bucket",
            "tessera_allocator_binds_total", "tessera_allocator_events_total",
            "tessera_allocator_refused_pods"} <= asked


def test_card_and_pod_series_carry_the_labels_dcgm_exporter_uses(
    exported: dict[str, set[str]],
) -> None:
    assert exported["tessera_allocator_gpu_core_allocated_percent"] == {"node", "gpu",
                                                                        "modelName"}
    assert exported["tessera_allocator_pod_gpu_core_percent"] == {
        "namespace", "pod", "node", "gpu", "modelName"}
    shared = exported["tessera_allocator_pod_gpu_core_percent"] & DCGM_LABELS
    assert shared == {"namespace", "pod", "gpu", "modelName"}


def test_the_dashboard_is_parameterised_and_refers_to_dcgm_only_by_its_own_labels() -> None:
    doc = dashboard()
    assert doc["uid"] == "tessera-allocator"
    variables = {v["name"] for v in doc["templating"]["list"]}
    assert variables == {"datasource", "node"}
    for panel in doc["panels"]:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"], panel["title"]
    for expr in expressions(doc):
        for label in re.findall(r'label_replace\(DCGM_\w+, "\w+", "\$1", "(\w+)"', expr):
            assert label in DCGM_LABELS
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids))


def _selectors(expr: str, name: str) -> str:
    """The text of every ``{...}`` right after ``name`` in ``expr``."""
    return " ".join(re.findall(re.escape(name) + r"\{([^}]*)\}", expr))


def _names(expr: str) -> set[str]:
    return set(re.findall(r"\b(tessera_allocator_[a-z_]+)", expr))
