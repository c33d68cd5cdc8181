"""HAMi's own node and card policies (hami-scheduler), as Tessera placement policies.

Project-HAMi/HAMi v2.10.0 scores in two stages, and so do these policies:

- **Node** (``hami.io/node-scheduler-policy``, default ``binpack``): a node's score is
  ``10 * (used/count + usedcores/totalcore + usedmem/totalmem)``, each a sum over the node's
  cards, taken **before** the pod is placed (``pkg/scheduler/score.go:320-327``: the score is
  computed on ``appNodeCopy`` ahead of ``allocateAppContainers``; the formula is
  ``pkg/scheduler/policy/node_policy.go:106-129``, ``util.Weight`` = 10 in
  ``pkg/util/types.go:99``; 0 when a total is 0). NVIDIA adds nothing to it
  (``pkg/device/nvidia/device.go:641-643``: ``ScoreNode`` returns 0). The list is sorted
  ascending for binpack, descending for spread, and the **last** node wins
  (``node_policy.go:48-54``, ``scheduler.go:1117-1118``): binpack takes the highest score,
  spread the lowest. Equal scores: HAMi's order is the order its goroutines finished
  (``score.go:378-404``), i.e. none; here equal nodes stay equal and kube-scheduler's own
  plugins choose among them, as for every policy.
- **Card** (``hami.io/gpu-scheduler-policy``, default ``spread``): each card's score is the
  same formula on that card, with the container's request added (one slot, its cores, its
  memory: ``pkg/scheduler/policy/gpu_policy.go:194-222``, default weights 1/1/1 in
  ``pkg/util/device_scoring_weights.go:36-38``), recomputed before each container
  (``score.go:81-89``). Cards are sorted ascending (binpack) or descending (spread), NUMA
  breaking ties (``gpu_policy.go:115-126``), and ``Fit`` walks the list **from its end**
  (``device.go:727``), taking the first cards that fit: binpack the highest score, spread the
  lowest. Go's ``sort.Sort`` is an insertion sort up to 12 elements, so among equal scores
  the list keeps the node's card order and the walk from the end takes the highest index;
  Tessera takes the lowest (:func:`allocator.ranking.fit.place`), which is HAMi's choice on
  the node with its cards numbered in reverse: the same cards in the same states, renumbered.

The figures are Tessera's bookings: ``used`` the holders of a card (one per container, as
``AddResourceUsage`` counts, ``device.go:660``), cores and MiB as booked, a card taken whole
as 100% core and all its memory (as HAMi books ``nvidia.com/gpu`` without share keys: its
admission sets ``gpucores`` to 100, ``device.go:369`` and ``417-445``). ``count`` is HAMi's
split count (:attr:`Card.max_shares`); a card without one (a node not run by HAMi's plugin)
has no slot term, where HAMi, which always has one, would score the node 0. Sums are in
float32, as HAMi's.

Where HAMi's card-by-card choice would leave a later container of the pod no room, HAMi
refuses the node; :func:`allocator.ranking.fit.place` takes the best card that keeps the pod
placeable instead.

Not reproduced: NUMA breaking ties among equal card scores (Tessera knows each card's NUMA
node on HAMi's nodes, :attr:`Card.numa`, but these scores ignore it); with ``numa-bind``
(honoured as a constraint, :mod:`allocator.ranking.search`), which NUMA node's cards a
container takes follows these scores, where HAMi walks its NUMA groups in sort order
(``gpu_policy.go:100-112``, ``:139-146`` for a chain); the ``mutex``, ``topology-aware`` and
NUMA-first card policies (refused at admission; a chain led by ``binpack`` or ``spread`` is
that key, its later keys only breaking ties:
:func:`tessera.dialects.hami_annotations.gpu_chain_policy`), per-pod scoring weights
(``hami.io/device-scoring-weights``), the order of ties left by a previous container of the
same pod, and Go's unstable sort above 12 cards.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from allocator.ranking.cards import CardState, NodeState
from allocator.ranking.policies.base import Policy, PolicyContext

#: ``util.Weight`` (pkg/util/types.go:99).
WEIGHT = np.float32(10)
#: HAMi's core capacity of a card (``Devcore``: 100 per card for NVIDIA).
CARD_CORES = 100

_F32 = np.float32


def _fraction(used: int, total: int) -> np.float32:
    """``float32(used) / float32(total)``, as Go writes it; 0 without a total."""
    return _F32(used) / _F32(total) if total else _F32(0)


def hami_score(cards: tuple[CardState, ...]) -> float:
    """HAMi's usage score of some cards, ``10 * (slots + cores + memory)`` in float32: the
    node score over all a node's cards, the card score over one card (module doc)."""
    used = total = core = mem = mem_total = 0
    for c in cards:
        cap = c.card.max_shares
        if cap is not None:
            used += len(c.holders)
            total += cap
        core += c.core_used
        mem += c.memory_used_mib
        mem_total += c.card.memory_mib
    if not cards or not mem_total:
        return 0.0
    terms = (_fraction(used, total) + _fraction(core, CARD_CORES * len(cards))
             + _fraction(mem, mem_total))
    return float(WEIGHT * terms)


def changed_card(before: NodeState, after: NodeState) -> CardState | None:
    """The card one placement step changed (None: no step, the same node)."""
    for old, new in zip(before.cards, after.cards, strict=True):
        if old is not new:
            return new
    return None


class HamiPolicy(Policy):
    """hami-scheduler's scoring: the node policy ranks nodes, the card policy picks cards."""

    #: Spread among nodes (else binpack).
    node_spread: ClassVar[bool]
    #: Spread among a node's cards (else binpack).
    card_spread: ClassVar[bool]

    def score(self, before: NodeState, after: NodeState, ctx: PolicyContext) -> float:
        # The node's usage before the pod: binpack wants the highest, spread the lowest.
        node = hami_score(before.cards)
        return -node if self.node_spread else node

    def card_score(self, before: NodeState, after: NodeState, ctx: PolicyContext) -> float:
        card = changed_card(before, after)
        if card is None:
            return 0.0
        value = hami_score((card,))
        return -value if self.card_spread else value


class HamiBinpackBinpack(HamiPolicy):
    name = "hami-binpack-binpack"
    node_spread = False
    card_spread = False


class HamiBinpackSpread(HamiPolicy):
    """HAMi's defaults (charts/hami/values.yaml:76-78, cmd/scheduler/main.go:70-71)."""

    name = "hami-binpack-spread"
    node_spread = False
    card_spread = True


class HamiSpreadBinpack(HamiPolicy):
    name = "hami-spread-binpack"
    node_spread = True
    card_spread = False


class HamiSpreadSpread(HamiPolicy):
    name = "hami-spread-spread"
    node_spread = True
    card_spread = True


class HamiBinpack(HamiBinpackBinpack):
    """Binpack among nodes and among cards."""

    name = "hami-binpack"


class HamiSpread(HamiSpreadSpread):
    """Spread among nodes and among cards."""

    name = "hami-spread"


#: Every HAMi policy, by registry name.
HAMI_POLICIES: tuple[type[HamiPolicy], ...] = (
    HamiBinpackBinpack, HamiBinpackSpread, HamiSpreadBinpack, HamiSpreadSpread,
    HamiBinpack, HamiSpread,
)
