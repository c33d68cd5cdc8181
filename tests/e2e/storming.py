"""The preemption storm's record and what it is checked against (test_preemption_storm.py).

A raw watch of the storm's namespace keeps every version of every pod in the API server's order
(:class:`PodStream`). Replayed (:func:`replay`), it says at every step which pods hold which
cards (what the API shows: a pod holds its cards from its bind until it is gone, terminating
included, as the allocator counts them) and when each pod was bound and evicted. The
preemptions are the allocator's ``Preempted`` Events on the preemptors (:func:`preemptions`).

Each preemption's victims are checked against the exhaustive oracle by
tests/e2e/storm_oracle.py.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from allocator.preemption import priority_of
from tessera.vocabulary import Vocabulary, decode_allocation

#: The allocator's hold of a preemption lasts at most this (allocator/verbs/preempt.py).
DEADLINE_S = 60.0
_PREEMPTING = re.compile(r"^preempting (?P<victims>.+) for cards? [\d,]+ of node \S+$")
_PREEMPTED_BY = re.compile(r"^preempted by (?P<preemptor>\S+) for cards? [\d,]+ of node \S+$")


@dataclass(frozen=True)
class Seen:
    """One watch event: when it arrived (monotonic seconds), its type, the pod."""

    at: float
    kind: str
    pod: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.pod["metadata"]["name"])


class PodStream:
    """Every pod event of ``namespace`` from now on, in order (a thread; resumes on timeout)."""

    def __init__(self, core_v1: Any, namespace: str) -> None:
        self.core = core_v1
        self.namespace = namespace
        self.events: list[Seen] = []
        self.stop = threading.Event()
        reply = core_v1.list_namespaced_pod(namespace, _preload_content=False)
        self.rv = json.loads(reply.data)["metadata"]["resourceVersion"]
        self.thread = threading.Thread(target=self._run, daemon=True, name="storm-watch")
        self.thread.start()

    def _run(self) -> None:
        from kubernetes.watch.watch import iter_resp_lines

        while not self.stop.is_set():
            reply = self.core.list_namespaced_pod(
                self.namespace, watch=True, resource_version=self.rv, timeout_seconds=30,
                allow_watch_bookmarks=True, _preload_content=False)
            for line in iter_resp_lines(reply):  # type: ignore[no-untyped-call]
                event = json.loads(line)
                obj = event.get("object") or {}
                self.rv = (obj.get("metadata") or {}).get("resourceVersion", self.rv)
                if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                    self.events.append(Seen(time.monotonic(), event["type"], obj))
                if self.stop.is_set():
                    return

    def last_at(self) -> float:
        return self.events[-1].at if self.events else 0.0

    def close(self) -> None:
        self.stop.set()
        self.thread.join(40)


def node_of(pod: Mapping[str, Any]) -> str | None:
    node = (pod.get("spec") or {}).get("nodeName")
    return str(node) if node else None


def leaving(seen: Seen) -> bool:
    return seen.kind == "DELETED" or bool(seen.pod["metadata"].get("deletionTimestamp"))


@dataclass
class History:
    """What the replay found: per pod, its last version, when it was bound (and where), when
    it began to leave; the cards over-committed at any step; the live pods after each step."""

    last: dict[str, dict[str, Any]] = field(default_factory=dict)
    bound: dict[str, tuple[float, str, int]] = field(default_factory=dict)
    left: dict[str, tuple[float, int]] = field(default_factory=dict)
    overcommitted: list[str] = field(default_factory=list)
    at: list[float] = field(default_factory=list)


def replay(events: Sequence[Seen], cards: Mapping[str, int], vocabulary: Vocabulary,
           memory_mib: int) -> History:
    """Walk the stream; at each step sum the core and memory every live bound pod holds on
    each card of ``cards`` (node -> card count): a whole card is all of both."""
    history = History()
    live: dict[str, dict[str, Any]] = {}
    for step, seen in enumerate(events):
        name = seen.name
        history.last[name] = seen.pod
        history.at.append(seen.at)
        if node_of(seen.pod) and name not in history.bound:
            history.bound[name] = (seen.at, str(node_of(seen.pod)), step)
        if leaving(seen) and name not in history.left:
            history.left[name] = (seen.at, step)
        if seen.kind == "DELETED":
            live.pop(name, None)
        else:
            live[name] = seen.pod
        if node_of(seen.pod):
            history.overcommitted += _over(live, cards, vocabulary, memory_mib, step)
    return history


def _over(live: Mapping[str, dict[str, Any]], cards: Mapping[str, int],
          vocabulary: Vocabulary, memory_mib: int, step: int) -> list[str]:
    used: dict[tuple[str, int], list[tuple[str, int, int]]] = {}
    for name, pod in live.items():
        node = node_of(pod)
        text = (pod["metadata"].get("annotations") or {}).get(vocabulary.allocation_annotation)
        if node is None or text is None:
            continue
        for c in decode_allocation(text).containers:
            for index in c.card_indices:
                share = (100, memory_mib) if c.is_whole else (c.core_percent, c.memory_mib)
                used.setdefault((node, index), []).append((name, *share))
    problems = []
    for (node, index), holders in used.items():
        if (index >= cards.get(node, 0) or sum(h[1] for h in holders) > 100
                or sum(h[2] for h in holders) > memory_mib):
            problems.append(f"step {step}: card {index} of {node}: {holders}")
    return problems


@dataclass(frozen=True)
class Preemption:
    """One preemption: its preemptor, the node and cards it was nominated for (the allocator's
    ``<domain>/preemption`` annotation, a new value each time), when that annotation appeared
    (the allocator writes it before it evicts), and its victims."""

    preemptor: str
    node: str
    cards: tuple[int, ...]
    step: int
    victims: tuple[str, ...] = ()


def evicted(stream: Sequence[Seen]) -> dict[str, tuple[int, str]]:
    """Pods evicted through the Eviction API (the API server's ``DisruptionTarget`` condition,
    reason ``EvictionByEvictionAPI``): the step it first shows, and the pod's node."""
    found: dict[str, tuple[int, str]] = {}
    for step, seen in enumerate(stream):
        conditions = (seen.pod.get("status") or {}).get("conditions") or []
        if seen.name not in found and any(
                c.get("type") == "DisruptionTarget" and c.get("reason") == "EvictionByEvictionAPI"
                for c in conditions):
            found[seen.name] = (step, str(node_of(seen.pod)))
    return found


