"""Bind: the write order, the keys of each agent profile, every failure path's rollback,
idempotence."""

from __future__ import annotations

import copy
import logging

import pytest
from alloc_harness import NOW, synced_allocator
from builders import VOCAB, make_gpu_pod, make_node, request, share, whole
from fake_kube import FakeKube

from allocator import agents
from allocator.errors import ApiError, BindError, Conflict
from allocator.picture.records import Stage
from allocator.verbs.core import Allocator
from tessera.agent_profiles import AgentProfile
from tessera.dialects import DialectConfig
from tessera.vocabulary import PodRequest, decode_allocation


def profile(name: str) -> DialectConfig:
    """The dialect configuration of a cluster whose nodes run the agent ``name``."""
    return DialectConfig(agent_profile=AgentProfile(name))


def _setup(req: PodRequest | None = None, webhook_labelled: bool = True,
           **config: object) -> tuple[FakeKube, Allocator]:
    """A pending GPU pod ``default/p`` (uid ``u-1``) and a node ``n1`` with two cards;
    ``webhook_labelled=False``: the pod was admitted without the webhook, so it lacks the
    GPU-pod label and its bind must PATCH it."""
    fake = FakeKube()
    fake.add_node(make_node("n1", count=2, memory_mib=16384))
    pod = make_gpu_pod("p", req or request(share(core=30, mem=2048)), uid="u-1")
    if not webhook_labelled:
        pod["metadata"]["labels"] = {"team": "a"}
    fake.add_pod(pod)
    return fake, synced_allocator(fake, **config)  # type: ignore[arg-type]


def _annotations(fake: FakeKube) -> dict[str, str]:
    return dict(fake.pods[("default", "p")]["metadata"].get("annotations") or {})


def _labels(fake: FakeKube) -> dict[str, str]:
    return dict(fake.pods[("default", "p")]["metadata"].get("labels") or {})


def test_a_bind_records_the_allocation_and_the_pod_is_bound(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)  # every log call on the path must format
    fake, alloc = _setup()
    out = alloc.bind("default", "p", "u-1", "n1")
    assert out.outcome == "bound" and out.cards == (0,)
    allocation = decode_allocation(_annotations(fake)[VOCAB.allocation_annotation])
    assert allocation.allocated_at == NOW
    assert [(c.name, c.card_indices, c.core_percent, c.memory_mib)
            for c in allocation.containers] == [("main", (0,), 30, 2048)]
    assert fake.pods[("default", "p")]["spec"]["nodeName"] == "n1"
    rec = alloc.state.record("u-1")
    assert rec is not None and rec.stage is Stage.BOUND
    assert any(r.message == "bound default/p to n1 cards (0,)" for r in caplog.records)


def test_the_watch_seeing_our_bind_confirms_the_record_and_leaves_the_node_as_it_is() -> None:
    fake, alloc = _setup()
    alloc.bind("default", "p", "u-1", "n1")
    view = alloc.state.view("n1")
    # The pod as the watch delivers it: bound, with the allocation the bind wrote.
    alloc.state.apply_pod(fake.pods[("default", "p")])
    rec = alloc.state.record("u-1")
    assert rec is not None and rec.stage is Stage.CONFIRMED
    assert alloc.state.view("n1") is view  # nothing to recompute: the cards are counted
    # The same pod seen with other cards (an agent moved it, say) moves the node's state.
    moved = copy.deepcopy(fake.pods[("default", "p")])
    annotations = moved["metadata"]["annotations"]
    annotations[VOCAB.allocation_annotation] = annotations[
        VOCAB.allocation_annotation].replace('"cards":[0]', '"cards":[1]')
    assert annotations != fake.pods[("default", "p")]["metadata"]["annotations"]
    alloc.state.apply_pod(moved)
    assert alloc.state.view("n1") is not view
    assert [c.core_used for c in alloc.state.view("n1").state.cards] == [0, 30]


