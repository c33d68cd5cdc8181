"""Under HAMi's lock, filter gives a node to a pod only when its bind would be served before
kube-scheduler's bind timeout (waiting a little for the node's turn), and a waiting bind
takes the lock as soon as our node watch shows it released."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from alloc_harness import synced_allocator
from builders import make_gpu_pod, request, share
from fake_kube import FakeKube
from test_hami_bind import HAMI_PROFILE, hami_node

from allocator.agents.hami import HamiAgent
from allocator.hami.codec import HAMI, encode_lock
from allocator.hami.lock import LockSettings, NodeLocks
from allocator.hami.pace import FIRST_GUESS_SECONDS, MAX_QUEUE, WINDOW, PluginPace
from allocator.verbs.core import Allocator


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


# --------------------------------------------------------------------------- the pace


def test_the_pace_is_a_slow_guess_until_enough_releases_of_our_locks_are_seen() -> None:
    clock = _Clock()
    pace = PluginPace(clock)
    assert pace.seconds == FIRST_GUESS_SECONDS and pace.room(6.0) == 3
    pace.released("n1")  # a lock we never took: nothing measured
    assert pace.measured == 0
    for _ in range(WINDOW - 1):
        pace.taken("n1")
        clock.now += 0.5
        pace.released("n1")
        pace.released("n1")  # every later event of the free node counts nothing
    assert pace.measured == WINDOW - 1 and pace.seconds == FIRST_GUESS_SECONDS
    pace.taken("n1")
    clock.now += 0.5
    pace.released("n1")
    assert pace.seconds == pytest.approx(0.5) and pace.room(6.0) == 12


def test_the_pace_is_the_slowest_recent_release_and_the_room_is_bounded() -> None:
    """A plugin's first Allocates are quick (its client's burst): one slow release among
    quick ones sets the pace."""
    clock = _Clock()
    pace = PluginPace(clock)
    for held in [0.05] * WINDOW + [1.5] + [0.05] * (WINDOW - 1):
        pace.taken("n1")
        clock.now += held
        pace.released("n1")
    assert pace.seconds == pytest.approx(1.5)
    pace.taken("n1")
    clock.now += 0.05
    pace.released("n1")  # the slow one left the window
    assert pace.seconds == pytest.approx(0.05)
    assert pace.room(0.01) == 1  # the pod being started is always ahead
    assert pace.room(600.0) == MAX_QUEUE
    assert 1.0 <= pace.turn_wait() <= 5.0


# --------------------------------------------------------------------------- filter


def _one_node(pods: int = 6) -> tuple[FakeKube, Allocator, HamiAgent]:
    fake = FakeKube()
    fake.add_node(hami_node("n1", count=4))
    for i in range(pods):
        fake.add_pod(make_gpu_pod(f"p{i}", request(share(core=10, mem=1024)), uid=f"u{i}"))
    alloc = synced_allocator(fake, dialects=HAMI_PROFILE)
    agent = alloc.bind.agent
    assert isinstance(agent, HamiAgent)
    agent.turn_wait_bounds = (0.2, 0.2)
    return fake, alloc, agent


def _filter(alloc: Allocator, name: str) -> Any:
    pod = alloc.bind.api.get_pod("default", name)
    return alloc.filter(pod, ["n1"])


def _bind_queued(fake: FakeKube, alloc: Allocator, count: int) -> None:
    """``count`` pods bound to n1 that its plugin has not started (the lock left free so
    the binds do not wait here)."""
    for i in range(count):
        assert alloc.bind("default", f"p{i}", f"u{i}", "n1").outcome == "bound"
        fake.nodes["n1"]["metadata"]["annotations"].pop(HAMI.lock_key, None)


def test_a_node_whose_queue_a_bind_could_not_pass_in_time_is_refused_after_a_short_wait(
) -> None:
    fake, alloc, _agent = _one_node()
    _bind_queued(fake, alloc, 4)  # the first guess lets 3 wait ahead (2 s each, 6 s budget)
    started = time.monotonic()
    out = _filter(alloc, "p4")
    assert out.nodes == [] and not out.failed  # preemption would not shorten the queue
    assert "HAMi's device plugin has 4 pods to start" in out.unresolvable["n1"]
    assert time.monotonic() - started >= 0.2
    assert alloc.state.record("u4") is None  # nothing held for it


def test_filter_answers_as_soon_as_the_plugin_starts_a_pod_of_the_queue() -> None:
    fake, alloc, agent = _one_node()
    _bind_queued(fake, alloc, 4)
    agent.turn_wait_bounds = (5.0, 5.0)

    def plugin_starts_p0() -> None:
        time.sleep(0.1)
        pod = fake.pods[("default", "p0")]
        pod["metadata"]["annotations"][HAMI.bind_phase_key] = "success"
        alloc.state.apply_pod(pod)

    threading.Thread(target=plugin_starts_p0).start()
    started = time.monotonic()
    assert _filter(alloc, "p4").nodes == ["n1"]
    assert time.monotonic() - started < 2.0
    record = alloc.state.record("u4")
    assert record is not None and record.node == "n1"


def test_a_short_queue_is_answered_at_once() -> None:
    fake, alloc, agent = _one_node()
    _bind_queued(fake, alloc, 3)
    agent.turn_wait_bounds = (5.0, 5.0)
    started = time.monotonic()
    assert _filter(alloc, "p3").nodes == ["n1"]
    assert time.monotonic() - started < 1.0


def test_our_measured_pace_lets_more_binds_queue_on_a_fast_plugin() -> None:
    fake, alloc, agent = _one_node()
    clock = _Clock()
    agent.pace = PluginPace(clock)
    for _ in range(WINDOW):  # locks we took, released by the plugin 0.1 s later
        agent.pace.taken("n1")
        clock.now += 0.1
        agent.node_seen("n1", {}, "")
    _bind_queued(fake, alloc, 5)
    assert agent.pace.seconds < 0.5
    assert _filter(alloc, "p5").nodes == ["n1"]


# --------------------------------------------------------------------------- the lock


def test_a_waiting_bind_reads_the_node_when_the_watch_shows_the_lock_released() -> None:
    fake = FakeKube()
    fake.add_node(hami_node("n1"))
    clock = _Clock()
    fake.nodes["n1"]["metadata"]["annotations"][HAMI.lock_key] = encode_lock(
        clock(), "default", "other")
    # Polls far apart: only the release's wake-up can make the bind quick.
    locks = NodeLocks(fake, HAMI, LockSettings(wait_seconds=8, first_poll_seconds=5,
                                               max_poll_seconds=5), clock=clock)

    def plugin_releases() -> None:
        time.sleep(0.1)
        fake.nodes["n1"]["metadata"]["annotations"].pop(HAMI.lock_key)
        locks.released("n1")

    holder = threading.Thread(target=locks.acquire, args=("n1", "default", "first"))
    # The first bind takes the free path; make it find the lock held: queue behind it.
    threading.Thread(target=plugin_releases).start()
    started = time.monotonic()
    holder.start()
    holder.join(timeout=4)
    assert not holder.is_alive() and time.monotonic() - started < 2.0
    assert "default,first" in fake.nodes["n1"]["metadata"]["annotations"][HAMI.lock_key]


def test_a_filter_counts_the_queues_once_when_no_node_is_full() -> None:
    fake = FakeKube()
    for name in ("n1", "n2"):
        fake.add_node(hami_node(name, count=4))
    fake.add_pod(make_gpu_pod("p", request(share(core=10, mem=1024)), uid="u"))
    alloc = synced_allocator(fake, dialects=HAMI_PROFILE)
    reads = 0
    count = alloc.filter._pods_to_start

    def counted() -> Any:
        nonlocal reads
        reads += 1
        return count()

    alloc.filter._pods_to_start = counted
    assert alloc.filter(alloc.bind.api.get_pod("default", "p"), ["n1", "n2"]).nodes
    assert reads == 1
