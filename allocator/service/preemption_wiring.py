"""Preemption's wiring (:func:`allocator.service.app.create_app` calls it when
``preemption`` is on): the verb (:class:`~allocator.verbs.preempt.Preempt`) with the hooks
that hear of it (Events, ``/metrics``), the picture's releases and deletions told to it after
the requeue, and the preemptions in flight as ``/status`` and the page show them
(:mod:`allocator.service.preemptions`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence, Sized
from functools import partial
from typing import Any

from allocator.decisions import DecisionHooks, Fanout
from allocator.picture.state import ClusterState
from allocator.ports import KubeApi
from allocator.service import preemptions
from allocator.service.metrics import PreemptionCounts
from allocator.verbs.bind import Bind
from allocator.verbs.preempt import Preempt
from allocator.verbs.requeue import RequeueOnRelease
from tessera.vocabulary import PodRequest


def build_preempt(state: ClusterState, api: KubeApi, clock: Callable[[], float],
                  hooks: Sequence[DecisionHooks], counts: PreemptionCounts, *,
                  request_of: Callable[[Mapping[str, Any]], PodRequest | None],
                  ready: Callable[[], bool]) -> Preempt:
    """The verb, telling ``hooks`` and ``counts``; ``counts``' in-flight gauge reads it at
    scrape time."""
    preempt = Preempt(state, api, Fanout([*hooks, counts]), clock,
                      state.vocabulary.preemption_annotation,
                      state.vocabulary.gpu_pod_selector, request_of=request_of, ready=ready)
    counts.in_flight.set_function(partial(_count, preempt.snapshot))
    return preempt


def _count(items: Callable[[], Sized]) -> float:
    return float(len(items()))


def connect(preempt: Preempt, state: ClusterState, requeue: RequeueOnRelease,
            bind: Bind) -> None:
    """Each release tells the requeue and then preemption (the hold of freed cards, which
    asks the preemptor again through the requeue); each deletion both (a deleted preemptor's
    preemption is over); a bind placing a pod afresh keeps off the cards reserved against it."""
    preempt.requeue = requeue
    bind.reserved = preempt.reserved

    def on_release(node: str) -> None:
        requeue.released(node)
        preempt.released(node)

    def on_pod_deleted(uid: str) -> None:
        requeue.forget(uid)
        preempt.pod_gone(uid)

    state.on_release = on_release
    state.on_pod_deleted = on_pod_deleted


def status(preempt: Preempt | None, state: ClusterState, now: float) -> list[dict[str, Any]]:
    """``/status`` ``preemptions``: none when preemption is off."""
    if preempt is None:
        return []
    return preemptions.documents(preempt.snapshot(), state.record, now)