@pytest.mark.parametrize(
    ("agent", "req", "expected_annotations", "expected_labels"),
    [
        # elastic-gpu-agent reads annotations only (allocator/agents/): no label.
        ("elastic", request(whole("a", cards=2)),
         {"elasticgpu.io/container-a": "0,1", "elasticgpu.io/assumed": "true"}, {}),
        ("nano-gpu", request(share("a", core=20)),
         {"nano-gpu/container-a": "0", "nano-gpu/assume": "true"},
         {"nano-gpu/assume": "true"}),
        ("aliyun", request(share("a", mem=2500)),
         {"ALIYUN_COM_GPU_MEM_IDX": "0", "ALIYUN_COM_GPU_MEM_DEV": "16",
          "ALIYUN_COM_GPU_MEM_POD": "3", "ALIYUN_COM_GPU_MEM_ASSIGNED": "false",
          "ALIYUN_COM_GPU_MEM_ASSUME_TIME": str(int(NOW * 1e9))}, {}),
    ],
)
def test_each_agent_profile_is_written_as_its_agent_reads_it_and_no_other(
    agent: str, req: PodRequest, expected_annotations: dict[str, str],
    expected_labels: dict[str, str],
) -> None:
    fake, alloc = _setup(req, dialects=profile(agent))
    alloc.bind("default", "p", "u-1", "n1")
    annotations = _annotations(fake)
    assert set(agents.all_agent_keys(annotations, VOCAB)) == set(expected_annotations)
    for key, value in expected_annotations.items():
        assert annotations[key] == value
    assert _labels(fake) == {VOCAB.gpu_pod_label: "true", **expected_labels}


@pytest.mark.parametrize(
    ("agent", "req", "why"),
    [("nano-gpu", request(whole("a", cards=2)), "nano-gpu-agent gives a container one card"),
     ("aliyun", request(whole("a")), "gpushare-device-plugin"),
     ("aliyun", request(share("a", mem=1024), share("b", mem=1024)),
      "one GPU container per pod"),
     ("elastic", request(share("i", core=10, init=True), share("a", core=20)),
      "exactly the same")],
    ids=["nano-two-cards", "aliyun-whole", "aliyun-two-containers", "elastic-init-differs"],
)
def test_a_pod_its_agent_cannot_start_is_not_bound(agent: str, req: PodRequest,
                                                   why: str) -> None:
    # The webhook refuses these; a pod admitted without it (or by an earlier configuration)
    # is refused at bind, and nothing of it remains.
    fake, alloc = _setup(req, dialects=profile(agent))
    with pytest.raises(BindError, match=f"agent profile {agent}") as refused:
        alloc.bind("default", "p", "u-1", "n1")
    assert why in str(refused.value)
    assert "nodeName" not in fake.pods[("default", "p")]["spec"]
    assert VOCAB.allocation_annotation not in _annotations(fake)
    assert alloc.state.record("u-1") is None


def test_a_writer_that_cannot_express_the_allocation_fails_the_bind() -> None:
    # The writer's own check (an allocation no agent-checked request would give).
    from tessera.vocabulary import Allocation, ContainerAllocation
    ctx = agents.BindContext(Allocation("n1", (ContainerAllocation("a", (0, 1)),)), {}, (),
                             VOCAB, 0)
    out = agents.agent_metadata(AgentProfile.NANO_GPU, ctx)
    assert out.annotations == {} and "one card" in out.skipped[AgentProfile.NANO_GPU]
    assert agents.agent_metadata(AgentProfile.ALIYUN, ctx).skipped


def test_an_elastic_init_container_is_placed_on_its_app_containers_card() -> None:
    fake, alloc = _setup(request(whole("i", cards=2, init=True), whole("a", cards=2)),
                         dialects=profile("elastic"))
    assert alloc.bind("default", "p", "u-1", "n1").cards == (0, 1)
    allocation = decode_allocation(_annotations(fake)[VOCAB.allocation_annotation])
    assert [c.name for c in allocation.containers] == ["a"]
    assert _annotations(fake)["elasticgpu.io/container-a"] == "0,1"


