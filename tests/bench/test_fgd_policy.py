"""The fragmentation measure and the two FGD policies (allocator/ranking/policies/fgd*.py)."""

from __future__ import annotations

import pytest

from allocator.ranking.fit import Card, CardState, NodeState, Placement, place
from allocator.ranking.policies import (
    REGISTRY,
    NodeFacts,
    PolicyContext,
    Workload,
    chooser,
    get_policy,
)
from allocator.ranking.policies.fgd import FGD, compile_mix, fragmentation, mix_of
from allocator.ranking.policies.fgd_cpu import SHORTFALL_TOLERANCE, FGDCpu, cpu_stranding
from allocator.ranking.policies.fgd_ff import TOLERANCE, FGDFirstFit
from tessera.vocabulary import ContainerRequest, PodRequest


def share(pct: int, models: tuple[str, ...] = ()) -> PodRequest:
    return PodRequest((ContainerRequest("main", core_percent=pct, memory_percent=pct),),
                      models=models)


def whole(cards: int = 1) -> PodRequest:
    return PodRequest((ContainerRequest("main", cards=cards),))


def node(name: str, *used: int, model: str = "T4", memory: int = 16000) -> NodeState:
    """Cards with ``used`` percent taken (core and memory alike); 100 = taken whole."""
    cards = []
    for i, u in enumerate(used):
        card = Card(i, model, memory)
        if u >= 100:
            cards.append(CardState(card, 100, memory, True, (("x", "c"),)))
        elif u:
            cards.append(CardState(card, u, memory * u // 100, False, (("x", "c"),)))
        else:
            cards.append(CardState(card))
    return NodeState(name, tuple(cards))


HALF = compile_mix([(share(50), 1.0)])


@pytest.mark.parametrize(
    ("state", "mix_pairs", "cpu", "expected"),
    [
        # every typical pod fits every free card: nothing is fragmented
        (node("n", 0, 0), [(share(50), 1.0)], None, 0.0),
        # a card with 30% free cannot take a 50% share: its 0.3 is fragment
        (node("n", 70, 0), [(share(50), 1.0)], None, 0.3),
        # half the mix wants a whole card: only the idle card serves it
        (node("n", 70, 0), [(share(50), 0.5), (whole(), 0.5)], None, 0.5 * 0.3 + 0.5 * 0.3),
        # the mix needs two whole cards, the node has one idle: everything free is stranded
        (node("n", 70, 0), [(whole(2), 1.0)], None, 1.3),
        # wrong model: the node is useless to the mix
        (node("n", 0, 0, model="P100"), [(share(50, ("T4",)), 1.0)], None, 2.0),
        # taken cards are not free capacity
        (node("n", 100, 100), [(share(50), 1.0)], None, 0.0),
    ],
)
def test_fragmentation_counts_the_free_capacity_the_typical_pods_cannot_use(
        state: NodeState, mix_pairs: list[tuple[PodRequest, float]], cpu: int | None,
        expected: float) -> None:
    assert fragmentation(state, compile_mix(mix_pairs), cpu) == pytest.approx(expected)


@pytest.mark.parametrize(("cpu_free", "expected"), [(None, 0.0), (8000, 0.0), (3999, 2.0)])
def test_a_node_without_cpu_for_the_typical_pod_strands_all_its_free_gpu(
        cpu_free: int | None, expected: float) -> None:
    mix = compile_mix([(share(50), 1.0)], [4000])
    assert fragmentation(node("n", 0, 0), mix, cpu_free) == pytest.approx(expected)


def _best(policy: str, req: PodRequest, nodes: list[NodeState],
          ctx: PolicyContext) -> tuple[str, tuple[int, ...]]:
    pol = get_policy(policy)
    scored = []
    for n in nodes:
        placed = place(req, n, chooser(pol, ctx), "u")
        assert isinstance(placed, Placement)
        scored.append((pol.score(n, placed.after, ctx), n.name, placed.containers[0].card_indices))
    best = max(scored)
    return best[1], best[2]


@pytest.mark.parametrize("policy", ["fgd", "fgd-ff"])
def test_fgd_puts_a_share_into_the_fragment_it_fits_instead_of_breaking_an_idle_card(
        policy: str) -> None:
    # Typical pods: 30% shares and whole cards. A 30% share fits exactly into the 70%-used
    # card; putting it on an idle card would leave a 70% hole no whole-card pod can use.
    workload = Workload(((share(30), 0.5), (whole(), 0.5)))
    req = share(30)
    ctx = PolicyContext(req, workload=workload)
    assert _best(policy, req, [node("a", 70, 0), node("b", 0, 0)], ctx) == ("a", (0,))


def test_fgd_keeps_cpu_for_gpu_pods_when_told_the_nodes_cpu() -> None:
    # Same GPU state; on "poor" the pod's CPU leaves less than a typical pod needs.
    workload = Workload(((share(50), 1.0),), (4000,))
    req = share(50)
    ctx = PolicyContext(req, workload=workload, pod_cpu_milli=6000, node_facts={
        "poor": NodeFacts(9000), "rich": NodeFacts(64000)})
    assert _best("fgd", req, [node("poor", 0, 0, 0), node("rich", 0, 0, 0)], ctx)[0] == "rich"


def test_fgd_scores_nothing_without_a_workload_picture() -> None:
    req = share(50)
    n = node("a", 0, 0)
    placed = place(req, n, chooser(get_policy("fgd"), PolicyContext(req)), "u")
    assert isinstance(placed, Placement)
    assert get_policy("fgd").score(n, placed.after, PolicyContext(req)) == 0.0


def test_fgd_ff_bias_is_stable_below_one_step_and_differs_between_nodes() -> None:
    pol = FGDFirstFit()
    biases = {name: pol.fixed_rank(name) for name in (f"node-{i}" for i in range(50))}
    assert all(0.0 <= b < TOLERANCE for b in biases.values())
    assert len(set(biases.values())) == len(biases)
    assert biases == {name: FGDFirstFit().fixed_rank(name) for name in biases}
    assert pol.name_bias() == pol.fixed_rank  # what the allocator adds per node name


def test_fgd_ff_treats_tiny_fragmentation_differences_as_equal_and_prefers_its_fixed_order(
        ) -> None:
    # A 10% share lands on one idle card of either identical node: the fragmentation change
    # is the same, so the node rank decides, for every pod alike.
    workload = Workload(((share(50), 1.0),))
    req = share(10)
    ctx = PolicyContext(req, workload=workload)
    names = [f"n{i}" for i in range(6)]
    pol = FGDFirstFit()
    winner, _ = _best("fgd-ff", req, [node(n, 0, 0) for n in names], ctx)
    assert winner == max(names, key=pol.fixed_rank)


def test_fgd_cpu_counts_the_gpus_a_nodes_cpu_cannot_feed() -> None:
    mix = compile_mix([(whole(), 1.0)], [12000])
    eight = node("g2", 0, 0, 0, 0, 0, 0, 0, 0)
    # 4 pods' CPU for 8 GPUs: 4 short, less the half card of tolerance
    assert cpu_stranding(eight, mix, 48000) == pytest.approx(4.0 - SHORTFALL_TOLERANCE)
    assert cpu_stranding(eight, mix, 96000) == pytest.approx(0.0)
    assert FGDCpu().measure(eight, mix, None) == fragmentation(eight, mix, None)


def test_fgd_cpu_fills_the_node_with_the_mix_so_cpu_light_pods_offset_cpu_hungry_ones() -> None:
    # Half the pods ask 16 cores per GPU, half 4: a pod of the mix asks 10 cores per GPU on
    # average, so 64 free cores feed 6.4 of the 8 idle GPUs and 1.6 are stranded (filling
    # with each pod alone would count 0.5 * (8 - 4) + 0.5 * 0 = 2).
    mix = compile_mix([(whole(), 0.5), (share(50), 0.5)], [16000, 2000])
    eight = node("g2", 0, 0, 0, 0, 0, 0, 0, 0)
    assert cpu_stranding(eight, mix, 64000) == pytest.approx(8 - 64000 * 0.75 / 9000 - 0.5)
    mix = compile_mix([(whole(), 0.5), (whole(), 0.5)], [16000, 4000])
    assert cpu_stranding(eight, mix, 64000) == pytest.approx(1.6 - 0.5)
    # Free CPU is read in 4-core steps: 67 cores count as 64.
    assert cpu_stranding(eight, mix, 67000) == pytest.approx(1.6 - 0.5)
    # A typical pod whose CPU the node cannot cover is FGD's to count, not the mix's: with
    # 12 cores only the 4-core half fits, and 12 cores feed 3 of its 8 GPUs.
    assert cpu_stranding(eight, mix, 12000) == pytest.approx(0.5 * (8 - 3) - 0.5)


def test_fgd_cpu_counts_no_shortfall_below_half_a_card() -> None:
    mix = compile_mix([(whole(), 1.0)], [12000])
    seven = node("g2", 0, 0, 0, 0, 0, 0, 0)
    assert SHORTFALL_TOLERANCE == 0.5
    assert cpu_stranding(seven, mix, 80000) == 0.0  # 80 cores feed 6.67 of 7 GPUs
    assert cpu_stranding(seven, mix, 72000) == pytest.approx(0.5)  # feed 6: one card short


def test_a_cpu_hungry_one_gpu_pod_scores_alike_on_a_fresh_96_and_128_core_eight_gpu_node(
) -> None:
    # The mix asks 11 cores per GPU. A 1-GPU pod asking 24 cores leaves a fresh 96-core
    # 8-GPU node 72 cores for 7 GPUs: 0.45 of a card short, which counts as none, so the
    # 96-core and the 128-core node score alike (the fixed order decides), and the 128-core
    # node, the only home of a pod asking more than 96 cores, is not preferred. Counting that
    # shortfall (the version before) preferred the 128-core node for every such pod.
    workload = Workload(((whole(), 1.0),), (11000,))
    req = whole()
    fresh = [0] * 8
    ctx = PolicyContext(req, workload=workload, pod_cpu_milli=24000, node_facts={
        "cpu96": NodeFacts(96000), "cpu128": NodeFacts(128000)})
    pol = FGDCpu()
    scores = {}
    for n in (node("cpu96", *fresh), node("cpu128", *fresh)):
        placed = place(req, n, chooser(pol, ctx), "u")
        assert isinstance(placed, Placement)
        scores[n.name] = pol.score(n, placed.after, ctx) - pol.fixed_rank(n.name)
    assert scores["cpu96"] == pytest.approx(scores["cpu128"])


def test_fgd_cpu_sends_a_cpu_only_pod_to_the_node_with_cpu_to_spare_where_fgd_sees_no_difference(
        ) -> None:
    workload = Workload(((whole(), 1.0),), (11300,))
    poor = node("poor", *([0] * 8))  # 96 cores for 8 idle GPUs
    rich = node("rich", 0, 0)  # 104 cores for 2 idle GPUs
    pod_cpu = 12500

    def gain(pol: FGD, n: NodeState, cpu: int) -> float:
        return pol.score_cpu_only(n, cpu, cpu - pod_cpu, workload)

    assert gain(FGD(), poor, 96000) == gain(FGD(), rich, 104000) == 0.0
    assert gain(FGDCpu(), rich, 104000) > gain(FGDCpu(), poor, 96000)


def test_fgd_cpu_declares_every_cpu_value_its_measure_can_tell_apart() -> None:
    thresholds = FGDCpu().cpu_thresholds([11300, 3152], 16000)
    assert thresholds == (3152, 4000, 8000, 11300, 12000, 16000)
    assert FGD().cpu_thresholds([11300, 3152, 11300], 16000) == (3152, 11300)


def test_the_fgd_family_reads_node_cpu_and_scores_cpu_only_pods_and_no_other_policy_does(
) -> None:
    node = NodeState("n", ())
    workload = Workload(((share(50), 1.0),), (4000,))
    reading = sorted(n for n, p in REGISTRY.items() if p.cpu_thresholds([4000], 8000))
    scoring = sorted(n for n, p in REGISTRY.items()
                     if p.score_cpu_only(node, 8000, 4000, workload) is not None)
    assert reading == scoring == ["fgd", "fgd-cpu", "fgd-ff"]


def test_a_workload_digests_its_mix_once_and_keeps_it() -> None:
    workload = Workload(((share(50), 1.0),), (4000,))
    assert workload.derived(mix_of) is workload.derived(mix_of)
    assert Workload(workload.typical).derived(mix_of) is not workload.derived(mix_of)
    assert workload.derived(mix_of).typical[0].cpu_milli == 4000
