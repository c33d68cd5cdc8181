"""With HAMi's node lock, filter prefers nodes whose agent has no pod to start: a bind to a
node whose plugin has not yet allocated the previous pod would wait for it."""

from __future__ import annotations

from typing import Any

import pytest
from alloc_harness import synced_allocator
from builders import make_gpu_pod, request, share, whole
from fake_kube import FakeKube
from test_hami_bind import HAMI_PROFILE, hami_node

from allocator.hami.awaiting import AwaitingAgent
from allocator.hami.codec import HAMI, VOLCANO_VGPU
from allocator.verbs.core import Allocator
from tessera.dialects import DialectConfig


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _pod(phase: str | None, node: str = "n1", key: str = HAMI.bind_phase_key) -> dict[str, Any]:
    pod = make_gpu_pod("p", uid="u", node=node)
    if phase is not None:
        pod["metadata"]["annotations"][key] = phase
    return pod


# --------------------------------------------------------------------------- the table


@pytest.mark.parametrize("key", [HAMI.bind_phase_key, VOLCANO_VGPU.bind_phase_key])
def test_a_pod_awaits_its_agent_from_allocating_until_its_phase_ends(key: str) -> None:
    table = AwaitingAgent()
    table.seen("u", _pod("allocating", key=key))
    assert table.by_node() == {"n1": 1}
    table.seen("u", _pod(None))  # an event without the key (ours before the write) changes nothing
    assert table.by_node() == {"n1": 1}
    table.seen("u", _pod("success", key=key))
    assert not table.by_node()
    table.seen("u", _pod("allocating", key=key))
    table.seen("u", _pod("failed", key=key))
    assert not table.by_node()


def test_our_bind_counts_before_any_event_and_an_unbound_allocating_pod_adds_nothing() -> None:
    table = AwaitingAgent()
    table.seen("u", _pod("allocating", node=""))  # our annotations, before the Binding
    assert not table.by_node()
    table.bound("u", "n2")
    table.seen("u", _pod("allocating", node="n2"))
    assert table.by_node() == {"n2": 1} and len(table) == 1
    table.gone("u")
    assert not table.by_node()


def test_a_node_whose_lock_the_watch_shows_held_has_a_pod_to_start() -> None:
    """The plugin writes the pod's success before it gives the lock back."""
    table = AwaitingAgent()
    table.bound("u", "n1")
    table.node_seen("n1", {HAMI.lock_key: "2026-11-27T00:00:00Z,default,p"})
    table.node_seen("n2", {VOLCANO_VGPU.lock_key: "x"})
    assert table.by_node() == {"n1": 1, "n2": 1}
    table.seen("u", _pod("success"))
    assert table.by_node() == {"n1": 1, "n2": 1}
    table.node_seen("n1", {})
    table.node_gone("n2")
    assert not table.by_node()


def test_an_entry_past_the_locks_expiry_is_forgotten() -> None:
    clock = _Clock()
    table = AwaitingAgent(clock, max_age_seconds=300)
    table.bound("u", "n1")
    table.node_seen("n2", {HAMI.lock_key: "held for good"})
    clock.now += 299
    assert table.by_node() == {"n1": 1, "n2": 1}
    clock.now += 2
    assert not table.by_node() and len(table) == 0


# --------------------------------------------------------------------------- filter


def _cluster(dialects: DialectConfig = HAMI_PROFILE) -> tuple[FakeKube, Allocator]:
    fake = FakeKube()
    for name in ("n1", "n2", "n3"):
        fake.add_node(hami_node(name))
    for i in range(5):
        fake.add_pod(make_gpu_pod(f"p{i}", request(share(core=30, mem=2048)), uid=f"u{i}"))
    return fake, synced_allocator(fake, dialects=dialects, default_policy="binpack")


def _filter(alloc: Allocator, name: str, names: list[str]) -> list[str]:
    return alloc.filter(_fake_pod(alloc, name), names).nodes


def _fake_pod(alloc: Allocator, name: str) -> dict[str, Any]:
    pod = alloc.bind.api.get_pod("default", name)
    assert pod is not None
    return pod


