"""``defrag-plan``: the fewest pod moves that would leave N whole cards idle (pure, dry run).

A *move* takes one pod off all its cards and puts it elsewhere, where the allocator's own
placement (:func:`tessera.plugin.placing.place_best`, the chosen policy) would put it if it
arrived after the plan's earlier moves. Nothing is evicted: the plan is a list to act on, and
the scheduler will make its own choice when a moved pod comes back.

What is searched, and what is guaranteed:

- A plan empties a set S of busy cards; the pods to move are every holder of those cards.
  Only cards whose holders can all move count: a pod with a readable request, holding shares
  (moving a whole-card pod only moves an idle card elsewhere, which frees nothing in total).
- The moved pods are re-placed one at a time, largest first, on every card except S, with the
  policy; the plan holds when the cluster then has at least N idle cards (of the model asked).
- Which cards to empty is searched exhaustively (depth-first, cheapest cards first, pruned by
  the best plan found so far and, when no movable pod holds two candidate cards, by the fewest
  holders the remaining cards can bring; a plan that costs no more than the cheapest cards
  ends the search) within budgets of :data:`SEARCH_BUDGET` re-placements and
  :data:`VISIT_BUDGET` card sets; within
  it the plan has the fewest moves **among plans that empty exactly the missing number of
  cards with this re-placement order**. Where the moved pods go is greedy (the policy's
  choice, one pod at a time), not an exhaustive bin packing, so a plan that needs a cleverer
  arrangement of the moved pods can be missed. When the budget runs out the best plan found
  so far is returned and marked ``exact = False``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from allocator.fit import CardState, NodeState
from allocator.policies import PolicyContext, get_policy
from tessera.plugin.picture import GpuNode, GpuPod, Picture, selector_excludes
from tessera.plugin.placing import ContentIds, ScoreMemo, place_best

#: Re-placement attempts (each one places every pod of a candidate plan) before the search
#: stops and returns its best plan so far.
SEARCH_BUDGET = 400
#: Card sets looked at (most are pruned without a re-placement) before the search stops.
VISIT_BUDGET = 200_000

CardRef = tuple[str, int]  # (node name, card index)


@dataclass(frozen=True)
class Move:
    pod: str
    owner: str
    from_node: str
    from_cards: tuple[int, ...]
    to_node: str
    to_cards: tuple[int, ...]


@dataclass(frozen=True)
class Plan:
    wanted: int
    model: str
    idle_before: int
    idle_after: int
    #: Cards the plan empties.
    freed: tuple[CardRef, ...]
    moves: tuple[Move, ...]
    #: True when the wanted cards are idle after the moves.
    feasible: bool
    #: True when the search finished within its budget (see the module docstring).
    exact: bool
    note: str = ""


def _counts(card: CardState, model: str) -> bool:
    return not model or card.card.model.lower() == model.lower()


def _idle(states: Sequence[NodeState], model: str) -> int:
    return sum(1 for s in states for c in s.cards if c.idle and _counts(c, model))


def _movable(pod: GpuPod | None) -> bool:
    return (pod is not None and pod.request is not None and pod.allocation is not None
            and not any(c.is_whole for c in pod.allocation.containers))


def _size_order(pod: GpuPod) -> tuple[int, int, int, str]:
    containers = pod.request.containers if pod.request else ()
    return (-sum(c.cards for c in containers), -sum(c.core_percent for c in containers),
            -sum(c.memory_mib for c in containers), pod.key)


class _Search:
    def __init__(self, picture: Picture, wanted: int, model: str, policy: str,
                 seed: int) -> None:
        self.picture = picture
        self.nodes: list[GpuNode] = list(picture.nodes)
        self.wanted = wanted
        self.model = model
        self.policy = get_policy(policy)
        self.seed = seed
        self.memo: ScoreMemo = {}
        self.ids = ContentIds()
        self.tried: dict[frozenset[CardRef], tuple[Move, ...] | None] = {}
        self.budget = SEARCH_BUDGET
        self.visits = VISIT_BUDGET
        self.exhausted = False
        # Candidate cards: busy, of the model, every holder movable; with their holders.
        self.candidates: list[tuple[CardRef, frozenset[str]]] = []
        for n in self.nodes:
            for c in n.state.cards:
                if c.idle or not _counts(c, model):
                    continue
                uids = frozenset(uid for uid, _ in c.holders)
                if all(_movable(picture.pod_by_uid(uid)) for uid in uids):
                    self.candidates.append(((n.name, c.card.index), uids))
        # Cheapest first: fewest holders, then by node and card (a stable order).
        self.candidates.sort(key=lambda item: (len(item[1]), item[0]))

    def evaluate(self, cards: frozenset[CardRef]) -> tuple[Move, ...] | None:
        """The moves that empty ``cards``, or None when the moved pods do not all fit
        elsewhere or the cluster would still lack idle cards."""
        if cards in self.tried:
            return self.tried[cards]
        self.budget -= 1
        movers_uids = {uid for ref, uids in self.candidates if ref in cards for uid in uids}
        movers = [p for p in (self.picture.pod_by_uid(u) for u in sorted(movers_uids))
                  if p is not None]
        # Largest first, as fit orders containers: whole cards, then the biggest shares.
        movers.sort(key=_size_order)
        # The cards being emptied are taken out of their nodes while the movers are placed:
        # no mover may land there, and a card shown as full would skew the policy's score
        # of its node (binpack would take the node for fuller than it is).
        states = [NodeState(n.name, tuple(c for c in n.state_without(movers_uids).cards
                                          if (n.name, c.card.index) not in cards))
                  for n in self.nodes]
        contents = [self.ids.of(s) for s in states]
        moves: list[Move] = []
        result: tuple[Move, ...] | None = None
        for pod in movers:
            assert pod.request is not None and pod.allocation is not None
            ctx = PolicyContext(pod.request, pod_key=f"{pod.namespace}/{pod.name}/{pod.uid}",
                                seed=self.seed)
            open_idx = [i for i, n in enumerate(self.nodes) if not selector_excludes(pod, n)]
            placed = place_best(pod.request, self.policy, ctx, [states[i] for i in open_idx],
                                pod.uid, self.memo, [contents[i] for i in open_idx])
            if placed is None:
                break
            target = next(i for i in open_idx if self.nodes[i].name == placed.node)
            states[target] = placed.after
            contents[target] = self.ids.of(placed.after)
            moves.append(Move(pod.key, pod.owner, pod.node, pod.allocation.card_indices(),
                              placed.node, tuple(sorted({i for c in placed.containers
                                                         for i in c.card_indices}))))
        else:
            # The emptied cards count as idle again once the plan is done.
            idle = _idle(states, self.model) + len(cards)
            if idle >= self.wanted:
                result = tuple(moves)
        self.tried[cards] = result
        return result

    def _single_card_holders(self) -> bool:
        """True when no movable pod holds more than one candidate card: then every further
        card brings holders of its own, which gives the search its lower bound."""
        seen: set[str] = set()
        for _, uids in self.candidates:
            if seen & uids:
                return False
            seen |= uids
        return True

    def run(self, need: int) -> tuple[frozenset[CardRef], tuple[Move, ...]] | None:
        best: tuple[frozenset[CardRef], tuple[Move, ...]] | None = None
        best_cost = len(self.picture.pods) + 1
        sizes = [len(uids) for _, uids in self.candidates]
        disjoint = self._single_card_holders()
        # floor[i][r]: fewest holders r more cards from candidates[i:] can bring (sizes are
        # sorted, so the next r); 0 when a pod may hold several cards (no such bound).
        def floor(i: int, r: int) -> int:
            return sum(sizes[i:i + r]) if disjoint else 0

        proven = False

        def dfs(start: int, chosen: list[CardRef], holders: frozenset[str]) -> None:
            nonlocal best, best_cost, proven
            self.visits -= 1
            if self.visits <= 0:
                self.exhausted = True
                return
            left = need - len(chosen)
            if len(holders) + floor(start, left) >= best_cost:
                return  # cannot beat the best plan
            if left == 0:
                if self.budget <= 0:
                    self.exhausted = True
                    return
                key = frozenset(chosen)
                moves = self.evaluate(key)
                if moves is not None:
                    best, best_cost = (key, moves), len(holders)
                    # Nothing can cost less than the cheapest cards: the search is done.
                    proven = disjoint and best_cost == floor(0, need)
                return
            for i in range(start, len(self.candidates) - left + 1):
                if self.exhausted or proven:
                    return
                ref, uids = self.candidates[i]
                dfs(i + 1, [*chosen, ref], holders | uids)

        dfs(0, [], frozenset())
        return best


def plan(picture: Picture, wanted: int, policy: str, *, model: str = "",
         seed: int = 0) -> Plan:
    """The fewest moves after which ``wanted`` cards (of ``model``, if given) are idle."""
    states = [n.state for n in picture.nodes]
    before = _idle(states, model)
    if before >= wanted:
        return Plan(wanted, model, before, before, (), (), True, True,
                    f"{before} card(s) already idle: nothing to move")
    search = _Search(picture, wanted, model, policy, seed)
    need = wanted - before
    found = search.run(need)
    exact = not search.exhausted
    if found is None:
        why = ("search budget ran out before a plan was found" if search.exhausted else
               f"no way to empty {need} more card(s) by moving shared pods")
        return Plan(wanted, model, before, before, (), (), False, exact, why)
    cards, moves = found
    return Plan(wanted, model, before, before + need, tuple(sorted(cards)), moves, True, exact)


def render(p: Plan) -> str:
    what = f"{p.wanted} idle card(s)" + (f" of model {p.model}" if p.model else "")
    lines = [f"goal: {what}; idle now: {p.idle_before}"]
    if not p.feasible:
        lines.append(f"no plan: {p.note}")
        return "\n".join(lines) + "\n"
    if not p.moves:
        lines.append(p.note)
        return "\n".join(lines) + "\n"
    freed = ", ".join(f"{node} #{index}" for node, index in p.freed)
    how = ("fewest moves: the search was complete" if p.exact
           else "best found: the search budget ran out")
    lines.append(f"{len(p.moves)} move(s) empty {freed} ({how})")
    lines.append("")
    lines.append(f"  {'pod':<40}{'from':<28}{'to':<28}owner")
    for m in p.moves:
        src = f"{m.from_node} " + ",".join(f"#{i}" for i in m.from_cards)
        dst = f"{m.to_node} " + ",".join(f"#{i}" for i in m.to_cards)
        owner = m.owner or "none: a bare pod is lost when deleted"
        lines.append(f"  {m.pod[:39]:<40}{src[:27]:<28}{dst[:27]:<28}{owner}")
    lines.append("")
    lines.append("dry run: nothing was evicted")
    return "\n".join(lines) + "\n"