def preemptions(stream: Sequence[Seen], events: Sequence[Mapping[str, Any]],
                vocabulary: Vocabulary) -> list[Preemption]:
    """Every preemption the stream shows, with its victims.

    The allocator writes its note (node, cards, deadline, the victims' UIDs) before it evicts
    (decision 0019): a note's victims are those it chose. A note without victims (a version
    of the allocator that evicted first, then annotated): an eviction belongs to the first
    preemption on its node annotated after it, of the preemptor its ``Preempted`` Event names
    when that Event was written (the allocator's Events are rate-limited, as client-go's: a
    storm of refusals uses the budget, so some are missing)."""
    uid_name = {str(s.pod["metadata"].get("uid")): s.name for s in stream}
    found: list[Preemption] = []
    last: dict[str, str] = {}
    for step, seen in enumerate(stream):
        text = (seen.pod["metadata"].get("annotations") or {}).get(
            vocabulary.preemption_annotation)
        if text and last.get(seen.name) != text:
            last[seen.name] = text
            note = json.loads(text)
            listed = tuple(uid_name[u] for u in note.get("victims") or () if u in uid_name)
            found.append(Preemption(seen.name, str(note["node"]),
                                    tuple(int(c) for c in note["cards"]), step, listed))
    noted = {v for p in found for v in p.victims}
    named = _victims_named(events)
    victims: dict[int, list[str]] = {}
    unnoted: dict[tuple[str, str], list[tuple[int, str]]] = {}
    for name, (step, node) in sorted(evicted(stream).items(), key=lambda kv: kv[1][0]):
        if name in noted:
            continue
        later = [i for i, p in enumerate(found) if p.node == node and p.step > step
                 and not p.victims and (name not in named or named[name] == p.preemptor)]
        if later:
            victims.setdefault(later[0], []).append(name)
        elif name in named:
            # Its preemptor was deleted before the annotation was written: its Event tells.
            unnoted.setdefault((named[name], node), []).append((step, name))
    told = preempting_events(events)
    return [*(p if p.victims else Preemption(p.preemptor, p.node, p.cards, p.step,
                                             _as_told(p.preemptor, victims.get(i, []), told))
              for i, p in enumerate(found)),
            *(Preemption(who, node, (), min(e)[0], tuple(n for _, n in e))
              for (who, node), e in unnoted.items())]


