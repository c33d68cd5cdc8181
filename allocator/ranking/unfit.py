"""Why a GPU request does not fit a node, worded for the pod's owner (pure).

:func:`unfit_reason` is the whole answer behind filter's refusals, kubectl tessera's why and
the plain ranker: the first cause found, from the cheapest check to the exact search
(:mod:`allocator.ranking.search`). Placing the pod is :mod:`allocator.ranking.fit`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Final

from allocator.ranking.cards import CardState, NodeState
from allocator.ranking.search import (
    eligible,
    feasible,
    order,
    share_fits,
    slots,
)
from tessera.dialects.hami_annotations import (
    NO_USE_GPU_TYPE,
    NO_USE_GPU_UUID,
    NUMA_BIND,
    USE_GPU_TYPE,
    USE_GPU_UUID,
    VGPU_MODE,
)
from tessera.vocabulary import ContainerRequest, PodRequest


@dataclass(frozen=True, slots=True)
class Unfit:
    """Why a pod does not fit a node, worded for the pod's owner.

    ``resolvable`` is False when no amount of evicting other pods would help (wrong model,
    cards too small): kube-scheduler then skips preemption for that node.
    """

    reason: str
    resolvable: bool = True




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
            or _short_of_one_numa_node(request, cards)
            or _short_of_room_for_a_share(request, cards)
            or _short_of_room_together(request, cards))


def _no_eligible_card(request: PodRequest, node: NodeState) -> Unfit:
    """Cause: no card is of an allowed model, none has the minimum memory, or HAMi's card
    choice leaves none (an unknown UUID in ``use-gpuuuid`` among them, or no card in a mode
    ``vgpu-mode`` allows)."""
    have = " and ".join(m or "unknown" for m in node.models)
    if not any(request.allows_model(c.card.model) for c in node.cards):
        want = " or ".join(request.models)
        return Unfit(f"no card of model {want} (node has {have})", resolvable=False)
    sized = [c for c in node.cards if request.allows_model(c.card.model)
             and c.card.memory_mib >= request.min_card_memory_mib]
    if sized:  # so the card choice took every card (never a comma: values are not quoted)
        keys = _card_choice_keys(request, sized)
        if VGPU_MODE in keys:
            modes = " and ".join(sorted({c.card.mode or "unknown" for c in sized}))
            have = f"{have} in mode {modes}"
        return Unfit(f"no card allowed by pod annotation {keys} (node has {have})",
                     resolvable=False)
    largest = max(c.card.memory_mib for c in node.cards)
    return Unfit(
        f"no card with at least {request.min_card_memory_mib} MiB memory "
        f"(largest {largest} MiB)",
        resolvable=False,
    )


#: HAMi's card-choosing annotations, by the request field each fills.
_CARD_CHOICE: Final = {"use_types": USE_GPU_TYPE, "nouse_types": NO_USE_GPU_TYPE,
                       "use_uuids": USE_GPU_UUID, "nouse_uuids": NO_USE_GPU_UUID,
                       "card_modes": VGPU_MODE}
_NO_CHOICE: Final = dict.fromkeys(_CARD_CHOICE, ())


def _card_choice_keys(request: PodRequest, cards: Sequence[CardState]) -> str:
    """The annotations that turned cards away: each one alone, as the request's only choice."""
    keys = []
    for field, key in _CARD_CHOICE.items():
        alone = replace(request, **{**_NO_CHOICE, field: getattr(request, field)})
        if not all(eligible(alone, c.card) for c in cards):
            keys.append(key)
    return " and ".join(keys)


def _fits_at_a_glance(request: PodRequest, cards: Sequence[CardState]) -> bool:
    """The common case, answered without the search: one container that needs one card with
    room, or k idle cards. False means "look closer", not "does not fit"."""
    if len(request.containers) != 1:
        return False
    only = request.containers[0]
    if request.one_numa_node and max(only.cards, only.shares) > 1:
        return False
    if only.cards:
        if only.cards > 1 and not request.mixed_models:
            return False
        return sum(1 for c in cards if c.idle) >= only.cards
    # Each share of the container goes to its own card: n cards with room are enough (of one
    # memory size with a memory percent).
    roomy = [c.card.memory_mib if only.memory_percent else 0 for c in cards
             if share_fits(only, c)]
    return max((roomy.count(size) for size in set(roomy)), default=0) >= only.shares


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


def _short_of_one_numa_node(request: PodRequest, cards: Sequence[CardState]) -> Unfit | None:
    """Cause: a multi-card container fits the node's cards, but not those of any one NUMA
    node (the pod binds each container to one: HAMi's ``numa-bind``)."""
    if not request.one_numa_node:
        return None
    anywhere = slots(replace(request, one_numa_node=False), cards)
    for i in order(request):
        c = request.containers[i]
        if (max(c.cards, c.shares) < 2 or feasible([c], 0, slots(request, cards))
                or not feasible([c], 0, anywhere)):
            continue  # fits one NUMA node, or fits nowhere: another cause says it better
        per_numa: dict[int, int] = {}
        for x in cards:
            per_numa[x.card.numa] = per_numa.get(x.card.numa, 0) + 1
        have = " and ".join(f"{n} on NUMA {numa}" for numa, n in sorted(per_numa.items()))
        return Unfit(f"needs {c.describe()} on one NUMA node (pod annotation {NUMA_BIND}; "
                     f"node has {have})",
                     resolvable=max(per_numa.values()) >= max(c.cards, c.shares))
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
    largest = max(x.card.memory_mib for x in cards)
    if c.memory_mib > largest:  # no eviction frees more than a whole card
        return Unfit(f"no card with {c.memory_mib} MiB memory (largest card {largest} MiB)",
                     resolvable=False)
    open_cards = [x for x in cards if not x.whole and not x.shares_full]
    capped = share_cap_note(cards)
    if c.shares > 1 and (several := _short_of_cards_for_shares(c, cards)):
        return several
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


def _short_of_cards_for_shares(c: ContainerRequest, cards: Sequence[CardState]) -> Unfit | None:
    """Why a share on each of several cards does not fit when some card has room for one:
    fewer cards with room (of one memory size, with a memory percent) than shares."""
    sizes = [x.card.memory_mib if c.memory_percent else 0 for x in cards if share_fits(c, x)]
    roomy = max((sizes.count(size) for size in set(sizes)), default=0)
    if not roomy:
        return None
    alike = " of one memory size" if c.memory_percent else ""
    return Unfit(f"needs {c.describe()} ({roomy} card{'s' if roomy > 1 else ''}{alike} with "
                 f"room){foreign_note([x for x in cards if not x.whole and not x.shares_full])}"
                 f"{share_cap_note(cards)}")


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