def test_a_webhook_labelled_pod_after_filter_is_bound_with_one_api_call_the_binding(
) -> None:
    fake, alloc = _setup()  # the default elastic dialect
    alloc.reader.remember(fake.get_pod("default", "p"))  # the copy filter received
    fake.calls.clear()
    assert alloc.bind("default", "p", "u-1", "n1").outcome == "bound"
    assert fake.calls == [("bind_pod", "p")]
    assert fake.patches == []
    ((_, node, annotations),) = fake.bindings
    assert node == "n1"
    assert decode_allocation(annotations[VOCAB.allocation_annotation]).card_indices() == (0,)
    assert annotations["elasticgpu.io/container-main"] == "0"
    assert annotations["elasticgpu.io/assumed"] == "true"
    assert _labels(fake) == {VOCAB.gpu_pod_label: "true"}


@pytest.mark.parametrize("agent", ["elastic", "aliyun"])
def test_no_agent_but_nano_gpu_makes_a_webhook_labelled_pod_need_a_patch(agent: str) -> None:
    fake, alloc = _setup(dialects=profile(agent))
    alloc.bind("default", "p", "u-1", "n1")
    assert [c for c in fake.calls if c[0] in ("patch_pod", "bind_pod")] == [("bind_pod", "p")]


@pytest.mark.parametrize(
    ("webhook_labelled", "agent", "labels"),
    [
        # admitted without the webhook: our pod watch selects by the GPU-pod label
        (False, "elastic", {VOCAB.gpu_pod_label: "true"}),
        # nano-gpu-agent 0.3 finds pods through a label-selected informer
        (True, "nano-gpu", {"nano-gpu/assume": "true"}),
        (False, "nano-gpu", {VOCAB.gpu_pod_label: "true", "nano-gpu/assume": "true"}),
    ],
)
def test_a_pod_lacking_a_label_it_must_carry_is_patched_with_the_uid_before_the_binding(
    webhook_labelled: bool, agent: str, labels: dict[str, str],
) -> None:
    fake, alloc = _setup(request(share("main", core=20)), webhook_labelled=webhook_labelled,
                         dialects=profile(agent))
    alloc.bind("default", "p", "u-1", "n1")
    assert [c for c in fake.calls if c[0] in ("patch_pod", "bind_pod")] == [
        ("patch_pod", "p"), ("bind_pod", "p")]
    assert fake.patches == [("p", {"metadata": {"uid": "u-1", "labels": labels}})]
    for key, value in labels.items():
        assert _labels(fake)[key] == value


def test_agent_keys_an_older_attempt_left_on_the_unbound_pod_are_cleared() -> None:
    fake, alloc = _setup(dialects=profile("elastic"))
    fake.pods[("default", "p")]["metadata"]["annotations"].update(
        {"nano-gpu/container-main": "1", "nano-gpu/assume": "true"})
    alloc.bind("default", "p", "u-1", "n1")
    # the webhook-labelled pod needs no label, but the stale keys still cost a PATCH
    assert fake.patches == [("p", {"metadata": {"uid": "u-1", "labels": {}, "annotations": {
        "nano-gpu/container-main": None, "nano-gpu/assume": None}}})]
    annotations = _annotations(fake)
    assert "nano-gpu/container-main" not in annotations and "nano-gpu/assume" not in annotations
    assert annotations["elasticgpu.io/container-main"] == "0"


def test_a_pod_an_earlier_release_labelled_assumed_keeps_it_and_binds_with_one_call() -> None:
    fake, alloc = _setup()
    # an unbound pod whose earlier bind failed and whose label rollback failed too
    fake.pods[("default", "p")]["metadata"]["labels"]["elasticgpu.io/assumed"] = "true"
    alloc.bind("default", "p", "u-1", "n1")
    assert fake.patches == []
    assert _labels(fake)["elasticgpu.io/assumed"] == "true"
    assert _annotations(fake)["elasticgpu.io/assumed"] == "true"


