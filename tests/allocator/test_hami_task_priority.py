"""HAMi's task priority on a pod admitted without the webhook (issue 46): the pod is placed
as any other (``nvidia.com/priority`` asks for no card; the shipped scheduler configurations
manage it, as HAMi's chart does), and its bind warns on the pod that the variable carrying the
priority is missing (allocator/hami/task_priority.py)."""

from __future__ import annotations

from typing import Any

import pytest
from alloc_harness import synced_allocator
from builders import make_pod
from fake_kube import FakeKube
from test_hami_bind import HAMI_PROFILE, hami_node

from allocator.decisions import PodRef
from allocator.hami.task_priority import TASK_PRIORITY_UNSET, unset_task_priority

SHARE = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000", "nvidia.com/gpucores": "30"}


def _container(name: str, limits: dict[str, str], env: list[dict[str, str]] | None = None
               ) -> dict[str, Any]:
    container: dict[str, Any] = {"name": name, "image": "busybox",
                                 "resources": {"limits": limits}}
    if env is not None:
        container["env"] = env
    return container


@pytest.mark.parametrize(("containers", "named"), [
    ([_container("main", dict(SHARE))], None),
    ([_container("main", {**SHARE, "nvidia.com/priority": "0"},
                 [{"name": "CUDA_TASK_PRIORITY", "value": "0"}])], None),
    ([_container("main", {**SHARE, "nvidia.com/priority": "0"})], "'main' (0)"),
    ([_container("main", dict(SHARE)), _container("side", {"nvidia.com/priority": "2"},
                                                   [{"name": "OTHER", "value": "x"}])],
     "'side' (2)"),
    ([_container("main", {**SHARE, "nvidia.com/priority": "1"})], None),
], ids=["none-asked", "webhook-wrote-it", "unset", "unset-on-a-gpu-less-container",
        "the-default-asked"])
def test_a_task_priority_without_its_variable_is_named(
        containers: list[dict[str, Any]], named: str | None) -> None:
    note = unset_task_priority({"spec": {"containers": containers}})
    if named is None:
        assert note == ""
    else:
        assert f"nvidia.com/priority of container {named} is not set" in note
        assert "no CUDA_TASK_PRIORITY" in note and "default priority (1, low)" in note


@pytest.mark.parametrize("pod", [{}, {"spec": None}, {"spec": {"containers": "x"}},
                                 {"spec": {"containers": [None, {"resources": "x"},
                                                          {"resources": {"limits": None}}]}}])
def test_hostile_pods_give_no_note(pod: dict[str, Any]) -> None:
    assert unset_task_priority(pod) == ""


def test_a_note_names_a_few_containers_and_counts_the_rest() -> None:
    containers = [_container(f"c{i}", {"nvidia.com/priority": "0"}) for i in range(9)]
    note = unset_task_priority({"spec": {"containers": containers}})
    assert "'c3' (0) and 5 more" in note and "'c4'" not in note


def _unshaped_pod(priority_env: bool) -> dict[str, Any]:
    """A HAMi pod as its owner wrote it, never seen by a webhook (no request record)."""
    pod = make_pod({**SHARE, "nvidia.com/priority": "0"})
    pod["metadata"]["uid"] = "u-1"
    if priority_env:
        pod["spec"]["containers"][0]["env"] = [{"name": "CUDA_TASK_PRIORITY", "value": "0"}]
    return pod


@pytest.mark.parametrize("priority_env", [False, True], ids=["no-variable", "variable"])
def test_a_pod_admitted_without_the_webhook_is_bound_and_warned_about_only_without_it(
        priority_env: bool) -> None:
    fake = FakeKube()
    fake.add_node(hami_node())
    pod = _unshaped_pod(priority_env)
    fake.add_pod(pod)
    alloc = synced_allocator(fake, dialects=HAMI_PROFILE)
    warned: list[tuple[PodRef, str, str]] = []
    alloc.agent.warn = lambda ref, reason, note: warned.append((ref, reason, note))
    assert alloc.filter(pod, ["n1"]).nodes == ["n1"]
    out = alloc.bind("default", "p", "u-1", "n1")
    assert out.cards
    assert fake.pods[("default", "p")]["spec"]["nodeName"] == "n1"
    if priority_env:
        assert warned == []
    else:
        [(ref, reason, note)] = warned
        assert (ref, reason) == (PodRef("default", "p", "u-1"), TASK_PRIORITY_UNSET)
        assert "'main' (0)" in note


def test_the_allocator_process_turns_the_warning_into_a_warning_event_on_the_pod() -> None:
    from alloc_harness import make_app

    from allocator.verbs.config import AllocatorConfig

    fake = FakeKube()
    fake.add_node(hami_node())
    fake.add_pod(_unshaped_pod(priority_env=False))
    app, rt = make_app(fake, core=AllocatorConfig(dialects=HAMI_PROFILE))
    resp = app.test_client().post("/scheduler/bind", json={
        "PodName": "p", "PodNamespace": "default", "PodUID": "u-1", "Node": "n1"})
    assert resp.get_json() == {"Error": ""}
    rt.recorder.process()
    warnings = [e for e in fake.api_events.values() if e["type"] == "Warning"]
    [event] = warnings
    assert (event["reason"], event["action"]) == (TASK_PRIORITY_UNSET, "Binding")
    assert event["regarding"]["uid"] == "u-1" and "'main' (0)" in event["note"]
