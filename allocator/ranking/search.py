"""Exact feasibility: whether every GPU container of a pod can be placed on some cards (pure).

A small backtracking search with symmetry breaking over identical cards, so filter never
admits a node on which bind then fails; and the per-card tests it is built from.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from allocator.ranking.cards import Card, CardState, NodeState
from tessera.vocabulary import ContainerRequest, PodRequest


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
    """Whether a share fits on ``card`` now (never on a card taken whole, nor on one whose
    holders reached its cap)."""
    return not card.whole and not card.shares_full and room_for_share(
        container, card.card, card.free_core, card.free_memory_mib)


def eligible(request: PodRequest, card: Card) -> bool:
    """Whether the pod may use ``card`` at all: its model, its memory, and the card
    types, UUIDs and sharing modes the pod takes or avoids (the PodRequest's card choice)."""
    return (request.allows_model(card.model) and card.memory_mib >= request.min_card_memory_mib
            and (not request.picks_cards
                 or (request.allows_type(card.model) and request.allows_uuid(card.uuid)
                     and request.allows_mode(card.mode))))


#: What the cards of one multi-card container share: a model (unless the pod mixes models)
#: and a NUMA node (when the pod binds one); -1 / "" where nothing is shared.
Group = tuple[str, int]


def group_of(card: Card, one_model: bool, one_numa: bool) -> Group:
    return (card.model if one_model else "", card.numa if one_numa else -1)


def request_group(request: PodRequest, card: Card) -> Group:
    """:func:`group_of` for ``request``'s multi-card containers."""
    return group_of(card, not request.mixed_models, request.one_numa_node)


def order(request: PodRequest) -> list[int]:
    """Hardest first: whole cards (most first), then the largest shares."""
    cs = request.containers
    return sorted(
        range(len(cs)),
        key=lambda i: (
            -cs[i].cards,
            -cs[i].shares,
            -cs[i].core_percent,
            -cs[i].memory_percent,
            -cs[i].memory_mib,
            i,
        ),
    )


@dataclass(frozen=True, slots=True)
class Taken:
    """What the shares of a multi-share container already placed bind its other shares to:
    off their ``cards``; with a memory percent, on cards of the same ``memory_mib`` (the
    record keeps one MiB figure per container, and each card must get that figure); when the
    pod binds a container to one NUMA node, on that ``numa`` node."""

    cards: frozenset[int] = frozenset()
    memory_mib: int | None = None
    numa: int | None = None

    def allows(self, card: Card) -> bool:
        return (card.index not in self.cards and self.memory_mib in (None, card.memory_mib)
                and self.numa in (None, card.numa))

    def with_card(self, c: ContainerRequest, card: CardState, one_numa: bool = False) -> Taken:
        """These and ``card``, taken by a share of ``c`` (``one_numa``: the pod binds the
        container's cards to one NUMA node)."""
        return Taken(self.cards | {card.card.index},
                     card.card.memory_mib if c.memory_percent else None,
                     card.card.numa if one_numa else None)


NOTHING_TAKEN: Final = Taken()


#: What :attr:`Slots.shares_left` holds for a card without a share cap (more than any pod
#: places on one card).
NO_CAP: Final = 1 << 30


class Slots:
    """Mutable working copy of the eligible cards, for the feasibility search."""

    __slots__ = ("cards", "first", "free_core", "free_mem", "idle", "one_model", "one_numa",
                 "shares_left", "whole")

    def __init__(self, cards: Sequence[CardState], one_model: bool,
                 first: Taken = NOTHING_TAKEN, one_numa: bool = False) -> None:
        #: what binds the first item (the rest of a multi-share container being placed)
        self.first = first
        #: the cards of one multi-card container must share a model
        self.one_model = one_model
        #: the cards of one multi-card container must share a NUMA node
        self.one_numa = one_numa
        self.cards = [c.card for c in cards]
        self.free_core = [c.free_core for c in cards]
        self.free_mem = [c.free_memory_mib for c in cards]
        self.idle = [c.idle for c in cards]
        self.whole = [c.whole for c in cards]
        #: how many more shares each card takes (:data:`NO_CAP` when it has no cap)
        self.shares_left = [NO_CAP if (left := c.shares_left) is None else left for c in cards]


def feasible(items: Sequence[ContainerRequest], k: int, s: Slots,
              pins: Sequence[Card | None] = ()) -> bool:
    """Whether ``items[k:]`` fit together on the slots. ``pins[j]``, when given, is the card
    whose group (:func:`group_of`) whole-card item j must take (the rest of a container whose
    first card is chosen)."""
    if k == len(items):
        return True
    c = items[k]
    if c.cards:
        pin = pins[k] if k < len(pins) else None
        for pool in _whole_card_pools(c.cards, s, pin):
            if _take_whole(items, k, s, pins, pool):
                return True
        return False
    return _take_shares(items, k, s, pins, c.shares, 0, s.first if k == 0 else NOTHING_TAKEN)


def _take_shares(items: Sequence[ContainerRequest], k: int, s: Slots,
                 pins: Sequence[Card | None], left: int, start: int, taken: Taken) -> bool:
    """Try every way to put the ``left`` shares of share item k on distinct slots from
    ``start`` on (in index order: a set of cards is tried once), then the rest."""
    if left == 0:
        return feasible(items, k + 1, s, pins)
    c = items[k]
    seen: set[tuple[int, int, int, bool, str, int, int]] = set()
    for i in range(start, len(s.cards)):
        if (s.whole[i] or not s.shares_left[i] or not taken.allows(s.cards[i])
                or not room_for_share(c, s.cards[i], s.free_core[i], s.free_mem[i])):
            continue
        numa = s.cards[i].numa if s.one_numa else -1
        key = (s.free_core[i], s.free_mem[i], s.cards[i].memory_mib, s.idle[i],
               s.cards[i].model, s.shares_left[i], numa)
        if key in seen:
            continue
        seen.add(key)
        need_mem = share_memory_mib(c, s.cards[i])
        was_idle = s.idle[i]
        s.free_core[i] -= c.core_percent
        s.free_mem[i] -= need_mem
        s.idle[i] = False
        s.shares_left[i] -= 1
        size = s.cards[i].memory_mib if c.memory_percent else None
        ok = _take_shares(items, k, s, pins, left - 1, i + 1,
                          Taken(taken.cards, taken.memory_mib or size,
                                None if numa < 0 else numa))
        s.free_core[i] += c.core_percent
        s.free_mem[i] += need_mem
        s.idle[i] = was_idle
        s.shares_left[i] += 1
        if ok:
            return True
    return False


def _whole_card_pools(count: int, s: Slots, pin: Card | None) -> list[list[int]]:
    """The idle slots a whole-card item of ``count`` cards may choose from: one pool per
    group when its cards must share a model or NUMA node (or the pinned card's group only),
    else all idle slots."""
    idle = [i for i in range(len(s.cards)) if s.idle[i]]
    if pin is not None:
        group = group_of(pin, s.one_model, s.one_numa)
        idle = [i for i in idle if group_of(s.cards[i], s.one_model, s.one_numa) == group]
    elif (s.one_model or s.one_numa) and count > 1:
        by_group: dict[Group, list[int]] = {}
        for i in idle:
            by_group.setdefault(group_of(s.cards[i], s.one_model, s.one_numa), []).append(i)
        return [pool for pool in by_group.values() if len(pool) >= count]
    return [idle] if len(idle) >= count else []


def _take_whole(items: Sequence[ContainerRequest], k: int, s: Slots,
                pins: Sequence[Card | None], pool: list[int]) -> bool:
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
        ok = feasible(items, k + 1, s, pins)
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


def slots(request: PodRequest, cards: Sequence[CardState],
          first: Taken = NOTHING_TAKEN) -> Slots:
    return Slots(cards, one_model=not request.mixed_models, first=first,
                 one_numa=request.one_numa_node)


def feasible_on(request_items: Sequence[ContainerRequest], request: PodRequest,
                 node: NodeState, pins: Sequence[Card | None] = (),
                 first: Taken = NOTHING_TAKEN) -> bool:
    """``first``: what binds the first item (:class:`Taken`)."""
    cards = [c for c in node.cards if eligible(request, c.card)]
    return feasible(request_items, 0, slots(request, cards, first), pins)
