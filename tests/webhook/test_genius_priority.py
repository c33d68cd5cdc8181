"""``genius/priority`` becomes the PriorityClass of its level (webhook/priority.py): the class
named, ``spec.priority`` and ``spec.preemptionPolicy`` removed for the Priority admission
plugin's second run to fill in; off by default; system classes kept; idempotent."""

from __future__ import annotations

from typing import Any

import pytest
from builders import make_pod

from tessera.dialects import DialectConfig
from webhook.config import WebhookConfig
from webhook.mutation import MutationConfig, mutate_pod
from webhook.priority import genius_level

ON = MutationConfig(DialectConfig(), genius_priority_levels=10)


def genius_pod(level: str | None, **spec: Any) -> dict[str, Any]:
    labels = {"genius/gpu-number": "1"}
    if level is not None:
        labels["genius/priority"] = level
    pod = make_pod(name="g", labels=labels)
    pod["spec"].update(spec)
    return pod


@pytest.mark.parametrize(("value", "level"), [
    ("7", 7), ("0", 0), ("10", 10), ("99", 10), ("-3", 0), ("high", 0), ("", 0), (" 4 ", 4),
    ("1" * 40, 0),
])
def test_the_level_is_genius_s_atoi_clamped_to_the_classes_there_are(value: str,
                                                                    level: int) -> None:
    assert genius_level({"genius/priority": value}, 10) == level


def test_without_the_label_or_with_the_mapping_off_there_is_no_level() -> None:
    assert genius_level({}, 10) is None
    assert genius_level({"genius/priority": "5"}, 0) is None


def test_a_genius_pod_gets_its_class_and_loses_the_priority_the_first_run_set() -> None:
    # As the webhook sees it: the Priority plugin already ran (no default class: 0).
    pod = genius_pod("7", priority=0, preemptionPolicy="PreemptLowerPriority")
    out = mutate_pod(pod, ON)
    spec = out.pod["spec"]
    assert spec["priorityClassName"] == "tessera-genius-priority-7"
    assert "priority" not in spec and "preemptionPolicy" not in spec
    # The second run of the Priority plugin fills spec.priority in; the webhook, asked again,
    # changes nothing.
    settled = dict(out.pod, spec={**spec, "priority": 7, "preemptionPolicy": "Never"})
    assert not mutate_pod(settled, ON).changed


def test_a_default_class_is_replaced_but_a_system_class_is_kept() -> None:
    out = mutate_pod(genius_pod("3", priorityClassName="cluster-default", priority=100), ON)
    assert out.pod["spec"]["priorityClassName"] == "tessera-genius-priority-3"
    kept = mutate_pod(genius_pod("3", priorityClassName="system-node-critical",
                                 priority=2000001000), ON)
    assert kept.pod["spec"]["priorityClassName"] == "system-node-critical"
    assert kept.pod["spec"]["priority"] == 2000001000


def test_off_by_default_and_never_for_a_pod_without_gpus() -> None:
    assert "priorityClassName" not in mutate_pod(genius_pod("7", priority=0),
                                                 MutationConfig()).pod["spec"]
    plain = make_pod(name="p", labels={"genius/priority": "7"})
    assert not mutate_pod(plain, ON).changed


def test_the_levels_are_read_from_the_environment() -> None:
    assert WebhookConfig.from_env({}).mutation.genius_priority_levels == 0
    config = WebhookConfig.from_env({"TESSERA_GENIUS_PRIORITY_LEVELS": "5"})
    assert config.mutation.genius_priority_levels == 5
