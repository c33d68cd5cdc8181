"""``defrag-plan``: the fewest pod moves that would leave N whole cards idle (pure, dry run).

A *move* takes one pod off all its cards and puts it elsewhere, where the allocator's own
placement (:func:`kubectl_tessera.placing.place_best`, the chosen policy) would put it if it
arrived after the plan's earlier moves. Nothing is evicted: the plan is a list to act on, and
the scheduler will make its own choice when a moved pod comes back.

With ``on_one_node`` the N cards must be idle on one node (the room one pod needs together):
each node is searched in turn, its own cards only, whole-card pods may move too (they free a
card here by taking an idle one elsewhere), the moved pods leave the node, and the first node
by name among the cheapest plans wins.

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

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from allocator.ranking.fit import CardState, NodeState
from allocator.ranking.policies import PolicyContext, get_policy
from kubectl_tessera.picture import GpuNode, GpuPod, Picture, selector_excludes
from kubectl_tessera.placing import ContentIds, ScoreMemo, place_best

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
    #: With ``--on-one-node``: the node where the cards are freed (idle counts are its own).
    node: str = ""


def _counts(card: CardState, model: str) -> bool:
    return not model or card.card.model.lower() == model.lower()


def _idle(states: Sequence[NodeState], model: str) -> int:
    return sum(1 for s in states for c in s.cards if c.idle and _counts(c, model))


def _movable(pod: GpuPod | None, whole_ok: bool) -> bool:
    return (pod is not None and pod.request is not None and pod.allocation is not None
            and (whole_ok or not any(c.is_whole for c in pod.allocation.containers)))


@dataclass
class _Budget:
    """What is left of the search's budgets, shared by the per-node searches of one plan."""

    placements: int
    visits: int
    exhausted: bool = False


def _size_order(pod: GpuPod) -> tuple[int, int, int, str]:
    containers = pod.request.containers if pod.request else ()
    return (-sum(c.cards for c in containers), -sum(c.core_percent for c in containers),
            -sum(c.memory_mib for c in containers), pod.key)


class _Search:
    def __init__(self, picture: Picture, wanted: int, model: str, policy: str,
                 seed: int, budget: _Budget, node: str = "") -> None:
        self.picture = picture
        self.nodes: list[GpuNode] = list(picture.nodes)
        self.wanted = wanted
        self.model = model
        self.policy = get_policy(policy)
        self.seed = seed
        self.memo: ScoreMemo = {}
        self.ids = ContentIds()
        self.tried: dict[frozenset[CardRef], tuple[Move, ...] | None] = {}
        self.budget = budget
        #: "" = idle cards anywhere count; else only this node's (then whole-card pods may
        #: move too: they free this node's card by taking an idle one elsewhere).
        self.node = node
        self.target = next((i for i, n in enumerate(self.nodes) if n.name == node), -1)
        # Candidate cards: busy, of the model, every holder movable; with their holders.
        self.candidates: list[tuple[CardRef, frozenset[str]]] = []
        for n in self.nodes:
            if node and n.name != node:
                continue
            for c in n.state.cards:
                if c.idle or not _counts(c, model):
                    continue
                uids = frozenset(uid for uid, _ in c.holders)
                if all(_movable(picture.pod_by_uid(uid), bool(node)) for uid in uids):
                    self.candidates.append(((n.name, c.card.index), uids))
        # Cheapest first: fewest holders, then by node and card (a stable order).
        self.candidates.sort(key=lambda item: (len(item[1]), item[0]))

    def evaluate(self, cards: frozenset[CardRef]) -> tuple[Move, ...] | None:
        """The moves that empty ``cards``, or None when the moved pods do not all fit
        elsewhere or the cluster would still lack idle cards."""
        if cards in self.tried:
            return self.tried[cards]
        self.budget.placements -= 1
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
            # On one node, the moved pods leave it: its idle cards are what the plan is for.
            open_idx = [i for i, n in enumerate(self.nodes)
                        if i != self.target and not selector_excludes(pod, n)]
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
            counted = [states[self.target]] if self.node else states
            idle = _idle(counted, self.model) + len(cards)
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

    def run(self, need: int, bound: int) -> tuple[frozenset[CardRef], tuple[Move, ...]] | None:
        """The cheapest plan emptying ``need`` candidate cards, if it moves fewer than
        ``bound`` pods."""
        best: tuple[frozenset[CardRef], tuple[Move, ...]] | None = None
        best_cost = bound
        sizes = [len(uids) for _, uids in self.candidates]
        disjoint = self._single_card_holders()
        # floor[i][r]: fewest holders r more cards from candidates[i:] can bring (sizes are
        # sorted, so the next r); 0 when a pod may hold several cards (no such bound).
        def floor(i: int, r: int) -> int:
            return sum(sizes[i:i + r]) if disjoint else 0

        proven = False

        def dfs(start: int, chosen: list[CardRef], holders: frozenset[str]) -> None:
            nonlocal best, best_cost, proven
            self.budget.visits -= 1
            if self.budget.visits <= 0:
                self.budget.exhausted = True
                return
            left = need - len(chosen)
            if len(holders) + floor(start, left) >= best_cost:
                return  # cannot beat the best plan
            if left == 0:
                if self.budget.placements <= 0:
                    self.budget.exhausted = True
                    return
                key = frozenset(chosen)
                moves = self.evaluate(key)
                if moves is not None:
                    best, best_cost = (key, moves), len(holders)
                    # Nothing can cost less than the cheapest cards: the search is done.
                    proven = disjoint and best_cost == floor(0, need)
                return
            for i in range(start, len(self.candidates) - left + 1):
                if self.budget.exhausted or proven:
                    return
                ref, uids = self.candidates[i]
                dfs(i + 1, [*chosen, ref], holders | uids)

        dfs(0, [], frozenset())
        return best


