"""Bind: the only verb that writes. The pod goes to the node with its cards, or nothing of
it remains.

Told in three steps, each a function below:

1. :meth:`Bind._settle_existing` — what the picture already says of the pod: a hold for this node
   (filter's, claimed in step 2), a record of an earlier bind (an idempotent repeat: make sure
   the Binding exists), a pod already bound.
2. :meth:`Bind._claim_or_reserve` — the pod's cards on the node: filter's hold claimed, or the pod
   placed afresh by its policy and reserved in the picture (placing again while other binds
   change the node, up to :data:`RESERVE_PLACEMENTS` times).
3. :meth:`Bind.write` — onto the pod and into the API, inside the node agent's guard
   (:meth:`~allocator.agents.port.NodeAgent.guard`: a node lock, or nothing): the agent
   metadata, a PATCH of the labels the pod must carry (skipped when it has them), then the
   Binding, which carries the canonical allocation record and the agent annotations onto the
   pod atomically with ``spec.nodeName``. Every failure undoes what was done.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import Final

from allocator import agents
from allocator.agents.port import NodeAgent
from allocator.decisions import DecisionHooks, PodRef
from allocator.errors import ApiError, BindError, Conflict, NotFound, describe_error
from allocator.picture.records import Stage
from allocator.picture.state import ClusterState
from allocator.ports import KubeApi, Obj
from allocator.preemption import priority_of
from allocator.preemption.reserved import blocked
from allocator.ranking.cards import NodeState
from allocator.ranking.fit import Unfit, place_and_keep
from allocator.ranking.policies import Policy, chooser
from allocator.verbs.pods import Requests, pod_key
from allocator.verbs.priority import pod_priority
from allocator.verbs.reader import PodReader
from tessera.logs import pod_context
from tessera.vocabulary import Allocation, PodRequest, RequestError, encode_allocation

logger = logging.getLogger(__name__)

#: Placing the pod for its reservation: every bind to the node meanwhile means placing
#: again; under a burst of binds to one node, many times.
RESERVE_PLACEMENTS: Final = 100


@dataclass(frozen=True)
class BindOutcome:
    """What a successful bind did: ``"bound"``, ``"already-bound"`` or ``"no-gpu"``."""

    outcome: str
    cards: tuple[int, ...] = ()


class Bind:
    """The bind verb, with its handles: the shared reads, the picture, the API port, the node
    agent, the decision hooks and the clock (the reader's)."""

    def __init__(self, reader: PodReader, state: ClusterState, api: KubeApi, agent: NodeAgent,
                 hooks: DecisionHooks) -> None:
        self.reader = reader
        self.state = state
        self.api = api
        self.agent = agent
        self.hooks = hooks
        self.clock: Callable[[], float] = reader.clock
        self.vocabulary = reader.config.vocabulary
        #: The cards reserved against a pod (UID, priority) by preemptions in flight, by node
        #: (:meth:`allocator.verbs.preempt.Preempt.reserved`; None: preemption off): a pod
        #: placed afresh (its hold gone) is placed off them.
        self.reserved: Callable[[str, int], Mapping[str, frozenset[int]]] | None = None

    def __call__(self, namespace: str, name: str, uid: str, node: str) -> BindOutcome:
        """Bind the pod to ``node`` with its cards; :class:`BindError` when it did not happen
        (and then nothing of it remains: cache and pod annotations are rolled back)."""
        try:
            return self._bind(namespace, name, uid, node)
        except BindError as exc:
            self.hooks.bind_failed(PodRef(namespace, name, uid), node, str(exc))
            raise

    def _bind(self, namespace: str, name: str, uid: str, node: str) -> BindOutcome:
        r, state = self.reader, self.state
        r.check_ready()
        pod = self._read_pod(namespace, name, uid)
        ref = PodRef(namespace, name, (pod.get("metadata") or {}).get("uid", ""))
        settled, held = self._settle_existing(ref, pod, node)
        if settled is not None:
            return settled
        try:
            request = r.pod_request(pod)
            policy = r.policy_for(request) if request is not None else None
        except RequestError as exc:
            raise BindError(str(exc)) from exc
        if request is None or policy is None:
            # Not a GPU pod after all (the scheduler only sends pods with our resources,
            # but a pod may have changed): bind it plainly.
            state.release_hold(ref.uid)
            self.create_binding(namespace, name, ref.uid, node, {})
            return BindOutcome("no-gpu")
        reserved = self._claim_or_reserve(ref, pod, request, policy, node, held)
        try:
            allocation = replace(reserved, allocated_at=self.clock())
            with self.agent.guard(ref, node):
                self.write(ref, pod, node, allocation)
        except BaseException:
            state.unreserve(ref.uid)  # the reservation goes with everything else
            raise
        state.mark_bound(ref.uid, priority_of(pod))
        cards = allocation.card_indices()
        logger.info("bound %s/%s to %s cards %s", namespace, name, node, cards,
                    extra=pod_context(pod, node=node, policy=policy.name, outcome="bound"))
        self.hooks.allocated(ref, node, cards, policy.name)
        return BindOutcome("bound", cards)

    def _read_pod(self, namespace: str, name: str, uid: str) -> Obj:
        """The pod filter kept, else read from the API; it must still be the scheduler's."""
        who = f"{namespace}/{name}"
        pod = self.reader.recall(namespace, name, uid)
        try:
            if pod is None:
                pod = self.api.get_pod(namespace, name)
        except NotFound as exc:
            raise BindError(f"pod {who} not found") from exc
        except ApiError as exc:
            raise BindError(f"reading pod {who} failed: {exc}") from exc
        actual_uid = (pod.get("metadata") or {}).get("uid", "")
        if uid and actual_uid != uid:
            raise BindError(f"pod {who} was replaced (uid {actual_uid}, scheduler had {uid})")
        return pod

    def _settle_existing(self, ref: PodRef, pod: Obj, node: str
                         ) -> tuple[BindOutcome | None, bool]:
        """(the outcome when the picture or the pod already settle this bind, else None;
        whether filter's hold for this node is there to claim)."""
        who = f"{ref.namespace}/{ref.name}"
        bound_to = (pod.get("spec") or {}).get("nodeName") or ""
        record = self.state.record(ref.uid)
        held = False
        if record is not None and record.stage is Stage.HELD:
            held = record.node == node and not bound_to
            if not held:
                self.state.release_hold(ref.uid)  # not this bind's: the pod is placed afresh
            record = None
        if record is not None:
            if record.node != node:
                raise BindError(f"pod {who} already holds cards on node {record.node}, "
                                f"not {node}")
            if record.stage is Stage.INFLIGHT:
                raise BindError(f"a bind of pod {who} to {node} is already in progress")
            # Idempotent repeat: the cards are ours; make sure the Binding exists.
            if bound_to != node:
                annotations = self._metadata(pod, record.allocation)[0]
                self.create_binding(ref.namespace, ref.name, ref.uid, node, annotations)
            return BindOutcome("already-bound", record.allocation.card_indices()), False
        if bound_to:
            if bound_to == node:
                return BindOutcome("already-bound"), False
            raise BindError(f"pod {who} is already bound to node {bound_to}")
        return None, held

    def _claim_or_reserve(self, ref: PodRef, pod: Obj, request: PodRequest, policy: Policy,
                          node: str, held: bool) -> Allocation:
        """Filter's hold for this node, claimed; else the pod placed afresh and reserved."""
        state = self.state
        claimed = state.claim_hold(ref.uid, node, request) if held else None
        if claimed is not None:
            return claimed
        meta = pod.get("metadata") or {}

        def reserve(allocation: Allocation, version: int, requests: Requests) -> bool:
            if state.reserve(ref.uid, meta.get("namespace", ""), meta.get("name", ""),
                             allocation, version, requests):
                return True
            if state.record(ref.uid) is not None:
                raise BindError(f"a bind of pod {pod_key(pod)} is already in progress")
            return False

        ctx, requests = self.reader.placing_inputs(request, pod)
        against = (self.reserved(ref.uid, pod_priority(pod)).get(node, frozenset())
                   if self.reserved is not None else frozenset())

        def node_now() -> tuple[NodeState, int] | None:
            now = self.reader.node_now(node)
            return now if now is None or not against else (blocked(now[0], against), now[1])

        with state.node_lock(node):
            kept = place_and_keep(request, node_now,
                                  chooser(policy, ctx), ref.uid,
                                  partial(reserve, requests=requests), RESERVE_PLACEMENTS)
        if kept is None:
            raise BindError(f"node {node} is unknown to the GPU allocator")
        if isinstance(kept, Unfit):
            raise BindError(f"node {node}: {kept.reason}")
        return kept

    def write(self, ref: PodRef, pod: Obj, node: str, allocation: Allocation) -> None:
        """Write the pod's ``allocation`` on ``node``: the agent metadata, the label PATCH,
        then the Binding (while still the leader). On failure the labels are rolled back and
        :class:`BindError` says what happened; the caller drops the reservation."""
        who = f"{ref.namespace}/{ref.name}"
        annotations, patch, rollback = self._metadata(pod, allocation)
        if patch is not None:
            try:
                self.api.patch_pod(ref.namespace, ref.name, patch)
            except ApiError as exc:
                raise BindError(f"labelling pod {who} for its allocation failed: {exc}"
                                ) from exc
        try:
            if not self.reader.is_leader():
                raise BindError("lost leadership before binding; retry")
            self.create_binding(ref.namespace, ref.name, ref.uid, node, annotations)
        except Exception as exc:
            undone = "rolled back"
            if patch is not None:
                try:
                    self.api.patch_pod(ref.namespace, ref.name, rollback)
                except Exception as rb_exc:
                    # Labels stay on an unbound pod: harmless (no allocation record was
                    # written, and no node agent looks at a pod without a node).
                    undone = f"label rollback failed too ({rb_exc})"
                    logger.error("rollback of %s failed: %s", who, rb_exc,
                                 extra=pod_context(pod))
            raise BindError(f"{describe_error(exc)}; allocation {undone}") from exc

    def _metadata(self, pod: Obj, allocation: Allocation
                  ) -> tuple[dict[str, str], Obj | None, Obj]:
        """(annotations for the Binding, label PATCH or None when nothing is missing, its
        rollback).

        The allocation record and the agent annotations travel **in the Binding**: the
        pods/binding subresource copies ``metadata.annotations`` onto the pod in the same
        storage update that sets ``spec.nodeName`` (kubernetes
        ``pkg/registry/core/pod/storage/storage.go``, ``BindingREST.setPodNodeAndMetadata``:
        ``for k, v := range annotations { pod.Annotations[k] = v }``). So a record exists only
        on a bound pod, and no crash can leave one on a pod that is not. Labels are copied
        there only behind the PodTopologyLabelsAdmission gate, so the labels that must be on
        the pod — the GPU-pod label our watch selects by, the labels of agents that select
        by label (nano-gpu) — are PATCHed first (harmless on an unbound pod), with the UID as
        precondition. A webhook-admitted pod already has the GPU-pod label and the default
        elastic agent wants none (see :mod:`allocator.agents`), so its bind is the Binding
        alone. Only the cluster's agent profile is written; when its writer cannot express the
        allocation the bind fails (:class:`BindError`): nothing is bound that the node's agent
        cannot start.
        """
        vocab = self.vocabulary
        meta = pod.get("metadata") or {}
        old_ann: dict[str, str] = dict(meta.get("annotations") or {})
        old_lab: dict[str, str] = dict(meta.get("labels") or {})
        extra = self.agent.metadata(agents.BindContext(
            allocation, pod, self.state.cards(allocation.node), vocab,
            int(self.clock() * 1e9)))
        if extra.skipped:
            why = "; ".join(extra.skipped.values())
            raise BindError(f"agent profile {self.agent.profile.value}: its node agent cannot "
                            f"be given this allocation ({why}); not bound")
        annotations = dict(extra.annotations)
        annotations[vocab.allocation_annotation] = encode_allocation(allocation)
        wanted = {**extra.labels, vocab.gpu_pod_label: "true"}
        # Every pod we bind carries the GPU-pod label, so the label-selected pod watch sees
        # it even when it was admitted without the webhook.
        labels: dict[str, str | None] = {k: v for k, v in wanted.items()
                                         if old_lab.get(k) != v}
        # A Binding can add annotations but not remove them: agent keys an older allocator
        # left on this unbound pod (another dialect set) are cleared with the labels.
        stale: dict[str, str | None] = {
            k: None for k in agents.all_agent_keys(old_ann, vocab) if k not in annotations}
        if not labels and not stale:
            return annotations, None, {}
        # The UID makes the patch conditional: a pod recreated under the same name fails it.
        patch_meta: Obj = {"uid": meta.get("uid"), "labels": labels}
        if stale:
            patch_meta["annotations"] = stale
        rollback: Obj = {"metadata": {"labels": {k: old_lab.get(k) for k in labels}}}
        return annotations, {"metadata": patch_meta}, rollback

    def create_binding(self, namespace: str, name: str, uid: str, node: str,
                       annotations: Mapping[str, str]) -> None:
        try:
            self.api.bind_pod(namespace, name, uid, node, annotations)
        except Conflict as exc:
            # Already bound (a lost reply of an earlier attempt?): fine if to this node.
            try:
                current = self.api.get_pod(namespace, name)
            except ApiError:
                current = {}
            if (current.get("spec") or {}).get("nodeName") == node:
                if annotations and self.vocabulary.allocation_annotation not in (
                        (current.get("metadata") or {}).get("annotations") or {}):
                    # Bound by someone else, without cards: record ours on the bound pod.
                    self._annotate_bound(namespace, name, uid, node, annotations)
                return
            raise BindError(f"binding {namespace}/{name} to {node} conflicted: {exc}") from exc
        except ApiError as exc:
            raise BindError(f"binding {namespace}/{name} to {node} failed: {exc}") from exc

    def _annotate_bound(self, namespace: str, name: str, uid: str, node: str,
                        annotations: Mapping[str, str]) -> None:
        try:
            self.api.patch_pod(namespace, name, {"metadata": {
                "uid": uid, "annotations": dict(annotations)}})
        except ApiError as exc:
            raise BindError(f"pod {namespace}/{name} was bound to {node} without an "
                            f"allocation, and recording it failed: {exc}") from exc