@pytest.mark.parametrize("webhook_labelled", [True, False])
def test_an_api_error_on_the_binding_rolls_back_cache_annotations_and_labels(
    webhook_labelled: bool,
) -> None:
    fake, alloc = _setup(webhook_labelled=webhook_labelled)
    before = _annotations(fake)
    labels_before = _labels(fake)
    fake.fail("bind_pod", ApiError("POST binding: HTTP 500: etcd timeout", 500))
    with pytest.raises(BindError, match="etcd timeout; allocation rolled back"):
        alloc.bind("default", "p", "u-1", "n1")
    # without the webhook's label the bind PATCHed it first, and undid that
    assert len(fake.patches) == (0 if webhook_labelled else 2)
    assert _annotations(fake) == before
    assert _labels(fake) == labels_before
    assert alloc.state.record("u-1") is None
    view = alloc.state.view("n1")
    assert view is not None and view.state.core_used == 0
    # and the next attempt succeeds on the same cards
    assert alloc.bind("default", "p", "u-1", "n1").cards == (0,)


def test_a_failed_rollback_is_reported_and_the_cache_is_still_released() -> None:
    fake, alloc = _setup(webhook_labelled=False)
    fake.fail("bind_pod", ApiError("connection refused"))
    fake.fail("patch_pod", ApiError("still down"), times=0)
    orig = fake.patch_pod
    calls = {"n": 0}

    def patch(ns: str, name: str, body: dict) -> dict:  # type: ignore[type-arg]
        calls["n"] += 1
        if calls["n"] == 2:
            raise ApiError("still down")
        return orig(ns, name, body)

    fake.patch_pod = patch  # type: ignore[method-assign]
    with pytest.raises(BindError, match="label rollback failed too"):
        alloc.bind("default", "p", "u-1", "n1")
    assert alloc.state.record("u-1") is None
    # what is left behind are labels on an unbound pod, never an allocation record
    assert VOCAB.allocation_annotation not in _annotations(fake)
    assert agents.all_agent_keys(_annotations(fake), VOCAB) == ()


def test_an_api_error_on_the_patch_releases_the_reservation() -> None:
    fake, alloc = _setup(webhook_labelled=False)
    fake.fail("patch_pod", ApiError("HTTP 403: forbidden", 403))
    with pytest.raises(BindError, match="labelling pod default/p for its allocation failed"):
        alloc.bind("default", "p", "u-1", "n1")
    assert alloc.state.record("u-1") is None
    assert ("bind_pod", "p") not in fake.calls


def test_repeated_binds_of_one_pod_are_idempotent() -> None:
    fake, alloc = _setup()
    first = alloc.bind("default", "p", "u-1", "n1")
    again = alloc.bind("default", "p", "u-1", "n1")
    assert again.outcome == "already-bound" and again.cards == first.cards
    view = alloc.state.view("n1")
    assert view is not None and view.state.core_used == 30
    assert [c for c in fake.calls if c[0] == "bind_pod"] == [("bind_pod", "p")]


def test_a_repeat_bind_recreates_a_missing_binding() -> None:
    fake, alloc = _setup()
    alloc.bind("default", "p", "u-1", "n1")
    fake.pods[("default", "p")]["spec"].pop("nodeName")  # as if the Binding had been lost
    assert alloc.bind("default", "p", "u-1", "n1").outcome == "already-bound"
    assert fake.pods[("default", "p")]["spec"]["nodeName"] == "n1"


def test_a_binding_conflict_for_the_same_node_counts_as_success() -> None:
    fake, alloc = _setup()
    orig = fake.bind_pod

    def bind_then_conflict(ns: str, name: str, uid: str, node: str,
                           annotations: dict[str, str] | None = None) -> None:
        orig(ns, name, uid, node, annotations)  # the first reply was lost...
        raise Conflict("pod p is already assigned to node n1", 409)

    fake.bind_pod = bind_then_conflict  # type: ignore[method-assign]
    assert alloc.bind("default", "p", "u-1", "n1").outcome == "bound"
    assert VOCAB.allocation_annotation in _annotations(fake)


