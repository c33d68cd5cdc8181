"""The shared vocabulary: keys derived from the domain, and the codecs' round trips."""

from __future__ import annotations

import json

import pytest

from tessera.vocabulary import (
    Allocation,
    CodecError,
    ContainerAllocation,
    ContainerRequest,
    Mode,
    PodRequest,
    RequestError,
    Vocabulary,
    decode_allocation,
    decode_request,
    encode_allocation,
    encode_request,
)

REQUESTS = [
    PodRequest((ContainerRequest("main", memory_mib=256),)),
    PodRequest((ContainerRequest("main", cards=2),)),
    PodRequest((ContainerRequest("main", core_percent=20, memory_mib=1024),)),
    PodRequest((ContainerRequest("main", core_percent=25, memory_percent=25),)),
    PodRequest(
        (
            ContainerRequest("warmup", core_percent=10, memory_percent=10, init=True),
            ContainerRequest("main", cards=1),
        ),
        models=("Tesla-T4", "NVIDIA-A10"),
        min_card_memory_mib=8000,
        policy="spread",
    ),
    PodRequest((ContainerRequest("main", cards=2),), mixed_models=True),
    PodRequest((ContainerRequest("main", core_percent=30, memory_mib=3000, shares=2),)),
    PodRequest((ContainerRequest("main", cards=1),), use_types=("A100", "h100"),
               nouse_types=("T4",), use_uuids=("GPU-1",), nouse_uuids=("GPU-2", "GPU-3")),
    PodRequest((ContainerRequest("main", cards=2),), card_modes=("hami-core", "mps"),
               one_numa_node=True),
]


def test_a_request_written_before_share_counts_reads_as_one_share() -> None:
    old = '{"v":1,"containers":[{"name":"main","memoryMiB":3000}]}'
    assert decode_request(old).containers[0].shares == 1
    assert encode_request(decode_request(old)) == old


def test_a_request_written_before_hamis_card_choice_reads_as_no_choice() -> None:
    old = '{"v":1,"containers":[{"name":"main","cards":1}]}'
    assert not decode_request(old).picks_cards
    assert encode_request(decode_request(old)) == old


@pytest.mark.parametrize(("model", "uuid", "choice", "allowed"), [
    ("NVIDIA-A100-SXM4-80GB", "GPU-1", {"use_types": ("a100",)}, True),  # part, any case
    ("NVIDIA-A100-SXM4-80GB", "GPU-1", {"use_types": ("T4", "H100")}, False),
    ("NVIDIA-A100-SXM4-80GB", "GPU-1", {"nouse_types": ("sxm4",)}, False),
    ("Tesla-T4", "GPU-1", {"use_types": ("nvidia-tesla",)}, True),  # HAMi's NVIDIA-<model>
    ("Tesla-T4", "GPU-1", {"nouse_types": ("NVIDIA",)}, False),
    ("Tesla-T4", "GPU-1", {"nouse_types": ("A100",)}, True),
    # "use" and "nouse" both apply (HAMi v2.10.0 CheckType, CheckUUID).
    ("NVIDIA-A100-SXM4-80GB", "GPU-1", {"use_types": ("A100",), "nouse_types": ("80GB",)},
     False),
    ("NVIDIA-A100-SXM4-40GB", "GPU-1", {"use_types": ("A100",), "nouse_types": ("80GB",)},
     True),
    ("T4", "GPU-1", {"use_uuids": ("GPU-1", "GPU-2"), "nouse_uuids": ("GPU-1",)}, False),
    ("T4", "GPU-1", {"use_uuids": ("GPU-1", "GPU-2")}, True),
    ("T4", "GPU-12", {"use_uuids": ("GPU-1",)}, False),  # exact, not a part
    ("T4", "gpu-1", {"use_uuids": ("GPU-1",)}, False),
    ("T4", "GPU-1", {"nouse_uuids": ("GPU-1",)}, False),
    ("T4", "GPU-2", {"nouse_uuids": ("GPU-1",)}, True),
    ("T4", "", {"use_uuids": ("GPU-1",)}, False),  # a card without a UUID is never named
    ("T4", "GPU-1", {}, True),
])
def test_hamis_card_choice_matches_as_hami_does(model: str, uuid: str,
                                                choice: dict[str, tuple[str, ...]],
                                                allowed: bool) -> None:
    pod = PodRequest((ContainerRequest("main", cards=1),), **choice)  # type: ignore[arg-type]
    assert (pod.allows_type(model) and pod.allows_uuid(uuid)) is allowed


@pytest.mark.parametrize(("fields", "fragment"), [
    ({"cards": 2, "shares": 2}, "not whole cards"),
    ({"memoryMiB": 3000, "shares": 0}, "share count 0"),
    ({"memoryMiB": 3000, "shares": "2"}, "'shares' must be an integer"),
])
def test_a_bad_share_count_is_refused(fields: dict[str, object], fragment: str) -> None:
    text = json.dumps({"v": 1, "containers": [{"name": "main", **fields}]})
    with pytest.raises(CodecError, match=fragment):
        decode_request(text)


@pytest.mark.parametrize("request_", REQUESTS)
def test_a_pod_request_survives_its_codec(request_: PodRequest) -> None:
    text = encode_request(request_)
    assert decode_request(text) == request_
    assert encode_request(decode_request(text)) == text


