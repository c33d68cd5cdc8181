"""The dev cluster's stand-in dcgm-exporter serves dcgm-exporter's format, and what it serves
is what the allocator's parser reads once Prometheus has it."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from devcluster.dcgm import CardFigures, FakeDcgmExporter, exposition

#: render_metrics.go's label set for a card (NVIDIA/dcgm-exporter 4.5.3-4.8.2).
DCGM_LABELS = {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname"}


def test_the_exposition_parses_with_dcgm_exporters_names_labels_and_units() -> None:
    text = exposition([CardFigures("gpu-a", 3, used_mib=61 * 1024, total_mib=80 * 1024,
                                   util_percent=90)])
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert set(families) == {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_FREE",
                             "DCGM_FI_DEV_FB_USED"}
    assert all(f.type == "gauge" for f in families.values())
    (used,) = families["DCGM_FI_DEV_FB_USED"].samples
    assert set(used.labels) == DCGM_LABELS
    assert used.labels["gpu"] == "3" and used.labels["Hostname"] == "gpu-a"
    assert used.value == 61 * 1024
    assert families["DCGM_FI_DEV_FB_FREE"].samples[0].value == 19 * 1024
    assert families["DCGM_FI_DEV_GPU_UTIL"].samples[0].value == 90


def test_the_stand_in_serves_the_figures_last_set() -> None:
    exporter = FakeDcgmExporter().start()
    try:
        exporter.set(CardFigures("n1", 0, used_mib=1, total_mib=10))
        exporter.set(CardFigures("n1", 0, used_mib=7, total_mib=10))
        with urllib.request.urlopen(f"http://{exporter.address}/metrics", timeout=5) as reply:
            text = reply.read().decode()
        assert 'DCGM_FI_DEV_FB_USED{gpu="0",' in text and text.count("DCGM_FI_DEV_FB_USED{") == 1
        assert "} 7\n" in text
    finally:
        exporter.stop()
