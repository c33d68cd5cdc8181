"""The live workload mix (allocator.ranking.mix): what it learns from the pods it sees."""

from __future__ import annotations

import pytest

from allocator.ranking.mix import LiveMix, shape_key
from allocator.ranking.policies import NO_WORKLOAD
from tessera.vocabulary import ContainerRequest, PodRequest


def whole(cards: int, name: str = "main") -> PodRequest:
    return PodRequest((ContainerRequest(name, cards=cards),))


def share(core: int, name: str = "main") -> PodRequest:
    return PodRequest((ContainerRequest(name, core_percent=core),))


def test_names_and_policy_do_not_make_a_new_shape() -> None:
    a = PodRequest((ContainerRequest("a", cards=1),), policy="binpack")
    b = PodRequest((ContainerRequest("b", cards=1),))
    assert shape_key(a, 1000) == shape_key(b, 1000)
    assert shape_key(a, 1000) != shape_key(b, 2000)


def test_no_pod_seen_is_no_workload() -> None:
    assert LiveMix().workload() is NO_WORKLOAD


def test_weights_follow_popularity_and_sum_to_one() -> None:
    mix = LiveMix(refresh=1)
    for _ in range(30):
        mix.observe(whole(1), 8000)
    for _ in range(10):
        mix.observe(share(50), 4000)
    workload = mix.workload()
    weights = [w for _, w in workload.typical]
    assert workload.cpu_milli == (8000, 4000)
    assert weights[0] > weights[1] > 0
    assert sum(weights) == pytest.approx(1.0)


def test_old_pods_fade_after_the_half_life() -> None:
    mix = LiveMix(half_life=10, refresh=1)
    for _ in range(20):
        mix.observe(whole(1))
    for _ in range(20):
        mix.observe(share(25))
    (first, w_first), (_, w_second) = mix.typical()
    assert first[0] == ((0, 25, 0, 0),)
    assert w_first > 3 * w_second


def test_memory_is_bounded() -> None:
    mix = LiveMix(max_shapes=8, max_typical=4, refresh=1)
    for core in range(1, 100):
        mix.observe(share(core))
    assert len(mix.typical()) <= 4
    assert len(mix._weights) == 8


def test_the_published_workload_changes_in_steps() -> None:
    mix = LiveMix(refresh=4)
    mix.observe(whole(1))
    first = mix.workload()
    for _ in range(3):
        mix.observe(share(50))
        assert mix.workload() is first
    mix.observe(share(50))
    assert mix.workload() is not first


def test_same_observations_same_workload() -> None:
    def run() -> tuple[object, ...]:
        mix = LiveMix(refresh=1, half_life=5)
        for i in range(50):
            mix.observe(share(10 + i % 7), 1000 * (i % 3))
        return tuple((r, round(w, 12)) for r, w in mix.workload().typical)

    assert run() == run()


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError):
        LiveMix(half_life=0)
    with pytest.raises(ValueError):
        LiveMix(coverage=0.0)


def test_an_unchanged_mix_keeps_its_workload_object() -> None:
    # One shape only: its weight stays 1, so every rebuild is equal to the last.
    mix = LiveMix(refresh=2)
    mix.observe(whole(2), 4000)
    first = mix.workload()
    for _ in range(10):
        mix.observe(whole(2, name="other"), 4000)
        assert mix.workload() is first
