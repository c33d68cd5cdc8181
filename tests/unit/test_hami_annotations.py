"""HAMi's pod annotations: honoured with HAMi's meaning or refused naming them, in every agent
profile (tessera.dialects.hami_annotations, through tessera.dialects.parse_pod)."""

from __future__ import annotations

import re

import pytest
from builders import make_pod

from tessera.agent_profiles import AgentProfile
from tessera.dialects import DialectConfig, parse_pod, read_pod_request
from tessera.dialects.hami_annotations import hami_policy, policy_name
from tessera.vocabulary import RequestError, Vocabulary

VOCAB = Vocabulary()
PROFILES = [DialectConfig(agent_profile=p) for p in AgentProfile]
GPU = {f"{VOCAB.domain}/gpu-core": 25}  # a GPU pod of Tessera in every profile


def _policy(annotations: dict[str, str], own: str | None = None) -> str | None:
    return hami_policy(annotations, VOCAB, own)


@pytest.mark.parametrize(("annotations", "expected"), [
    ({}, None),  # neither: the cluster's default policy
    ({"hami.io/node-scheduler-policy": "spread"}, "hami-spread-spread"),  # card default spread
    ({"hami.io/node-scheduler-policy": "binpack"}, "hami-binpack-spread"),
    ({"hami.io/gpu-scheduler-policy": "binpack"}, "hami-binpack-binpack"),  # node default
    ({"hami.io/gpu-scheduler-policy": "spread"}, "hami-binpack-spread"),
    ({"hami.io/node-scheduler-policy": "spread", "hami.io/gpu-scheduler-policy": "binpack"},
     "hami-spread-binpack"),
])
def test_hamis_policy_annotations_name_the_hami_policy_missing_ones_taking_hamis_default(
        annotations: dict[str, str], expected: str | None) -> None:
    assert _policy(annotations) == expected


def test_the_four_names_are_those_of_the_ranking_policies() -> None:
    names = {policy_name(n, g) for n in ("binpack", "spread") for g in ("binpack", "spread")}
    assert names == {"hami-binpack-binpack", "hami-binpack-spread", "hami-spread-binpack",
                     "hami-spread-spread"}


@pytest.mark.parametrize("annotations", [
    {"nvidia.com/vgpu-mode": "hami-core"},
    {"nvidia.com/numa-bind": "false"},
    {"nvidia.com/numa-bind": "0"},  # Go's ParseBool
    {"nvidia.com/numa-bind": "F"},
    # An empty card filter is no constraint in HAMi (CheckType, CheckUUID).
    {"nvidia.com/use-gputype": "", "nvidia.com/nouse-gpuuuid": " "},
    {"unrelated.io/key": "x"},
])
def test_values_tessera_honours_are_admitted(annotations: dict[str, str]) -> None:
    assert _policy(annotations) is None


@pytest.mark.parametrize(("key", "value", "fragment"), [
    ("nvidia.com/vgpu-mode", "mig", "write hami-core or remove it"),
    ("nvidia.com/vgpu-mode", "mps", "MIG and MPS not yet"),
    ("nvidia.com/vgpu-mode", "", "hami-core shares only"),  # HAMi: matches no hami-core card
    ("nvidia.com/numa-bind", "true", "one NUMA node"),
    ("nvidia.com/numa-bind", "yes", "not a boolean (HAMi reads it as false)"),
    ("hami.io/node-scheduler-policy", "topology-aware", "honours binpack or spread"),
    ("hami.io/gpu-scheduler-policy", "mutex", "topology-aware, mutex, numa"),
    ("hami.io/gpu-scheduler-policy", "binpack,numa", "comma-separated chains"),
    ("hami.io/gpu-scheduler-policy", " binpack", "write one of them"),  # HAMi: spread
    ("hami.io/device-scoring-weights", "slot=1,core=1,memory=3", "remove it"),
])
def test_what_tessera_cannot_honour_is_refused_naming_the_annotation_and_what_to_do(
        key: str, value: str, fragment: str) -> None:
    with pytest.raises(RequestError) as refused:
        _policy({key: value})
    assert f"pod annotation {key}={value!r}" in str(refused.value)
    assert fragment in str(refused.value)


