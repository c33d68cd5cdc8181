"""A preemption storm on the real control plane: 300 GPU pods of mixed priorities (PriorityClasses
that preempt, classes that never do, and Genius's ``genius/priority`` levels, which the webhook
turns into classes that never preempt) arrive on 3 KWOK nodes of 2 cards while the test deletes
pods (churn), and the allocator is restarted half-way.

Checked at the end, from a watch of every pod version (tests/e2e/storming.py) and the Events:

- at no step of the stream does a card hold more than it has (bound pods, terminating ones
  included, as the allocator counts them);
- every pod that left and was not deleted by the test was evicted through the Eviction API
  and belongs to a preemption (the preemptor's ``<domain>/preemption`` annotation, a new value
  per preemption, or its ``Preempted`` Event when the preemptor was deleted before it could be
  annotated); the allocator's Events, when written (they are rate-limited as client-go's),
  agree; kube-scheduler preempted nobody itself;
- every victim had a priority strictly lower than its preemptor's;
- every preemption was followed by its preemptor's bind on its node, or is counted as wasted
  (printed; at most :data:`WASTE_ALLOWED`), a preemptor deleted by the test aside, and those
  outranked: a pod of higher priority bound on its cards while it waited, its note cleared
  before its deadline (kube-scheduler lets a pod of higher priority ignore a lower
  nomination; counted and printed, not bounded: the storm's priority-20 pods come at random);
- no pod is the victim of two preemptions (of a second while the first is in flight, or
  once it is leaving), and no pod of lower priority was bound on a
  preemption's cards while its preemptor waited taking the room it evicted for (the
  preemption's cards are reserved from its decision, decision 0025; storming.thefts says
  what counts);
- the victims are those the exhaustive oracle (tests/preemption_oracle.py) gives on the node as
  the stream shows it just before the first eviction, and the node is the one it picks among
  the three, for every preemption whose snapshot is surely the allocator's view
  (storm_oracle.py says when; the others are counted and printed). After the storm,
  :data:`CALM_PREEMPTORS` preemptors of priority 30 come one at a time on a quiet cluster, so
  that at least 3 are checked and at least one node choice.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ALL_DIALECTS
from dev_clusters import running
from kubernetes.client.exceptions import ApiException
from storm_oracle import HOLD_S, asked_again, iter_victim_problems, offer, quiet_before
from storming import (
    DEADLINE_S,
    History,
    PodStream,
    Preemption,
    Record,
    Seen,
    evicted,
    leaving,
    node_of,
    note_over,
    outranked_at,
    preempting_events,
    preemptions,
    replay,
    started,
    thefts,
)

from devcluster.binaries import Binaries
from devcluster.cluster import DevCluster
from devcluster.nodes import delete_nodes, uniform
from devcluster.options import Options
from devcluster.workloads import (
    container,
    create_priority_classes,
    list_objects,
    make_pod,
    wait_for,
)
from tessera.vocabulary import Vocabulary

pytestmark = pytest.mark.e2e

PODS = 300
RESTART_AT = PODS // 2
NODES, CARDS, MODEL, MEMORY_MIB = 3, 2, "Tesla-T4", 15360
GENIUS_LEVELS = 3
#: (class, value, may preempt): the classes the storm's pods name besides Genius's.
CLASSES = (("storm-p1", 1, True), ("storm-p2", 2, True), ("storm-p10", 10, True),
           ("storm-p20", 20, True), ("storm-p20-never", 20, False), ("storm-p30", 30, True))
#: After the storm, preemptors of priority 30 one at a time, each once nothing has happened
#: for longer than any hold the API does not show lasts: snapshots the oracle check is sure
#: of, whatever the churn left unsure.
CALM_PREEMPTORS = 3
CALM_QUIET_S = HOLD_S + 1.0
#: Wasted preemptions allowed, outranked ones aside: a preemptor bound elsewhere first (room
#: appeared there meanwhile). Lower-priority binds on a preemption's cards are no more
#: (decision 0025): they were most of the waste (4 were allowed).
WASTE_ALLOWED = 2

SEED = 47


@pytest.fixture(scope="module")
def cluster(binaries: Binaries, request: pytest.FixtureRequest) -> Iterator[DevCluster]:
    dev = DevCluster(binaries, None, Options(
        preemption=True, allocator_args=(ALL_DIALECTS,),
        webhook_args=(ALL_DIALECTS, f"--genius-priority-levels={GENIUS_LEVELS}")))
    with running(dev, request, "dev cluster"):
        _priority_classes(dev)
        yield dev


def _priority_classes(dev: DevCluster) -> None:
    # Genius's levels as the chart creates them (templates/genius-priority: Never).
    wanted = [(f"tessera-genius-priority-{n}", n, False) for n in range(GENIUS_LEVELS + 1)]
    create_priority_classes(dev.api_client, [*wanted, *CLASSES])


def _storm_pod(draw: random.Random, name: str, selector: dict[str, str]) -> dict[str, Any]:
    """30% Genius levels 0-3 and 30% classes 1-2 as quarter or half cards; 20% class 10 as
    half or whole cards; 15% class 20 whole cards; 5% class 20 that never preempts."""
    roll = draw.random()
    if roll < 0.3:
        doc = make_pod(name, [container(limits={"elasticgpu.io/gpu-core":
                                                draw.choice(("25", "50"))})],
                       labels={"genius/priority": str(draw.randint(0, GENIUS_LEVELS))},
                       node_selector=selector)
        return doc
    if roll < 0.6:
        klass, core = draw.choice(("storm-p1", "storm-p2")), draw.choice(("25", "50"))
    elif roll < 0.8:
        klass, core = "storm-p10", draw.choice(("50", "100"))
    elif roll < 0.95:
        klass, core = "storm-p20", "100"
    else:
        klass, core = "storm-p20-never", "50"
    doc = make_pod(name, [container(limits={"elasticgpu.io/gpu-core": core})],
                   node_selector=selector)
    doc["spec"]["priorityClassName"] = klass
    return doc


def _storm(cluster: DevCluster, core_v1: Any, namespace: str, selector: dict[str, str],
           stream: PodStream) -> set[str]:
    """Create the pods a few tenths of a second apart, deleting one now and then (bound
    mostly, sometimes pending); restart the allocator half-way. The names deleted."""
    draw = random.Random(SEED)
    deleted: set[str] = set()
    for i in range(PODS):
        core_v1.create_namespaced_pod(namespace, _storm_pod(draw, f"s{i:03d}", selector))
        if i == RESTART_AT:
            cluster.services.restart_allocator()  # waits for /readyz
        roll = draw.random()
        if roll < 0.35:
            last = {s.name: s.pod for s in stream.events}
            bound = sorted(n for n, p in last.items() if node_of(p) and n not in deleted
                           and not p["metadata"].get("deletionTimestamp"))
            pending = sorted(n for n, p in last.items() if not node_of(p) and n not in deleted)
            pool = pending if roll < 0.04 else bound
            if pool:
                victim = draw.choice(pool)
                try:
                    core_v1.delete_namespaced_pod(victim, namespace, grace_period_seconds=0)
                    deleted.add(victim)
                except ApiException as exc:
                    if exc.status != 404:
                        raise
                    # Evicted for a preemption since the watch last showed it: not ours.
        time.sleep(0.25)
    return deleted


def _calm(core_v1: Any, namespace: str, selector: dict[str, str], stream: PodStream,
          vocabulary: Vocabulary) -> None:
    """:data:`CALM_PREEMPTORS` whole-card pods of priority 30, each created once no pod was
    bound, left or asked again for :data:`CALM_QUIET_S` (or after a minute: then it is one
    more preemption), and bound before the next."""
    for i in range(CALM_PREEMPTORS):
        deadline = time.monotonic() + 60
        while (time.monotonic() - _last_change(stream, vocabulary) < CALM_QUIET_S
               and time.monotonic() < deadline):
            time.sleep(0.5)
        doc = make_pod(f"calm{i}", [container(limits={"elasticgpu.io/gpu-core": "100"})],
                       node_selector=selector)
        doc["spec"]["priorityClassName"] = "storm-p30"
        core_v1.create_namespaced_pod(namespace, doc)
        wait_for(f"calm{i} bound", lambda n=f"calm{i}": any(
            s.name == n and node_of(s.pod) for s in stream.events), timeout=60, interval=0.5)


def _last_change(stream: PodStream, vocabulary: Vocabulary) -> float:
    """When a pod was last bound, began to leave or was asked again by the requeue."""
    events = list(stream.events)
    asked = asked_again(events, vocabulary)
    last = max((at for at, _ in asked), default=0.0)
    seen_bound: set[str] = set()
    for seen in events:
        if leaving(seen) or (node_of(seen.pod) and seen.name not in seen_bound):
            last = max(last, seen.at)
        if node_of(seen.pod):
            seen_bound.add(seen.name)
    return last


def _settled(stream: PodStream, vocabulary: Vocabulary) -> bool:
    """Quiet for 8 s, and no preemption under way: every preemptor the stream shows nominated
    less than a deadline ago is bound or gone."""
    if time.monotonic() - stream.last_at() < 8:
        return False
    events = list(stream.events)
    last = {s.name: s for s in events}
    waiting = {p.preemptor for p in preemptions(events, (), vocabulary)
               if time.monotonic() - events[p.step].at < DEADLINE_S}
    return all(last[n].kind == "DELETED" or node_of(last[n].pod) for n in waiting)


def test_a_storm_of_300_pods_with_churn_and_a_restart_preempts_only_lower_and_minimal_victims(
        cluster: DevCluster, core_v1: Any, namespace: str, tmp_path: Path) -> None:
    names = [f"{namespace}-n{i}" for i in range(NODES)]
    selector = {"tessera-storm": namespace}
    cluster.add_nodes([uniform(n, CARDS, MODEL, MEMORY_MIB, labels=selector) for n in names])
    stream = PodStream(core_v1, namespace)
    began = time.monotonic()
    try:
        deleted = _storm(cluster, core_v1, namespace, selector, stream)
        wait_for("the storm settled", lambda: _settled(stream, cluster.vocabulary),
                 timeout=150, interval=2)
        _calm(core_v1, namespace, selector, stream, cluster.vocabulary)
        elapsed = time.monotonic() - began
        events = list_objects(core_v1.list_namespaced_event, namespace)
    finally:
        stream.close()
        delete_nodes(core_v1, names)
    record = Record(namespace, names, sorted(deleted), stream.events, events, elapsed)
    path = tmp_path / "storm.json"
    record.dump(path)  # judge() reads it again: `python -c` over a kept run, no new storm
    print(f"\npreemption storm: its record in {path}")
    judge(record, cluster.vocabulary)


def judge(record: Record, vocabulary: Vocabulary) -> None:
    """Every check of the module's docstring over one storm's record (prints the counts)."""
    names, deleted = record.nodes, set(record.deleted)
    history = replay(record.stream, dict.fromkeys(names, CARDS), vocabulary, MEMORY_MIB)
    found = preemptions(record.stream, record.events, vocabulary)
    victims = {v for p in found for v in p.victims}
    assert history.overcommitted == [], history.overcommitted[:5]
    _check_evictions(record, history, found)

    wasted, by_churn, outranked = _outcomes(history, record.stream, found, deleted, vocabulary)
    taken = thefts(history, record.stream, found, vocabulary, MEMORY_MIB)
    twice = _chosen_twice(history, record.stream, found, vocabulary)
    checked, problems = _against_the_oracle(history, record.stream, found, names, vocabulary)
    print(f"preemption storm: {PODS} + {CALM_PREEMPTORS} pods ({len(deleted)} deleted by the "
          f"test), "
          f"{len(history.bound)} bound, {len(found)} preemptions evicting {len(victims)} pods, "
          f"{len(wasted)} wasted {wasted}, {len(outranked)} outranked {outranked}, "
          f"{len(by_churn)} preemptors deleted by the test, "
          f"{len(taken)} binds of lower priority taking a waiting preemptor's room "
          f"{taken}, {len(twice)} victims of two preemptions {twice}; "
          f"victims checked against the oracle: {checked['node']} on their node, "
          f"{checked['choice']} with the node chosen of {NODES}, {checked['unsure']} snapshots "
          f"not sure ({checked['unsure_agreeing']} of them as the oracle says anyway; "
          f"{checked['room_held']} preempted where the API showed room: held room); "
          f"{record.elapsed_s:.0f} s with an allocator restart (shared machine)")
    assert problems == [], problems
    assert len(found) >= 10, "too few preemptions to call it a storm"
    assert checked["node"] >= 3, "too few snapshots checked against the oracle"
    assert checked["choice"] >= 1, "no calm preemptor's node choice checked"
    assert len(wasted) <= WASTE_ALLOWED, wasted
    assert twice == [], twice
    assert taken == [], taken


def _chosen_twice(history: History, stream: list[Seen], found: list[Preemption],
                  vocabulary: Vocabulary) -> list[str]:
    """Victims chosen again by a preemption while an earlier one that chose them was in
    flight (from its note until its preemptor was bound or gone, its note cleared or
    replaced, or its deadline), or once they were evicted already. (A victim the test's churn
    deleted a moment before the allocator's watch showed it may be named by one preemption:
    its eviction finds it gone; that is not two preemptions choosing it.)"""
    twice = []
    evicted_at = {name: step for name, (step, _node) in evicted(stream).items()}
    for i, p in enumerate(found):
        end = min(history.bound.get(p.preemptor, (float("inf"), "", 0))[0],
                  history.left.get(p.preemptor, (float("inf"), 0))[0],
                  note_over(stream, p, vocabulary), history.at[p.step] + DEADLINE_S)
        for later in found[i + 1:]:
            at = history.at[later.step]
            for v in set(p.victims) & set(later.victims):
                out = evicted_at.get(v)
                if at < end or (out is not None and history.at[out] < at):
                    twice.append(f"{v} ({p.preemptor}, {later.preemptor})")
    return twice


def _check_evictions(record: Record, history: History, found: list[Preemption]) -> None:
    """Every pod that left unasked was evicted for a preemption of higher priority, as the
    Events (those written) say, and kube-scheduler evicted nobody."""
    deleted, victims = set(record.deleted), {v for p in found for v in p.victims}
    left = set(history.left) - deleted
    assert left <= set(evicted(record.stream)), "left, neither deleted by the test nor evicted"
    assert left <= victims, f"evicted for no preemption: {sorted(left - victims)}"
    unevicted = victims - set(evicted(record.stream))
    assert unevicted <= deleted, f"named victims never evicted: {sorted(unevicted - deleted)}"
    for preemptor, named in preempting_events(record.events):
        assert any(p.preemptor == preemptor and set(p.victims) == named for p in found), (
            preemptor, named)
    assert not [e for e in record.events if e.get("reason") == "Preempted"
                and e.get("reportingComponent") != "tessera-allocator"], "kube-scheduler preempted"
    priority = {n: int(p["spec"].get("priority") or 0) for n, p in history.last.items()}
    lower = [(p.preemptor, v) for p in found for v in p.victims
             if priority[v] >= priority[p.preemptor]]
    assert lower == [], f"victims of equal or higher priority: {lower}"


def _outcomes(history: History, stream: list[Seen], found: list[Preemption], deleted: set[str],
              vocabulary: Vocabulary) -> tuple[list[str], list[str], list[str]]:
    """Preemptions not followed by their preemptor's bind on their node: wasted, those whose
    preemptor the test deleted first, and those outranked (a pod of higher priority bound on
    their cards from their note until shortly after it was cleared, before the deadline)."""
    wasted: list[str] = []
    by_churn: list[str] = []
    outranked: list[str] = []
    for p in found:
        at, _ = started(history, p)
        bind = history.bound.get(p.preemptor)
        if bind is not None and bind[0] >= at and bind[1] == p.node:
            continue
        label = f"{p.preemptor}@{p.node}"
        if p.preemptor in deleted:
            by_churn.append(label)
        elif outranked_at(history, stream, p, vocabulary) < float("inf"):
            outranked.append(label)
        else:
            wasted.append(label)
    return wasted, by_churn, outranked


def _against_the_oracle(history: History, stream: list[Seen], found: list[Preemption],
                        names: list[str], vocabulary: Vocabulary
                        ) -> tuple[dict[str, int], list[str]]:
    """Counts (``node``: checked on their node, ``choice``: also the node chosen, ``unsure``:
    not checked; for information, ``unsure_agreeing``: of those, how many the snapshot's
    oracle agrees with anyway, ``room_held``: how many preempted on a node where the API
    showed room for the preemptor) and the problems of the checked ones."""
    counts = {"node": 0, "choice": 0, "unsure": 0, "unsure_agreeing": 0, "room_held": 0}
    problems: list[str] = []
    asked = asked_again(stream, vocabulary)
    for p in found:
        _, step = started(history, p)
        everywhere = quiet_before(stream, history, found, p, set(names), asked)
        sure = p.victims and (everywhere or quiet_before(stream, history, found, p, {p.node},
                                                         asked))
        nodes = names if everywhere else [p.node]
        offers = {n: offer(history, stream, step, n, CARDS, MODEL, MEMORY_MIB, vocabulary)
                  for n in nodes}
        found_here = list(iter_victim_problems(history, p, offers, vocabulary))
        # The oracle evicting nobody: the node had room by the API, so the allocator counted
        # room held (for another pod) as taken.
        counts["room_held"] += any(w.endswith("the oracle's walk []") for w in found_here)
        if not sure:
            counts["unsure"] += 1
            counts["unsure_agreeing"] += not found_here
            continue
        problems += found_here
        counts["node"] += 1
        counts["choice"] += everywhere
    return counts, problems
