"""Pods and waiting, for the e2e tests and the demo (thin helpers over kubernetes.client)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import yaml

from devcluster import DevClusterError

#: Never pulled: no kubelet runs here. Any valid image reference would do.
IMAGE = "registry.k8s.io/pause:3.10"

T = TypeVar("T")


def container(name: str = "main", limits: Mapping[str, str] | None = None,
              requests: Mapping[str, str] | None = None) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if limits:
        resources["limits"] = dict(limits)
    if requests:
        resources["requests"] = dict(requests)
    return {"name": name, "image": IMAGE, "resources": resources}


def make_pod(
    name: str,
    containers: Iterable[Mapping[str, Any]] | None = None,
    *,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    node_selector: Mapping[str, str] | None = None,
    init_containers: Iterable[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [dict(c) for c in (containers or [container()])],
        # Nothing runs in it: no reason to wait the default 30 s on a delete.
        "terminationGracePeriodSeconds": 0,
    }
    inits = [dict(c) for c in init_containers]
    if inits:
        spec["initContainers"] = inits
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    meta: dict[str, Any] = {"name": name}
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def quantities_as_strings(pod: dict[str, Any]) -> dict[str, Any]:
    """Resource quantities written as YAML numbers (``aliyun.com/gpu-mem: 5``) turned into
    strings, in place.

    The API server accepts both and always stores and sends the string form (also to the
    webhook), but the Python client validates its arguments and takes strings only.
    """
    spec = pod.get("spec") or {}
    for ctr in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        resources = ctr.get("resources") or {}
        for kind in ("limits", "requests"):
            values = resources.get(kind) or {}
            for key, value in values.items():
                if isinstance(value, int | float) and not isinstance(value, bool):
                    values[key] = str(value)
    return pod


def load_documents(path: Path) -> list[dict[str, Any]]:
    """Every document of a manifest file, or of ``*.yaml``/``*.yml`` in a directory (sorted
    by file name)."""
    files = sorted([*path.glob("*.yaml"), *path.glob("*.yml")]) if path.is_dir() else [path]
    return [doc for f in files for doc in yaml.safe_load_all(f.read_text())
            if isinstance(doc, dict)]


def load_manifests(directory: Path) -> list[dict[str, Any]]:
    """Every Pod document in ``*.yaml``/``*.yml`` under ``directory``, sorted by file name."""
    return [quantities_as_strings(doc) for doc in load_documents(directory)
            if doc.get("kind") == "Pod"]


def workload_pods(doc: Mapping[str, Any]) -> int:
    """How many pods a workload keeps at once: a Deployment's or ReplicaSet's replicas (default
    1), a Job's parallelism capped by its completions (defaults 1); 0 for anything else."""
    spec = doc.get("spec") or {}
    kind = doc.get("kind")
    if kind in ("Deployment", "ReplicaSet", "StatefulSet"):
        return int(spec.get("replicas", 1))
    if kind == "Job":
        parallelism = int(spec.get("parallelism", 1))
        completions = spec.get("completions")
        return parallelism if completions is None else min(parallelism, int(completions))
    return 0