def _as_told(preemptor: str, evicted_here: list[str], told: Sequence[tuple[str, set[str]]]
             ) -> tuple[str, ...]:
    """The victims the preemptor's Event names when it has one naming every pod evicted for it
    (a victim deleted meanwhile by someone else is named but shows no eviction), else those
    evicted."""
    for who, named in told:
        if who == preemptor and named >= set(evicted_here) and named:
            return tuple(sorted(named))
    return tuple(evicted_here)


def _victims_named(events: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """victim -> preemptor, from the allocator's ``Preempted`` Events on victims."""
    named = {}
    for e in events:
        match = _PREEMPTED_BY.match(e.get("message") or "")
        if e.get("reason") == "Preempted" and match is not None:
            named[e["involvedObject"]["name"]] = match["preemptor"].split("/")[-1]
    return named


def preempting_events(events: Sequence[Mapping[str, Any]]) -> list[tuple[str, set[str]]]:
    """(preemptor, the victims it names) from each ``Preempted`` Event on a preemptor."""
    out = []
    for e in events:
        match = _PREEMPTING.match(e.get("message") or "")
        if e.get("reason") == "Preempted" and match is not None:
            out.append((e["involvedObject"]["name"],
                        {v.strip().split("/")[-1] for v in match["victims"].split(",")}))
    return out


def started(history: History, p: Preemption) -> tuple[float, int]:
    """When (and at which step) its first victim began to leave (its annotation's when it
    evicted nobody)."""
    return min([history.left[v] for v in p.victims if v in history.left]
               + [(history.at[p.step], p.step)])


@dataclass(frozen=True)
class Record:
    """One storm: its namespace and nodes, the pods the test deleted, the pod stream, the
    namespace's Events at the end, and how long it took."""

    namespace: str
    nodes: list[str]
    deleted: list[str]
    stream: list[Seen]
    events: list[dict[str, Any]]
    elapsed_s: float

    def dump(self, path: Path) -> None:
        doc = {"namespace": self.namespace, "nodes": self.nodes, "deleted": self.deleted,
               "stream": [[s.at, s.kind, s.pod] for s in self.stream],
               "events": self.events, "elapsed_s": self.elapsed_s}
        path.write_text(json.dumps(doc))

    @classmethod
    def load(cls, path: Path) -> Record:
        doc = json.loads(path.read_text())
        return cls(doc["namespace"], doc["nodes"], doc["deleted"],
                   [Seen(at, kind, pod) for at, kind, pod in doc["stream"]], doc["events"],
                   doc["elapsed_s"])


def thefts(history: History, stream: Sequence[Seen], found: Sequence[Preemption],
           vocabulary: Vocabulary, memory_mib: int) -> list[str]:
    """Pods of lower priority than a preemptor bound on its cards while it waited (from its
    note until it was bound, gone, its note cleared or changed, or its deadline) that took
    the room it evicted for: with every pod not leaving at that step (the one bound
    included), the preemptor's share no longer fits on one of its cards. A pod the allocator
    had placed there before the decision (its hold counted as taken when the victims were
    chosen) leaves the preemptor its room, and is no theft."""
    out = []
    for p in found:
        if not p.cards or p.preemptor not in history.last:
            continue
        start = history.at[p.step]
        end = min(history.bound.get(p.preemptor, (float("inf"), "", 0))[0], start + DEADLINE_S,
                  history.left.get(p.preemptor, (float("inf"), 0))[0],
                  note_over(stream, p, vocabulary))
        floor = priority_of(history.last[p.preemptor])
        need = _share(history.last[p.preemptor], vocabulary, memory_mib)
        last_step = outranked_at(history, stream, p, vocabulary)
        for name, (at, node, step) in history.bound.items():
            if (node != p.node or not start < at < end or step > last_step
                    or priority_of(history.last[name]) >= floor):
                continue
            used = _standing(stream, step, vocabulary, memory_mib, exclude=p.victims)
            if set(_cards_of(stream[step].pod, vocabulary)) & set(p.cards) and any(
                    used.get((node, c), (0, 0))[0] + need[0] > 100
                    or used.get((node, c), (0, 0))[1] + need[1] > memory_mib for c in p.cards):
                out.append(f"{name} on {p.preemptor}'s card(s) {p.cards} of {node}")
    return out


#: Seconds between a preemptor's note cleared and the bind of the higher-priority pod whose
#: placement on its cards ended the preemption (outranked), either way round: the allocator
#: ends it when that pod's filter holds the cards, clears the note after, and the bind comes.
OUTRANKED_BIND_S = 2.0


def outranked_at(history: History, stream: Sequence[Seen], p: Preemption,
                 vocabulary: Vocabulary) -> int | float:
    """The step of the bind of a pod of higher priority on ``p``'s cards that ended it
    (outranked: its note cleared before the deadline, within :data:`OUTRANKED_BIND_S` of
    that bind), else infinity."""
    start, over = history.at[p.step], note_over(stream, p, vocabulary)
    if not over < start + DEADLINE_S:
        return float("inf")
    floor = priority_of(history.last[p.preemptor])
    steps = [step for name, (at, node, step) in history.bound.items()
             if node == p.node and start <= at and abs(at - over) <= OUTRANKED_BIND_S
             and priority_of(history.last[name]) > floor
             and set(_cards_of(stream[step].pod, vocabulary)) & set(p.cards)]
    return min(steps, default=float("inf"))


def note_over(stream: Sequence[Seen], p: Preemption, vocabulary: Vocabulary) -> float:
    """When the preemptor's note was cleared or replaced after ``p.step`` (its preemption
    over: outranked, or its deadline), else infinity."""
    first = (stream[p.step].pod["metadata"].get("annotations") or {}).get(
        vocabulary.preemption_annotation)
    for seen in stream[p.step + 1:]:
        if seen.name == p.preemptor and (seen.pod["metadata"].get("annotations") or {}).get(
                vocabulary.preemption_annotation) != first:
            return seen.at
    return float("inf")


def _cards_of(pod: Mapping[str, Any], vocabulary: Vocabulary) -> tuple[int, ...]:
    text = (pod["metadata"].get("annotations") or {}).get(vocabulary.allocation_annotation)
    return decode_allocation(text).card_indices() if text else ()


def _share(pod: Mapping[str, Any], vocabulary: Vocabulary, memory_mib: int) -> tuple[int, int]:
    """(core percent, memory MiB) the pod takes on a card: its allocation's when it was ever
    bound (the storm's pods have one container on one card), else its core limit alone."""
    text = (pod["metadata"].get("annotations") or {}).get(vocabulary.allocation_annotation)
    if text:
        (c,) = decode_allocation(text).containers
        return (100, memory_mib) if c.is_whole else (c.core_percent, c.memory_mib)
    core = int(pod["spec"]["containers"][0]["resources"]["limits"]["elasticgpu.io/gpu-core"])
    return (100, memory_mib) if core >= 100 else (core, 0)


def _standing(stream: Sequence[Seen], step: int, vocabulary: Vocabulary, memory_mib: int,
              exclude: Sequence[str]) -> dict[tuple[str, int], tuple[int, int]]:
    """(core, memory) taken on each (node, card) after ``step`` by bound pods not leaving,
    ``exclude`` aside."""
    live: dict[str, dict[str, Any]] = {}
    for seen in stream[:step + 1]:
        if leaving(seen):
            live.pop(seen.name, None)
        else:
            live[seen.name] = seen.pod
    used: dict[tuple[str, int], tuple[int, int]] = {}
    for name, pod in live.items():
        node = node_of(pod)
        if node is None or name in exclude or not _cards_of(pod, vocabulary):
            continue
        core, memory = _share(pod, vocabulary, memory_mib)
        for index in _cards_of(pod, vocabulary):
            was = used.get((node, index), (0, 0))
            used[(node, index)] = (was[0] + core, was[1] + memory)
    return used
