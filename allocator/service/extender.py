"""The kube-scheduler extender wire format, and pure handlers over :class:`Allocator`.

Upstream: kubernetes ``staging/src/k8s.io/kube-scheduler/extender/v1/types.go``. The structs
carry **no JSON tags**, so keys are the Go field names (``Pod``, ``NodeNames``,
``FailedNodes``, ``Host``, ``Score``...). The scheduler's client
(``pkg/scheduler/framework/extender.go`` — ``HTTPExtender.send``) POSTs JSON to
``urlPrefix/verb``, treats any status but 200 as an error, and for ``nodeCacheCapable``
extenders reads ``NodeNames`` from the filter reply, refusing names it did not send.

Handlers take the raw request body and return the reply document; they never raise, so the
HTTP layer can always answer 200 with ``Error`` set (the scheduler reports it on the pod).
Bodies are decoded and type-checked here, once (:func:`decode_args`, :func:`decode_binding`):
anyone who reaches the port can send one, so past this point a pod is a JSON object whose
metadata has the types the API server gives it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from http import HTTPStatus
from itertools import chain, compress
from json.encoder import encode_basestring_ascii as _quote
from typing import Any, TypedDict

from allocator.errors import NotReady, describe_error, event_safe
from allocator.preemption import extender_wire
from allocator.ranking.policies import MAX_SCORE
from allocator.verbs.bind import BindOutcome
from allocator.verbs.core import Allocator
from allocator.verbs.preempt_verb import no_candidates, unchanged
from tessera.logs import pod_context, pod_ids_context
from tessera.vocabulary import TesseraError
from tessera.wire import WireError, check_object_meta, load_json

logger = logging.getLogger(__name__)


class ExtenderFilterResult(TypedDict):
    Nodes: None
    NodeNames: list[str]
    FailedNodes: dict[str, str]
    FailedAndUnresolvableNodes: dict[str, str]
    Error: str


class HostPriority(TypedDict):
    Host: str
    Score: int


class ExtenderBindingResult(TypedDict):
    Error: str


@dataclass(frozen=True)
class ExtenderArgs:
    """``ExtenderArgs{Pod, Nodes, NodeNames}``: names come from ``NodeNames``
    (nodeCacheCapable, what we ship) or, for a non-cache-capable configuration, from the
    names of the ``Nodes`` list."""

    pod: dict[str, Any]
    node_names: list[str]


@dataclass(frozen=True)
class ExtenderBindingArgs:
    """``ExtenderBindingArgs{PodName, PodNamespace, PodUID, Node}``."""

    pod_name: str
    pod_namespace: str
    pod_uid: str
    node: str


def _load(body: bytes, what: str) -> Any:
    try:
        return load_json(body)
    except ValueError as exc:
        raise WireError(f"body is not JSON ({what}): {exc}") from exc


def decode_args(body: bytes) -> ExtenderArgs:
    doc = _load(body, "ExtenderArgs")
    if not isinstance(doc, Mapping):
        raise WireError("body must be a JSON object (ExtenderArgs)")
    pod = doc.get("Pod")
    if not isinstance(pod, dict):
        raise WireError("ExtenderArgs.Pod must be a Pod object")
    check_object_meta(pod, "ExtenderArgs.Pod")
    names = doc.get("NodeNames")
    if names is None:
        nodes = doc.get("Nodes")
        items = (nodes or {}).get("items") if isinstance(nodes, Mapping) else None
        if not isinstance(items, list):
            raise WireError("ExtenderArgs needs NodeNames (nodeCacheCapable) or Nodes")
        names = [(check_object_meta(i, "ExtenderArgs.Nodes.items[]").get("metadata") or {})
                 .get("name") for i in items]
    # C-level checks (a generator over 5,000 names cost ~2 ms on the benchmark machine):
    # every element exactly a str (what json.loads makes), none empty.
    if not isinstance(names, list) or (names and (set(map(type, names)) != {str}
                                                  or "" in names)):
        raise WireError("ExtenderArgs.NodeNames must be a list of node names")
    return ExtenderArgs(pod, names)


def decode_binding(body: bytes) -> ExtenderBindingArgs:
    doc = _load(body, "ExtenderBindingArgs")
    if not isinstance(doc, Mapping):
        raise WireError("body must be a JSON object (ExtenderBindingArgs)")
    values = {}
    for key in ("PodName", "PodNamespace", "PodUID", "Node"):
        value = doc.get(key, "")
        if not isinstance(value, str):
            raise WireError(f"ExtenderBindingArgs.{key} must be a string")
        values[key] = value
    if not values["PodName"] or not values["Node"]:
        raise WireError("ExtenderBindingArgs needs PodName and Node")
    return ExtenderBindingArgs(values["PodName"], values["PodNamespace"] or "default",
                               values["PodUID"], values["Node"])


def filter_reply(allocator: Allocator, body: bytes) -> ExtenderFilterResult:
    """The filter verb's reply (:class:`allocator.verbs.filter.Filter`)."""
    try:
        args = decode_args(body)
        out = allocator.filter(args.pod, args.node_names)
    except (WireError, NotReady) as exc:
        return _filter_error(event_safe(str(exc)))
    except Exception as exc:  # a bug must still reach the user as an Error, never a 500
        logger.exception("filter failed")
        return _filter_error(describe_error(exc))
    return {
        "Nodes": None,
        "NodeNames": out.nodes,
        "FailedNodes": out.failed,
        "FailedAndUnresolvableNodes": out.unresolvable,
        "Error": "",
    }