def list_objects(call: Callable[..., Any], *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
    """A list call's items as plain API JSON (camelCase), skipping model deserialisation.

    Model objects are slow for hundreds of pods and rename keys; the report and the checks
    read the wire form.
    """
    response = call(*args, _preload_content=False, **kwargs)
    try:
        items: list[dict[str, Any]] = json.loads(response.data)["items"]
    finally:
        response.release_conn()
    return items


def get_object(call: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
    response = call(*args, _preload_content=False, **kwargs)
    try:
        obj: dict[str, Any] = json.loads(response.data)
    finally:
        response.release_conn()
    return obj


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 60.0,
             interval: float = 0.25) -> T:
    """Poll until ``probe`` returns something other than None/False; return it."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value is not None and value is not False:
            return value
        if time.monotonic() > deadline:
            raise DevClusterError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def scheduling_events(core_v1: Any, namespace: str, name: str) -> list[dict[str, Any]]:
    """The scheduler's events about one pod (FailedScheduling, Scheduled), oldest first."""
    events = list_objects(
        core_v1.list_namespaced_event,
        namespace,
        field_selector=f"involvedObject.kind=Pod,involvedObject.name={name}",
    )
    ours = [e for e in events if e.get("reason") in ("FailedScheduling", "Scheduled")]
    return sorted(ours, key=lambda e: e.get("eventTime") or e.get("lastTimestamp") or "")


def pending_reason(core_v1: Any, namespace: str, name: str) -> str | None:
    """The newest FailedScheduling message for the pod, or None."""
    failed = [
        e for e in scheduling_events(core_v1, namespace, name)
        if e.get("reason") == "FailedScheduling"
    ]
    return str(failed[-1].get("message") or "") if failed else None


#: A PriorityClass to create: its name, its value, and whether its pods preempt
#: (``PreemptLowerPriority``, the default) or not (``Never``).
PriorityClass = tuple[str, int, bool]


def create_priority_classes(api_client: Any, classes: Iterable[PriorityClass],
                            timeout: float = 60.0) -> None:
    """Create the classes (one that exists is kept) and return once the API server admits a
    pod naming each: the Priority admission plugin resolves classes from its informer, so a
    pod created at once could be refused. A dry-run pod per class proves it."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    scheduling: Any = client.SchedulingV1Api(api_client)
    names = []
    for name, value, preempts in classes:
        names.append(name)
        try:
            scheduling.create_priority_class({
                "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                "metadata": {"name": name}, "value": value,
                "preemptionPolicy": "PreemptLowerPriority" if preempts else "Never"})
        except ApiException as exc:
            if exc.status != 409:
                raise
    core: Any = client.CoreV1Api(api_client)

    def admitted(name: str) -> bool:
        probe = make_pod("", [container()])
        probe["metadata"] = {"generateName": "priority-probe-"}
        probe["spec"]["priorityClassName"] = name
        try:
            core.create_namespaced_pod("default", probe, dry_run="All")
        except ApiException as exc:
            # Forbidden: the class (or the namespace's ServiceAccount) not known yet.
            if exc.status != 403:
                raise
            return False
        return True

    for name in names:
        wait_for(f"PriorityClass {name} admitted", partial(admitted, name), timeout,
                 interval=0.1)


def delete_pods(core_v1: Any, namespace: str, names: Iterable[str]) -> None:
    """Delete at once (KWOK would finish a graceful delete too, a moment later)."""
    from kubernetes.client.exceptions import ApiException

    for name in names:
        try:
            core_v1.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        except ApiException as exc:
            if exc.status != 404:
                raise


def ensure_namespace(core_v1: Any, name: str, timeout: float = 30.0) -> None:
    """Create the namespace if missing and wait for its ``default`` ServiceAccount.

    The ServiceAccount admission plugin refuses pods until the controller-manager has created
    that account (a second or so after the namespace), as on any cluster; controllers retry,
    but a test or demo that creates pods at once must wait.
    """
    from kubernetes.client.exceptions import ApiException

    try:
        core_v1.create_namespace({"metadata": {"name": name}})
    except ApiException as exc:
        if exc.status != 409:
            raise

    def default_account() -> bool | None:
        try:
            core_v1.read_namespaced_service_account("default", name)
        except ApiException as exc:
            if exc.status != 404:
                raise
            return None
        return True

    # It is there some 20 ms after the namespace: a quarter-second poll would mostly wait.
    wait_for(f"ServiceAccount {name}/default", default_account, timeout=timeout,
             interval=0.02)


def failed_scheduling_messages(core_v1: Any, namespace: str) -> dict[str, str]:
    """pod name -> the newest FailedScheduling message, for every pod of the namespace."""
    newest: dict[str, tuple[str, str]] = {}
    for event in list_objects(core_v1.list_namespaced_event, namespace,
                              field_selector="reason=FailedScheduling"):
        involved = event.get("involvedObject") or {}
        if involved.get("kind") != "Pod":
            continue
        when = str(event.get("lastTimestamp") or event.get("eventTime") or "")
        name = str(involved.get("name"))
        if name not in newest or when >= newest[name][0]:
            newest[name] = (when, str(event.get("message") or ""))
    return {name: message for name, (_, message) in newest.items()}


def unschedulable_message(pod: Mapping[str, Any]) -> str | None:
    """The scheduler's verdict that no node fits, from the pod's ``PodScheduled`` condition.

    Only reason ``Unschedulable`` counts (every node was filtered out); ``SchedulerError``
    (a failed bind, an unreachable extender) means the pod is retried after a back-off, so it
    is still in flight. Prefer this to the FailedScheduling event for showing a reason:
    kube-scheduler passes the message to ``Eventf`` as a format string
    (pkg/scheduler/schedule_one.go, handleSchedulingFailure), so a ``%`` in an extender's
    reason is mangled in the event (``50% core`` becomes ``50%!c(MISSING)ore``) but not in the
    condition.
    """
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if (condition.get("type") == "PodScheduled" and condition.get("status") == "False"
                and condition.get("reason") == "Unschedulable"):
            return str(condition.get("message") or "") or None
    return None


def wait_settled(
    core_v1: Any,
    namespace: str,
    names: Iterable[str],
    timeout: float = 180.0,
    quiet_rounds: int = 3,
    interval: float = 1.0,
) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Wait until every named pod is bound or found unschedulable by the scheduler, and the set
    of bound pods has not changed for ``quiet_rounds`` polls. Returns (bound pods by name,
    the scheduler's message by name of the pods still unbound).
    """
    wanted = set(names)
    deadline = time.monotonic() + timeout
    previous: frozenset[str] | None = None
    quiet = 0
    while True:
        pods = {
            p["metadata"]["name"]: p
            for p in list_objects(core_v1.list_namespaced_pod, namespace)
            if p["metadata"]["name"] in wanted
        }
        bound = {n: p for n, p in pods.items() if p["spec"].get("nodeName")}
        pending = {
            n: unschedulable_message(pods[n]) or "" if n in pods else ""
            for n in wanted - set(bound)
        }
        decided = len(pods) == len(wanted) and all(pending.values())
        now_bound = frozenset(bound)
        quiet = quiet + 1 if decided and now_bound == previous else 0
        previous = now_bound
        if quiet >= quiet_rounds:
            return bound, pending
        if time.monotonic() > deadline:
            undecided = sorted(n for n, r in pending.items() if not r)
            raise DevClusterError(
                f"timed out after {timeout:.0f}s waiting for pods to settle: "
                f"{len(bound)} bound, {len(pending)} unbound, undecided: {undecided[:10]}"
            )
        time.sleep(interval)


def events_by_reason(core: Any, namespace: str) -> dict[str, Any]:
    """The namespace's Events by ``<type>/<reason>`` (an aggregated Event by its count), and
    how many Warning Events say a bind failed (kube-scheduler's FailedScheduling after a failed
    bind quotes the bind's error; the allocator's own FailedAllocation too)."""
    by_reason: dict[str, int] = {}
    failures = 0
    for event in core.list_namespaced_event(namespace).items:
        times = max(event.count or 1, event.series.count if event.series else 1)
        key = f"{event.type}/{event.reason}"
        by_reason[key] = by_reason.get(key, 0) + times
        if event.type == "Warning" and "bind" in (event.message or "").lower():
            failures += times
    return {"by_reason": dict(sorted(by_reason.items())), "bind_failures": failures}
