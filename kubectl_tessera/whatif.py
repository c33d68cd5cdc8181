"""``what-if``: the cluster's GPU pods replayed under each policy, and the cards left free (pure).

The openb replay's engine (bench/openb/replay.py) on live data: the nodes start empty, the pods
arrive one at a time in the order they were allocated (then the Pending ones, oldest first),
and each goes where :func:`kubectl_tessera.placing.place_best` puts it, i.e. the policy's score
of the placement :func:`allocator.ranking.fit.place` makes, applied with
:func:`allocator.ranking.fit.apply_placement`. No pod leaves. kube-scheduler's part is reduced to
what
the picture knows: a pod only goes to nodes its ``nodeSelector`` matches and that are not
cordoned; CPU, memory, affinity and taints are not modelled, and ties go to the first node by
name where kube-scheduler would pick one at random.

Fragmentation-aware policies (fgd, fgd-ff, fgd-cpu) need the workload mix; as in the openb
replay, it is the replayed pods' own request shapes weighted by how often each occurs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from allocator.ranking.fit import NodeState, apply_placement, empty_node
from allocator.ranking.policies import PolicyContext, Workload, get_policy
from kubectl_tessera.picture import GpuNode, GpuPod, Picture, selector_excludes
from kubectl_tessera.placing import ContentIds, ScoreMemo, place_best
from tessera.vocabulary import PodRequest

#: The replay "policy" that keeps each pod's own policy, and the default for the others.
AS_IS = "as-is"


@dataclass(frozen=True)
class Outcome:
    """The end state of one replay (or of the cluster as it is, ``policy == "now"``)."""

    policy: str
    pods: int
    placed: int
    #: Pods that found no node, "namespace/name".
    unplaced: tuple[str, ...]
    cards: int
    #: Cards nobody holds any part of.
    idle_cards: int
    #: Nodes all of whose cards are idle.
    idle_nodes: int
    #: Cards partly used (a share taken, room left on them).
    shared_cards: int


@dataclass(frozen=True)
class WhatIf:
    now: Outcome
    outcomes: tuple[Outcome, ...]
    #: Pending pods that were replayed after the bound ones.
    pending: int


def _outcome(policy: str, states: Sequence[NodeState], pods: int,
             unplaced: Sequence[str]) -> Outcome:
    cards = [c for s in states for c in s.cards]
    return Outcome(
        policy=policy, pods=pods, placed=pods - len(unplaced), unplaced=tuple(unplaced),
        cards=len(cards), idle_cards=sum(1 for c in cards if c.idle),
        idle_nodes=sum(1 for s in states if s.cards and all(c.idle for c in s.cards)),
        shared_cards=sum(1 for c in cards if not c.idle and not c.whole),
    )


def workload_mix(pods: Sequence[GpuPod]) -> tuple[tuple[PodRequest, float], ...]:
    """The replayed pods' request shapes and their popularity (fgd's typical pods)."""
    counts = Counter(p.request for p in pods if p.request is not None)
    return tuple((request, float(n)) for request, n in counts.most_common())


def replay(picture: Picture, pods: Sequence[GpuPod], policy_name: str,
           default_policy: str, seed: int = 0) -> Outcome:
    """Place ``pods`` in order on the picture's nodes, emptied, under one policy.

    ``policy_name`` is used for every pod, or with :data:`AS_IS` each pod's own policy and
    ``default_policy`` for pods without one (the cluster as configured).
    """
    nodes: list[GpuNode] = list(picture.nodes)
    position = {n.name: i for i, n in enumerate(nodes)}
    # Nodes open to a pod depend on its nodeSelector only (and cordons, fixed here).
    open_for: dict[tuple[tuple[str, str], ...], list[int]] = {}
    states = [empty_node(n.name, n.cards) for n in nodes]
    ids = ContentIds()
    contents = [ids.of(s) for s in states]
    workload = Workload(workload_mix(pods))  # one per replay: fgd's digest lives with it
    memo: ScoreMemo = {}
    unplaced: list[str] = []
    for pod in pods:
        request = pod.request
        if request is None:
            unplaced.append(pod.key)
            continue
        name = policy_name
        if policy_name == AS_IS:
            name = request.policy or default_policy
        policy = get_policy(name)
        ctx = PolicyContext(request, pod_key=f"{pod.namespace}/{pod.name}/{pod.uid}",
                            seed=seed, workload=workload)
        selector = tuple(sorted(pod.node_selector.items()))
        open_idx = open_for.get(selector)
        if open_idx is None:
            open_idx = open_for[selector] = [i for i, n in enumerate(nodes)
                                             if not selector_excludes(pod, n)]
        placed = place_best(request, policy, ctx, [states[i] for i in open_idx], pod.uid,
                            memo, [contents[i] for i in open_idx])
        if placed is None:
            unplaced.append(pod.key)
            continue
        target = position[placed.node]
        states[target] = apply_placement(states[target], placed.containers, pod.uid)
        contents[target] = ids.of(states[target])
    return _outcome(policy_name, states, len(pods), unplaced)


def what_if(picture: Picture, policies: Sequence[str], default_policy: str, *,
            include_pending: bool = True, seed: int = 0) -> WhatIf:
    """The cluster now, and one replay per policy of its bound (and Pending) GPU pods."""
    bound = [p for p in picture.holders if p.node in {n.name for n in picture.nodes}]
    pending = list(picture.pending) if include_pending else []
    now = _outcome("now", [n.state for n in picture.nodes], len(bound) + len(pending),
                   [p.key for p in pending])
    pods = bound + pending
    return WhatIf(now, tuple(replay(picture, pods, p, default_policy, seed) for p in policies),
                  len(pending))


def render(result: WhatIf) -> str:
    head = (f"{'policy':<10}{'placed':>10}{'unplaced':>10}{'idle cards':>12}"
            f"{'idle nodes':>12}{'shared cards':>14}")
    lines = [head]
    for o in (result.now, *result.outcomes):
        lines.append(f"{o.policy:<10}{o.placed:>6}/{o.pods:<3}{len(o.unplaced):>10}"
                     f"{o.idle_cards:>7}/{o.cards:<4}{o.idle_nodes:>12}{o.shared_cards:>14}")
    lines.append("")
    lines.append(f"replayed: {result.now.placed} bound GPU pods in allocation order"
                 + (f", then {result.pending} pending" if result.pending else "")
                 + "; 'now' is the cluster as it is")
    for o in result.outcomes:
        if o.unplaced:
            lines.append(f"{o.policy}: no node for {', '.join(o.unplaced)}")
    return "\n".join(lines) + "\n"