def test_every_refused_annotation_is_named_at_once() -> None:
    with pytest.raises(RequestError) as refused:
        _policy({"hami.io/device-scoring-weights": "slot=2", "nvidia.com/numa-bind": "true",
                 "hami.io/gpu-scheduler-policy": "mutex"})
    text = str(refused.value)
    for key in ("hami.io/device-scoring-weights", "nvidia.com/numa-bind",
                "hami.io/gpu-scheduler-policy"):
        assert key in text


def test_a_huge_value_is_quoted_cut_short() -> None:
    with pytest.raises(RequestError) as refused:
        _policy({"hami.io/device-scoring-weights": "slot=" * 10_000})
    assert len(str(refused.value)) < 300


def test_tessera_policy_must_agree_with_hamis() -> None:
    both = {"hami.io/gpu-scheduler-policy": "binpack"}
    assert _policy(both, "hami-binpack-binpack") == "hami-binpack-binpack"
    assert _policy({}, "fgd") == "fgd"
    contradiction = re.escape(f"{VOCAB.policy_annotation}='fgd' contradicts")
    with pytest.raises(RequestError, match=contradiction):
        _policy(both, "fgd")


@pytest.mark.parametrize("config", PROFILES, ids=lambda c: c.agent_profile.value)
def test_every_profile_reads_hamis_annotations_on_a_gpu_pod(config: DialectConfig) -> None:
    pod = make_pod(GPU, annotations={"hami.io/node-scheduler-policy": "spread"})
    request = parse_pod(pod, config)
    assert request is not None and request.policy == "hami-spread-spread"
    typed = parse_pod(make_pod(GPU, annotations={"nvidia.com/use-gputype": "A100,H100",
                                                 "nvidia.com/nouse-gputype": ""}), config)
    assert typed is not None and typed.use_types == ("A100", "H100") and not typed.nouse_types
    named = make_pod(GPU, annotations={"nvidia.com/use-gpuuuid": "GPU-1, GPU-2"})
    if config.agent_profile is AgentProfile.HAMI:  # the one agent that tells card UUIDs
        request = parse_pod(named, config)
        assert request is not None and request.use_uuids == ("GPU-1", "GPU-2")
        read = read_pod_request(named, config)
        assert read is not None and read.use_uuids == request.use_uuids
        return
    with pytest.raises(RequestError, match=r"use-gpuuuid='GPU-1, GPU-2': .* no card UUIDs"):
        parse_pod(named, config)
    # The allocator's view of a pod admitted without the webhook says the same.
    with pytest.raises(RequestError, match=r"nvidia\.com/use-gpuuuid"):
        read_pod_request(named, config)


@pytest.mark.parametrize(("annotations", "fields"), [
    ({"nvidia.com/use-gputype": "a100"}, {"use_types": ("a100",)}),
    ({"nvidia.com/nouse-gputype": "T4, ,V100"}, {"nouse_types": ("T4", "V100")}),
    ({"nvidia.com/use-gpuuuid": "GPU-a"}, {"use_uuids": ("GPU-a",)}),
    ({"nvidia.com/nouse-gpuuuid": "GPU-a,GPU-b"}, {"nouse_uuids": ("GPU-a", "GPU-b")}),
    ({"nvidia.com/use-gputype": " ", "nvidia.com/use-gpuuuid": ""}, {}),  # empty: none
])
def test_card_choosing_annotations_are_honoured_as_the_requests_card_choice(
        annotations: dict[str, str], fields: dict[str, tuple[str, ...]]) -> None:
    config = DialectConfig(agent_profile=AgentProfile.HAMI)
    request = parse_pod(make_pod(GPU, annotations=annotations), config)
    assert request is not None
    for name in ("use_types", "nouse_types", "use_uuids", "nouse_uuids"):
        assert getattr(request, name) == fields.get(name, ())
    assert request.picks_cards == bool(fields)


def test_an_overlong_card_choice_is_refused_naming_the_annotation() -> None:
    config = DialectConfig(agent_profile=AgentProfile.HAMI)
    pod = make_pod(GPU, annotations={"nvidia.com/nouse-gpuuuid": ",".join(["GPU-1"] * 100)})
    with pytest.raises(RequestError, match=r"nvidia\.com/nouse-gpuuuid: at most 64 values"):
        parse_pod(pod, config)


def test_a_pod_without_gpu_is_not_concerned() -> None:
    pod = make_pod({"cpu": "1"}, annotations={"nvidia.com/use-gpuuuid": "GPU-1"})
    assert parse_pod(pod, DialectConfig()) is None
