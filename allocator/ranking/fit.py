"""Node state and the placement of a GPU request on one node (pure).

A node is a tuple of cards; each card carries what is taken on it: a compute share (percent),
memory (MiB), or the whole card, and by which pod containers. Placing a
:class:`~tessera.vocabulary.PodRequest` means placing **every** GPU container of the pod:

- whole-card containers get cards that nobody uses, and keep them exclusive;
- a share lands on exactly one card that has both the compute and the memory free
  (``memory_percent`` is resolved to MiB of the card actually chosen);
- only cards of an allowed model and with at least ``min_card_memory_mib`` are used;
- the cards of one multi-card container are all of one model, unless the pod opts out
  (``PodRequest.mixed_models``).

Init containers are placed like the others and reserved **disjointly** from the app
containers. Kubernetes runs init containers before the app containers, so their cards could
in principle be reused, but the node agents hand devices out per container at container start
and none of them frees an init container's device for reuse: reserving both is the only
choice that never over-commits a card. (kube-scheduler itself takes max(init, sum(app)) for
node totals, so our per-card answer is the stricter of the two.)

Feasibility is exact (a small backtracking search with symmetry breaking over identical
cards), so filter never admits a node on which bind then fails. The placement itself is
greedy over containers: each step picks the card the policy scores best among those that keep
the rest of the pod placeable.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Final

from tessera.vocabulary import (
    WHOLE_CARD_PERCENT,
    Allocation,
    ContainerAllocation,
    ContainerRequest,
    PodRequest,
)

#: (pod UID, container name) holding a card.
Holder = tuple[str, str]

#: How a policy compares a node state before and after one step of a placement.
Chooser = Callable[["NodeState", "NodeState"], float]

_FULL: Final = WHOLE_CARD_PERCENT


@dataclass(frozen=True, slots=True)
class Card:
    """One physical card: device index (``/dev/nvidia<index>``), model, memory capacity."""

    index: int
    model: str
    memory_mib: int


@dataclass(frozen=True, slots=True)
class CardState:
    """A card and what is taken on it. A whole card counts as 100% core and all its memory."""

    card: Card
    core_used: int = 0
    memory_used_mib: int = 0
    whole: bool = False
    holders: tuple[Holder, ...] = ()
    #: Memory measured in use beyond what Tessera booked here (processes it did not place;
    #: :mod:`allocator.picture.measured`): not free, and a card with any is not idle. 0 without
    #: metrics.
    foreign_memory_mib: int = 0
    #: Measured compute utilisation (percent, stepped), read by the ``usage`` policy only.
    busy_percent: int = 0

    @property
    def free_core(self) -> int:
        return _FULL - self.core_used

    @property
    def free_memory_mib(self) -> int:
        return self.card.memory_mib - self.memory_used_mib - self.foreign_memory_mib

    @property
    def idle(self) -> bool:
        return not self.holders and not self.foreign_memory_mib

    @property
    def utilisation(self) -> float:
        """Mean of the compute and memory fractions taken (1.0 for a whole card)."""
        core = self.core_used / _FULL
        if self.card.memory_mib <= 0:
            return core
        return (core + self.memory_used_mib / self.card.memory_mib) / 2

    def with_whole(self, holder: Holder) -> CardState:
        return CardState(
            self.card, _FULL, self.card.memory_mib, True, (*self.holders, holder),
            self.foreign_memory_mib, self.busy_percent,
        )

    def with_share(self, core: int, memory_mib: int, holder: Holder) -> CardState:
        return CardState(
            self.card,
            self.core_used + core,
            self.memory_used_mib + memory_mib,
            self.whole,
            (*self.holders, holder),
            self.foreign_memory_mib,
            self.busy_percent,
        )


@dataclass(frozen=True, slots=True)
class NodeState:
    """A node's cards and their usage: an immutable snapshot (copy on write)."""

    name: str
    cards: tuple[CardState, ...]

    def replace_card(self, position: int, card: CardState) -> NodeState:
        cards = list(self.cards)
        cards[position] = card
        return NodeState(self.name, tuple(cards))

    @property
    def models(self) -> tuple[str, ...]:
        return tuple(sorted({c.card.model for c in self.cards}))

    @property
    def core_total(self) -> int:
        return _FULL * len(self.cards)

    @property
    def core_used(self) -> int:
        return sum(c.core_used for c in self.cards)

    @property
    def memory_total_mib(self) -> int:
        return sum(c.card.memory_mib for c in self.cards)

    @property
    def memory_used_mib(self) -> int:
        return sum(c.memory_used_mib for c in self.cards)

    @property
    def idle_cards(self) -> int:
        return sum(1 for c in self.cards if c.idle)


