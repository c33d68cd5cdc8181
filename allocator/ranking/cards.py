"""A node's cards and what is taken on each, by which pod containers (pure).

A node is a tuple of cards; each card carries what is taken on it: a compute share (percent),
memory (MiB), or the whole card, and by which pod containers. Node states are immutable:
every change makes a new one (:func:`build_node_state` from the allocation records of the
pods on the node; :func:`apply_placement` adds one).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Final

from tessera.vocabulary import WHOLE_CARD_PERCENT, ContainerAllocation

#: (pod UID, container name) holding a card.
Holder = tuple[str, str]

_FULL: Final = WHOLE_CARD_PERCENT


@dataclass(frozen=True, slots=True)
class Card:
    """One physical card: device index (``/dev/nvidia<index>``), model, memory capacity, and
    the most holders it takes (``max_shares``; None: no cap).

    The cap is HAMi's split count (``count`` of a device in the plugin's register annotation):
    hami-scheduler refuses a card whose holders reached it, one holder per container using the
    card (Project-HAMi/HAMi v2.10.0 ``pkg/device/nvidia/device.go``: ``Fit`` skips a device
    when ``dev.Count <= dev.Used``, ``AddResourceUsage`` adds one to ``Used`` per container
    device). Every other node agent has no such cap.

    ``links``: how well the card talks to each other card of the node, ``(other index,
    score)`` sorted, higher better (NVLink over PCIe; HAMi's pair scores, docs/hami.md). Empty
    when the node agent tells none: the cards of a multi-card container then know no topology.
    """

    index: int
    model: str
    memory_mib: int
    max_shares: int | None = None
    links: tuple[tuple[int, int], ...] = ()
    #: The card's UUID when the node agent tells it (HAMi's register annotation), else "":
    #: what HAMi's ``nvidia.com/use-gpuuuid`` and ``nouse-gpuuuid`` name.
    uuid: str = ""
    #: The sharing mode the node agent registered the card in ("" when it tells none): what
    #: HAMi's ``nvidia.com/vgpu-mode`` chooses among (``hami-core``, ``mps``).
    mode: str = ""
    #: The NUMA node the card hangs off, as the node agent tells it (0 when it tells none):
    #: what HAMi's ``nvidia.com/numa-bind`` keeps a container's cards within.
    numa: int = 0

    def link_to(self, other: int) -> int:
        """The pair score with card ``other`` (0 when none is known)."""
        for index, score in self.links:
            if index == other:
                return score
        return 0


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
    def shares_left(self) -> int | None:
        """How many more holders the card takes (None: no cap)."""
        cap = self.card.max_shares
        return None if cap is None else max(0, cap - len(self.holders))

    @property
    def shares_full(self) -> bool:
        """The card's holders reached its cap: it takes no further share."""
        cap = self.card.max_shares
        return cap is not None and len(self.holders) >= cap

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
#: (booked, and measured: foreign memory, busy percent), and for a capped card its cap and
#: how many holders it has (None: no cap; fit reads what the cap leaves, HAMi's policies the
#: slots used of it). Left out on purpose: the card's index, UUID, sharing mode and NUMA
#: node, who its holders are, and how many an uncapped card has (a pod that tells cards apart
#: by UUID, mode or NUMA node is placed node by node:
#: :class:`~allocator.ranking.fast.FastRanker`). Fit answers, reasons and the scores of
#: policies that sum over cards never depend on them; a bind chooses the real cards again. A
#: card with links (pair scores) ends with its index and links: which cards a multi-card
#: container takes depends on them, so only nodes of the same topology are alike.
CardSignature = tuple[str, int, int, int, bool, bool, int, int, tuple[int, int] | None,
                      tuple[int, tuple[tuple[int, int], ...]] | None]


def card_signature(card: CardState) -> CardSignature:
    cap = card.card.max_shares
    return (card.card.model, card.card.memory_mib, card.core_used, card.memory_used_mib,
            card.whole, not card.holders,  # not holders: idle, without a property call
            card.foreign_memory_mib, card.busy_percent,
            None if cap is None else (cap, len(card.holders)),
            (card.card.index, card.card.links) if card.card.links else None)


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
                    elif st.shares_full:
                        problems.append(f"card {index} over its {st.card.max_shares} shares "
                                        f"by {uid}")
                    states[pos] = new
    return NodeState(name, tuple(states)), tuple(problems)



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
