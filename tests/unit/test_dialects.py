"""Every dialect, every refusal, and the allocator's view of a pod (tessera.dialects)."""

from __future__ import annotations

from typing import Any

import pytest

from tessera.dialects import (
    DEFAULT_DIALECTS,
    Dialect,
    DialectConfig,
    asks_for_gpu,
    parse_pod,
    read_pod_request,
)
from tessera.vocabulary import (
    ConfigError,
    ContainerRequest,
    Mode,
    PodRequest,
    RequestError,
    Vocabulary,
    encode_request,
)

DEFAULT = DialectConfig()
WITH_HAMI = DialectConfig(enabled=DEFAULT_DIALECTS | {Dialect.HAMI})


def make_pod(
    limits: dict[str, Any] | None = None,
    *,
    requests: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    containers: list[dict[str, Any]] | None = None,
    init_containers: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if limits is not None:
        resources["limits"] = limits
    if requests is not None:
        resources["requests"] = requests
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {
            "containers": containers
            if containers is not None
            else [{"name": "main", "image": "busybox", "resources": resources}]
        },
    }
    if labels:
        pod["metadata"]["labels"] = labels
    if annotations:
        pod["metadata"]["annotations"] = annotations
    if init_containers:
        pod["spec"]["initContainers"] = init_containers
    return pod


