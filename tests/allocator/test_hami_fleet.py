"""The HAMi stand-in's speed and its fleet (devcluster/plugin_client.py,
devcluster/hami_fleet.py): a client rate-limited as HAMi's plugin's is, v2.10.0's eight
requests an Allocate, and the fleet as processes fed node names by one pod watch."""

from __future__ import annotations

import io
from typing import Any

import pytest
from alloc_harness import synced_allocator
from builders import make_gpu_pod, make_node, request, share
from fake_kube import FakeKube
from test_hami_node_standin import HAMI_PROFILE

from allocator.hami.codec import HAMI
from devcluster.hami_fleet import HamiFleet, serve_stdin, shard_of
from devcluster.hami_node import HamiNode, fake_devices
from devcluster.plugin_client import ClientRate, PluginApi, RateLimitedApi, TokenBucket


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_the_bucket_gives_the_burst_at_once_then_qps_requests_a_second() -> None:
    clock = _Clock()
    bucket = TokenBucket(ClientRate(qps=5, burst=10), clock, clock.sleep)
    assert [bucket.take() for _ in range(10)] == [0.0] * 10
    assert bucket.take() == pytest.approx(0.2)
    assert bucket.take() == pytest.approx(0.2)
    clock.now += 10  # idle: the bucket refills up to its burst, no further
    assert [bucket.take() for _ in range(10)] == [0.0] * 10
    assert bucket.take() == pytest.approx(0.2)


class _Counting:
    """Counts the requests that reach the API."""

    def __init__(self, api: PluginApi) -> None:
        self.api = api
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        target = getattr(self.api, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            return target(*args, **kwargs)
        return call


def _bound_pod(fake: FakeKube, name: str = "p") -> None:
    fake.add_pod(make_gpu_pod(name, request(share("main", core=20, mem=4096)), uid=name))
    pod = fake.pods[("default", name)]
    pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "1"
    alloc = synced_allocator(fake, dialects=HAMI_PROFILE)
    assert alloc.bind("default", name, name, "n1").outcome == "bound"


def _hami_cluster() -> FakeKube:
    fake = FakeKube()
    fake.add_node(make_node("n1", count=4))
    HamiNode(fake, "n1", fake_devices("n1", 4)).register()
    return fake


def test_with_hamis_requests_an_allocate_makes_v2_10s_eight_requests_in_its_order() -> None:
    fake = _hami_cluster()
    _bound_pod(fake)
    counting = _Counting(fake)
    standin = HamiNode(counting, "n1", fake_devices("n1", 4), hami_requests=True)
    assert standin.allocate_next() == "default/p"
    assert counting.calls == ["get_node", "get_pod", "patch_pod", "get_pod", "patch_pod",
                              "get_node", "get_node", "patch_node"]
    annotations = fake.pods[("default", "p")]["metadata"]["annotations"]
    assert annotations[HAMI.bind_phase_key] == "success"
    assert HAMI.lock_key not in fake.nodes["n1"]["metadata"]["annotations"]
    assert len(standin.allocate_seconds) == 1


def test_a_rate_limited_client_makes_every_request_wait_its_turn() -> None:
    fake = _hami_cluster()
    limited = RateLimitedApi(fake, ClientRate(qps=1000, burst=1))
    clock = _Clock()
    limited.bucket = TokenBucket(ClientRate(qps=5, burst=1), clock, clock.sleep)
    for _ in range(3):
        limited.get_node("n1")
    assert clock.slept == [pytest.approx(0.2), pytest.approx(0.2)]


def test_the_pod_watch_hands_each_waiting_pod_to_its_nodes_process_once() -> None:
    fake = _hami_cluster()
    _bound_pod(fake)
    handed: list[str] = []
    fleet = HamiFleet(fake, dispatch=handed.append)
    pod = fake.pods[("default", "p")]
    fleet.serve_event("n1", pod)
    fleet.serve_event("n1", pod)  # a second event of the same wait
    fleet.serve_event("n1", {**pod, "spec": {**pod["spec"], "nodeName": "n2"}})  # not bound there
    assert handed == ["n1"] and fleet.served == 1
    # The node's process: the pod found from the lock, allocated.
    plugins = HamiFleet(fake)
    serve_stdin(plugins, io.StringIO("n1\n\n"))
    assert plugins.served == 1
    assert fake.pods[("default", "p")]["metadata"]["annotations"][HAMI.bind_phase_key] == (
        "success")


def test_nodes_are_spread_over_the_shards_the_same_way_everywhere() -> None:
    names = [f"n{i:05d}" for i in range(1000)]
    counts = [sum(1 for n in names if shard_of(n, 4) == s) for s in range(4)]
    assert sum(counts) == 1000 and min(counts) > 150
    assert all(shard_of(n, 1) == 0 for n in names)
