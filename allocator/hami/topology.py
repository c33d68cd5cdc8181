"""HAMi's pair scores: how well each two cards of a node talk (pure). Read in HAMi's source at
tag ``v2.10.0`` (Project-HAMi/HAMi); none of its code is copied (docs/hami.md, "Topology").

- key ``hami.io/node-nvidia-score`` (``pkg/device/nvidia/device.go:43``,
  ``RegisterGPUPairScore``), written by the device plugin next to its register annotation
  only when it runs with ``ENABLE_TOPOLOGY_SCORE=true``
  (``pkg/device-plugin/nvidiadevice/nvinternal/plugin/register.go:279-300``);
- a JSON list of ``{"uuid": <card>, "score": {<other card's uuid>: <int>}}``
  (``pkg/device/nvidia/calculate_score.go:165-172``, read back by ``DecodePairScores``,
  ``pkg/device/devices.go:146-150,383-389``); a score is the sum over the pair's links of 10
  (across CPUs) .. 60 (same board) for a PCIe path and 100 per NVLink
  (``calculate_score.go:211-285``), 0 for a pair with asymmetric link data.

A pair scored both ways counts its lower score; a UUID the register annotation does not list
(or a card left out: unhealthy, cordoned) is ignored.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace

from allocator.hami.codec import (
    HAMI,
    MAX_ANNOTATION_CHARS,
    MAX_DEVICES,
    HamiFormatError,
    bounded_int,
)
from allocator.hami.writer import read_devices
from allocator.picture.inventory import Inventory

#: HAMi's pair-score node annotation.
SCORE_KEY = "hami.io/node-nvidia-score"

#: Pair scores by UUID: (uuid, uuid) -> score, both orders.
PairScores = dict[tuple[str, str], int]


def parse_scores(text: str) -> PairScores:
    """The pair scores of the annotation; :class:`HamiFormatError` when it cannot be read."""
    if len(text) > MAX_ANNOTATION_CHARS:
        raise HamiFormatError(f"{SCORE_KEY} of {len(text)} characters is too long")
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise HamiFormatError(f"{SCORE_KEY} is not JSON: {exc}") from None
    if not isinstance(raw, list):
        raise HamiFormatError(f"{SCORE_KEY} must be a JSON list")
    if len(raw) > MAX_DEVICES:
        raise HamiFormatError(f"{SCORE_KEY}: {len(raw)} devices is more than {MAX_DEVICES}")
    seen: dict[tuple[str, str], int] = {}
    for item in raw:
        if not isinstance(item, dict):
            raise HamiFormatError(f"{SCORE_KEY}: each device must be a JSON object")
        uuid, scores = item.get("uuid"), item.get("score")
        scores = {} if scores is None else scores  # Go's nil map: no score
        if not isinstance(uuid, str) or not uuid:
            raise HamiFormatError(f"{SCORE_KEY}: uuid {uuid!r} must be a non-empty string")
        if not isinstance(scores, dict) or len(scores) > MAX_DEVICES:
            raise HamiFormatError(f"{SCORE_KEY}: device {uuid}: score must be a JSON object")
        for other, value in scores.items():
            score = bounded_int(value, f"{SCORE_KEY}: device {uuid} score to {other}")
            if other == uuid:
                continue
            for pair in ((uuid, other), (other, uuid)):
                seen[pair] = min(score, seen.get(pair, score))
    return seen


def with_links(inventory: Inventory | None, annotations: Mapping[str, str]
               ) -> Inventory | None:
    """``inventory`` (HAMi's register annotation read) with each card's pair scores from
    :data:`SCORE_KEY`; unchanged without one; a score that cannot be read is left out and
    named in the inventory's problem (the cards stay)."""
    text = annotations.get(SCORE_KEY)
    if inventory is None or text is None or not inventory.cards:
        return inventory
    devices = read_devices(annotations, HAMI)
    if devices is None or devices.problem:
        return inventory
    try:
        scores = parse_scores(text)
    except HamiFormatError as exc:
        ignored = f"annotation {SCORE_KEY} ignored: {exc}"
        return replace(inventory, problem="; ".join(p for p in (inventory.problem, ignored) if p))
    uuid_of = {d.index: d.uuid for d in devices.devices}
    cards = []
    for card in inventory.cards:
        mine = uuid_of.get(card.index, "")
        links = tuple((other.index, scores[(mine, uuid_of.get(other.index, ""))])
                      for other in inventory.cards
                      if other is not card and (mine, uuid_of.get(other.index, "")) in scores)
        cards.append(replace(card, links=links))
    return replace(inventory, cards=tuple(cards))