def make_container(name: str, limits: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": name, "image": "busybox", "resources": {"limits": limits or {}}}


def share(core: int = 0, memory_mib: int = 0, memory_percent: int = 0) -> PodRequest:
    return PodRequest(
        (ContainerRequest("main", core_percent=core, memory_mib=memory_mib,
                          memory_percent=memory_percent),)
    )


def whole(cards: int) -> PodRequest:
    return PodRequest((ContainerRequest("main", cards=cards),))


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        # canonical elastic keys and their .com twins
        ({"elasticgpu.io/gpu-memory": "256"}, share(memory_mib=256)),
        ({"elasticgpu.io/gpu-core": "200"}, whole(2)),
        ({"elasticgpu.io/gpu-core": "100"}, whole(1)),
        ({"elasticgpu.io/gpu-core": "30"}, share(core=30)),
        ({"elasticgpu.io/gpu-core": "30", "elasticgpu.io/gpu-memory": "2048"},
         share(core=30, memory_mib=2048)),
        ({"elasticgpu.io/gpu-core": "1k"}, whole(10)),  # API server canonical form of 1000
        ({"elasticgpu.com/gpu-core": "25"}, share(core=25)),
        ({"elasticgpu.com/gpu-memory": "512"}, share(memory_mib=512)),
        ({"elasticgpu.io/gpu-core": "25", "elasticgpu.com/gpu-core": "25"}, share(core=25)),
        # percent
        ({"elasticgpu.io/gpu-percent": "25"}, share(core=25, memory_percent=25)),
        ({"elasticgpu.io/gpu-percent": "100"}, whole(1)),
        ({"nano-gpu/gpu-percent": "40"}, share(core=40, memory_percent=40)),
        # fraction
        ({"elasticgpu.io/gpu": "0.25"}, share(core=25, memory_percent=25)),
        ({"elasticgpu.io/gpu": "250m"}, share(core=25, memory_percent=25)),
        ({"elasticgpu.io/gpu": "2"}, whole(2)),
        ({"elasticgpu.io/gpu": 1}, whole(1)),
        # older nano-gpu (memory in GiB)
        ({"nano-gpu.io/gpu-core": "20", "nano-gpu.io/gpu-memory": "1"},
         share(core=20, memory_mib=1024)),
        ({"nano-gpu.io/gpu-core": "300"}, whole(3)),
        # Aliyun gpushare (GiB)
        ({"aliyun.com/gpu-mem": 5}, share(memory_mib=5 * 1024)),
        ({"aliyun.com/gpu-mem": "5"}, share(memory_mib=5 * 1024)),
        # two dialects that agree
        ({"elasticgpu.io/gpu-core": "20", "nano-gpu.io/gpu-core": "20"}, share(core=20)),
        ({"elasticgpu.io/gpu-percent": "50", "elasticgpu.io/gpu": "0.5"},
         share(core=50, memory_percent=50)),
    ],
)
def test_each_dialect_becomes_the_canonical_request(
    limits: dict[str, Any], expected: PodRequest
) -> None:
    assert parse_pod(make_pod(limits), DEFAULT) == expected


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        ({"nvidia.com/gpu": "1"}, whole(1)),
        ({"nvidia.com/gpu": "2"}, whole(2)),
        ({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000"}, share(memory_mib=3000)),
        ({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000", "nvidia.com/gpucores": "30"},
         share(core=30, memory_mib=3000)),
        ({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50",
          "nvidia.com/gpucores": "50"}, share(core=50, memory_percent=50)),
        ({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "30"}, share(core=30, memory_percent=100)),
        ({"nvidia.com/gpumem": "1000"}, share(memory_mib=1000)),  # HAMi's defaultGPUNum 1
        ({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "100"}, whole(1)),
    ],
)
def test_hami_keys_are_read_when_opted_in(limits: dict[str, Any], expected: PodRequest) -> None:
    assert parse_pod(make_pod(limits), WITH_HAMI) == expected


def test_hami_keys_belong_to_nvidia_unless_opted_in() -> None:
    assert parse_pod(make_pod({"nvidia.com/gpu": "1"}), DEFAULT) is None


@pytest.mark.parametrize(
    "limits",
    [
        {"aliyun.com/gpu-mem": "5"},
        {"nano-gpu.io/gpu-core": "20"},
    ],
)
def test_a_disabled_dialect_is_left_alone(limits: dict[str, Any]) -> None:
    config = DialectConfig(enabled=frozenset({Dialect.ELASTIC}))
    assert parse_pod(make_pod(limits), config) is None


@pytest.mark.parametrize(
    ("labels", "expected_cards", "expected_memory", "expected_models"),
    [
        ({"genius/gpu-number": "1"}, 1, 0, ()),
        ({"genius/gpu-number": "2", "genius/gpu-memory-each": "8000"}, 2, 8000, ()),
        ({"genius/gpu-number": "1", "genius/gpu-memory": "4000"}, 1, 4000, ()),
        ({"genius/gpu-number": "2", "genius/gpu-memory-total": "9001"}, 2, 4501, ()),
        ({"genius/gpu-number": "1", "genius/gpu-model": "Tesla-V100"}, 1, 0, ("Tesla-V100",)),
        ({"genius/gpu-number": "1", "genius/model": "Tesla-T4"}, 1, 0, ("Tesla-T4",)),
    ],
)
def test_genius_labels_ask_for_whole_cards_for_the_first_container(
    labels: dict[str, str],
    expected_cards: int,
    expected_memory: int,
    expected_models: tuple[str, ...],
) -> None:
    pod = make_pod(containers=[make_container("main"), make_container("sidecar")], labels=labels)
    assert parse_pod(pod, DEFAULT) == PodRequest(
        (ContainerRequest("main", cards=expected_cards),),
        models=expected_models,
        min_card_memory_mib=expected_memory,
    )


def test_init_containers_count_and_are_marked() -> None:
    pod = make_pod(
        containers=[make_container("main", {"elasticgpu.io/gpu-core": "50"})],
        init_containers=[make_container("warmup", {"elasticgpu.io/gpu": "0.1"})],
    )
    request = parse_pod(pod, DEFAULT)
    assert request is not None
    assert request.containers == (
        ContainerRequest("warmup", core_percent=10, memory_percent=10, init=True),
        ContainerRequest("main", core_percent=50),
    )


def test_containers_without_gpu_are_not_in_the_request() -> None:
    pod = make_pod(containers=[
        make_container("main", {"elasticgpu.io/gpu-core": "100"}),
        make_container("logger", {"cpu": "100m"}),
    ])
    assert parse_pod(pod, DEFAULT) == whole(1)


@pytest.mark.parametrize(
    ("limits", "requests", "expected"),
    [
        (None, {"elasticgpu.io/gpu-core": "20"}, share(core=20)),
        ({"elasticgpu.io/gpu-core": "20"}, None, share(core=20)),
        ({"elasticgpu.io/gpu-core": "20"}, {"elasticgpu.io/gpu-core": "20"}, share(core=20)),
        ({"elasticgpu.io/gpu": "0.5"}, {"elasticgpu.io/gpu": "500m"}, share(50, 0, 50)),
    ],
)
def test_requests_limits_or_both_equal_are_read(
    limits: dict[str, Any] | None, requests: dict[str, Any] | None, expected: PodRequest
) -> None:
    assert parse_pod(make_pod(limits, requests=requests), DEFAULT) == expected


@pytest.mark.parametrize(
    "pod",
    [
        make_pod(),
        make_pod({"cpu": "1", "memory": "1Gi"}),
        make_pod({"elasticgpu.io/gpu-core": "0"}),
        make_pod({"elasticgpu.io/gpu-core": "0", "elasticgpu.io/gpu-memory": "0"}),
        make_pod({"aliyun.com/gpu-mem": "0"}),
        make_pod({"nvidia.com/gpu": "1"}),
        make_pod(labels={"app": "web"}),
        make_pod(annotations={"elasticgpu.io/gpu-model": "Tesla-T4"}),
    ],
)
def test_pods_without_a_gpu_request_parse_to_none(pod: dict[str, Any]) -> None:
    assert parse_pod(pod, DEFAULT) is None


def test_a_pod_without_gpu_keys_takes_the_fast_path() -> None:
    assert not asks_for_gpu(make_pod({"cpu": "1"}), DEFAULT)
    assert asks_for_gpu(make_pod({"aliyun.com/gpu-mem": "1"}), DEFAULT)
    assert asks_for_gpu(make_pod(labels={"genius/gpu-number": "1"}), DEFAULT)


@pytest.mark.parametrize(
    ("pod", "fragments"),
    [
        (make_pod({"elasticgpu.io/gpu-core": "150"}),
         ["'main'", "elasticgpu.io/gpu-core=150", "100·k"]),
        (make_pod({"elasticgpu.io/gpu-memory": "-256"}),
         ["'main'", "elasticgpu.io/gpu-memory=-256", ">= 0"]),
        (make_pod({"elasticgpu.io/gpu-percent": "0"}),
         ["'main'", "elasticgpu.io/gpu-percent=0", "1-100"]),
        (make_pod({"elasticgpu.io/gpu-percent": "101"}),
         ["'main'", "elasticgpu.io/gpu-percent=101", "1-100"]),
        (make_pod({"elasticgpu.io/gpu": "1.5"}),
         ["'main'", "elasticgpu.io/gpu=1.5", "whole number"]),
        (make_pod({"elasticgpu.io/gpu": "0.255"}), ["elasticgpu.io/gpu=0.255", "hundredths"]),
        (make_pod({"elasticgpu.io/gpu": "0"}), ["elasticgpu.io/gpu=0"]),
        (make_pod({"elasticgpu.io/gpu-core": "20", "nano-gpu.io/gpu-core": "30"}),
         ["'main'", "elasticgpu.io/gpu-core", "nano-gpu.io/gpu-core", "20%", "30%"]),
        (make_pod({"elasticgpu.io/gpu-core": "100", "aliyun.com/gpu-mem": "2"}),
         ["'main'", "elasticgpu.io/gpu-core", "aliyun.com/gpu-mem"]),
        (make_pod({"elasticgpu.io/gpu-memory": "5GB"}),
         ["'main'", "elasticgpu.io/gpu-memory", "'5GB'", "not a Kubernetes quantity"]),
        (make_pod({"elasticgpu.io/gpu-memory": "1Gi"}),
         ["'main'", "elasticgpu.io/gpu-memory", "binary suffixes"]),
        (make_pod({"elasticgpu.io/gpu-core": "20.5"}), ["elasticgpu.io/gpu-core=20.5"]),
        (make_pod({"elasticgpu.io/gpu-core": "100", "elasticgpu.io/gpu-memory": "1024"}),
         ["whole cards", "remove elasticgpu.io/gpu-memory"]),
        (make_pod({"elasticgpu.io/gpu-core": "30"}, requests={"elasticgpu.io/gpu-core": "20"}),
         ["'main'", "elasticgpu.io/gpu-core", "20 in requests", "30 in limits"]),
        (make_pod({"aliyun.com/gpu-mem": "-1"}), ["aliyun.com/gpu-mem=-1", "GiB"]),
        (make_pod(labels={"genius/gpu-number": "two"}), ["genius/gpu-number", "'two'"]),
        (make_pod(labels={"genius/gpu-memory-each": "8000"}),
         ["genius/gpu-memory-each", "need genius/gpu-number"]),
        (make_pod({"elasticgpu.io/gpu-core": "20"},
                  annotations={"elasticgpu.io/gpu-policy": "Bin Pack!"}),
         ["elasticgpu.io/gpu-policy", "not a policy name"]),
        (make_pod({"elasticgpu.io/gpu-core": "20"}, annotations={"elasticgpu.io/gpu-model": " | "}),
         ["elasticgpu.io/gpu-model", "empty"]),
        (make_pod(containers=[
            make_container("a", {"elasticgpu.io/gpu-core": "150"}),
            make_container("b", {"elasticgpu.io/gpu-percent": "0"}),
        ]), ["'a'", "'b'"]),
        ({"metadata": {}, "spec": {"containers": "nope"}, "kind": "Pod"},
         ["spec.containers must be a list"]),
    ],
)
def test_impossible_requests_are_refused_with_a_message_naming_container_and_key(
    pod: dict[str, Any], fragments: list[str]
) -> None:
    with pytest.raises(RequestError) as caught:
        parse_pod(pod, DEFAULT)
    for fragment in fragments:
        assert fragment in str(caught.value)


@pytest.mark.parametrize(
    ("limits", "fragment"),
    [
        ({"nvidia.com/gpu": "2", "nvidia.com/gpumem": "1000"}, "exactly one card"),
        ({"nvidia.com/gpumem": "1000", "nvidia.com/gpumem-percentage": "50"},
         "cannot be used together"),
        ({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50"}, "add nvidia.com/gpucores"),
        ({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "100", "nvidia.com/gpumem": "10"},
         "gpucores=100"),
        ({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "101"}, "0-100"),
    ],
)
def test_impossible_hami_requests_are_refused(limits: dict[str, Any], fragment: str) -> None:
    with pytest.raises(RequestError, match="container 'main'") as caught:
        parse_pod(make_pod(limits), WITH_HAMI)
    assert fragment in str(caught.value)


def test_model_and_policy_annotations_go_into_the_request() -> None:
    pod = make_pod(
        {"elasticgpu.io/gpu-core": "20"},
        annotations={
            "elasticgpu.io/gpu-model": "Tesla-T4 | NVIDIA-A10,Tesla-T4",
            "elasticgpu.io/gpu-policy": "spread",
        },
    )
    request = parse_pod(pod, DEFAULT)
    assert request is not None
    assert request.models == ("Tesla-T4", "NVIDIA-A10")
    assert request.policy == "spread"


def test_genius_model_narrows_the_annotation_and_must_overlap() -> None:
    annotations = {"elasticgpu.io/gpu-model": "Tesla-T4|NVIDIA-A10"}
    narrowed = parse_pod(
        make_pod(labels={"genius/gpu-number": "1", "genius/gpu-model": "nvidia-a10"},
                 annotations=annotations),
        DEFAULT,
    )
    assert narrowed is not None and narrowed.models == ("NVIDIA-A10",)
    with pytest.raises(RequestError, match="no model in common"):
        parse_pod(
            make_pod(labels={"genius/gpu-number": "1", "genius/gpu-model": "H100"},
                     annotations=annotations),
            DEFAULT,
        )


def test_a_custom_domain_reads_its_own_keys_and_the_elastic_ones() -> None:
    config = DialectConfig(vocabulary=Vocabulary("gpu.example.com"))
    assert parse_pod(make_pod({"gpu.example.com/gpu-core": "40"}), config) == share(core=40)
    assert parse_pod(make_pod({"elasticgpu.io/gpu-core": "40"}), config) == share(core=40)
    request = parse_pod(
        make_pod({"gpu.example.com/gpu-core": "40"},
                 annotations={"gpu.example.com/gpu-policy": "binpack"}),
        config,
    )
    assert request is not None and request.policy == "binpack"


def test_the_aliyun_and_nano_gpu_units_are_configurable() -> None:
    config = DialectConfig(aliyun_memory_unit_mib=1, nano_gpu_memory_unit_mib=1)
    assert parse_pod(make_pod({"aliyun.com/gpu-mem": "5"}), config) == share(memory_mib=5)
    assert parse_pod(make_pod({"nano-gpu.io/gpu-memory": "300"}), config) == share(memory_mib=300)


def test_the_mode_of_a_pod_follows_its_containers() -> None:
    mixed = parse_pod(make_pod(containers=[
        make_container("a", {"elasticgpu.io/gpu-core": "100"}),
        make_container("b", {"elasticgpu.io/gpu-core": "10"}),
    ]), DEFAULT)
    assert mixed is not None and mixed.mode is Mode.MIXED


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, DialectConfig()),
        ({"TESSERA_DIALECTS": "elastic, hami"},
         DialectConfig(enabled=frozenset({Dialect.ELASTIC, Dialect.HAMI}))),
        ({"TESSERA_ALIYUN_MEMORY_UNIT": "MiB"}, DialectConfig(aliyun_memory_unit_mib=1)),
        ({"TESSERA_DOMAIN": "gpu.example.com"},
         DialectConfig(vocabulary=Vocabulary("gpu.example.com"))),
    ],
)
def test_dialect_config_is_read_from_the_environment(
    env: dict[str, str], expected: DialectConfig
) -> None:
    assert DialectConfig.from_env(env) == expected


