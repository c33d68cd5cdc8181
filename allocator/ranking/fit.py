"""Whether a GPU request fits one node, and its placement there (pure).

A node's cards and usage are :class:`~allocator.ranking.cards.NodeState`. Placing a
:class:`~tessera.vocabulary.PodRequest` means placing **every** GPU container of the pod:

- whole-card containers get cards that nobody uses, and keep them exclusive;
- a share lands on one card that has both the compute and the memory free
  (``memory_percent`` is resolved to MiB of the card actually chosen) and fewer holders than
  its cap, when it has one (:attr:`~allocator.ranking.cards.Card.max_shares`: the agent's
  split count; each container on a card is one holder, init containers included); a container of
  ``shares`` n puts one such share on each of n distinct cards (one container's several vGPUs);
- only cards of an allowed model and with at least ``min_card_memory_mib`` are used;
- the cards of one multi-card container are all of one model, unless the pod opts out
  (``PodRequest.mixed_models``), and of one NUMA node when the pod asks it
  (``PodRequest.one_numa_node``).

Init containers in the request are placed like the others and reserved **disjointly** from
the app containers: an agent that gives an init container devices of its own hands them out
at container start and never gives them back, so reserving both is the only choice that never
over-commits a card. (kube-scheduler itself takes max(init, sum(app)) for node totals, so our
per-card answer is the stricter of the two.) Where the profile's agent runs an init container
on the cards of the app container kubelet hands its devices to, the request as placed holds no
init container (:meth:`tessera.agent_profiles.NodeAgent.placement_request`, docs/agents.md).

Feasibility is exact (:mod:`allocator.ranking.search`), so filter never admits a node on
which bind then fails; why a pod does not fit is :mod:`allocator.ranking.unfit`'s. The
placement itself is greedy over containers: each step picks the card the policy scores best
among those that keep the rest of the pod placeable.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial

from allocator.ranking.cards import Card, CardState, Holder, NodeState, card_signature
from allocator.ranking.search import (
    NOTHING_TAKEN,
    Taken,
    eligible,
    feasible,
    feasible_on,
    order,
    request_group,
    share_fits,
    share_memory_mib,
    slots,
)
from allocator.ranking.unfit import NODE_CHANGING as NODE_CHANGING
from allocator.ranking.unfit import Unfit as Unfit
from allocator.ranking.unfit import unfit_reason as unfit_reason
from tessera.vocabulary import Allocation, ContainerAllocation, ContainerRequest, PodRequest

#: How a policy compares a node state before and after one step of a placement.
Chooser = Callable[[NodeState, NodeState], float]


@dataclass(frozen=True, slots=True)
class Placement:
    """Where every GPU container of a pod goes on one node, and the node state after it."""

    node: str
    containers: tuple[ContainerAllocation, ...]
    after: NodeState

    def allocation(self, pod_uid: str, at: float) -> Allocation:
        return Allocation(node=self.node, containers=self.containers, allocated_at=at,
                          pod_uid=pod_uid)


FitResult = Placement | Unfit

#: Chooser scores closer than this are equal (float rounding between cards of one model).
_EQUAL = 1e-9


def fits(request: PodRequest, node: NodeState) -> bool:
    """The fast yes/no behind :func:`unfit_reason` (same answer, no message)."""
    cards = [c for c in node.cards if eligible(request, c.card)]
    if not cards:
        return False
    items = request.containers if len(request.containers) == 1 else [
        request.containers[i] for i in order(request)
    ]
    return feasible(items, 0, slots(request, cards))


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
    steps = order(request)
    items = [request.containers[i] for i in steps]
    state = node
    result: dict[int, ContainerAllocation] = {}
    for step, ci in enumerate(steps):
        c = items[step]
        rest = items[step + 1:]
        holder = (pod_uid, c.name)
        if c.cards:
            taken: list[int] = []
            first: Card | None = None  # set by the first card when the cards share a group
            alike = c.cards > 1 and (not request.mixed_models or request.one_numa_node)

            def take(cs: CardState, h: Holder = holder) -> CardState:
                return cs.with_whole(h)

            for j in range(c.cards):
                # The rest of this container counts as one more whole-card demand, in the
                # group (model, NUMA node) of the card this step takes when they share one.
                remaining = c.cards - j - 1
                pending = ([ContainerRequest(c.name, cards=remaining)] if remaining else [])
                tie = (partial(_link_tie, request, state, tuple(taken), remaining, first)
                       if c.cards > 1 and _linked(state) else None)
                state, pos = _best_step(
                    request, state, chooser, pending + list(rest),
                    partial(_idle_like, request, first), take,
                    pin_first=alike and bool(pending), tie=tie,
                )
                taken.append(state.cards[pos].card.index)
                if alike:
                    first = state.cards[pos].card
            result[ci] = ContainerAllocation(c.name, tuple(sorted(taken)), init=c.init)
        else:
            state, result[ci] = _place_shares(request, state, chooser, c, rest, holder)
    containers = tuple(result[i] for i in range(len(request.containers)))
    return Placement(node.name, containers, state)


def _place_shares(request: PodRequest, state: NodeState, chooser: Chooser,
                  c: ContainerRequest, rest: list[ContainerRequest],
                  holder: Holder) -> tuple[NodeState, ContainerAllocation]:
    """Put each of the ``shares`` of container ``c`` on its own card, one card per step."""
    def put(cs: CardState) -> CardState:
        return cs.with_share(c.core_percent, share_memory_mib(c, cs.card), holder)

    taken = NOTHING_TAKEN  # the cards chosen so far (and their memory size, with a percent)
    for j in range(c.shares):
        # The rest of this container's shares count as one more item, kept off its cards.
        pending = [replace(c, shares=c.shares - j - 1)] if j + 1 < c.shares else []

        def can(cs: CardState, bound: Taken = taken) -> bool:
            return bound.allows(cs.card) and share_fits(c, cs)

        one_numa = request.one_numa_node
        state, pos = _best_step(request, state, chooser, pending + rest, can, put,
                                first=partial(taken.with_card, c, one_numa=one_numa)
                                if pending else None)
        taken = taken.with_card(c, state.cards[pos], one_numa)
    # Every card of the container takes the same MiB (a percent: cards of one memory size).
    mem = share_memory_mib(c, state.cards[pos].card)
    return state, ContainerAllocation(c.name, tuple(sorted(taken.cards)),
                                      core_percent=c.core_percent, memory_mib=mem, init=c.init)


def _linked(state: NodeState) -> bool:
    return any(cs.card.links for cs in state.cards)


def _link_tie(request: PodRequest, state: NodeState, taken: tuple[int, ...], remaining: int,
              first: Card | None, cs: CardState) -> int:
    """How well card ``cs`` joins a multi-card container that took ``taken`` already and
    needs ``remaining`` more after it: its pair scores with the cards taken, plus its best
    ``remaining`` with the idle cards it could still take (for two cards: the best pair)."""
    card = cs.card
    joined = sum(card.link_to(t) for t in taken)
    others = sorted((card.link_to(o.card.index) for o in state.cards
                     if o is not cs and _idle_like(request, first, o)
                     and eligible(request, o.card)),
                    reverse=True)
    return joined + sum(others[:remaining])


def _idle_like(request: PodRequest, first: Card | None, card: CardState) -> bool:
    """An idle card, of the group (model, NUMA node) of ``first`` when one is given."""
    return card.idle and (first is None
                          or request_group(request, card.card) == request_group(request, first))


def _best_step(
    request: PodRequest,
    state: NodeState,
    chooser: Chooser,
    rest: list[ContainerRequest],
    can: Callable[[CardState], bool],
    put: Callable[[CardState], CardState],
    pin_first: bool = False,
    first: Callable[[CardState], Taken] | None = None,
    tie: Callable[[CardState], int] | None = None,
) -> tuple[NodeState, int]:
    """The best card for one step. ``pin_first``: the first item of ``rest`` is the rest of
    this step's container and must take cards of the group (model, NUMA node) chosen here.
    ``first``: what binds the first item of ``rest`` (the rest of a multi-share container)
    given the card chosen here. ``tie``: among cards the chooser scores equal, the one it
    says higher wins (the cards' topology)."""
    best: tuple[float, NodeState, int] | None = None
    best_tie = 0
    seen: set[object] = set()
    for pos, cs in enumerate(state.cards):
        if not eligible(request, cs.card) or not can(cs):
            continue
        # Cards alike to placement are tried once; a pod binding a NUMA node tells them
        # apart by it too (the signature leaves it out).
        key = (card_signature(cs), cs.card.numa) if request.one_numa_node else card_signature(cs)
        if key in seen:
            continue
        seen.add(key)
        trial = state.replace_card(pos, put(cs))
        pins = (cs.card,) if pin_first else ()
        bound = NOTHING_TAKEN if first is None else first(cs)
        if rest and not feasible_on(rest, request, trial, pins, bound):
            continue
        score = chooser(state, trial)
        if tie is None:
            if best is None or score > best[0]:
                best = (score, trial, pos)
            continue
        joins = tie(cs)
        if best is None or score > best[0] + _EQUAL or (
                score >= best[0] - _EQUAL and joins > best_tie):
            best, best_tie = (score, trial, pos), joins
    # unfit_reason() proved a complete placement exists and every step keeps one, so a
    # candidate always exists here; anything else is a bug worth failing loudly on.
    assert best is not None, "placement search lost a feasible placement"
    return best[1], best[2]


def place_and_keep(request: PodRequest, node: Callable[[], tuple[NodeState, int] | None],
                   chooser: Chooser, pod_uid: str, keep: Callable[[Allocation, int], bool],
                   attempts: int) -> Allocation | Unfit | None:
    """Place the pod on the ``node`` as it is now (its state and version) and ``keep`` the
    allocation there (a reservation or a hold, told the version it was placed on), placing
    again when ``keep`` says the node changed meanwhile. The allocation kept; why the pod does
    not fit (or :data:`NODE_CHANGING` when ``attempts`` ran out); None for a node unknown."""
    for _attempt in range(attempts):
        now = node()
        if now is None:
            return None
        placed = place(request, now[0], chooser, pod_uid=pod_uid)
        if isinstance(placed, Unfit):
            return placed
        allocation = placed.allocation(pod_uid, 0.0)
        if keep(allocation, now[1]):
            return allocation
    return NODE_CHANGING
