"""Whether a GPU request fits one node, and its placement there (pure).

A node's cards and usage are :class:`~allocator.ranking.cards.NodeState`. Placing a
:class:`~tessera.vocabulary.PodRequest` means placing **every** GPU container of the pod:

- whole-card containers get cards that nobody uses, and keep them exclusive;
- a share lands on exactly one card that has both the compute and the memory free
  (``memory_percent`` is resolved to MiB of the card actually chosen) and fewer holders than
  its cap, when it has one (:attr:`~allocator.ranking.cards.Card.max_shares`: HAMi's split
  count; each container on a card is one holder, init containers included);
- only cards of an allowed model and with at least ``min_card_memory_mib`` are used;
- the cards of one multi-card container are all of one model, unless the pod opts out
  (``PodRequest.mixed_models``).

Init containers in the request are placed like the others and reserved **disjointly** from
the app containers: an agent that gives an init container devices of its own hands them out
at container start and never gives them back, so reserving both is the only choice that never
over-commits a card. (kube-scheduler itself takes max(init, sum(app)) for node totals, so our
per-card answer is the stricter of the two.) With elastic-gpu-agent, nano-gpu-agent and HAMi's
plugin an init container runs on the cards of the app container kubelet hands its devices to,
so the request as placed for them holds no init container
(:meth:`tessera.agent_profiles.NodeAgent.placement_request`, docs/agents.md, docs/hami.md).

Feasibility is exact (:mod:`allocator.ranking.search`), so filter never admits a node on
which bind then fails. The placement itself is
greedy over containers: each step picks the card the policy scores best among those that keep
the rest of the pod placeable.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

from allocator.ranking.cards import CardSignature, CardState, Holder, NodeState, card_signature
from allocator.ranking.search import (
    eligible,
    feasible,
    feasible_on,
    order,
    share_fits,
    share_memory_mib,
    slots,
)
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


@dataclass(frozen=True, slots=True)
class Unfit:
    """Why a pod does not fit a node, worded for the pod's owner.

    ``resolvable`` is False when no amount of evicting other pods would help (wrong model,
    cards too small): kube-scheduler then skips preemption for that node.
    """

    reason: str
    resolvable: bool = True


FitResult = Placement | Unfit

#: Chooser scores closer than this are equal (float rounding between cards of one model).
_EQUAL = 1e-9

#: Placing a pod ran out of attempts: the node kept changing under it.
NODE_CHANGING = Unfit("it changed too often to reserve cards; retry")


def unfit_reason(request: PodRequest, node: NodeState) -> Unfit | None:
    """None when the whole pod fits the node, else why not (the first cause found).

    Reasons carry no comma: kube-scheduler counts the nodes per reason and joins them with
    ", " into its FailedScheduling message ("0/3 nodes are available: 1 needs 5 whole cards
    (node has 2), 2 ..."; kubernetes v1.34 pkg/scheduler/framework/types.go, FitError.Error).
    """
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
        have = " and ".join(m or "unknown" for m in node.models)
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
        return Unfit(f"needs {whole} whole cards (node has {len(cards)})", resolvable=False)
    free = sum(1 for c in cards if c.idle)
    if whole > free:
        return Unfit(f"needs {whole} whole card{'s' if whole > 1 else ''} ({free} free)"
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
    for i in order(request):
        c = request.containers[i]
        if c.cards < 2:
            continue
        if max(total.values()) < c.cards:
            have = " and ".join(f"{n} {m or 'unknown'}" for m, n in sorted(total.items()))
            return Unfit(f"needs {c.cards} whole cards of one model (node has {have})",
                         resolvable=False)
        if max(idle.values()) < c.cards:
            free = " and ".join(f"{n} {m or 'unknown'}" for m, n in sorted(idle.items()))
            return Unfit(f"needs {c.cards} whole cards of one model ({free} free)")
    return None


def _short_of_room_for_a_share(request: PodRequest,
                               cards: Sequence[CardState]) -> Unfit | None:
    """Cause: one share of the pod fits on no card, even alone (hardest share first)."""
    for i in order(request):
        c = request.containers[i]
        if not c.cards and not feasible([c], 0, slots(request, cards)):
            return _no_room_for(c, cards)
    return None


def _no_room_for(c: ContainerRequest, cards: Sequence[CardState]) -> Unfit:
    """Why share ``c`` fits on no card, naming the room there is."""
    open_cards = [x for x in cards if not x.whole and not x.shares_full]
    capped = share_cap_note(cards)
    if not open_cards:
        if capped:
            return Unfit(f"no card takes another share{capped}")
        return Unfit(f"no card with {c.describe()} free (all cards taken whole)")
    best_core = max(x.free_core for x in open_cards)
    best_mem = max(x.free_memory_mib for x in open_cards)
    note = foreign_note(open_cards) + capped
    if c.core_percent and not (c.memory_mib or c.memory_percent):
        return Unfit(f"no card with {c.core_percent}% core free (largest {best_core}%){capped}")
    if not c.core_percent and c.memory_mib:
        return Unfit(f"no card with {c.memory_mib} MiB free (largest {best_mem} MiB){note}")
    return Unfit(
        f"no card with {c.describe()} free (most free: {best_core}% core and {best_mem} MiB)"
        f"{note}"
    )


def foreign_note(cards: Sequence[CardState]) -> str:
    """The cards whose memory is measured in use by processes Tessera did not place, in words
    ("" when none: always so without metrics), to end an :class:`Unfit` reason."""
    busy = [f"gpu {c.card.index}: {_gib(c.foreign_memory_mib)} used by processes Tessera did "
            f"not place" for c in cards if c.foreign_memory_mib]
    return f"; {'; '.join(busy)}" if busy else ""


def share_cap_note(cards: Sequence[CardState]) -> str:
    """The cards (not taken whole) whose holders reached their share cap, in words ("" when
    none: always so but on HAMi's nodes), to end an :class:`Unfit` reason. Counted, not named
    by index: an answer is shared by every node of the same content, whatever its indices."""
    full = [c.card.max_shares or 0 for c in cards if not c.whole and c.shares_full]
    if not full:
        return ""
    caps = " or ".join(str(n) for n in sorted(set(full)))
    return f"; {len(full)} card{'s' if len(full) > 1 else ''} at {caps} shares (HAMi split count)"


def _gib(mib: int) -> str:
    return f"{mib // 1024} GiB" if mib % 1024 == 0 else f"{mib} MiB"


def _short_of_room_together(request: PodRequest, cards: Sequence[CardState]) -> Unfit | None:
    """Cause: each container fits alone, but not all of them at once."""
    items = [request.containers[i] for i in order(request)]
    if len(items) > 1 and not feasible(items, 0, slots(request, cards)):
        return Unfit(f"the pod's {len(items)} GPU containers do not fit together on its cards")
    return None


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
            model: str | None = None  # set by the first card when the cards share a model
            one_model = c.cards > 1 and not request.mixed_models

            def take(cs: CardState, h: Holder = holder) -> CardState:
                return cs.with_whole(h)

            for j in range(c.cards):
                # The rest of this container counts as one more whole-card demand, of the
                # model of the card this step takes when the cards share one.
                remaining = c.cards - j - 1
                pending = ([ContainerRequest(c.name, cards=remaining)] if remaining else [])
                tie = (partial(_link_tie, request, state, tuple(taken), remaining, model)
                       if c.cards > 1 and _linked(state) else None)
                state, pos = _best_step(
                    request, state, chooser, pending + list(rest), partial(_idle_of, model), take,
                    pin_first=one_model and bool(pending), tie=tie,
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


def _linked(state: NodeState) -> bool:
    return any(cs.card.links for cs in state.cards)


def _link_tie(request: PodRequest, state: NodeState, taken: tuple[int, ...], remaining: int,
              model: str | None, cs: CardState) -> int:
    """How well card ``cs`` joins a multi-card container that took ``taken`` already and
    needs ``remaining`` more after it: its pair scores with the cards taken, plus its best
    ``remaining`` with the idle cards it could still take (for two cards: the best pair)."""
    card = cs.card
    joined = sum(card.link_to(t) for t in taken)
    others = sorted((card.link_to(o.card.index) for o in state.cards
                     if o is not cs and _idle_of(model, o) and eligible(request, o.card)),
                    reverse=True)
    return joined + sum(others[:remaining])


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
    tie: Callable[[CardState], int] | None = None,
) -> tuple[NodeState, int]:
    """The best card for one step. ``pin_first``: the first item of ``rest`` is the rest of
    this step's container and must take cards of the model chosen here. ``tie``: among cards
    the chooser scores equal, the one it says higher wins (the cards' topology)."""
    best: tuple[float, NodeState, int] | None = None
    best_tie = 0
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
        if rest and not feasible_on(rest, request, trial, pins):
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
