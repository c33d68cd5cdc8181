"""HAMi's pod annotations: honoured with HAMi's meaning or refused naming them, in every agent
profile (tessera.dialects.hami_annotations, through tessera.dialects.parse_pod)."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest
from builders import make_pod

from tessera.agent_profiles import AgentProfile
from tessera.dialects import DialectConfig, parse_pod, read_pod_request
from tessera.dialects.hami_annotations import hami_policy, policy_name
from tessera.vocabulary import (
    CodecError,
    PodRequest,
    RequestError,
    Vocabulary,
    decode_request,
    encode_request,
)

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
    # An empty card filter is no constraint in HAMi (CheckType, CheckUUID).
    {"nvidia.com/use-gputype": "", "nvidia.com/nouse-gpuuuid": " "},
    {"unrelated.io/key": "x"},
])
def test_values_tessera_honours_are_admitted(annotations: dict[str, str]) -> None:
    assert _policy(annotations) is None


@pytest.mark.parametrize(("chain", "expected"), [
    # HAMi sorts by the chain's keys in order (gpu_policy.go:132-166): the first decides.
    ("binpack,numa", "hami-binpack-binpack"),
    ("spread, numa", "hami-binpack-spread"),
    ("spread,binpack", "hami-binpack-spread"),  # binpack compares the same score again
    ("binpack,binpack,", "hami-binpack-binpack"),  # empty and repeated keys are skipped
])
def test_a_chain_of_sort_keys_means_its_first_key(chain: str, expected: str) -> None:
    assert _policy({"hami.io/gpu-scheduler-policy": chain}) == expected


@pytest.mark.parametrize(("key", "value", "fragment"), [
    ("hami.io/node-scheduler-policy", "topology-aware", "honours binpack or spread"),
    ("hami.io/gpu-scheduler-policy", "mutex", "idle cards only"),
    ("hami.io/gpu-scheduler-policy", "spread,mutex", "idle cards only"),
    ("hami.io/gpu-scheduler-policy", "topology-aware", "worst-connected card for one"),
    ("hami.io/gpu-scheduler-policy", "binpack, topology-aware", "best-connected set"),
    ("hami.io/gpu-scheduler-policy", "numa", "NUMA node first"),
    ("hami.io/gpu-scheduler-policy", "numa,binpack", "numa only after one of them"),
    ("hami.io/gpu-scheduler-policy", "binpack,numb", "'numb' is not a HAMi card policy"),
    ("hami.io/gpu-scheduler-policy", ",", "names no card policy"),
    ("hami.io/node-scheduler-policy", "binpack,numa", "honours binpack or spread"),
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
        _policy({"hami.io/device-scoring-weights": "slot=2",
                 "hami.io/gpu-scheduler-policy": "mutex"})
    text = str(refused.value)
    for key in ("hami.io/device-scoring-weights", "hami.io/gpu-scheduler-policy"):
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


HAMI = DialectConfig(agent_profile=AgentProfile.HAMI)
OTHERS = [c for c in PROFILES if c.agent_profile is not AgentProfile.HAMI]


def _hami_request(annotations: dict[str, str]) -> PodRequest:
    request = parse_pod(make_pod(GPU, annotations=annotations), HAMI)
    assert request is not None
    return request


# HAMi v2.10.0 pkg/device/nvidia/device.go:493-503 checkType: a card is taken when the
# vgpu-mode value contains (strings.Contains) the card's registered mode, one of
# hami-core, mig, mps (:61-63). Tessera places shares on hami-core and mps cards.
@pytest.mark.parametrize(("value", "modes"), [
    ("hami-core", ("hami-core",)),
    ("mps", ("mps",)),
    ("hami-core,mps", ("hami-core", "mps")),
    ("mps hami-core", ("hami-core", "mps")),
    ("mig,mps", ("mps",)),  # mig cards are left out: the mps ones remain
    ("use-mps-please", ("mps",)),  # containment, not equality
    ("hami-core-mig", ("hami-core",)),
])
def test_vgpu_mode_takes_the_card_modes_its_value_contains(
        value: str, modes: tuple[str, ...]) -> None:
    request = _hami_request({"nvidia.com/vgpu-mode": value})
    assert request.card_modes == modes
    assert request.picks_cards and request.tells_cards_apart
    assert request.allows_mode("mps") == ("mps" in modes)
    assert not request.allows_mode("mig")


@pytest.mark.parametrize(("value", "fragment"), [
    ("", "names none of HAMi's card modes"),  # HAMi: contains no mode, takes no card
    ("MPS", "names none of HAMi's card modes"),  # strings.Contains is case-sensitive
    ("garbage", "names none of HAMi's card modes"),
    ("mig", "allows mig cards only: Tessera cuts no MIG instance"),
    ("mps" * 30, "at most 64 characters"),
])
def test_a_vgpu_mode_tessera_cannot_place_is_refused_naming_it(value: str,
                                                               fragment: str) -> None:
    with pytest.raises(RequestError) as refused:
        _hami_request({"nvidia.com/vgpu-mode": value})
    text = str(refused.value)
    assert "pod annotation nvidia.com/vgpu-mode=" in text and fragment in text
    assert len(text) < 400


# device.go:482-491 assertNuma: Go's strconv.ParseBool, true binds; :740-753 Fit keeps a
# container's cards on one NUMA node.
@pytest.mark.parametrize(("value", "bound"), [
    ("true", True), ("1", True), ("T", True), ("TRUE", True),
    ("false", False), ("0", False), ("F", False), ("False", False),
])
def test_numa_bind_is_gos_parse_bool(value: str, bound: bool) -> None:
    request = _hami_request({"nvidia.com/numa-bind": value})
    assert request.one_numa_node is bound
    assert request.tells_cards_apart is bound


@pytest.mark.parametrize("value", ["yes", "on", "", "t" * 1000])
def test_a_numa_bind_that_is_no_boolean_is_refused(value: str) -> None:
    with pytest.raises(RequestError, match=r"nvidia\.com/numa-bind=.* is not a boolean"):
        _hami_request({"nvidia.com/numa-bind": value})


@pytest.mark.parametrize("config", OTHERS, ids=lambda c: c.agent_profile.value)
def test_other_agents_refuse_numa_bind_and_mps_naming_the_agent(config: DialectConfig) -> None:
    agent = config.agent.name
    for asked, fragment in (
            ({"nvidia.com/numa-bind": "true"}, f"{agent} tells no card's NUMA node"),
            ({"nvidia.com/vgpu-mode": "mps"}, f"not under {agent}; write hami-core")):
        with pytest.raises(RequestError) as refused:
            parse_pod(make_pod(GPU, annotations=asked), config)
        assert fragment in str(refused.value)
        assert "agent profile hami" in str(refused.value)
    # hami-core (with or without more) asks for what every card of these agents is.
    for value in ("hami-core", "hami-core,mps"):
        admitted = parse_pod(make_pod(GPU, annotations={"nvidia.com/vgpu-mode": value}), config)
        assert admitted is not None and admitted.card_modes == ()
    unbound = parse_pod(make_pod(GPU, annotations={"nvidia.com/numa-bind": "false"}), config)
    assert unbound is not None and not unbound.one_numa_node


def test_every_refused_card_choice_is_named_at_once() -> None:
    with pytest.raises(RequestError) as refused:
        _hami_request({"nvidia.com/vgpu-mode": "mig", "nvidia.com/numa-bind": "yes",
                       "nvidia.com/use-gputype": ",".join(["A100"] * 100)})
    text = str(refused.value)
    for key in ("nvidia.com/vgpu-mode", "nvidia.com/numa-bind", "nvidia.com/use-gputype"):
        assert f"pod annotation {key}" in text


def test_modes_and_numa_bind_survive_the_request_record() -> None:
    pod = make_pod(GPU, annotations={"nvidia.com/vgpu-mode": "mps",
                                     "nvidia.com/numa-bind": "true"})
    request = parse_pod(pod, HAMI)
    assert request is not None
    decoded = decode_request(encode_request(request))
    assert decoded == request
    assert decoded.card_modes == ("mps",) and decoded.one_numa_node
    old = decode_request(encode_request(replace(request, card_modes=(), one_numa_node=False)))
    assert old.card_modes == () and not old.one_numa_node


@pytest.mark.parametrize(("field", "value"), [
    ("cardModes", [1]), ("cardModes", [""]), ("cardModes", "mps"),
    ("oneNumaNode", "yes"), ("oneNumaNode", 1),
])
def test_a_garbled_record_of_modes_or_numa_binding_is_a_codec_error(field: str,
                                                                   value: object) -> None:
    request = _hami_request({"nvidia.com/vgpu-mode": "mps"})
    doc = json.loads(encode_request(request))
    doc[field] = value
    with pytest.raises(CodecError, match=field):
        decode_request(json.dumps(doc))
