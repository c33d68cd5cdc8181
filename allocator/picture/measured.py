"""What the cards are really doing, from Prometheus: parse, and apply to the picture (pure).

The figures are NVIDIA dcgm-exporter's, as Prometheus scrapes them (NVIDIA/dcgm-exporter, tag
``4.5.3-4.8.2``): ``etc/default-counters.csv`` exports ``DCGM_FI_DEV_FB_USED`` and
``DCGM_FI_DEV_FB_FREE`` (gauges, MiB) and ``DCGM_FI_DEV_GPU_UTIL`` (gauge, percent);
``internal/pkg/rendermetrics/render_metrics.go`` labels every card's series with ``gpu`` (the
card's index), ``UUID``, ``pci_bus_id``, ``device``, ``modelName`` and ``Hostname``, plus
``GPU_I_PROFILE``/``GPU_I_ID`` on a MIG instance's series; ``internal/pkg/hostname/hostname.go``
takes ``Hostname`` from ``NODE_NAME``, which its chart sets from ``spec.nodeName``
(``deployment/templates/daemonset.yaml``), so under Kubernetes it is the Node's name. Another
node label (a ServiceMonitor relabelling to ``node``, say) is a setting.

The reply is Prometheus's instant query (``GET /api/v1/query``): ``{"status": "success",
"data": {"resultType": "vector", "result": [{"metric": {...}, "value": [<unix time>,
"<number>"]}]}}`` (prometheus/prometheus, tag v3.16.0 as Go module v0.316.0,
``web/api/v1/api.go`` and ``docs/querying/api.md``).

What a figure does to placement (docs/metrics.md):

- **foreign memory**: a card whose measured used memory exceeds what Tessera booked there has
  that much less free memory
  (:attr:`allocator.ranking.cards.CardState.foreign_memory_mib`), and is no longer idle.
  Bookings made shortly before the sample (:attr:`MeasuredConfig.settle_seconds`) are assumed
  not yet in it: the pod's process may not have started, so its memory counts on top of the
  measurement instead of inside it. Stepped up (:attr:`MeasuredConfig.memory_step_mib`) and
  ignored below a floor, so that alike nodes stay alike for the verbs' memos.
- **busy percent**: the card's measured utilisation, stepped; read by the ``usage`` policy.

Nothing here refuses a pod or fails a verb: a node, card or series that cannot be read is
left out (placed by its bookings alone, as without metrics).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final
from urllib.parse import urlencode

from allocator.ranking.cards import Card, NodeState
from tessera.vocabulary import ContainerAllocation

#: dcgm-exporter's names (module doc).
FB_USED: Final = "DCGM_FI_DEV_FB_USED"
FB_FREE: Final = "DCGM_FI_DEV_FB_FREE"
GPU_UTIL: Final = "DCGM_FI_DEV_GPU_UTIL"
GPU_LABEL: Final = "gpu"
UUID_LABEL: Final = "UUID"
MODEL_LABEL: Final = "modelName"
HOSTNAME_LABEL: Final = "Hostname"
#: Present on a MIG instance's series: Tessera places whole cards' shares, so those are skipped.
MIG_INSTANCE_LABEL: Final = "GPU_I_ID"

#: Series read from one reply at most (8 cards x 3 figures x 20,000 nodes); a larger reply
#: is refused whole, never half-read.
MAX_SERIES: Final = 480_000
#: A label value longer than this is not a node name or a card index.
MAX_LABEL_CHARS: Final = 253
#: Card indices as the inventory bounds them (allocator.picture.inventory.MAX_NODE_CARDS).
MAX_CARD_INDEX: Final = 1023


class MeasureError(ValueError):
    """Prometheus's reply cannot be read (or says the query failed)."""


