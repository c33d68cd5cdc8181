"""Properties of fit over generated requests and nodes: the yes/no, the reason and the
placement never disagree."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from allocator.ranking.fit import (
    Card,
    CardState,
    NodeState,
    Placement,
    Unfit,
    fits,
    place,
    unfit_reason,
)
from allocator.ranking.policies import REGISTRY, PolicyContext, chooser
from tessera.vocabulary import ContainerRequest, PodRequest

MODELS = ("A100", "T4")
MEMORIES = (0, 8192, 16384, 40960)


@st.composite
def card_states(draw: st.DrawFn, index: int) -> CardState:
    card = Card(index, draw(st.sampled_from(MODELS)), draw(st.sampled_from(MEMORIES)))
    state = CardState(card)
    use = draw(st.sampled_from(("idle", "whole", "shares")))
    if use == "whole":
        return state.with_whole(("other", "c"))
    if use == "shares":
        for n in range(draw(st.integers(1, 3))):
            core = draw(st.integers(0, state.free_core))
            mem = draw(st.integers(0, max(0, state.free_memory_mib)))
            if core or mem:
                state = state.with_share(core, mem, (f"other-{n}", "c"))
    return state


@st.composite
def nodes(draw: st.DrawFn) -> NodeState:
    count = draw(st.integers(0, 4))
    return NodeState("n", tuple(draw(card_states(i)) for i in range(count)))


@st.composite
def containers(draw: st.DrawFn, name: str) -> ContainerRequest:
    if draw(st.booleans()):
        return ContainerRequest(name, cards=draw(st.integers(1, 3)))
    core = draw(st.integers(0, 99))
    if draw(st.booleans()):
        mib, pct = draw(st.integers(0, 41000)), 0
    else:
        mib, pct = 0, draw(st.integers(0, 100))
    if not (core or mib or pct):
        core = 1
    return ContainerRequest(name, core_percent=core, memory_mib=mib, memory_percent=pct,
                            init=draw(st.booleans()))


@st.composite
def requests(draw: st.DrawFn) -> PodRequest:
    count = draw(st.integers(1, 3))
    return PodRequest(
        tuple(draw(containers(f"c{i}")) for i in range(count)),
        models=tuple(draw(st.lists(st.sampled_from(MODELS), max_size=1))),
        min_card_memory_mib=draw(st.sampled_from((0, 0, 16384))),
        mixed_models=draw(st.booleans()),
    )


@settings(max_examples=400, deadline=None)
@given(requests(), nodes())
def test_fits_says_yes_exactly_when_unfit_reason_has_no_reason(request: PodRequest,
                                                               node: NodeState) -> None:
    reason = unfit_reason(request, node)
    assert fits(request, node) == (reason is None), reason


@settings(max_examples=200, deadline=None)
@given(requests(), nodes(), st.sampled_from(sorted(REGISTRY)))
def test_place_succeeds_exactly_when_the_pod_fits_and_never_over_commits_a_card(
        request: PodRequest, node: NodeState, policy: str) -> None:
    ctx = PolicyContext(request, pod_key="ns/p/uid")
    placed = place(request, node, chooser(REGISTRY[policy], ctx), pod_uid="uid")
    assert isinstance(placed, Placement) == fits(request, node)
    if isinstance(placed, Unfit):
        return
    for card in placed.after.cards:
        assert card.free_core >= 0 and card.free_memory_mib >= 0
    used = {i for c in placed.containers for i in c.card_indices}
    whole = [i for c in placed.containers if c.is_whole for i in c.card_indices]
    assert len(whole) == len(set(whole)) == request.whole_cards
    assert used <= {c.card.index for c in node.cards}
    model = {c.card.index: c.card.model for c in node.cards}
    for c in placed.containers:
        if c.is_whole and not request.mixed_models:
            assert len({model[i] for i in c.card_indices}) == 1, c
