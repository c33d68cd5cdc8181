"""Cards HAMi's (or volcano-vgpu's) plugin registers in ``mig`` mode take no pod from Tessera,
with the reason on ``/status``: the plugin hands out MIG instances there and sets no HAMi-core
limit (HAMi v2.10.0 plugin/server.go:820-832), so a HAMi-core share cannot run on them.
``mps`` cards are ordinary cards, as to HAMi's plugin and hami-scheduler (issue 46)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from alloc_harness import make_app
from builders import VOCAB, make_gpu_pod, make_node, request, share
from fake_kube import FakeKube
from test_hami_bind import _devices

from allocator.hami.codec import HAMI, VOLCANO_VGPU
from allocator.hami.described import registered_cards
from allocator.hami.register import encode_register_json, encode_register_text
from allocator.picture.inventory import read_inventory
from allocator.verbs.core import AllocatorConfig
from tessera.agent_profiles import AgentProfile
from tessera.dialects import DialectConfig


def _node(modes: dict[int, str], flavor: Any = HAMI, count: int = 4,
          gfd: tuple[str, int, int] | None = None, name: str = "n1") -> dict[str, Any]:
    node = make_node(name, count=count, gfd=gfd)
    devices = tuple(replace(d, mode=modes.get(d.index, "hami-core"))
                    for d in _devices(count))
    node["metadata"]["annotations"][flavor.register_key] = (
        encode_register_json(devices) if flavor is HAMI else
        encode_register_text(devices, flavor))
    return node


@pytest.mark.parametrize("flavor", [HAMI, VOLCANO_VGPU], ids=["hami", "volcano-vgpu"])
def test_mig_mode_cards_are_left_out_with_the_reason_and_mps_cards_kept(flavor: Any) -> None:
    inv = read_inventory(_node({1: "mig", 2: "mps", 3: "mig"}, flavor), VOCAB,
                         own_description=registered_cards)
    assert inv.source == "hami"
    assert [c.index for c in inv.cards] == [0, 2]
    assert "cards 1, 3 left out: registered in mig mode" in inv.problem


def test_a_node_of_mig_cards_only_has_no_cards_even_with_gfd_labels() -> None:
    """GFD counts a MIG card as a card: its labels must not bring the cards back."""
    node = _node({i: "mig" for i in range(4)}, gfd=("A100", 4, 40960))
    inv = read_inventory(node, VOCAB, own_description=registered_cards)
    assert inv.cards == () and inv.source == "hami" and "mig mode" in inv.problem


def test_no_mig_card_no_reason() -> None:
    inv = read_inventory(_node({2: "mps"}), VOCAB, own_description=registered_cards)
    assert len(inv.cards) == 4 and inv.problem == ""


def test_status_names_the_mig_cards_and_filter_places_on_the_others() -> None:
    fake = FakeKube()
    fake.add_node(_node({0: "mig", 1: "mig"}, name="mixed"))
    fake.add_node(_node({i: "mig" for i in range(4)}, name="allmig"))
    config = AllocatorConfig(dialects=DialectConfig(agent_profile=AgentProfile.HAMI),
                             filter_best=False)
    app, _ = make_app(fake, core=config)
    client = app.test_client()
    nodes = {n["name"]: n for n in client.get("/status").get_json()["nodes"]}
    assert "cards 0, 1 left out: registered in mig mode" in nodes["mixed"]["problem"]
    assert [c["index"] for c in nodes["mixed"]["cards"]] == [2, 3]
    assert nodes["allmig"]["cards"] == []
    pod = make_gpu_pod("p", request(share(core=30, mem=1000)), uid="u-1")
    body = client.post("/scheduler/filter", json={"Pod": pod, "Nodes": None,
                                                  "NodeNames": ["mixed", "allmig"]}).get_json()
    assert body["NodeNames"] == ["mixed"]
