"""The e2e oracle (devcluster/checks.py:allocation_problems): each named check finds the one
inconsistency it is named for, and a consistent pod has none."""

from __future__ import annotations

from typing import Any

import pytest

from devcluster.checks import allocation_problems
from kubectl_tessera.report import CardInfo
from tessera.vocabulary import (
    Allocation,
    ContainerAllocation,
    ContainerRequest,
    PodRequest,
    Vocabulary,
    encode_allocation,
    encode_request,
)

VOCABULARY = Vocabulary()
CARDS = [CardInfo(0, "A100", 40960), CardInfo(1, "A100", 40960), CardInfo(2, "T4", 16384)]


def bound_pod(request: PodRequest, allocation: Allocation, *, node: str = "gpu-1",
              uid: str = "uid-1", agent: dict[str, str] | None = None,
              assumed: bool = True) -> dict[str, Any]:
    """A pod as the allocator leaves it: both records, the agent's keys, bound to ``node``."""
    annotations = {
        VOCABULARY.request_annotation: encode_request(request),
        VOCABULARY.allocation_annotation: encode_allocation(allocation),
        **({f"{VOCABULARY.domain}/assumed": "true"} if assumed else {}),
    }
    if agent is None:
        agent = {c.name: ",".join(map(str, c.card_indices)) for c in allocation.containers}
    annotations |= {f"{VOCABULARY.domain}/container-{name}": v for name, v in agent.items()}
    return {"metadata": {"uid": uid, "annotations": annotations}, "spec": {"nodeName": node}}


SHARE = PodRequest(containers=(ContainerRequest("app", core_percent=25, memory_mib=4096),))
SHARE_ON_0 = Allocation("gpu-1", (ContainerAllocation("app", (0,), 25, 4096),), pod_uid="uid-1")
WHOLE = PodRequest(containers=(ContainerRequest("app", cards=2),))
WHOLE_ON_0_1 = Allocation("gpu-1", (ContainerAllocation("app", (0, 1)),), pod_uid="uid-1")


def test_a_consistent_share_and_whole_cards_have_no_problem() -> None:
    assert allocation_problems(bound_pod(SHARE, SHARE_ON_0), CARDS, VOCABULARY) == []
    assert allocation_problems(bound_pod(WHOLE, WHOLE_ON_0_1), CARDS, VOCABULARY) == []


@pytest.mark.parametrize(("request_", "allocation", "pod_options", "expected"), [
    (SHARE, SHARE_ON_0, {"node": "gpu-2"},
     "record says node 'gpu-1', pod is bound to 'gpu-2'"),
    (SHARE, SHARE_ON_0, {"uid": "uid-2"}, "record is for uid uid-1, pod is uid-2"),
    (SHARE, Allocation("gpu-1", (ContainerAllocation("other", (0,), 25, 4096),)), {},
     "containers requested ['app'] but allocated ['other']"),
    (SHARE, Allocation("gpu-1", (ContainerAllocation("app", (7,), 25, 4096),)), {},
     "app: cards [7] do not exist on gpu-1"),
    (WHOLE, Allocation("gpu-1", (ContainerAllocation("app", (0, 0)),)), {},
     "app: wants 2 whole cards, got"),
    (SHARE, Allocation("gpu-1", (ContainerAllocation("app", (0, 1), 25, 4096),)), {},
     "app: a share must be on one card, got (0, 1)"),
    (SHARE, Allocation("gpu-1", (ContainerAllocation("app", (0,), 50, 4096),)), {},
     "app: core 50% != 25%"),
    (SHARE, Allocation("gpu-1", (ContainerAllocation("app", (0,), 25, 2048),)), {},
     "app: memory 2048 MiB != 4096"),
    (PodRequest(containers=(ContainerRequest("app", core_percent=25, memory_percent=50),)),
     Allocation("gpu-1", (ContainerAllocation("app", (0,), 25, 1000),)), {},
     "app: memory 1000 MiB, ~20480 wanted"),
    (PodRequest(containers=SHARE.containers, models=("T4",)), SHARE_ON_0, {},
     "app: card 0 is A100, not in ('T4',)"),
    (PodRequest(containers=WHOLE.containers, min_card_memory_mib=65536), WHOLE_ON_0_1, {},
     "app: card 0 has 40960 MiB < 65536"),
    (SHARE, SHARE_ON_0, {"agent": {"app": "1"}},
     "agent annotation elasticgpu.io/container-app='1', want '0'"),
    (SHARE, SHARE_ON_0, {"assumed": False}, "elasticgpu.io/assumed annotation missing"),
])
def test_each_check_reports_the_inconsistency_it_is_named_for(
    request_: PodRequest, allocation: Allocation, pod_options: dict[str, Any], expected: str,
) -> None:
    problems = allocation_problems(bound_pod(request_, allocation, **pod_options), CARDS,
                                   VOCABULARY)
    assert any(p.startswith(expected) for p in problems), problems


def test_a_pod_without_its_records_is_one_problem() -> None:
    (problem,) = allocation_problems({"metadata": {}, "spec": {}}, CARDS, VOCABULARY)
    assert problem.startswith("annotations: KeyError")


def test_cards_that_do_not_exist_are_the_only_problem_of_their_container() -> None:
    allocation = Allocation("gpu-1", (ContainerAllocation("app", (9,), 50, 1),), pod_uid="uid-1")
    assert allocation_problems(bound_pod(SHARE, allocation, agent={}), CARDS, VOCABULARY) == [
        "app: cards [9] do not exist on gpu-1"]