@dataclass(frozen=True)
class MeasuredConfig:
    """Where the figures come from and how they are applied (off when ``url`` is empty)."""

    #: Prometheus's base URL (``http://prometheus-operated.monitoring:9090``); "" = off.
    url: str = ""
    #: The label naming the Node on dcgm-exporter's series.
    node_label: str = HOSTNAME_LABEL
    #: Extra PromQL label matchers for the series (``job="dcgm-exporter"``), or "".
    selector: str = ""
    #: Seconds between two queries.
    interval_seconds: float = 15.0
    #: Figures older than this are dropped: placement by bookings alone until a query works.
    stale_seconds: float = 60.0
    #: Seconds a query may take.
    timeout_seconds: float = 5.0
    #: Bookings younger than this at the sample are counted on top of the measurement.
    settle_seconds: float = 120.0
    #: Foreign memory is rounded up to a multiple of this.
    memory_step_mib: int = 1024
    #: Foreign memory below this is noise (the driver's own use): ignored.
    memory_floor_mib: int = 512
    #: Utilisation is rounded to a multiple of this (percent): quarters tell an idle card from
    #: a busy one, and keep alike nodes alike (docs/metrics.md, Cost).
    busy_step_percent: int = 25

    @property
    def enabled(self) -> bool:
        return bool(self.url)

    def query(self) -> str:
        """One instant query for the three figures of every card."""
        names = "|".join((FB_USED, FB_FREE, GPU_UTIL))
        extra = f",{self.selector}" if self.selector else ""
        return f'{{__name__=~"{names}"{extra}}}'

    def query_url(self) -> str:
        """:meth:`query` as a GET of Prometheus's instant query API."""
        return f"{self.url.rstrip('/')}/api/v1/query?{urlencode({'query': self.query()})}"


@dataclass(frozen=True, slots=True)
class MeasuredCard:
    """One card's figures (None: that series was missing)."""

    index: int
    used_mib: int | None = None
    free_mib: int | None = None
    busy_percent: int | None = None
    uuid: str = ""
    model: str = ""


@dataclass(frozen=True)
class Sample:
    """Every card's figures, by node name then card index, at one evaluation time."""

    at: float
    nodes: Mapping[str, Mapping[int, MeasuredCard]] = field(default_factory=dict)
    #: Series left out, and why (a count per reason, for ``/status``).
    skipped: Mapping[str, int] = field(default_factory=dict)

    @property
    def cards(self) -> int:
        return sum(len(c) for c in self.nodes.values())


_FIELD: Final = {FB_USED: "used_mib", FB_FREE: "free_mib", GPU_UTIL: "busy_percent"}


def parse_sample(body: bytes | str, node_label: str = HOSTNAME_LABEL) -> Sample:
    """Prometheus's reply to :meth:`MeasuredConfig.query`, as per-node, per-card figures.

    :class:`MeasureError` when the reply is not a successful vector; single series that cannot
    be read (no node, a card index that is not one, a value that is not a finite number >= 0)
    are skipped and counted."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise MeasureError(f"reply is not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise MeasureError("reply is not a JSON object")
    if doc.get("status") != "success":
        raise MeasureError(f"query failed: {_text(doc.get('errorType'))}: "
                           f"{_text(doc.get('error'))}")
    data = doc.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "vector":
        raise MeasureError("reply is not an instant vector")
    result = data.get("result")
    if not isinstance(result, list):
        raise MeasureError("reply has no result list")
    if len(result) > MAX_SERIES:
        raise MeasureError(f"reply has {len(result)} series, more than {MAX_SERIES}")
    at = 0.0
    cards: dict[str, dict[int, dict[str, Any]]] = {}
    skipped: dict[str, int] = {}
    for item in result:
        parsed = _series(item, node_label)
        if isinstance(parsed, str):
            skipped[parsed] = skipped.get(parsed, 0) + 1
            continue
        node, index, name, value, when, labels = parsed
        at = max(at, when)
        card = cards.setdefault(node, {}).setdefault(index, {"index": index})
        card[_FIELD[name]] = value
        card.setdefault("uuid", labels.get(UUID_LABEL, "")[:MAX_LABEL_CHARS])
        card.setdefault("model", labels.get(MODEL_LABEL, "")[:MAX_LABEL_CHARS])
    nodes = {n: {i: MeasuredCard(**c) for i, c in by_index.items()}
             for n, by_index in cards.items()}
    return Sample(at, nodes, skipped)


_Series = tuple[str, int, str, int, float, Mapping[str, str]]


def _series(item: object, node_label: str) -> _Series | str:
    """(node, card index, metric name, value, time, labels), or why the series is skipped."""
    if not isinstance(item, dict):
        return "not an object"
    labels = item.get("metric")
    value = item.get("value")
    if not isinstance(labels, dict) or not isinstance(value, list) or len(value) != 2:
        return "not a sample"
    name = labels.get("__name__")
    if name not in _FIELD:
        return "another metric"
    card = _card_of(labels, node_label)
    if isinstance(card, str):
        return card
    number = _number_of(value, name)
    if isinstance(number, str):
        return number
    return card[0], card[1], name, number[0], number[1], labels


def _card_of(labels: Mapping[str, Any], node_label: str) -> tuple[str, int] | str:
    """The series' (node, card index), or why it names no card of a node."""
    if MIG_INSTANCE_LABEL in labels:
        return "a MIG instance"
    node = labels.get(node_label)
    if not isinstance(node, str) or not node or len(node) > MAX_LABEL_CHARS:
        return f"no {node_label} label"
    gpu = labels.get(GPU_LABEL)
    if (not isinstance(gpu, str) or not gpu.isascii() or not gpu.isdigit() or len(gpu) > 4
            or int(gpu) > MAX_CARD_INDEX):
        return f"no card index in {GPU_LABEL}"
    return node, int(gpu)


