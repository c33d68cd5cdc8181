"""Every dialect, every refusal, and the allocator's view of a pod (tessera.dialects)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from builders import make_pod

from tessera.agent_profiles import AgentProfile
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
WITH_KAI = DialectConfig(enabled=DEFAULT_DIALECTS | {Dialect.KAI})
EVERYTHING = DialectConfig(enabled=frozenset(Dialect))


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


def test_only_hami_and_kai_wait_to_be_opted_in() -> None:
    # Their keys are not theirs alone: nvidia.com/gpu is NVIDIA's device plugin's, and KAI's
    # annotations have no prefix. Every other dialect's keys live under its own system's name.
    assert frozenset(Dialect) - DEFAULT_DIALECTS == {Dialect.HAMI, Dialect.KAI}


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        # Volcano vGPU: HAMi's model under volcano.sh names
        ({"volcano.sh/vgpu-number": "1"}, whole(1)),
        ({"volcano.sh/vgpu-number": "2"}, whole(2)),
        ({"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "3000"},
         share(memory_mib=3000)),
        ({"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "3000",
          "volcano.sh/vgpu-cores": "50"}, share(core=50, memory_mib=3000)),
        ({"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory-percentage": "25",
          "volcano.sh/vgpu-cores": "25"}, share(core=25, memory_percent=25)),
        ({"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-cores": "30"},
         share(core=30, memory_percent=100)),
        ({"volcano.sh/vgpu-memory": "1024"}, share(memory_mib=1024)),  # a count of 1 implied
        ({"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-cores": "100"}, whole(1)),
        ({"volcano.sh/vgpu-number": "0"}, None),
        # tkestack gpu-manager: core % (100 per card), memory in 256 MiB blocks
        ({"tencent.com/vcuda-core": "50", "tencent.com/vcuda-memory": "30"},
         share(core=50, memory_mib=7680)),  # the example of gpu-manager's README
        ({"tencent.com/vcuda-core": "100"}, whole(1)),
        ({"tencent.com/vcuda-core": "200", "tencent.com/vcuda-memory": "60"}, whole(2)),
        ({"tencent.com/vcuda-core": "0", "tencent.com/vcuda-memory": "0"}, None),
        # Koordinator: % of a card, memory in bytes, ratio in % of the card's memory
        ({"koordinator.sh/gpu": "50"}, share(core=50, memory_percent=50)),
        ({"koordinator.sh/gpu": "100"}, whole(1)),
        ({"koordinator.sh/gpu": "200"}, whole(2)),
        ({"koordinator.sh/gpu-memory": "4Gi"}, share(memory_mib=4096)),
        ({"koordinator.sh/gpu-memory": "1G"}, share(memory_mib=954)),  # 953.67 MiB, rounded up
        ({"koordinator.sh/gpu-memory-ratio": "30"}, share(core=30, memory_percent=30)),
        ({"koordinator.sh/gpu-memory-ratio": "200"}, whole(2)),
        ({"koordinator.sh/gpu-core": "60", "koordinator.sh/gpu-memory": "4Gi"},
         share(core=60, memory_mib=4096)),
        ({"koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory-ratio": "60"},
         share(core=50, memory_percent=60)),
        ({"koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory-ratio": "100"},
         share(core=50, memory_percent=100)),
        ({"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory-ratio": "100"}, whole(1)),
        ({"koordinator.sh/gpu-core": "300", "koordinator.sh/gpu-memory-ratio": "300"}, whole(3)),
        ({"koordinator.sh/gpu.shared": "1", "koordinator.sh/gpu-core": "40",
          "koordinator.sh/gpu-memory": "2Gi"}, share(core=40, memory_mib=2048)),
        ({"koordinator.sh/gpu.shared": "1", "koordinator.sh/gpu-memory-ratio": "25"},
         share(core=25, memory_percent=25)),
        ({"koordinator.sh/gpu.shared": "2", "koordinator.sh/gpu-core": "200",
          "koordinator.sh/gpu-memory-ratio": "200"}, whole(2)),
        ({"koordinator.sh/gpu-core": "0", "koordinator.sh/gpu-memory": "2Gi"},
         share(memory_mib=2048)),  # zeros are dropped, as Koordinator's RemoveZeros
        ({"koordinator.sh/gpu": "0"}, None),
    ],
)
def test_volcano_gpu_manager_and_koordinator_keys_become_the_canonical_request(
    limits: dict[str, Any], expected: PodRequest | None
) -> None:
    assert parse_pod(make_pod(limits), DEFAULT) == expected


@pytest.mark.parametrize(
    ("annotations", "containers", "expected"),
    [
        ({"gpu-fraction": "0.5"}, ["main"], share(core=50, memory_percent=50)),
        ({"gpu-fraction": "0.25", "gpu-fraction-num-devices": "1"}, ["main"],
         share(core=25, memory_percent=25)),
        ({"gpu-fraction": ".5"}, ["main"], share(core=50, memory_percent=50)),
        ({"gpu-fraction": "5e-1"}, ["main"], share(core=50, memory_percent=50)),
        ({"gpu-memory": "2000"}, ["main"], share(memory_mib=2000)),
        # the first container, unless gpu-fraction-container-name names another
        ({"gpu-fraction": "0.5"}, ["main", "sidecar"], share(core=50, memory_percent=50)),
        ({"gpu-fraction": "0.5", "gpu-fraction-container-name": "gpu-workload"},
         ["sidecar", "gpu-workload"],
         PodRequest((ContainerRequest("gpu-workload", core_percent=50, memory_percent=50),))),
        # the container name alone asks for nothing (KAI reads fraction and memory only)
        ({"gpu-fraction-container-name": "main"}, ["main"], None),
    ],
)
def test_kai_annotations_give_one_container_a_share_when_opted_in(
    annotations: dict[str, str], containers: list[str], expected: PodRequest | None
) -> None:
    pod = make_pod(containers=[make_container(n) for n in containers], annotations=annotations)
    assert parse_pod(pod, WITH_KAI) == expected


def test_a_kai_share_may_go_to_an_init_container() -> None:
    pod = make_pod(
        containers=[make_container("main")],
        init_containers=[make_container("gpu-init")],
        annotations={"gpu-fraction": "0.5", "gpu-fraction-container-name": "gpu-init"},
    )
    assert parse_pod(pod, WITH_KAI) == PodRequest(
        (ContainerRequest("gpu-init", core_percent=50, memory_percent=50, init=True),)
    )


def test_a_kai_share_and_a_container_key_that_agree_are_one_request() -> None:
    pod = make_pod({"elasticgpu.io/gpu-percent": "50"}, annotations={"gpu-fraction": "0.5"})
    assert parse_pod(pod, WITH_KAI) == share(core=50, memory_percent=50)


def test_kai_annotations_are_left_alone_unless_opted_in() -> None:
    pod = make_pod(annotations={"gpu-fraction": "0.5", "gpu-memory": "nonsense"})
    assert not asks_for_gpu(pod, DEFAULT)
    assert parse_pod(pod, DEFAULT) is None


@pytest.mark.parametrize(
    ("limits", "fragments"),
    [
        # Volcano: HAMi's rules under Volcano's names
        ({"volcano.sh/vgpu-memory": "1000", "volcano.sh/vgpu-memory-percentage": "50"},
         ["volcano.sh/vgpu-memory", "volcano.sh/vgpu-memory-percentage", "together"]),
        ({"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory-percentage": "50"},
         ["add volcano.sh/vgpu-cores"]),
        ({"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-cores": "100",
          "volcano.sh/vgpu-memory": "10"}, ["volcano.sh/vgpu-cores=100"]),
        ({"volcano.sh/vgpu-cores": "101"}, ["volcano.sh/vgpu-cores=101", "0-100"]),
        ({"volcano.sh/vgpu-memory-percentage": "0"}, ["volcano.sh/vgpu-memory-percentage=0"]),
        # gpu-manager: above 100 only multiples of 100; a share needs both
        ({"tencent.com/vcuda-core": "150"}, ["tencent.com/vcuda-core=150", "100·k"]),
        ({"tencent.com/vcuda-core": "50"},
         ["tencent.com/vcuda-core=50 without tencent.com/vcuda-memory", "needs both"]),
        ({"tencent.com/vcuda-memory": "8"},
         ["tencent.com/vcuda-memory=8 without tencent.com/vcuda-core", "needs both"]),
        ({"tencent.com/vcuda-memory": "1Gi", "tencent.com/vcuda-core": "10"},
         ["tencent.com/vcuda-memory", "256 MiB blocks"]),
        # Koordinator: only the combinations it accepts
        ({"koordinator.sh/gpu-core": "50"},
         ["koordinator.sh/gpu-core is not a combination Koordinator accepts"]),
        ({"koordinator.sh/gpu.shared": "1"}, ["koordinator.sh/gpu.shared is not a combination"]),
        ({"koordinator.sh/gpu": "50", "koordinator.sh/gpu-memory": "1Gi"},
         ["koordinator.sh/gpu + koordinator.sh/gpu-memory is not a combination"]),
        ({"koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory": "1Gi",
          "koordinator.sh/gpu-memory-ratio": "50"}, ["is not a combination"]),
        ({"koordinator.sh/gpu-memory-ratio": "50", "nvidia.com/gpu": "1"},
         ["nvidia.com/gpu + koordinator.sh/gpu-memory-ratio is not a combination"]),
        ({"koordinator.sh/gpu": "150"}, ["koordinator.sh/gpu=150", "multiples of 100"]),
        ({"koordinator.sh/gpu-core": "250", "koordinator.sh/gpu-memory-ratio": "300"},
         ["koordinator.sh/gpu-core=250", "multiples of 100"]),
        ({"koordinator.sh/gpu.shared": "2", "koordinator.sh/gpu-core": "51",
          "koordinator.sh/gpu-memory-ratio": "50"},
         ["koordinator.sh/gpu-core=51 with koordinator.sh/gpu.shared=2", "multiple of 2"]),
        ({"koordinator.sh/gpu.shared": "2", "koordinator.sh/gpu-core": "300",
          "koordinator.sh/gpu-memory-ratio": "200"}, ["at most 200"]),
        ({"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": "4Gi"},
         ["koordinator.sh/gpu-core=100 with koordinator.sh/gpu-memory", "all of one card's"]),
        ({"koordinator.sh/gpu-core": "200", "koordinator.sh/gpu-memory": "4Gi"},
         ["koordinator.sh/gpu-core=200", "more compute than one card has"]),
        ({"koordinator.sh/gpu-memory": "-1Gi"}, ["koordinator.sh/gpu-memory", "bytes >= 0"]),
        ({"koordinator.sh/gpu-memory": "4GB"}, ["koordinator.sh/gpu-memory", "'4GB'"]),
    ],
)
def test_impossible_volcano_gpu_manager_and_koordinator_requests_are_refused(
    limits: dict[str, Any], fragments: list[str]
) -> None:
    with pytest.raises(RequestError, match="container 'main'") as caught:
        parse_pod(make_pod(limits), DEFAULT)
    for fragment in fragments:
        assert fragment in str(caught.value)


@pytest.mark.parametrize(
    ("annotations", "fragments"),
    [
        ({"gpu-fraction": "1"}, ["container 'main'", "gpu-fraction='1'", "between 0 and 1"]),
        ({"gpu-fraction": "0"}, ["gpu-fraction='0'"]),
        ({"gpu-fraction": "-0.5"}, ["gpu-fraction='-0.5'"]),
        ({"gpu-fraction": "0.333"}, ["gpu-fraction='0.333'", "hundredths"]),
        ({"gpu-fraction": "half"}, ["gpu-fraction='half'"]),
        ({"gpu-fraction": "0.5", "gpu-memory": "2000"},
         ["container 'main'", "gpu-fraction and gpu-memory", "together"]),
        ({"gpu-memory": "0"}, ["container 'main'", "gpu-memory='0'", "whole number of MiB"]),
        ({"gpu-memory": "2Gi"}, ["gpu-memory='2Gi'"]),
        ({"gpu-fraction-num-devices": "2"}, ["gpu-fraction-num-devices='2'", "needs gpu-fraction"]),
        ({"gpu-memory": "1000", "gpu-fraction-num-devices": "0"},
         ["gpu-fraction-num-devices='0'", "from 1 to 1024"]),
        ({"gpu-fraction": "0.5", "gpu-fraction-container-name": "nope"},
         ["gpu-fraction-container-name='nope'", "'main'"]),
    ],
)
def test_impossible_kai_requests_are_refused_as_kai_refuses_them(
    annotations: dict[str, str], fragments: list[str]
) -> None:
    with pytest.raises(RequestError) as caught:
        parse_pod(make_pod(annotations=annotations), WITH_KAI)
    for fragment in fragments:
        assert fragment in str(caught.value)


def test_a_kai_share_next_to_whole_nvidia_gpus_is_refused_naming_their_container() -> None:
    pod = make_pod(
        containers=[make_container("main"), make_container("trainer", {"nvidia.com/gpu": "1"})],
        annotations={"gpu-fraction": "0.5"},
    )
    with pytest.raises(RequestError, match=r"container 'trainer': nvidia\.com/gpu") as caught:
        parse_pod(pod, WITH_KAI)
    assert "gpu-fraction" in str(caught.value)


HOSTILE = ["NaN", "nan", "inf", "1e999999", "²", "٣", "0x10", "9" * 70, "", " ", "1_000", None,
           True, [1], {"a": 1}]


@pytest.mark.parametrize("value", HOSTILE, ids=repr)
@pytest.mark.parametrize(
    "key",
    ["volcano.sh/vgpu-number", "volcano.sh/vgpu-memory", "volcano.sh/vgpu-memory-percentage",
     "volcano.sh/vgpu-cores", "tencent.com/vcuda-core", "tencent.com/vcuda-memory",
     "koordinator.sh/gpu", "koordinator.sh/gpu.shared", "koordinator.sh/gpu-core",
     "koordinator.sh/gpu-memory", "koordinator.sh/gpu-memory-ratio"],
)
def test_hostile_resource_values_are_refused_never_raised(key: str, value: Any) -> None:
    with pytest.raises(RequestError, match=re.escape(f"container 'main': {key}")):
        parse_pod(make_pod({key: value}), DEFAULT)


@pytest.mark.parametrize("value", HOSTILE, ids=repr)
@pytest.mark.parametrize(
    "key", ["gpu-fraction", "gpu-memory", "gpu-fraction-num-devices", "gpu-fraction-container-name"]
)
def test_hostile_kai_annotation_values_are_refused_never_raised(key: str, value: Any) -> None:
    share_key = "gpu-memory" if key == "gpu-fraction" else "gpu-fraction"
    annotations = {key: value} if key in ("gpu-fraction", "gpu-memory") else {
        key: value, share_key: "0.5"}
    with pytest.raises(RequestError, match=key):
        parse_pod(make_pod(annotations=annotations), WITH_KAI)


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        ({"volcano.sh/vgpu-memory": "1e8"}, "at most 16777216"),
        ({"tencent.com/vcuda-core": "1e9"}, "at most 102400"),
        ({"koordinator.sh/gpu-memory": "100Ei"}, "at most 16384 GiB"),
        ({"koordinator.sh/gpu.shared": "1M", "koordinator.sh/gpu-memory": "1"}, "at most 1024"),
    ],
)
def test_huge_values_are_refused_with_their_bound(limits: dict[str, Any], expected: str) -> None:
    with pytest.raises(RequestError, match="container 'main'") as caught:
        parse_pod(make_pod(limits), DEFAULT)
    assert expected in str(caught.value)


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


@pytest.mark.parametrize(("value", "mixed"), [("true", True), (" True ", True),
                                             ("false", False)])
def test_the_mixed_models_annotation_lets_a_pod_mix_card_models(value: str,
                                                                mixed: bool) -> None:
    pod = make_pod({"elasticgpu.io/gpu-core": "200"},
                   annotations={"elasticgpu.io/gpu-mixed-models": value})
    request = parse_pod(pod, DEFAULT)
    assert request is not None and request.mixed_models is mixed
    unset = parse_pod(make_pod({"elasticgpu.io/gpu-core": "200"}), DEFAULT)
    assert unset is not None and unset.mixed_models is False


def test_a_mixed_models_annotation_that_is_not_a_boolean_is_refused() -> None:
    pod = make_pod({"elasticgpu.io/gpu-core": "200"},
                   annotations={"elasticgpu.io/gpu-mixed-models": "yes"})
    with pytest.raises(RequestError, match=r'gpu-mixed-models=.yes. must be "true" or "false"'):
        parse_pod(pod, DEFAULT)


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
        ({"TESSERA_DOMAIN": "gpu.example.com", "TESSERA_AGENT_PROFILE": "hami"},
         DialectConfig(vocabulary=Vocabulary("gpu.example.com"),
                       agent_profile=AgentProfile.HAMI)),
    ],
)
def test_dialect_config_is_read_from_the_environment(
    env: dict[str, str], expected: DialectConfig
) -> None:
    assert DialectConfig.from_env(env) == expected


def test_bad_dialect_config_names_every_problem() -> None:
    with pytest.raises(ConfigError) as caught:
        DialectConfig.from_env({
            "TESSERA_DIALECTS": "elastic,kueue",
            "TESSERA_ALIYUN_MEMORY_UNIT": "GB",
            "TESSERA_DOMAIN": "Not A Domain",
        })
    for fragment in ("kueue", "TESSERA_ALIYUN_MEMORY_UNIT='GB'", "TESSERA_DOMAIN"):
        assert fragment in str(caught.value)


def test_the_allocator_reads_the_canonical_annotation_first() -> None:
    recorded = PodRequest((ContainerRequest("main", core_percent=25, memory_percent=25),))
    # The pod's resources say something else: the annotation (written by the webhook) wins.
    pod = make_pod(
        {"elasticgpu.io/gpu-core": "25"},
        annotations={"elasticgpu.io/gpu-request": encode_request(recorded)},
    )
    assert read_pod_request(pod, DEFAULT) == recorded


@pytest.mark.parametrize(
    ("pod", "config", "expected"),
    [
        (make_pod({"aliyun.com/gpu-mem": "2"}), DEFAULT, share(memory_mib=2048)),
        (make_pod({"volcano.sh/vgpu-memory": "2048"}), DEFAULT, share(memory_mib=2048)),
        (make_pod({"tencent.com/vcuda-core": "10", "tencent.com/vcuda-memory": "8"}), DEFAULT,
         share(core=10, memory_mib=2048)),
        (make_pod({"koordinator.sh/gpu-memory": "2Gi"}), DEFAULT, share(memory_mib=2048)),
        (make_pod(annotations={"gpu-memory": "2048"}), WITH_KAI, share(memory_mib=2048)),
        (make_pod(annotations={"gpu-memory": "2048"}), DEFAULT, None),
        (make_pod(), DEFAULT, None),
    ],
)
def test_the_allocator_parses_pods_that_came_without_the_webhook(
    pod: dict[str, Any], config: DialectConfig, expected: PodRequest | None
) -> None:
    assert read_pod_request(pod, config) == expected


@pytest.mark.parametrize(
    "annotation",
    ["not json", '{"v": 1, "containers": []}', '{"v": 9, "containers": [{"name": "main"}]}'],
)
def test_a_broken_canonical_annotation_is_a_request_error(annotation: str) -> None:
    pod = make_pod({"elasticgpu.io/gpu-core": "25"},
                   annotations={"elasticgpu.io/gpu-request": annotation})
    with pytest.raises(RequestError, match=r"elasticgpu\.io/gpu-request"):
        read_pod_request(pod, DEFAULT)


@pytest.mark.parametrize(
    ("limits", "wording"),
    [
        ({"elasticgpu.io/gpu-core": "30", "nano-gpu/gpu-percent": "40"},
         "asks for 30% core but nano-gpu/gpu-percent asks for 40% core and 40% of its memory"),
        ({"elasticgpu.io/gpu": "2", "nano-gpu.io/gpu-core": "100"},
         "asks for 2 whole cards but nano-gpu.io/gpu-core asks for 1 whole card"),
    ],
)
def test_two_dialects_that_disagree_are_refused_naming_both_requests(
        limits: dict[str, Any], wording: str) -> None:
    with pytest.raises(RequestError, match="write the request once, in one dialect") as caught:
        parse_pod(make_pod(limits), DEFAULT)
    assert wording in str(caught.value)


HAMI_PROFILE = DialectConfig(agent_profile=AgentProfile.HAMI)


def test_a_memory_percent_alone_is_one_share_under_hamis_agent() -> None:
    """HAMi v2.10.0 device.go:551-566 reads gpumem-percentage as a percent of the card's
    memory, device.go:579 gives defaultCores (0) when gpucores is absent; HAMi's agent counts
    nvidia.com/gpu, so the share is counted without compute."""
    pod = make_pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "25"})
    assert parse_pod(pod, HAMI_PROFILE) == share(memory_percent=25)


def test_a_memory_percent_alone_is_refused_where_compute_is_counted() -> None:
    pod = make_pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "25"})
    with pytest.raises(RequestError, match="under the elastic agent profile"):
        parse_pod(pod, WITH_HAMI)


def test_a_count_with_a_share_is_that_share_on_as_many_cards() -> None:
    """HAMi v2.10.0 device.go:520-597: Nums n vGPUs, each with Memreq and Coresreq; its
    fitInDevices gives each vGPU its own device."""
    pod = make_pod({"nvidia.com/gpu": "2", "nvidia.com/gpumem": "3000",
                    "nvidia.com/gpucores": "30"})
    expected = PodRequest((ContainerRequest("main", core_percent=30, memory_mib=3000,
                                            shares=2),))
    assert parse_pod(pod, HAMI_PROFILE) == expected
    assert parse_pod(pod, WITH_HAMI) == expected


@pytest.mark.parametrize("profile", [p for p in AgentProfile if p is not AgentProfile.HAMI])
def test_a_share_on_several_cards_is_refused_at_admission_naming_the_agent(
    profile: AgentProfile,
) -> None:
    agent = DialectConfig(agent_profile=profile).agent
    request = PodRequest((ContainerRequest("main", core_percent=30, memory_mib=3000,
                                           shares=2),))
    with pytest.raises(RequestError, match=r"on each of 2 cards.*gives a container's share "
                                           r"one card") as caught:
        agent.admit(request)
    assert agent.name in str(caught.value)


def test_a_share_on_several_cards_is_admitted_under_hamis_agent() -> None:
    agent = DialectConfig(agent_profile=AgentProfile.HAMI).agent
    request = PodRequest((ContainerRequest("main", memory_mib=3000, shares=2),))
    assert agent.admit(request).containers[0].shares == 2


def test_a_gpu_sidecar_is_read_as_a_restartable_init_container() -> None:
    # restartPolicy: Always on an init container (a sidecar): it runs beside the app
    # containers, and kubelet hands its devices to none of them (kubernetes v1.34.4
    # pkg/kubelet/cm/devicemanager/manager.go:380-387); the hami profile refuses it.
    ask = {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "10", "nvidia.com/gpumem": "1024"}
    pod = make_pod(ask, init_containers=[
        {"name": "side", "restartPolicy": "Always", "resources": {"limits": ask}},
        {"name": "once", "resources": {"limits": ask}}])
    parsed = parse_pod(pod, WITH_HAMI)
    assert parsed is not None
    assert [(c.name, c.init, c.restartable) for c in parsed.containers] == [
        ("side", True, True), ("once", True, False), ("main", False, False)]