#: What placement and the policies can tell apart about a card: model, memory and usage
#: (booked, and measured: foreign memory, busy percent). Left out on purpose: the card's index
#: and its holders. Fit answers, reasons and the scores of policies that sum over cards never
#: depend on them; a bind chooses the real cards again.
CardSignature = tuple[str, int, int, int, bool, bool, int, int]


def card_signature(card: CardState) -> CardSignature:
    return (card.card.model, card.card.memory_mib, card.core_used, card.memory_used_mib,
            card.whole, not card.holders,  # not holders: idle, without a property call
            card.foreign_memory_mib, card.busy_percent)


def node_signature(node: NodeState) -> tuple[CardSignature, ...]:
    """The signature of every card, in the node's card order."""
    return tuple(map(card_signature, node.cards))


def empty_node(name: str, cards: Iterable[Card]) -> NodeState:
    return NodeState(name, tuple(CardState(c) for c in cards))


def build_node_state(
    name: str,
    cards: Sequence[Card],
    allocations: Iterable[tuple[str, Iterable[ContainerAllocation]]],
) -> tuple[NodeState, tuple[str, ...]]:
    """The node with every recorded allocation applied, and the problems found doing so.

    Recorded allocations are the truth even when they conflict (an over-committed card then
    simply has no room left); the problems are reported, never silently dropped.
    """
    states = [CardState(c) for c in cards]
    position = {c.index: i for i, c in enumerate(cards)}
    problems: list[str] = []
    for uid, containers in allocations:
        for ca in containers:
            holder = (uid, ca.name)
            for index in ca.card_indices:
                pos = position.get(index)
                if pos is None:
                    problems.append(f"pod {uid} container {ca.name}: no card {index}")
                    continue
                st = states[pos]
                if ca.is_whole:
                    if not st.idle:
                        problems.append(f"card {index} taken whole by {uid} but already in use")
                    states[pos] = st.with_whole(holder)
                else:
                    new = st.with_share(ca.core_percent, ca.memory_mib, holder)
                    if st.whole or new.free_core < 0 or new.free_memory_mib < 0:
                        problems.append(f"card {index} over-committed by {uid}")
                    states[pos] = new
    return NodeState(name, tuple(states)), tuple(problems)


@dataclass(frozen=True, slots=True)
class Placement:
    """Where every GPU container of a pod goes on one node, and the node state after it."""

    node: str
    containers: tuple[ContainerAllocation, ...]
    after: NodeState

    def allocation(self, pod_uid: str, at: float) -> Allocation:
        return Allocation(node=self.node, containers=self.containers, allocated_at=at,
                          pod_uid=pod_uid)


@dataclass(frozen=True, slots=True)
class Unfit:
    """Why a pod does not fit a node, worded for the pod's owner.

    ``resolvable`` is False when no amount of evicting other pods would help (wrong model,
    cards too small): kube-scheduler then skips preemption for that node.
    """

    reason: str
    resolvable: bool = True


FitResult = Placement | Unfit


# ----------------------------------------------------------------------------- helpers


