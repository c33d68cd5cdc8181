"""The webhook's matchConditions come from the dialects, and the shipped ones are the defaults."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tessera.cli import main
from tessera.dialects import DEFAULT_DIALECTS, Dialect, DialectConfig
from tessera.vocabulary import ConfigError, Vocabulary
from webhook.registration import match_conditions, match_conditions_yaml, match_expression

SHIPPED = Path(__file__).resolve().parents[2] / "manifests" / "base" / "webhook-configuration.yaml"

CONFIGS = {
    "default": DialectConfig(),
    "everything": DialectConfig(enabled=frozenset(Dialect)),
    "elastic only": DialectConfig(enabled=frozenset({Dialect.ELASTIC})),
    "kai only": DialectConfig(enabled=frozenset({Dialect.KAI})),
    "genius only": DialectConfig(enabled=frozenset({Dialect.GENIUS})),
    "own domain": DialectConfig(vocabulary=Vocabulary("gpu.example.com")),
}


def quoted(expression: str) -> set[str]:
    return set(re.findall(r"'([^']*)'", expression))


def test_the_shipped_match_conditions_are_the_ones_generated_for_the_default_dialects() -> None:
    (hook,) = yaml.safe_load(SHIPPED.read_text())["webhooks"]
    assert hook["matchConditions"] == match_conditions(DialectConfig())


@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
def test_the_conditions_name_exactly_the_keys_the_dialects_read(config: DialectConfig) -> None:
    expression = match_expression(config)
    assert quoted(expression) == config.resource_keys | config.label_keys | config.annotation_keys
    assert ("object.metadata.labels" in expression) == bool(config.label_keys)
    assert ("object.metadata.annotations" in expression) == bool(config.annotation_keys)
    assert ("initContainers" in expression) == bool(config.resource_keys)


def test_opt_in_keys_are_not_sent_to_the_webhook_by_default() -> None:
    keys = quoted(match_expression(DialectConfig(enabled=DEFAULT_DIALECTS)))
    assert keys.isdisjoint({"nvidia.com/gpu", "nvidia.com/gpumem", "gpu-fraction", "gpu-memory"})
    assert {"volcano.sh/vgpu-number", "tencent.com/vcuda-core", "koordinator.sh/gpu"} <= keys


def test_a_configuration_without_dialects_still_reads_its_agents_shape() -> None:
    # The agent profile's own dialect cannot be turned off: a shaped pod must read back.
    expression = match_expression(DialectConfig(enabled=frozenset()))
    assert "'elasticgpu.io/gpu-core'" in expression
    assert "nano-gpu" not in expression and "volcano.sh" not in expression


@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
def test_the_printed_yaml_is_the_conditions(config: DialectConfig) -> None:
    assert yaml.safe_load(match_conditions_yaml(config)) == {
        "matchConditions": match_conditions(config)}


def test_a_key_cel_cannot_hold_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="cannot be written"):
        match_expression(DialectConfig(vocabulary=Vocabulary("it's")))


def test_tessera_webhook_prints_the_conditions_for_its_flags(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TESSERA_DIALECTS", raising=False)
    monkeypatch.delenv("TESSERA_DOMAIN", raising=False)
    assert main(["webhook", "--dialects=elastic,kai", "--print-match-conditions"]) == 0
    expected = DialectConfig(enabled=frozenset({Dialect.ELASTIC, Dialect.KAI}))
    assert capsys.readouterr().out == match_conditions_yaml(expected)


def test_tessera_webhook_refuses_to_print_for_an_unknown_dialect(
    capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["webhook", "--dialects=kueue", "--print-match-conditions"]) == 2
    assert "kueue" in capsys.readouterr().err
