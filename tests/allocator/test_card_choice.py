"""HAMi's card choice (``nvidia.com/use-gputype`` and the other three) in the ranking:
``eligible`` keeps the cards the pod allows, and a pod no card is allowed to gets an
unresolvable reason naming the annotation (allocator.ranking.search, allocator.ranking.unfit)."""

from __future__ import annotations

import pytest
from builders import share, whole

from allocator.ranking.cards import Card, CardState, NodeState
from allocator.ranking.fit import Placement, Unfit, fits, place, unfit_reason
from allocator.ranking.policies import REGISTRY, PolicyContext, chooser
from tessera.vocabulary import PodRequest

A100 = "NVIDIA-A100-SXM4-80GB"
T4 = "NVIDIA-Tesla-T4"


def _node() -> NodeState:
    """Card 0: a T4, card 1: an A100, each with its UUID (as HAMi's register tells)."""
    return NodeState("n", (CardState(Card(0, T4, 16384, uuid="GPU-t4")),
                           CardState(Card(1, A100, 81920, uuid="GPU-a100"))))


def _card_of(req: PodRequest) -> tuple[int, ...]:
    result = place(req, _node(), chooser(REGISTRY["binpack"], PolicyContext(req)), "u1")
    assert isinstance(result, Placement), result
    return result.containers[0].card_indices


@pytest.mark.parametrize(("choice", "card"), [
    ({"use_types": ("a100",)}, 1),  # a case-insensitive part of the card type
    ({"use_types": ("H100", "T4")}, 0),
    ({"nouse_types": ("Tesla",)}, 1),
    ({"nouse_types": ("A100",)}, 0),
    ({"use_uuids": ("GPU-a100",)}, 1),
    ({"nouse_uuids": ("GPU-t4",)}, 1),
    # "use" and "nouse" both apply, as in HAMi v2.10.0.
    ({"use_uuids": ("GPU-t4", "GPU-a100"), "nouse_uuids": ("GPU-t4",)}, 1),
    ({"use_types": ("NVIDIA",), "nouse_types": ("tesla",)}, 1),
])
def test_the_pod_gets_a_card_its_hami_annotations_allow(choice: dict[str, tuple[str, ...]],
                                                        card: int) -> None:
    req = PodRequest((whole(),), **choice)  # type: ignore[arg-type]
    assert _card_of(req) == (card,)
    # And the other card is refused to it: taken, the pod waits rather than moves.
    shared = PodRequest((share(core=10),), **choice)  # type: ignore[arg-type]
    assert _card_of(shared) == (card,)


def test_without_a_choice_both_cards_serve() -> None:
    assert fits(PodRequest((whole(cards=2),), mixed_models=True), _node())


@pytest.mark.parametrize(("choice", "key"), [
    ({"use_uuids": ("GPU-unknown",)}, "nvidia.com/use-gpuuuid"),
    ({"use_uuids": ("GPU-T4",)}, "nvidia.com/use-gpuuuid"),  # exact: case counts
    ({"nouse_uuids": ("GPU-t4", "GPU-a100")}, "nvidia.com/nouse-gpuuuid"),
    ({"use_types": ("H100",)}, "nvidia.com/use-gputype"),
    ({"nouse_types": ("NVIDIA",)}, "nvidia.com/nouse-gputype"),
    ({"use_types": ("T4",), "use_uuids": ("GPU-a100",)},
     "nvidia.com/use-gputype and nvidia.com/use-gpuuuid"),
    ({"use_types": ("T4",), "nouse_types": ("tesla",)},
     "nvidia.com/use-gputype and nvidia.com/nouse-gputype"),
    ({"use_uuids": ("GPU-t4",), "nouse_uuids": ("GPU-t4",)},
     "nvidia.com/use-gpuuuid and nvidia.com/nouse-gpuuuid"),
])
def test_a_pod_no_card_is_allowed_to_is_unresolvable_naming_the_annotation(
        choice: dict[str, tuple[str, ...]], key: str) -> None:
    req = PodRequest((share(core=10),), **choice)  # type: ignore[arg-type]
    have = " and ".join(_node().models)
    assert {A100, T4} == set(_node().models)
    assert unfit_reason(req, _node()) == Unfit(
        f"no card allowed by pod annotation {key} (node has {have})", resolvable=False)
    assert not fits(req, _node())


def test_a_whole_card_pod_counts_only_the_cards_it_is_allowed() -> None:
    req = PodRequest((whole(cards=2),), use_types=("A100",))
    reason = unfit_reason(req, _node())
    assert reason is not None and not reason.resolvable and "needs 2 whole cards" in reason.reason