def _filter_error(message: str) -> ExtenderFilterResult:
    # NodeNames is always present: a missing list would silently filter out every node.
    return {"Nodes": None, "NodeNames": [], "FailedNodes": {},
            "FailedAndUnresolvableNodes": {}, "Error": message}


def prioritize_reply(allocator: Allocator, body: bytes) -> list[HostPriority]:
    """``HostPriorityList``: the nodes whose score can change the scheduler's choice
    (:func:`worth_sending`). This type has no error field: on failure no node gets a score
    (the scheduler ignores prioritize errors anyway, so neutral scores are the same)."""
    names, scores = prioritize_scores(allocator, body)
    return [{"Host": n, "Score": s} for n, s in zip(names, scores, strict=True)]


def prioritize_scores(allocator: Allocator, body: bytes,
                      cpu_only: bool = False) -> tuple[list[str], list[int]]:
    """(hosts, their scores) of :func:`prioritize_reply`, before they become JSON; with
    ``cpu_only``, of the ``prioritize-cpu-only`` verb
    (:meth:`allocator.verbs.prioritize.Prioritize.scores_cpu_only`), same wire format."""
    try:
        args = decode_args(body)
    except WireError as exc:
        logger.warning("prioritize: %s", exc)
        return [], []
    verb = allocator.prioritizer
    score = verb.scores_cpu_only if cpu_only else verb.scores
    try:
        return worth_sending(args.node_names, score(args.pod, args.node_names))
    except Exception as exc:
        level = logging.INFO if isinstance(exc, NotReady) else logging.WARNING
        logger.log(level, "prioritize: %s", describe_error(exc), extra=pod_context(args.pod))
        return [], []


def worth_sending(names: list[str], scores: list[int]) -> tuple[list[str], list[int]]:
    """The entries of a ``HostPriorityList`` that can change kube-scheduler's choice: each
    score less the lowest one, and only the nodes left above zero (none when all are equal).

    kube-scheduler adds an extender's ``Score * weight`` to the total of each node the reply
    names, and nothing to a node it leaves out (kubernetes v1.34.4
    ``pkg/scheduler/schedule_one.go``, ``prioritizeNodes``: ``allNodeExtendersScores`` is
    filled from the reply only), then picks a node of the highest total, ties at random
    (``selectHost``). Every node it sends to prioritize gets our score, so taking the same
    amount off every node's score moves no total relative to another: the same nodes have the
    highest total. What is left out is what the scheduler no longer has to decode: in a
    fleet of alike nodes all score the same, and the 161 KB reply at 5,000 nodes becomes
    ``[]``.
    """
    if not scores:
        return [], []
    low = min(scores)
    if low:
        scores = [s - low for s in scores]
    # C-level selection (no Python code per node): the nodes whose score is not zero.
    return list(compress(names, scores)), list(filter(None, scores))