NAMES = ["n1", "n2", "n3"]


def test_the_node_whose_plugin_has_a_pod_to_start_is_left_while_another_fits() -> None:
    fake, alloc = _cluster()
    assert alloc.bind("default", "p0", "u0", "n1").outcome == "bound"
    # n1 now packs best (binpack), but its plugin has p0 to allocate first; of the tied
    # others, the first asked.
    assert _filter(alloc, "p1", NAMES) == ["n2"]
    # The plugin allocated p0 (bind-phase success): n1 is the best again.
    pod = fake.pods[("default", "p0")]
    pod["metadata"]["annotations"][HAMI.bind_phase_key] = "success"
    alloc.state.apply_pod(pod)
    assert _filter(alloc, "p1", NAMES) == ["n1"]


def test_filters_holds_count_as_a_pod_to_start() -> None:
    _, alloc = _cluster()
    assert alloc.bind("default", "p0", "u0", "n1").outcome == "bound"
    [first] = _filter(alloc, "p1", ["n2", "n1"])  # held on n2 for its bind
    assert first == "n2"
    assert _filter(alloc, "p2", NAMES) == ["n3"]


def test_nodes_with_the_fewest_pods_to_start_go_first() -> None:
    fake, alloc = _cluster()
    for i, node in ((0, "n1"), (1, "n1"), (2, "n2")):
        assert alloc.bind("default", f"p{i}", f"u{i}", node).outcome == "bound"
        if i == 0:  # the plugin has not allocated p0 yet: p1's bind waits, here not at all
            fake.nodes["n1"]["metadata"]["annotations"].pop(HAMI.lock_key)
    assert alloc.state.pods_to_start() == {"n1": 2, "n2": 1}
    assert _filter(alloc, "p3", NAMES) == ["n3"]  # held: n3 has one to start now
    assert _filter(alloc, "p4", ["n1", "n2"]) == ["n2"]


def test_when_only_busy_nodes_fit_the_pod_goes_to_one_of_them() -> None:
    fake, alloc = _cluster()
    fake.add_node(hami_node("small", count=1))
    alloc.state.apply_node(fake.nodes["small"])
    fake.add_pod(make_gpu_pod("two", request(whole(cards=2)), uid="t"))
    assert alloc.bind("default", "p0", "u0", "n1").outcome == "bound"
    # Two whole cards fit n1 (three left) and not "small" (one card): the bind will wait.
    assert _filter(alloc, "two", ["small", "n1"]) == ["n1"]


def test_the_shortcut_over_every_node_still_answers_with_nodes_avoided(
        monkeypatch: pytest.MonkeyPatch) -> None:
    _, alloc = _cluster()
    assert alloc.bind("default", "p0", "u0", "n1").outcome == "bound"

    def no_lookups(*_args: Any, **_kw: Any) -> Any:
        raise AssertionError("the ranker's fit was asked: the shortcut missed")

    monkeypatch.setattr(alloc.ranker, "fit", no_lookups)
    assert _filter(alloc, "p1", NAMES) == ["n2"]


def test_tied_nodes_are_answered_by_the_first_asked_and_held() -> None:
    """With the lock, kube-scheduler's choice among ties would reach the picture only with
    the bind: the filters before it would all choose the same node."""
    _, alloc = _cluster()
    assert _filter(alloc, "p0", ["n3", "n1", "n2"]) == ["n3"]
    record = alloc.state.record("u0")
    assert record is not None and record.node == "n3" and record.stage == "held"
    assert _filter(alloc, "p1", ["n3", "n1", "n2"]) == ["n1"]


def test_without_hamis_lock_nothing_is_avoided_and_ties_are_all_answered() -> None:
    _, alloc = _cluster(DialectConfig())
    assert _filter(alloc, "p2", NAMES) == NAMES
    assert alloc.bind("default", "p0", "u0", "n1").outcome == "bound"
    assert _filter(alloc, "p1", NAMES) == ["n1"]