def test_bad_dialect_config_names_every_problem() -> None:
    with pytest.raises(ConfigError) as caught:
        DialectConfig.from_env({
            "TESSERA_DIALECTS": "elastic,volcano",
            "TESSERA_ALIYUN_MEMORY_UNIT": "GB",
            "TESSERA_DOMAIN": "Not A Domain",
        })
    for fragment in ("volcano", "TESSERA_ALIYUN_MEMORY_UNIT='GB'", "TESSERA_DOMAIN"):
        assert fragment in str(caught.value)


def test_the_allocator_reads_the_canonical_annotation_first() -> None:
    recorded = PodRequest((ContainerRequest("main", core_percent=25, memory_percent=25),))
    # The pod's resources say something else: the annotation (written by the webhook) wins.
    pod = make_pod(
        {"elasticgpu.io/gpu-core": "25"},
        annotations={"elasticgpu.io/gpu-request": encode_request(recorded)},
    )
    assert read_pod_request(pod, DEFAULT) == recorded


def test_the_allocator_parses_pods_that_came_without_the_webhook() -> None:
    assert read_pod_request(make_pod({"aliyun.com/gpu-mem": "2"}), DEFAULT) == share(
        memory_mib=2048
    )
    assert read_pod_request(make_pod(), DEFAULT) is None


@pytest.mark.parametrize(
    "annotation",
    ["not json", '{"v": 1, "containers": []}', '{"v": 9, "containers": [{"name": "main"}]}'],
)
def test_a_broken_canonical_annotation_is_a_request_error(annotation: str) -> None:
    pod = make_pod({"elasticgpu.io/gpu-core": "25"},
                   annotations={"elasticgpu.io/gpu-request": annotation})
    with pytest.raises(RequestError, match=r"elasticgpu\.io/gpu-request"):
        read_pod_request(pod, DEFAULT)