def test_a_pod_bound_to_the_node_by_someone_else_gets_our_record_on_a_conflict() -> None:
    fake, alloc = _setup()
    fake.pods[("default", "p")]["spec"]["nodeName"] = "n1"  # bound meanwhile, without cards
    pod = fake.get_pod("default", "p")
    pod["spec"].pop("nodeName")
    alloc.reader.remember(pod)  # the scheduler's copy, from before that binding
    assert alloc.bind("default", "p", "u-1", "n1").outcome == "bound"
    record = decode_allocation(_annotations(fake)[VOCAB.allocation_annotation])
    assert record.node == "n1" and record.card_indices() == (0,)


@pytest.mark.parametrize(
    ("uid", "node", "message"),
    [
        ("u-other", "n1", "was replaced"),
        ("u-1", "ghost", "node ghost is unknown"),
    ],
)
def test_binds_that_cannot_happen_say_why(uid: str, node: str, message: str) -> None:
    _fake, alloc = _setup()
    with pytest.raises(BindError, match=message):
        alloc.bind("default", "p", uid, node)


def test_a_bind_to_a_node_without_room_names_the_shortage() -> None:
    fake, alloc = _setup(request(whole(cards=2)))
    fake.add_pod(make_gpu_pod("q", request(whole()), uid="u-2"))
    alloc.bind("default", "q", "u-2", "n1")
    with pytest.raises(BindError, match=r"node n1: needs 2 whole cards \(1 free\)"):
        alloc.bind("default", "p", "u-1", "n1")


def test_a_missing_pod_and_a_pod_bound_elsewhere_are_errors() -> None:
    fake, alloc = _setup()
    with pytest.raises(BindError, match="not found"):
        alloc.bind("default", "nope", "", "n1")
    fake.add_node(make_node("n2"))
    alloc.state.replace_nodes(fake.list_nodes()[0])
    alloc.bind("default", "p", "u-1", "n1")
    with pytest.raises(BindError, match="already holds cards on node n1"):
        alloc.bind("default", "p", "u-1", "n2")


def test_a_pod_without_gpu_request_is_bound_plainly() -> None:
    fake = FakeKube()
    fake.add_node(make_node("n1"))
    pod = make_gpu_pod("plain")
    pod["metadata"]["annotations"] = {}
    pod["spec"]["containers"][0]["resources"] = {}
    fake.add_pod(pod)
    alloc = synced_allocator(fake)
    assert alloc.bind("default", "plain", "uid-plain", "n1").outcome == "no-gpu"
    assert fake.pods[("default", "plain")]["spec"]["nodeName"] == "n1"


def test_an_unexpected_adapter_exception_still_rolls_everything_back() -> None:
    fake, alloc = _setup()
    before = _annotations(fake)
    fake.fail("bind_pod", RuntimeError("adapter bug"))
    with pytest.raises(BindError, match=r"internal error.*adapter bug; allocation rolled back"):
        alloc.bind("default", "p", "u-1", "n1")
    assert _annotations(fake) == before
    assert alloc.state.record("u-1") is None


def test_a_bind_that_loses_leadership_before_the_binding_is_undone() -> None:
    fake, alloc = _setup()
    calls = iter([True, False])  # leader at the start, not any more before the Binding
    alloc.reader.is_leader = lambda: next(calls)
    with pytest.raises(BindError, match="lost leadership"):
        alloc.bind("default", "p", "u-1", "n1")
    assert "nodeName" not in fake.pods[("default", "p")]["spec"]
    assert alloc.state.record("u-1") is None


def test_filter_finds_no_node_for_a_pod_its_agent_cannot_start_and_names_the_agent() -> None:
    fake, alloc = _setup(request(whole("a", cards=2)), dialects=profile("nano-gpu"))
    out = alloc.filter(fake.pods[("default", "p")], ["n1"])
    assert out.nodes == []
    assert "nano-gpu-agent gives a container one card" in out.unresolvable["n1"]