def _number_of(value: list[Any], name: str) -> tuple[int, float] | str:
    """The sample's (value, time), or why it is no usable number."""
    when, text = value
    if not isinstance(when, int | float) or isinstance(when, bool) or not isinstance(text, str):
        return "not a sample"
    try:
        number = float(text[:64])
    except ValueError:
        return "not a number"
    if not math.isfinite(number) or number < 0 or number > 2**40:
        return "out of range"
    if name == GPU_UTIL:
        number = min(number, 100.0)
    return round(number), float(when)


# ----------------------------------------------------------------------------- the picture

#: Per card position of a node: (foreign memory MiB, busy percent), as
#: :func:`apply_overlay` puts them on the node's cards.
Overlay = tuple[tuple[int, int], ...]


def booked_before(allocations: Iterable[tuple[float, Iterable[ContainerAllocation]]],
                  cards: Sequence[Card], before: float) -> dict[int, int]:
    """MiB booked per card index by the allocations made before ``before`` (those a sample
    taken then may show; ``(allocated_at, containers)`` pairs, 0 = not yet written). A whole
    card books all its memory."""
    memory = {c.index: c.memory_mib for c in cards}
    out: dict[int, int] = {}
    for at, containers in allocations:
        if at <= 0 or at > before:
            continue
        for ca in containers:
            for index in ca.card_indices:
                if index in memory:
                    took = memory[index] if ca.is_whole else ca.memory_mib
                    out[index] = out.get(index, 0) + took
    return out


def overlay(cards: Sequence[Card], seen_booked_mib: Mapping[int, int],
            reading: Mapping[int, MeasuredCard] | None, config: MeasuredConfig) -> Overlay:
    """Each card's foreign memory and busy percent from its reading (zeros without one)."""
    if not reading:
        return ()
    out = []
    for card in cards:
        measured = reading.get(card.index)
        if measured is None:
            out.append((0, 0))
            continue
        foreign = 0
        if measured.used_mib is not None:
            beyond = measured.used_mib - seen_booked_mib.get(card.index, 0)
            if beyond >= config.memory_floor_mib:
                step = max(1, config.memory_step_mib)
                foreign = min(-(-beyond // step) * step, card.memory_mib)
        busy = 0
        if measured.busy_percent is not None:
            step = max(1, config.busy_step_percent)
            busy = min(100, (measured.busy_percent + step // 2) // step * step)
        out.append((foreign, busy))
    return tuple(out) if any(out_card != (0, 0) for out_card in out) else ()


def apply_overlay(state: NodeState, figures: Overlay) -> NodeState:
    """``state`` with each card's measured figures (``state`` itself for an empty overlay or
    one that does not match the cards). Foreign memory never makes free memory negative."""
    if not figures or len(figures) != len(state.cards):
        return state
    cards = []
    for cs, (foreign, busy) in zip(state.cards, figures, strict=True):
        room = max(0, cs.card.memory_mib - cs.memory_used_mib)
        cards.append(replace(cs, foreign_memory_mib=min(foreign, room), busy_percent=busy))
    return NodeState(state.name, tuple(cards))


def _text(value: object) -> str:
    return value[:200] if isinstance(value, str) else "unknown"