def share_memory_mib(container: ContainerRequest, card: Card) -> int:
    """MiB a share takes on ``card``: absolute, or its percent of the card rounded up (a
    percent of a card with no memory can never be satisfied)."""
    if container.memory_percent:
        need = -(-card.memory_mib * container.memory_percent // 100)
        return max(1, need)
    return container.memory_mib


def room_for_share(container: ContainerRequest, card: Card, free_core: int,
                   free_memory_mib: int) -> bool:
    """Whether a share fits in this much free room of ``card`` (the one share-fit check)."""
    return free_core >= container.core_percent and free_memory_mib >= share_memory_mib(
        container, card)


def share_fits(container: ContainerRequest, card: CardState) -> bool:
    """Whether a share fits on ``card`` now (never on a card taken whole)."""
    return not card.whole and room_for_share(container, card.card, card.free_core,
                                             card.free_memory_mib)


def eligible(request: PodRequest, card: Card) -> bool:
    return request.allows_model(card.model) and card.memory_mib >= request.min_card_memory_mib


def _order(request: PodRequest) -> list[int]:
    """Hardest first: whole cards (most first), then the largest shares."""
    cs = request.containers
    return sorted(
        range(len(cs)),
        key=lambda i: (
            -cs[i].cards,
            -cs[i].core_percent,
            -cs[i].memory_percent,
            -cs[i].memory_mib,
            i,
        ),
    )


class _Slots:
    """Mutable working copy of the eligible cards, for the feasibility search."""

    __slots__ = ("cards", "free_core", "free_mem", "idle", "one_model", "whole")

    def __init__(self, cards: Sequence[CardState], one_model: bool) -> None:
        #: the cards of one multi-card container must share a model
        self.one_model = one_model
        self.cards = [c.card for c in cards]
        self.free_core = [c.free_core for c in cards]
        self.free_mem = [c.free_memory_mib for c in cards]
        self.idle = [c.idle for c in cards]
        self.whole = [c.whole for c in cards]


def _feasible(items: Sequence[ContainerRequest], k: int, s: _Slots,
              pins: Sequence[str | None] = ()) -> bool:
    """Whether ``items[k:]`` fit together on the slots. ``pins[j]``, when given, is the model
    whole-card item j must take (the rest of a container whose first card is chosen)."""
    if k == len(items):
        return True
    c = items[k]
    if c.cards:
        pin = pins[k] if k < len(pins) else None
        for pool in _whole_card_pools(c.cards, s, pin):
            if _take_whole(items, k, s, pins, pool):
                return True
        return False
    n = len(s.cards)
    seen: set[tuple[int, int, int, bool, str]] = set()
    for i in range(n):
        if s.whole[i] or not room_for_share(c, s.cards[i], s.free_core[i], s.free_mem[i]):
            continue
        key = (s.free_core[i], s.free_mem[i], s.cards[i].memory_mib, s.idle[i],
               s.cards[i].model)
        if key in seen:
            continue
        seen.add(key)
        need_mem = share_memory_mib(c, s.cards[i])
        was_idle = s.idle[i]
        s.free_core[i] -= c.core_percent
        s.free_mem[i] -= need_mem
        s.idle[i] = False
        ok = _feasible(items, k + 1, s, pins)
        s.free_core[i] += c.core_percent
        s.free_mem[i] += need_mem
        s.idle[i] = was_idle
        if ok:
            return True
    return False


def _whole_card_pools(count: int, s: _Slots, pin: str | None) -> list[list[int]]:
    """The idle slots a whole-card item of ``count`` cards may choose from: one pool per
    model when its cards must share one (or the pinned model's only), else all idle slots."""
    idle = [i for i in range(len(s.cards)) if s.idle[i]]
    if pin is not None:
        idle = [i for i in idle if s.cards[i].model == pin]
    elif s.one_model and count > 1:
        by_model: dict[str, list[int]] = {}
        for i in idle:
            by_model.setdefault(s.cards[i].model, []).append(i)
        return [pool for pool in by_model.values() if len(pool) >= count]
    return [idle] if len(idle) >= count else []


def _take_whole(items: Sequence[ContainerRequest], k: int, s: _Slots,
                pins: Sequence[str | None], pool: list[int]) -> bool:
    """Try every way to give item k its whole cards from ``pool``, then the rest."""
    # Cards handed out whole differ only by their capacity (model and minimum memory were
    # already filtered, or the pool is one model), so try each multiset of capacities once.
    groups: dict[tuple[str, int], list[int]] = {}
    for i in pool:
        groups.setdefault((s.cards[i].model, s.cards[i].memory_mib), []).append(i)
    for chosen in _multisets(list(groups.values()), items[k].cards):
        saved = [(i, s.free_core[i], s.free_mem[i]) for i in chosen]
        for i in chosen:
            s.idle[i], s.whole[i], s.free_core[i], s.free_mem[i] = False, True, 0, 0
        ok = _feasible(items, k + 1, s, pins)
        for i, fc, fm in saved:
            s.idle[i], s.whole[i], s.free_core[i], s.free_mem[i] = True, False, fc, fm
        if ok:
            return True
    return False


def _multisets(groups: list[list[int]], k: int) -> Iterable[list[int]]:
    """Every way to take k cards from groups of interchangeable cards (one pick per count)."""
    if k == 0:
        yield []
        return
    if not groups:
        return
    head, rest = groups[0], groups[1:]
    for take in range(min(k, len(head)), -1, -1):
        for tail in _multisets(rest, k - take):
            yield head[:take] + tail


def _slots(request: PodRequest, cards: Sequence[CardState]) -> _Slots:
    return _Slots(cards, one_model=not request.mixed_models)


def _feasible_on(request_items: Sequence[ContainerRequest], request: PodRequest,
                 node: NodeState, pins: Sequence[str | None] = ()) -> bool:
    cards = [c for c in node.cards if eligible(request, c.card)]
    return _feasible(request_items, 0, _slots(request, cards), pins)


def unfit_reason(request: PodRequest, node: NodeState) -> Unfit | None:
    """None when the whole pod fits the node, else why not (the first cause found)."""
    if not node.cards:
        return Unfit("node has no GPU cards", resolvable=False)
    cards = [c for c in node.cards if eligible(request, c.card)]
    if not cards:
        return _no_eligible_card(request, node)
    if _fits_at_a_glance(request, cards):
        return None
    # Cheap checks first; they also produce the most actionable message.
    return (_short_of_whole_cards(request, cards) or _short_of_one_model(request, cards)
            or _short_of_room_for_a_share(request, cards)
            or _short_of_room_together(request, cards))


def _no_eligible_card(request: PodRequest, node: NodeState) -> Unfit:
    """Cause: no card is of an allowed model, or none has the minimum memory."""
    if not any(request.allows_model(c.card.model) for c in node.cards):
        have = ", ".join(m or "unknown" for m in node.models)
        want = " or ".join(request.models)
        return Unfit(f"no card of model {want} (node has {have})", resolvable=False)
    largest = max(c.card.memory_mib for c in node.cards)
    return Unfit(
        f"no card with at least {request.min_card_memory_mib} MiB memory "
        f"(largest {largest} MiB)",
        resolvable=False,
    )


def _fits_at_a_glance(request: PodRequest, cards: Sequence[CardState]) -> bool:
    """The common case, answered without the search: one container that needs one card with
    room, or k idle cards. False means "look closer", not "does not fit"."""
    if len(request.containers) != 1:
        return False
    only = request.containers[0]
    if only.cards:
        if only.cards > 1 and not request.mixed_models:
            return False
        return sum(1 for c in cards if c.idle) >= only.cards
    return any(share_fits(only, c) for c in cards)


def _short_of_whole_cards(request: PodRequest, cards: Sequence[CardState]) -> Unfit | None:
    """Cause: fewer eligible cards, or fewer idle ones, than the pod's whole cards."""
    whole = request.whole_cards
    if not whole:
        return None
    if whole > len(cards):
        return Unfit(f"needs {whole} whole cards, node has {len(cards)}", resolvable=False)
    free = sum(1 for c in cards if c.idle)
    if whole > free:
        return Unfit(f"needs {whole} whole card{'s' if whole > 1 else ''}, {free} free"
                     f"{foreign_note(cards)}")
    return None


def _short_of_one_model(request: PodRequest, cards: Sequence[CardState]) -> Unfit | None:
    """Cause: enough whole cards, but not of one model for a multi-card container."""
    if request.mixed_models:
        return None
    total: dict[str, int] = {}
    idle: dict[str, int] = {}
    for x in cards:
        total[x.card.model] = total.get(x.card.model, 0) + 1
        idle[x.card.model] = idle.get(x.card.model, 0) + int(x.idle)
    for i in _order(request):
        c = request.containers[i]
        if c.cards < 2:
            continue
        if max(total.values()) < c.cards:
            have = ", ".join(f"{n} {m or 'unknown'}" for m, n in sorted(total.items()))
            return Unfit(f"needs {c.cards} whole cards of one model, node has {have}",
                         resolvable=False)
        if max(idle.values()) < c.cards:
            free = ", ".join(f"{n} {m or 'unknown'}" for m, n in sorted(idle.items()))
            return Unfit(f"needs {c.cards} whole cards of one model, free: {free}")
    return None


def _short_of_room_for_a_share(request: PodRequest,
                               cards: Sequence[CardState]) -> Unfit | None:
    """Cause: one share of the pod fits on no card, even alone (hardest share first)."""
    for i in _order(request):
        c = request.containers[i]
        if not c.cards and not _feasible([c], 0, _slots(request, cards)):
            return _no_room_for(c, cards)
    return None


def _no_room_for(c: ContainerRequest, cards: Sequence[CardState]) -> Unfit:
    """Why share ``c`` fits on no card, naming the room there is."""
    open_cards = [x for x in cards if not x.whole]
    if not open_cards:
        return Unfit(f"no card with {c.describe()} free (all cards taken whole)")
    best_core = max(x.free_core for x in open_cards)
    best_mem = max(x.free_memory_mib for x in open_cards)
    note = foreign_note(open_cards)
    if c.core_percent and not (c.memory_mib or c.memory_percent):
        return Unfit(f"no card with {c.core_percent}% core free (largest {best_core}%)")
    if not c.core_percent and c.memory_mib:
        return Unfit(f"no card with {c.memory_mib} MiB free (largest {best_mem} MiB){note}")
    return Unfit(
        f"no card with {c.describe()} free (most free: {best_core}% core, {best_mem} MiB)"
        f"{note}"
    )


def foreign_note(cards: Sequence[CardState]) -> str:
    """The cards whose memory is measured in use by processes Tessera did not place, in words
    ("" when none: always so without metrics), to end an :class:`Unfit` reason."""
    busy = [f"gpu {c.card.index}: {_gib(c.foreign_memory_mib)} used by processes Tessera did "
            f"not place" for c in cards if c.foreign_memory_mib]
    return f"; {'; '.join(busy)}" if busy else ""


def _gib(mib: int) -> str:
    return f"{mib // 1024} GiB" if mib % 1024 == 0 else f"{mib} MiB"


def _short_of_room_together(request: PodRequest, cards: Sequence[CardState]) -> Unfit | None:
    """Cause: each container fits alone, but not all of them at once."""
    items = [request.containers[i] for i in _order(request)]
    if len(items) > 1 and not _feasible(items, 0, _slots(request, cards)):
        return Unfit(f"the pod's {len(items)} GPU containers do not fit together on its cards")
    return None


def fits(request: PodRequest, node: NodeState) -> bool:
    """The fast yes/no behind :func:`unfit_reason` (same answer, no message)."""
    cards = [c for c in node.cards if eligible(request, c.card)]
    if not cards:
        return False
    items = request.containers if len(request.containers) == 1 else [
        request.containers[i] for i in _order(request)
    ]
    return _feasible(items, 0, _slots(request, cards))


# ----------------------------------------------------------------------------- placement


def place(
    request: PodRequest, node: NodeState, chooser: Chooser, pod_uid: str = ""
) -> FitResult:
    """Place every GPU container of the pod on ``node``, choosing cards by ``chooser``.

    ``chooser(before, after)`` scores one step (higher is better); among cards that leave
    the node in the same state (identical cards), the lowest index wins, so placement is
    deterministic for a deterministic chooser.
    """
    unfit = unfit_reason(request, node)
    if unfit is not None:
        return unfit
    order = _order(request)
    items = [request.containers[i] for i in order]
    state = node
    result: dict[int, ContainerAllocation] = {}
    for step, ci in enumerate(order):
        c = items[step]
        rest = items[step + 1:]
        holder = (pod_uid, c.name)
        if c.cards:
            taken: list[int] = []
            model: str | None = None  # set by the first card when the cards share a model
            one_model = c.cards > 1 and not request.mixed_models

            def take(cs: CardState, h: Holder = holder) -> CardState:
                return cs.with_whole(h)

            for j in range(c.cards):
                # The rest of this container counts as one more whole-card demand, of the
                # model of the card this step takes when the cards share one.
                remaining = c.cards - j - 1
                pending = ([ContainerRequest(c.name, cards=remaining)] if remaining else [])
                state, pos = _best_step(
                    request, state, chooser, pending + list(rest), partial(_idle_of, model), take,
                    pin_first=one_model and bool(pending),
                )
                taken.append(state.cards[pos].card.index)
                if one_model:
                    model = state.cards[pos].card.model
            result[ci] = ContainerAllocation(c.name, tuple(sorted(taken)), init=c.init)
        else:
            def put(cs: CardState, c: ContainerRequest = c, h: Holder = holder) -> CardState:
                return cs.with_share(c.core_percent, share_memory_mib(c, cs.card), h)

            state, pos = _best_step(request, state, chooser, list(rest), partial(share_fits, c),
                                    put)
            chosen = state.cards[pos]
            mem = share_memory_mib(c, chosen.card)
            result[ci] = ContainerAllocation(
                c.name, (chosen.card.index,), core_percent=c.core_percent,
                memory_mib=mem, init=c.init,
            )
    containers = tuple(result[i] for i in range(len(request.containers)))
    return Placement(node.name, containers, state)


def _idle_of(model: str | None, card: CardState) -> bool:
    """An idle card, of ``model`` when one is given."""
    return card.idle and (model is None or card.card.model == model)


def _best_step(
    request: PodRequest,
    state: NodeState,
    chooser: Chooser,
    rest: list[ContainerRequest],
    can: Callable[[CardState], bool],
    put: Callable[[CardState], CardState],
    pin_first: bool = False,
) -> tuple[NodeState, int]:
    """The best card for one step. ``pin_first``: the first item of ``rest`` is the rest of
    this step's container and must take cards of the model chosen here."""
    best: tuple[float, NodeState, int] | None = None
    seen: set[CardSignature] = set()
    for pos, cs in enumerate(state.cards):
        if not eligible(request, cs.card) or not can(cs):
            continue
        key = card_signature(cs)
        if key in seen:
            continue
        seen.add(key)
        trial = state.replace_card(pos, put(cs))
        pins = (cs.card.model,) if pin_first else ()
        if rest and not _feasible_on(rest, request, trial, pins):
            continue
        score = chooser(state, trial)
        if best is None or score > best[0]:
            best = (score, trial, pos)
    # unfit_reason() proved a complete placement exists and every step keeps one, so a
    # candidate always exists here; anything else is a bug worth failing loudly on.
    assert best is not None, "placement search lost a feasible placement"
    return best[1], best[2]


def apply_placement(node: NodeState, containers: Iterable[ContainerAllocation],
                    pod_uid: str) -> NodeState:
    """``node`` with a recorded allocation added (used to re-check a stored record)."""
    state, _ = build_node_state(
        node.name, [c.card for c in node.cards], [(pod_uid, containers)]
    )
    merged = tuple(
        replace(
            old,
            core_used=old.core_used + new.core_used,
            memory_used_mib=old.memory_used_mib + new.memory_used_mib,
            whole=old.whole or new.whole,
            holders=old.holders + new.holders,
        )
        for old, new in zip(node.cards, state.cards, strict=True)
    )
    return NodeState(node.name, merged)
