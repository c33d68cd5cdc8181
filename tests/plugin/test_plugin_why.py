"""``why``: every node's verdict on a pod, against known placements."""

from __future__ import annotations

from dataclasses import replace

from plugin_builders import gpu_node, gpu_pod, picture_of, scenario, shares, wholes

from allocator.hami.codec import HAMI
from allocator.hami.register import RegisteredDevice, encode_register_json
from kubectl_tessera import why


def verdicts_of(name: str, nodes: list[dict[str, object]] | None = None,
                pods: list[dict[str, object]] | None = None,
                policy: str = "binpack") -> why.Explanation:
    base_nodes, base_pods = scenario()
    pic = picture_of(nodes if nodes is not None else base_nodes,
                     pods if pods is not None else base_pods)
    pod = pic.pod("default", name)
    assert pod is not None
    return why.explain(pic, pod, policy)


def test_a_pending_pod_too_big_for_today_gets_each_nodes_filter_reason() -> None:
    e = verdicts_of("e")
    assert [(v.node, v.outcome, v.reason) for v in e.verdicts] == [
        ("n1", "no-room", "needs 2 whole cards (0 free)"),
        ("n2", "no-room", "needs 2 whole cards (0 free)"),
    ]
    assert "would fit on n1, n2 if other pods released cards" in e.summary


def test_a_pod_asking_for_a_model_no_node_has_is_told_no_eviction_helps() -> None:
    e = verdicts_of("f")
    assert {v.outcome for v in e.verdicts} == {"never"}
    assert e.verdicts[0].reason == "no card of model A100 (node has T4)"
    assert "no node can ever hold it" in e.summary


def test_a_pending_pod_that_fits_somewhere_is_scored_and_told_to_look_at_the_scheduler() -> None:
    nodes = [gpu_node("n1"), gpu_node("n2")]
    pods = [gpu_pod("busy", shares(60), node="n1", cards=[0]),
            gpu_pod("new", shares(30), node_selector={})]
    e = verdicts_of("new", nodes, pods)
    # binpack prefers the node already in use: n1 scores 10, n2 0.
    assert [(v.node, v.outcome, v.score) for v in e.verdicts] == [
        ("n1", "fits", 10), ("n2", "fits", 0)]
    assert "fits now on n1, n2" in e.summary


def test_nodes_outside_the_pods_node_selector_or_cordoned_are_excluded_in_words() -> None:
    nodes = [gpu_node("n1", labels={"pool": "a"}), gpu_node("n2", unschedulable=True),
             gpu_node("n3", labels={"pool": "b"})]
    pods = [gpu_pod("p", wholes(1), node_selector={"pool": "b"})]
    e = verdicts_of("p", nodes, pods)
    assert [(v.node, v.outcome) for v in e.verdicts] == [
        ("n1", "excluded"), ("n2", "excluded"), ("n3", "fits")]
    assert e.verdicts[0].reason == "nodeSelector pool=b does not match"


def test_a_bound_pod_shows_its_cards_and_how_its_node_ranks_without_it() -> None:
    e = verdicts_of("a")
    assert e.node == "n1"
    assert [(c.container, c.cards, c.share) for c in e.cards] == [
        ("main", (0,), "50% core, 1000 MiB")]
    # Without a, n1 has one idle card and one half card; binpack today prefers n2, fuller.
    assert [(v.node, v.score) for v in e.verdicts] == [("n1", 0), ("n2", 10)]
    assert "would prefer n2" in e.summary


def test_a_bound_pod_on_the_best_node_is_told_so() -> None:
    nodes = [gpu_node("n1"), gpu_node("n2")]
    pods = [gpu_pod("x", shares(30), node="n1", cards=[0]),
            gpu_pod("y", shares(30), node="n1", cards=[0], at=1.0)]
    e = verdicts_of("y", nodes, pods)
    assert e.summary.startswith("bound to n1: the best node for its policy")


def test_the_pods_own_policy_wins_over_the_default() -> None:
    nodes = [gpu_node("n1"), gpu_node("n2")]
    request = shares(30)
    spread = type(request)(request.containers, policy="spread")
    pods = [gpu_pod("busy", shares(60), node="n1", cards=[0]), gpu_pod("new", spread)]
    e = verdicts_of("new", nodes, pods)
    assert e.policy == "spread"
    assert [(v.node, v.score) for v in e.verdicts] == [("n1", 0), ("n2", 10)]


def test_a_pod_whose_request_cannot_be_read_is_told_so_without_verdicts() -> None:
    pod = gpu_pod("bad", shares(10))
    pod["metadata"]["annotations"]["elasticgpu.io/gpu-request"] = '{"v":1,"containers":[]}'
    e = verdicts_of("bad", [gpu_node("n1")], [pod])
    assert e.verdicts == ()
    assert e.summary.startswith("its GPU request cannot be read: pod annotation "
                                "elasticgpu.io/gpu-request")
    assert "request problem:" in why.render(e)


def _hami_node(name: str, modes: tuple[str, ...], numas: tuple[int, ...]) -> dict[str, object]:
    register = encode_register_json([
        RegisteredDevice(f"GPU-{name}-{i}", i, 4, 16000, 100, "NVIDIA-T4", numa=numa, mode=mode)
        for i, (mode, numa) in enumerate(zip(modes, numas, strict=True))])
    return gpu_node(name, count=len(modes), annotations={HAMI.register_key: register})


def test_why_names_vgpu_mode_and_numa_bind_where_they_leave_no_room() -> None:
    nodes = [_hami_node("core", ("hami-core",) * 2, (0, 1)),
             _hami_node("mps", ("mps",) * 2, (0, 0))]
    pods = [gpu_pod("p", replace(wholes(2), card_modes=("hami-core",), one_numa_node=True))]
    e = verdicts_of("p", nodes, pods)
    assert "cards in mode hami-core; each container's cards on one NUMA node" in e.request
    assert [(v.node, v.outcome, v.reason) for v in e.verdicts] == [
        ("core", "never", "needs 2 whole cards on one NUMA node (pod annotation "
                          "nvidia.com/numa-bind; node has 1 on NUMA 0 and 1 on NUMA 1)"),
        ("mps", "never", "no card allowed by pod annotation nvidia.com/vgpu-mode (node has T4 "
                         "in mode mps)")]