def plan(picture: Picture, wanted: int, policy: str, *, model: str = "",
         seed: int = 0, on_one_node: bool = False) -> Plan:
    """The fewest moves after which ``wanted`` cards (of ``model``, if given) are idle: in
    the whole picture, or with ``on_one_node`` all on one node (room for one pod that needs
    them together); there, the first node by name among the cheapest plans."""
    budget = _Budget(SEARCH_BUDGET, VISIT_BUDGET)
    if not on_one_node:
        before = _idle([n.state for n in picture.nodes], model)
        if before >= wanted:
            return Plan(wanted, model, before, before, (), (), True, True,
                        f"{before} card(s) already idle: nothing to move")
        search = _Search(picture, wanted, model, policy, seed, budget)
        found = search.run(wanted - before, len(picture.pods) + 1)
        return _result(wanted, model, before, found, budget, "")
    best: Plan | None = None
    for node in picture.nodes:
        if sum(1 for c in node.state.cards if _counts(c, model)) < wanted:
            continue
        before = _idle([node.state], model)
        if before >= wanted:
            return Plan(wanted, model, before, before, (), (), True, True,
                        f"node {node.name} has {before} idle card(s): nothing to move",
                        node.name)
        bound = len(best.moves) if best is not None else len(picture.pods) + 1
        search = _Search(picture, wanted, model, policy, seed, budget, node.name)
        found = search.run(wanted - before, bound)
        if found is not None:
            best = _result(wanted, model, before, found, budget, node.name)
        if budget.exhausted:
            break
    if best is not None:
        return dataclasses.replace(best, exact=not budget.exhausted)
    why = ("search budget ran out before a plan was found" if budget.exhausted else
           f"no node can get {wanted} idle card(s) by moving pods")
    return Plan(wanted, model, 0, 0, (), (), False, not budget.exhausted, why)


def _result(wanted: int, model: str, before: int,
            found: tuple[frozenset[CardRef], tuple[Move, ...]] | None, budget: _Budget,
            node: str) -> Plan:
    exact = not budget.exhausted
    need = wanted - before
    if found is None:
        why = ("search budget ran out before a plan was found" if budget.exhausted else
               f"no way to empty {need} more card(s) by moving shared pods")
        return Plan(wanted, model, before, before, (), (), False, exact, why, node)
    cards, moves = found
    return Plan(wanted, model, before, before + need, tuple(sorted(cards)), moves, True, exact,
                "", node)


def render(p: Plan) -> str:
    what = f"{p.wanted} idle card(s)" + (f" of model {p.model}" if p.model else "")
    where = f" on node {p.node}" if p.node else ""
    lines = [f"goal: {what}{where}; idle now: {p.idle_before}"]
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