#: What follows a quoted host name in the reply, per score: the rest of its entry and the
#: start of the next one.
_AFTER_HOST = {score: f',"Score":{score}}},{{"Host":' for score in range(MAX_SCORE + 1)}
_NEXT_HOST = ',{"Host":'


def encode_priorities(names: list[str], scores: list[int]) -> str:
    """The ``HostPriorityList`` JSON text of :func:`prioritize_scores`, exactly as
    ``json.dumps(prioritize_reply(...), separators=(",", ":"))`` writes it.

    Written directly, because this is the biggest reply on the scheduler's critical path
    (5,000 entries): ``json.dumps`` of 5,000 small dicts took ~4 ms on the benchmark machine,
    a Python f-string per host ~1.5 ms. Here names are quoted by the json module's own C
    escaper and interleaved with precomputed score texts in one ``str.join``: no Python code
    runs per host.
    """
    if not names:
        return "[]"
    if not set(scores) <= _AFTER_HOST.keys():  # never from the allocator; stay correct
        return "[" + ",".join([f'{{"Host":{_quote(n)},"Score":{int(s)}}}'
                               for n, s in zip(names, scores, strict=True)]) + "]"
    text = "".join(chain.from_iterable(zip(map(_quote, names),
                                           map(_AFTER_HOST.__getitem__, scores),
                                           strict=True)))
    return '[{"Host":' + text[: -len(_NEXT_HOST)] + "]"


def bind_reply(allocator: Allocator, body: bytes) -> tuple[ExtenderBindingResult, str]:
    """(reply, outcome label for metrics)."""
    try:
        args = decode_binding(body)
    except WireError as exc:
        return {"Error": event_safe(str(exc))}, "bad-request"
    try:
        done: BindOutcome = allocator.bind(args.pod_namespace, args.pod_name, args.pod_uid,
                                           args.node)
    except NotReady as exc:
        return {"Error": event_safe(str(exc))}, "not-ready"
    except Exception as exc:
        ctx = pod_ids_context(args.pod_namespace, args.pod_name, args.pod_uid, node=args.node,
                          outcome="error")
        if isinstance(exc, TesseraError):
            logger.warning("bind refused: %s", exc, extra=ctx)
        else:
            logger.exception("bind failed", extra=ctx)
        return {"Error": describe_error(exc)}, "error"
    return {"Error": ""}, done.outcome


def preempt_reply(allocator: Allocator, body: bytes) -> extender_wire.ExtenderPreemptionResult:
    """The ``preemptVerb``'s reply (:mod:`allocator.verbs.preempt_verb`). Its result type has
    no error field, and kube-scheduler reads any status but 200 as the extender's error:
    it then preempts for nobody this attempt and retries the pod (kubernetes v1.34.4
    ``pkg/scheduler/extender.go:165-167`` and ``:420-422``;
    ``pkg/scheduler/framework/preemption/preemption.go:354-362``). So a malformed body is
    a :class:`WireError` (400) and a replica that cannot decide one of 503; a bug is logged
    and answered with no candidates (never a 500, never an eviction nobody chose)."""
    args = extender_wire.decode_args(body)
    verb = allocator.preempting
    if verb is None:
        return unchanged(args.nodes)
    try:
        return verb(args)
    except NotReady as exc:
        raise WireError(event_safe(str(exc)), HTTPStatus.SERVICE_UNAVAILABLE) from exc
    except Exception:
        logger.exception("preemptVerb failed", extra=pod_context(args.pod))
        return no_candidates()
