"""The monitor's label back-filled at start (issue 46, docs/hami.md): pods Tessera bound before
its bind wrote ``hami.io/vgpu-node`` as a label get it, one merge patch per pod with the UID as
precondition, nothing else changed; hami-scheduler's pods are adopted as before."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from builders import VOCAB, make_gpu_pod, request, share
from fake_kube import Conflict, FakeKube
from test_hami_bind import UUIDS, hami_node

from allocator.hami.adopt import Adoption, adopt_placed_pods
from allocator.hami.codec import HAMI, VOLCANO_VGPU, Flavor
from tessera.vocabulary import Allocation, ContainerAllocation


def _tessera_pod(name: str, node: str = "n1", flavor: Flavor = HAMI,
                 label: bool = False) -> dict[str, Any]:
    """A running pod Tessera bound: its record and HAMi's keys, the monitor label or not."""
    pod = make_gpu_pod(name, request(share("main", core=30, mem=3000)), uid=f"u-{name}",
                       node=node, phase="Running",
                       allocation=Allocation(node, (ContainerAllocation("main", (1,), 30,
                                                                        3000),)),
                       extra_annotations={
                           flavor.allocated_key: f"{UUIDS[1]},NVIDIA,3000,30:;",
                           flavor.node_key: node, flavor.bind_phase_key: "success"})
    if label:
        pod["metadata"]["labels"][flavor.node_key] = node
    return pod


def _without_labels(pod: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(pod)
    out["metadata"].pop("labels", None)
    out["metadata"].pop("resourceVersion", None)
    return out


def test_a_pod_tessera_bound_without_the_monitor_label_gets_it_and_nothing_else() -> None:
    fake = FakeKube()
    fake.add_node(hami_node())
    fake.add_pod(_tessera_pod("old"))
    before = copy.deepcopy(fake.pods[("default", "old")])
    assert adopt_placed_pods(fake, VOCAB, HAMI) == Adoption(adopted=0, labelled=1)
    assert fake.patches == [("old", {"metadata": {"uid": "u-old",
                                                  "labels": {"hami.io/vgpu-node": "n1"}}})]
    after = fake.pods[("default", "old")]
    assert after["metadata"]["labels"] == {**before["metadata"]["labels"],
                                           "hami.io/vgpu-node": "n1"}
    assert _without_labels(after) == _without_labels(before)
    # Once: the next start finds nothing to do, and sends nothing.
    assert adopt_placed_pods(fake, VOCAB, HAMI) == Adoption()
    assert len(fake.patches) == 1


@pytest.mark.parametrize(("pod", "flavor"), [
    (_tessera_pod("labelled", label=True), HAMI),
    (_tessera_pod("volcano", flavor=VOLCANO_VGPU), VOLCANO_VGPU),  # its monitor lists all
    (_tessera_pod("long", node="n" * 64), HAMI),  # no label value can name that node
], ids=["already-labelled", "volcano-vgpu", "node-name-too-long-for-a-label"])
def test_pods_that_need_no_label_or_cannot_carry_one_are_left_alone(
        pod: dict[str, Any], flavor: Flavor) -> None:
    fake = FakeKube()
    fake.add_pod(pod)
    assert adopt_placed_pods(fake, VOCAB, flavor) == Adoption()
    assert fake.patches == []


def test_a_refused_patch_is_logged_and_the_other_pods_are_still_labelled(
        caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeKube()
    fake.add_node(hami_node())
    for name in ("a", "b"):
        fake.add_pod(_tessera_pod(name))
    fake.fail("patch_pod", Conflict("Precondition failed: UID in precondition", 409))
    assert adopt_placed_pods(fake, VOCAB, HAMI) == Adoption(adopted=0, labelled=1)
    assert "labelling it for HAMi's monitor failed" in caplog.text
    labelled = [n for (_, n), p in fake.pods.items() if "hami.io/vgpu-node" in p["metadata"][
        "labels"]]
    assert len(labelled) == 1


def test_a_hami_scheduler_pod_without_the_label_is_adopted_and_labelled_in_one_patch() -> None:
    fake = FakeKube()
    fake.add_node(hami_node())
    pod = make_gpu_pod("theirs", request(share("main", core=10)), uid="u-t", node="n1",
                       phase="Running", extra_annotations={
                           HAMI.allocated_key: f"{UUIDS[2]},NVIDIA,12000,60:;",
                           HAMI.node_key: "n1", HAMI.bind_phase_key: "success"})
    del pod["metadata"]["labels"]
    fake.add_pod(pod)
    assert adopt_placed_pods(fake, VOCAB, HAMI) == Adoption(adopted=1, labelled=0)
    [(name, patch)] = fake.patches
    assert name == "theirs"
    assert patch["metadata"]["uid"] == "u-t"
    assert patch["metadata"]["labels"] == {VOCAB.gpu_pod_label: "true",
                                           "hami.io/vgpu-node": "n1"}
    assert VOCAB.allocation_annotation in patch["metadata"]["annotations"]