@pytest.mark.parametrize(
    "allocation",
    [
        Allocation("node-1", (ContainerAllocation("main", (0, 1)),), 1700000000.5, "uid-1"),
        Allocation(
            "node-2",
            (
                ContainerAllocation("warmup", (3,), core_percent=10, memory_mib=512, init=True),
                ContainerAllocation("main", (3,), core_percent=25, memory_mib=4096),
            ),
        ),
    ],
)
def test_an_allocation_survives_its_codec(allocation: Allocation) -> None:
    assert decode_allocation(encode_allocation(allocation)) == allocation


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "not JSON"),
        ("[1, 2]", "JSON object"),
        ('{"containers": [{"name": "main", "cards": 1}]}', "version"),
        ('{"v": 2, "containers": [{"name": "main", "cards": 1}]}', "version"),
        ('{"v": 1, "containers": []}', "at least one GPU container"),
        ('{"v": 1, "containers": [{"name": "main"}]}', "empty GPU share"),
        ('{"v": 1, "containers": [{"name": "", "cards": 1}]}', "'name'"),
        ('{"v": 1, "containers": [{"name": "main", "cards": "1"}]}', "'cards'"),
        ('{"v": 1, "containers": [{"name": "main", "cards": true}]}', "'cards'"),
        ('{"v": 1, "containers": [{"name": "main", "corePercent": 150}]}', "out of range"),
        ('{"v": 1, "containers": [{"name": "main", "memoryMiB": -1}]}', "< 0"),
        ('{"v": 1, "containers": [{"name": "main", "cards": 1, "corePercent": 5}]}', "no share"),
        ('{"v": 1, "containers": [{"name": "m", "cards": 1}, {"name": "m", "cards": 1}]}',
         "duplicate"),
        ('{"v": 1, "containers": [{"name": "main", "cards": 1}], "models": [""]}', "models"),
        ('{"v": 1, "containers": [{"name": "main", "cards": 1}], "policy": 7}', "policy"),
        ('{"v": 1, "containers": [{"name": "main", "cards": 2}], "mixedModels": "yes"}',
         "mixedModels"),
        ('{"v": 1, "containers": "main"}', "'containers'"),
        ('{"v": 1, "containers": [{"name": "main", "cards": 1}], "useUUIDs": "GPU-1"}',
         "'useUUIDs' must be a list"),
        ('{"v": 1, "containers": [{"name": "main", "cards": 1}], "nouseTypes": [""]}',
         "nouseTypes must be non-empty strings"),
    ],
)
def test_a_bad_request_annotation_is_refused_with_a_reason(text: str, fragment: str) -> None:
    with pytest.raises(CodecError) as caught:
        decode_request(text)
    assert fragment in str(caught.value)


@pytest.mark.parametrize(
    "text",
    [
        '{"v": 1, "node": "n", "containers": [{"name": "main", "cards": []}]}',
        '{"v": 1, "node": "n", "containers": [{"name": "main", "cards": [-1]}]}',
        '{"v": 1, "node": "", "containers": [{"name": "main", "cards": [0]}]}',
        '{"v": 1, "node": "n", "at": "yesterday", "containers": []}',
    ],
)
def test_a_bad_allocation_annotation_is_refused(text: str) -> None:
    with pytest.raises(CodecError):
        decode_allocation(text)


def test_the_encoded_request_is_compact_json_with_explicit_units() -> None:
    doc = json.loads(encode_request(REQUESTS[2]))
    assert doc == {"v": 1, "containers": [{"name": "main", "corePercent": 20, "memoryMiB": 1024}]}


def test_every_key_derives_from_the_domain() -> None:
    vocabulary = Vocabulary("gpu.example.com")
    keys = [
        vocabulary.core_resource, vocabulary.memory_resource, vocabulary.request_annotation,
        vocabulary.allocation_annotation, vocabulary.gpu_pod_label, vocabulary.mode_label,
        vocabulary.model_annotation, vocabulary.policy_annotation,
        vocabulary.mixed_models_annotation,
    ]
    assert all(k.startswith("gpu.example.com/") for k in keys)
    assert len(set(keys)) == len(keys)
    assert Vocabulary().core_resource == "elasticgpu.io/gpu-core"


@pytest.mark.parametrize(
    ("containers", "mode"),
    [
        ((ContainerRequest("a", cards=1),), Mode.WHOLE),
        ((ContainerRequest("a", core_percent=5),), Mode.SHARED),
        ((ContainerRequest("a", cards=1), ContainerRequest("b", memory_mib=5)), Mode.MIXED),
    ],
)
def test_the_mode_says_how_a_pod_uses_cards(
    containers: tuple[ContainerRequest, ...], mode: Mode
) -> None:
    assert PodRequest(containers).mode is mode


def test_a_share_and_whole_cards_cannot_be_mixed_in_one_container() -> None:
    with pytest.raises(RequestError):
        ContainerRequest("a", cards=1, memory_mib=10)


@pytest.mark.parametrize(
    "text",
    [
        "[" * 3000,
        '{"v":1,"node":"n","at":' + "9" * 400 + ',"containers":[]}',
        '{"v":1,"node":"n","at":1e999,"containers":[]}',
        '{"v":1,"node":"n","at":NaN,"containers":[]}',
        '{"v":1,"node":"n","at":-5,"containers":[]}',
        '{"v":1,"node":"n","at":' + "9" * 5000 + ',"containers":[]}',
        '{"v":1,"containers":' + "[" * 5000 + "]" * 5000 + "}",
    ],
    ids=["brackets", "at-400-digits", "at-inf", "at-nan", "at-negative", "at-5000-digits",
         "deep-containers"],
)
def test_a_hostile_allocation_record_is_a_codec_error_and_nothing_else(text: str) -> None:
    # Anyone who can create a pod can write this annotation (issue 9, item 1).
    with pytest.raises(CodecError):
        decode_allocation(text)


@pytest.mark.parametrize("text", ["[" * 3000, '{"v":1,"containers":' + "[" * 5000 + "}"])
def test_a_hostile_request_record_is_a_codec_error_and_nothing_else(text: str) -> None:
    with pytest.raises(CodecError):
        decode_request(text)
