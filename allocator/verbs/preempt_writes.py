"""What a preemption writes, on the worker's thread (:mod:`allocator.verbs.preempt`): the
note and the nomination, the evictions, the note's clearing; and whether the preemptor is
still a pending pod.

Why the preemptor is read back: with node resources on (the default), the picture watches
bound pods only (:func:`allocator.picture.watch.reflectors`), so it never sees a pending
preemptor deleted. A hold placed for one is checked at once, and every preemption in flight
at most every :data:`~allocator.verbs.preempt.CHECK_SECONDS` with one list of pending pods.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from allocator.decisions import DecisionHooks, PodRef
from allocator.errors import ApiError, NotFound, TooManyRequests
from allocator.verbs.preempt_note import Note, encode_note
from allocator.verbs.preempt_ports import InFlight, PreemptApi

logger = logging.getLogger(__name__)

#: The pods a restore and a check read: the pending ones (kube-scheduler's own
#: unassigned-pod selector).
PENDING = "spec.nodeName="


def _patch_note(api: PreemptApi, annotation: str, ref: PodRef, note: Note) -> None:
    """Raises :class:`ApiError` (the UID in the patch: a pod replaced under the name fails
    it)."""
    api.patch_pod(ref.namespace, ref.name, {"metadata": {
        "uid": ref.uid, "annotations": {annotation: encode_note(note)}}})


def write_note(api: PreemptApi, annotation: str, ref: PodRef, note: Note) -> None:
    """The note first (what a restarted leader reads), then the nomination."""
    try:
        _patch_note(api, annotation, ref, note)
        api.patch_pod_status(ref.namespace, ref.name,
                             {"status": {"nominatedNodeName": note.node}})
    except ApiError as exc:
        logger.warning("nomination of %s on %s failed: %s", ref.key, note.node, exc)


def write_answer_note(api: PreemptApi, annotation: str, ref: PodRef, note: Note) -> bool:
    """The ``preemptVerb``'s note, before its answer goes (kube-scheduler nominates the pod
    itself): whether it was written."""
    try:
        _patch_note(api, annotation, ref, note)
    except ApiError as exc:
        logger.warning("preemption note of %s on %s not written: %s", ref.key, note.node, exc)
        return False
    return True


def evict(api: PreemptApi, hooks: DecisionHooks, entry: InFlight,
          victims: tuple[PodRef, ...], going: Callable[[], bool] = lambda: True,
          leaving: Callable[[PodRef, bool], None] = lambda victim, going: None) -> None:
    """Evict ``victims`` in order through the Eviction API; a refusal stops the rest (a 429:
    a PodDisruptionBudget forbids it now; never a delete instead), and so does the
    preemption's end (``going`` False: its preemptor bound, deleted or outranked meanwhile).
    A victim already gone counts as evicted. Each is told to ``leaving`` before its eviction
    (True: another preemption deciding meanwhile counts it gone), and again (False) when the
    eviction failed."""
    ref = entry.pod
    evicted: list[PodRef] = []
    for victim in victims:
        if not going():
            logger.info("preemption for %s over: its other victims stay", ref.key)
            break
        leaving(victim, True)
        try:
            api.create_eviction(victim.namespace, victim.name)
        except NotFound:
            pass  # gone already: its cards are free
        except TooManyRequests as exc:
            logger.info("preemption for %s stopped: %s", ref.key, exc)
            leaving(victim, False)
            break
        except ApiError as exc:
            logger.warning("eviction of %s for %s failed: %s", victim.key, ref.key, exc)
            leaving(victim, False)
            break
        evicted.append(victim)
    if evicted:
        hooks.preempted(ref, tuple(evicted), entry.node, entry.cards)


def clear_note(api: PreemptApi, annotation: str, ref: PodRef, node: str) -> None:
    """Remove the note, and the nomination if it is still ours (kube-scheduler clears a
    nomination itself on a failed attempt with no candidate: module doc of
    :mod:`~allocator.verbs.preempt_note`); a note without a node names no nomination."""
    try:
        pod = api.get_pod(ref.namespace, ref.name)
        if str((pod.get("metadata") or {}).get("uid") or "") != ref.uid:
            return
        if node and (pod.get("status") or {}).get("nominatedNodeName") == node:
            api.patch_pod_status(ref.namespace, ref.name,
                                 {"status": {"nominatedNodeName": None}})
        api.patch_pod(ref.namespace, ref.name, {"metadata": {
            "uid": ref.uid, "annotations": {annotation: None}}})
    except NotFound:
        pass
    except ApiError as exc:
        logger.warning("preemption note of %s not cleared: %s", ref.key, exc)


def _is_pending(pod: dict[str, Any]) -> bool:
    meta = pod.get("metadata") or {}
    return not (pod.get("spec") or {}).get("nodeName") and not meta.get("deletionTimestamp")


def still_pending(api: PreemptApi, ref: PodRef) -> bool | None:
    """Whether the preemptor is still a pending pod (not deleted, not replaced under its
    name, not being deleted); None when the API could not say."""
    try:
        pod = api.get_pod(ref.namespace, ref.name)
    except NotFound:
        return False
    except ApiError as exc:
        logger.info("preemptor %s not checked: %s", ref.key, exc)
        return None
    return str((pod.get("metadata") or {}).get("uid") or "") == ref.uid and _is_pending(pod)


def _pending_uid(pod: dict[str, Any]) -> str | None:
    return str((pod.get("metadata") or {}).get("uid") or "") if _is_pending(pod) else None


def pending_uids(api: PreemptApi) -> set[str]:
    """The UIDs of every pending pod (one list). Raises :class:`ApiError`."""
    return {uid for uid in api.list_pods_by_field(PENDING, _pending_uid)[0] if uid}
