"""HAMi's lock taken from the node as our node watch showed it (allocator/hami/lock.py): no
node read when the watched copy is current, a read when the patch finds it stale (409), and
a read when a wait for the release woke without a watch event."""

from __future__ import annotations

import threading
from typing import Any

from alloc_harness import NOW
from fake_kube import FakeKube
from test_hami_bind import hami_node

from allocator.hami.codec import HAMI, encode_lock, parse_lock
from allocator.hami.lock import LockSettings, NodeLocks


def _locks(fake: FakeKube, wait: float = 2.0) -> NodeLocks:
    return NodeLocks(fake, HAMI, LockSettings(wait_seconds=wait, first_poll_seconds=0.001,
                                              max_poll_seconds=0.005), clock=lambda: NOW)


def _watch(locks: NodeLocks, fake: FakeKube, node: str = "n1") -> dict[str, Any]:
    """Tell ``locks`` of the node as the fake API has it now (as the node watch would)."""
    meta = fake.nodes[node]["metadata"]
    locks.watched(node, meta["resourceVersion"], dict(meta.get("annotations") or {}))
    return dict(meta.get("annotations") or {})


def _reads(fake: FakeKube) -> int:
    return sum(1 for call in fake.calls if call[0] == "get_node")


def _holder(fake: FakeKube) -> str:
    return (fake.nodes["n1"]["metadata"].get("annotations") or {}).get(HAMI.lock_key, "")


def test_a_current_watched_copy_takes_the_lock_without_reading_the_node() -> None:
    fake = FakeKube()
    fake.add_node(hami_node())
    locks = _locks(fake)
    annotations = _watch(locks, fake)
    locks.acquire("n1", "default", "p")
    assert _reads(fake) == 0
    assert _holder(fake) == encode_lock(NOW, "default", "p")
    # What the bind's writer reads is the copy the lock was taken on (the register included).
    seen = locks.seen("n1")
    assert seen is not None and seen["metadata"]["annotations"] == annotations


def test_a_stale_watched_copy_is_refused_by_the_precondition_and_the_node_read() -> None:
    fake = FakeKube()
    fake.add_node(hami_node())
    locks = _locks(fake)
    _watch(locks, fake)
    # Another scheduler locks the node; our watch has not shown it yet.
    fake.patch_node("n1", {"metadata": {"annotations": {
        HAMI.lock_key: encode_lock(NOW, "default", "other")}}})
    releaser = threading.Timer(0.05, lambda: fake.patch_node(
        "n1", {"metadata": {"annotations": {HAMI.lock_key: None}}}))
    releaser.start()
    locks.acquire("n1", "default", "p")
    releaser.join()
    assert _reads(fake) >= 1  # the 409, then reads until the release
    assert parse_lock(_holder(fake)).held_by("default", "p")


def test_a_held_lock_in_a_lagging_watch_is_read_again_after_a_poll() -> None:
    fake = FakeKube()
    fake.add_node(hami_node())
    locks = _locks(fake)
    fake.patch_node("n1", {"metadata": {"annotations": {
        HAMI.lock_key: encode_lock(NOW, "default", "other")}}})
    _watch(locks, fake)  # the watch shows the lock held ...
    fake.patch_node("n1", {"metadata": {"annotations": {HAMI.lock_key: None}}})
    # ... and never shows its release: the poll reads the node and takes the lock.
    locks.acquire("n1", "default", "p")
    assert _reads(fake) >= 1
    assert parse_lock(_holder(fake)).held_by("default", "p")


def test_the_watched_release_wakes_the_waiting_bind_which_takes_the_lock_from_it() -> None:
    fake = FakeKube()
    fake.add_node(hami_node())
    locks = NodeLocks(fake, HAMI, LockSettings(wait_seconds=5.0, first_poll_seconds=3.0,
                                               max_poll_seconds=3.0), clock=lambda: NOW)
    fake.patch_node("n1", {"metadata": {"annotations": {
        HAMI.lock_key: encode_lock(NOW, "default", "other")}}})
    _watch(locks, fake)

    def plugin_releases() -> None:
        fake.patch_node("n1", {"metadata": {"annotations": {HAMI.lock_key: None}}})
        _watch(locks, fake)
        locks.released("n1")

    releaser = threading.Timer(0.05, plugin_releases)
    releaser.start()
    locks.acquire("n1", "default", "p")  # a poll would take 3 s; the event wakes it at once
    releaser.join()
    assert _reads(fake) == 0
    assert parse_lock(_holder(fake)).held_by("default", "p")
