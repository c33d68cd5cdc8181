"""The preemption storm's victims against the exhaustive oracle (test_preemption_storm.py).

Each preemption's victims are checked against tests/preemption_oracle.py on the nodes as the
pod stream shows them just before its first victim was evicted (:func:`offer`). The allocator
decided on its own picture a moment earlier, and its picture holds room the API does not show
(a filter's hold until the bind, the requeue's hold for a refused pod it asks again, a
preemption's hold for its preemptor), so a snapshot is used only when it is surely the
allocator's picture (:func:`quiet_before`): within :data:`QUIET_S` of that moment nothing
happened on the node(s) in question (a change its watch may not have seen yet, or a bind whose
filter held room already); no other preemption's hold may lie there (its victims gone, its
preemptor not bound yet); and no pod asked again by the requeue after a release there may
still hold room (asked within :data:`HOLD_S`, neither bound nor gone since). The others are
counted, not checked.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from preemption_oracle import oracle_choices, reprieved_victims
from storming import DEADLINE_S, History, Preemption, Seen, node_of, started

from allocator.preemption import GpuPod, NodeOffer, Preemptor, policy_of, priority_of, started_at
from allocator.ranking.cards import Card, CardState, NodeState, apply_placement
from tessera.dialects.config import DialectConfig
from tessera.dialects.pod import read_pod_request
from tessera.vocabulary import Vocabulary, decode_allocation

#: Seconds around a snapshot in which nothing may happen on its nodes for it to be checked.
QUIET_S = 0.5
#: How long a filter's or the requeue's hold lasts at most (allocator/verbs/config.py).
HOLD_S = 15.0


def offer(history: History, events: Sequence[Seen], step: int, node: str, cards: int,
          model: str, memory_mib: int, vocabulary: Vocabulary) -> NodeOffer:
    """``node`` as the stream shows it before ``step``: its cards and every GPU pod bound there
    and not gone (terminating ones too: the allocator counts them until they are gone)."""
    live: dict[str, dict[str, Any]] = {}
    for seen in events[:step]:
        if seen.kind == "DELETED":
            live.pop(seen.name, None)
        else:
            live[seen.name] = seen.pod
    state = NodeState(node, tuple(CardState(Card(i, model, memory_mib)) for i in range(cards)))
    pods = []
    for name, pod in live.items():
        text = (pod["metadata"].get("annotations") or {}).get(vocabulary.allocation_annotation)
        if node_of(pod) != node or text is None:
            continue
        uid = str(pod["metadata"]["uid"])
        allocation = decode_allocation(text)
        state = apply_placement(state, allocation.containers, uid)
        pods.append(GpuPod(uid, "", name, allocation, priority_of(pod), started_at(pod)))
    # In the allocator's order, by UID (allocator/verbs/preempt_offers.py): pods of equal
    # priority started in the same second (``status.startTime`` has second resolution) tie,
    # and kube-scheduler's own order of a tie is not stable; the allocator's is the UID's.
    return NodeOffer(state, tuple(sorted(pods, key=lambda p: p.uid)))


def preemptor_of(pod: Mapping[str, Any], vocabulary: Vocabulary) -> Preemptor:
    request = read_pod_request(pod, DialectConfig(vocabulary))
    assert request is not None, pod["metadata"]["name"]
    return Preemptor(str(pod["metadata"]["uid"]), request, priority_of(pod), policy_of(pod))


def asked_again(events: Sequence[Seen], vocabulary: Vocabulary) -> list[tuple[float, str]]:
    """(when, pod) of each new value of the requeue's annotation: the allocator asked a
    refused pod again after a release, and may hold room for it (allocator/verbs/requeue.py)."""
    out, last = [], {}
    for seen in events:
        value = (seen.pod["metadata"].get("annotations") or {}).get(
            vocabulary.requeue_annotation)
        if value and last.get(seen.name) != value:
            last[seen.name] = value
            out.append((seen.at, seen.name))
    return out


def _requeue_hold(history: History, asked: Sequence[tuple[float, str]], at: float,
                  nodes: set[str]) -> bool:
    """Whether a pod asked again after a release on ``nodes`` may still hold room at ``at``."""
    releases = sorted(when for name, (when, _) in history.left.items()
                      if node_of(history.last[name]) in nodes)
    for when, name in asked:
        if not at - HOLD_S <= when <= at:
            continue
        bound = history.bound.get(name, (float("inf"), "", 0))[0]
        gone = history.left.get(name, (float("inf"), 0))[0]
        if min(bound, gone) > at and any(when - 2 * QUIET_S <= r <= when for r in releases):
            return True
    return False


def quiet_before(events: Sequence[Seen], history: History, all_preemptions: Sequence[
        Preemption], p: Preemption, nodes: set[str], asked: Sequence[tuple[float, str]]
                 ) -> bool:
    """Whether the stream before ``p``'s first eviction is surely what the allocator saw on
    ``nodes`` (the module's docstring says when); ``asked``: :func:`asked_again`'s."""
    at, _ = started(history, p)
    if _requeue_hold(history, asked, at, nodes):
        return False
    for seen in events:
        if not at - QUIET_S <= seen.at <= at + QUIET_S or seen.name in {*p.victims, p.preemptor}:
            continue
        if seen.at < at and (node_of(seen.pod) in nodes
                             or node_of(history.last[seen.name]) in nodes):
            return False  # a change the allocator's watch may not have seen yet
        bind = history.bound.get(seen.name)
        if seen.at >= at and bind is not None and bind[0] == seen.at and bind[1] in nodes:
            return False  # a bind: its filter's hold may have been there already
    for other in all_preemptions:
        if other is p or other.node not in nodes:
            continue
        gone = [history.left.get(v) for v in other.victims]
        if any(g is None for g in gone):
            continue
        began = started(history, other)[0]
        bound = history.bound.get(other.preemptor, (float("inf"), "", 0))[0]
        # Its hold may lie there: its victims left, its preemptor not bound, its deadline on.
        if began <= at < began + DEADLINE_S and bound > at - QUIET_S:
            return False
    return True


def iter_victim_problems(history: History, p: Preemption,
                         offers: Mapping[str, NodeOffer], vocabulary: Vocabulary
                         ) -> Iterator[str]:
    """How ``p``'s victims differ from the oracle's on the snapshot: the node's own victims by
    enumeration (kube-scheduler's reprieve walk) and, over ``offers``, the node chosen."""
    preemptor = preemptor_of(history.last[p.preemptor], vocabulary)
    offer_there = offers[p.node]
    found = reprieved_victims(preemptor, offer_there)
    got = set(p.victims)
    if found is None or {v.name for v in found[0]} != got:
        yield (f"{p.preemptor} on {p.node}: evicted {sorted(got)}, the oracle's walk "
               f"{None if found is None else sorted(v.name for v in found[0])}")
    if len(offers) > 1:
        # Any node tied best on all five criteria may be kube-scheduler's choice.
        choices = [(node, sorted(v.name for v in victims)) for node, victims in
                   oracle_choices(preemptor, list(offers.values()))]
        if (p.node, sorted(got)) not in choices:
            yield f"{p.preemptor}: chose {p.node} {sorted(got)}, the oracle {choices or None}"
