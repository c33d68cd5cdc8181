"""Koordinator's and KAI's share on each of several cards (issue 46): read with their meaning
as a share on each of n distinct cards, the shape HAMi's ``nvidia.com/gpu: n`` + ``gpumem``
has. Admitted where the agent runs it (HAMi's plugin), refused naming the agent elsewhere."""

from __future__ import annotations

import pytest
from builders import make_pod

from tessera.agent_profiles import AgentProfile, NodeAgent
from tessera.dialects import DEFAULT_DIALECTS, Dialect, DialectConfig, parse_pod
from tessera.vocabulary import ContainerRequest, RequestError

WITH_KAI = DialectConfig(enabled=DEFAULT_DIALECTS | {Dialect.KAI})


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        # koordinator-sh/koordinator v1.8.0 devicehandler_gpu.go:53-96: values / gpu.shared.
        ({"koordinator.sh/gpu.shared": "2", "koordinator.sh/gpu-core": "50",
          "koordinator.sh/gpu-memory-ratio": "50"},
         ContainerRequest("main", core_percent=25, memory_percent=25, shares=2)),
        ({"koordinator.sh/gpu.shared": "2", "koordinator.sh/gpu-memory": "8Gi"},
         ContainerRequest("main", memory_mib=4096, shares=2)),
        ({"koordinator.sh/gpu.shared": "3", "koordinator.sh/gpu-memory": "1Gi"},
         ContainerRequest("main", memory_mib=342, shares=3)),  # rounded up, never smaller
        # Without gpu.shared a ratio of 100·k sets k cards (devicehandler_gpu.go:67-69).
        ({"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory-ratio": "200"},
         ContainerRequest("main", core_percent=50, memory_percent=100, shares=2)),
    ],
    ids=["shared-core-ratio", "shared-memory", "shared-memory-rounded", "ratio-200"],
)
def test_koordinators_split_request_is_a_share_on_each_card(
        limits: dict[str, str], expected: ContainerRequest) -> None:
    parsed = parse_pod(make_pod(limits), DialectConfig())
    assert parsed is not None and parsed.containers == (expected,)


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        # NVIDIA/KAI-Scheduler v0.13.0 pkg/scheduler/api/pod_info/pod_info.go:458-465.
        ({"gpu-fraction": "0.5", "gpu-fraction-num-devices": "2"},
         ContainerRequest("main", core_percent=50, memory_percent=50, shares=2)),
        ({"gpu-memory": "2000", "gpu-fraction-num-devices": "3"},
         ContainerRequest("main", memory_mib=2000, shares=3)),
    ],
    ids=["fraction", "memory"],
)
def test_kais_multi_fraction_is_a_share_on_each_card(
        annotations: dict[str, str], expected: ContainerRequest) -> None:
    parsed = parse_pod(make_pod(annotations=annotations), WITH_KAI)
    assert parsed is not None and parsed.containers == (expected,)


@pytest.mark.parametrize("profile", [AgentProfile.ELASTIC, AgentProfile.NANO_GPU])
def test_a_split_request_is_refused_naming_an_agent_that_gives_a_share_one_card(
        profile: AgentProfile) -> None:
    parsed = parse_pod(make_pod({"koordinator.sh/gpu.shared": "2",
                                 "koordinator.sh/gpu-core": "50",
                                 "koordinator.sh/gpu-memory-ratio": "50"}), DialectConfig())
    assert parsed is not None
    agent = NodeAgent(profile)
    with pytest.raises(RequestError) as refused:
        agent.admit(parsed)
    message = str(refused.value)
    assert "on each of 2 cards" in message and agent.name in message
    assert "agent profile hami" in message and "exactly one card" not in message


def test_a_split_request_is_admitted_under_hamis_agent_with_hamis_keys() -> None:
    parsed = parse_pod(make_pod(annotations={"gpu-fraction": "0.5",
                                             "gpu-fraction-num-devices": "2"}), WITH_KAI)
    assert parsed is not None
    hami = NodeAgent(AgentProfile.HAMI)
    placed = hami.admit(parsed)
    assert hami.container_resources(placed.containers[0]) == {
        "nvidia.com/gpu": "2", "nvidia.com/gpucores": "50",
        "nvidia.com/gpumem-percentage": "50"}
