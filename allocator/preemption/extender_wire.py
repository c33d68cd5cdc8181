"""The extender's ``preemptVerb`` wire format: decode its arguments, encode its result (pure).

Upstream: k8s.io/kube-scheduler v0.34.4 ``extender/v1/types.go:32-69``. The structs carry no
JSON tags, so keys are the Go field names:

- ``ExtenderPreemptionArgs{Pod, NodeNameToVictims, NodeNameToMetaVictims}`` (lines 37-45):
  a ``nodeCacheCapable`` extender (what Tessera ships) gets ``NodeNameToMetaVictims``, node
  name to ``MetaVictims{Pods: [{UID}], NumPDBViolations}``; any other gets
  ``NodeNameToVictims``, the same with whole Pod objects in ``Pods`` (kubernetes v1.34.4
  ``pkg/scheduler/extender.go:151-163``). Both are decoded to the victims' UIDs.
- ``ExtenderPreemptionResult{NodeNameToMetaVictims}`` (lines 32-35) is always answered with
  UIDs (``extender.go:169-177``). It has no error field.

What kube-scheduler does with the result (kubernetes v1.34.4): each UID must be a pod its own
cache has on that node, else the whole answer is an error (``extender.go:207-221``,
``convertPodUIDToPod``); a node with no victims is an error unless the extender is ignorable
(``pkg/scheduler/framework/preemption/preemption.go:363-373``); the nodes answered replace
its candidates, and an empty answer leaves none: the pod is not preempted for
(``preemption.go:379-391``, then ``SelectCandidate``). So :func:`encode_result` never writes
a node without victims, and "no preemption" is the empty map.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from tessera.wire import WireError, check_object_meta, load_json


class MetaPod(TypedDict):
    UID: str


class MetaVictims(TypedDict):
    Pods: list[MetaPod]
    NumPDBViolations: int


class ExtenderPreemptionResult(TypedDict):
    NodeNameToMetaVictims: dict[str, MetaVictims]


@dataclass(frozen=True, slots=True)
class ProposedVictims:
    """The victims kube-scheduler chose on one node (by UID) and its count of budget
    violations among them."""

    uids: tuple[str, ...]
    pdb_violations: int = 0


@dataclass(frozen=True)
class PreemptionArgs:
    """A decoded ``ExtenderPreemptionArgs``: the preemptor (a JSON object whose metadata has
    the API server's types) and kube-scheduler's candidates, in the order sent."""

    pod: dict[str, Any]
    nodes: dict[str, ProposedVictims]


def decode_args(body: bytes) -> PreemptionArgs:
    """``ExtenderPreemptionArgs`` from a request body; :class:`WireError` for anything else."""
    try:
        doc = load_json(body)
    except ValueError as exc:
        raise WireError(f"body is not JSON (ExtenderPreemptionArgs): {exc}") from exc
    if not isinstance(doc, Mapping):
        raise WireError("body must be a JSON object (ExtenderPreemptionArgs)")
    pod = doc.get("Pod")
    if not isinstance(pod, dict):
        raise WireError("ExtenderPreemptionArgs.Pod must be a Pod object")
    check_object_meta(pod, "ExtenderPreemptionArgs.Pod")
    meta = doc.get("NodeNameToMetaVictims")
    if meta is not None:
        return PreemptionArgs(pod, _victims_map(meta, "NodeNameToMetaVictims", _meta_uid))
    full = doc.get("NodeNameToVictims")
    return PreemptionArgs(pod, _victims_map(full or {}, "NodeNameToVictims", _pod_uid))


def _victims_map(raw: Any, field: str, uid_of: Callable[[Any, str], str]
                 ) -> dict[str, ProposedVictims]:
    if not isinstance(raw, Mapping):
        raise WireError(f"ExtenderPreemptionArgs.{field} must be an object")
    out: dict[str, ProposedVictims] = {}
    for node, victims in raw.items():
        where = f"ExtenderPreemptionArgs.{field}[{node[:64]!r}]"
        if not node:
            raise WireError(f"ExtenderPreemptionArgs.{field} has an empty node name")
        if victims is None:  # a nil *Victims: no victims proposed there
            out[node] = ProposedVictims(())
            continue
        if not isinstance(victims, Mapping):
            raise WireError(f"{where} must be an object")
        pods = victims.get("Pods")
        pods = [] if pods is None else pods  # a nil slice
        count = victims.get("NumPDBViolations", 0)
        if not isinstance(pods, list):
            raise WireError(f"{where}.Pods must be a list")
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise WireError(f"{where}.NumPDBViolations must be a count")
        out[node] = ProposedVictims(tuple(uid_of(p, where) for p in pods), count)
    return out


def _meta_uid(pod: Any, where: str) -> str:
    uid = pod.get("UID") if isinstance(pod, Mapping) else None
    if not isinstance(uid, str) or not uid:
        raise WireError(f"{where}.Pods[] must be {{\"UID\": \"...\"}}")
    return uid


def _pod_uid(pod: Any, where: str) -> str:
    meta = check_object_meta(pod, f"{where}.Pods[]").get("metadata") or {}
    uid = meta.get("uid")
    if not uid:
        raise WireError(f"{where}.Pods[] has no metadata.uid")
    return str(uid)


def encode_result(answers: Iterable[tuple[str, Sequence[str], int]]
                  ) -> ExtenderPreemptionResult:
    """The result document for (node, victim UIDs, budget violations) answers. A node with
    no victims is left out (kube-scheduler would fail the whole preemption on it); no answer
    at all is ``{"NodeNameToMetaVictims": {}}``: no preemption."""
    return {"NodeNameToMetaVictims": {
        node: {"Pods": [{"UID": uid} for uid in uids], "NumPDBViolations": violations}
        for node, uids, violations in answers if uids
    }}
