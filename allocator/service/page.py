"""The allocator's read-only HTML page: nodes and their cards as bars, who holds each card, and
the pods filter recently refused, with its reasons. Pure: status document in, HTML out.

No build step and nothing fetched: one server-rendered document (``page.html``, a Jinja
template beside this module) with its own CSS, no script
at all, refreshed by ``<meta http-equiv="refresh">``. Every name on it (nodes, pods, models,
reasons) comes from the cluster and may be hostile: Jinja's autoescaping escapes each one,
and the route sends a Content-Security-Policy that forbids every script, so even a missed
escape could not run one (:data:`CONTENT_SECURITY_POLICY`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from typing import Any, Final

from jinja2 import Environment, StrictUndefined

from allocator.service.pending import Refusal

#: No script, no fetch, no frame, no form; only the page's own inline CSS.
CONTENT_SECURITY_POLICY: Final = ("default-src 'none'; style-src 'unsafe-inline'; "
                                  "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
#: The same in the document itself, for a saved copy (a ``<meta>`` policy cannot hold
#: ``frame-ancestors``).
META_POLICY: Final = ("default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; "
                      "form-action 'none'")
#: Nodes drawn (a 5,000-node cluster would make a page of many megabytes); /status has all.
MAX_NODES: Final = 300
#: Preemptions listed (at most 1,024 can be under way); /status has all.
MAX_PREEMPTIONS: Final = 100
REFRESH_SECONDS: Final = 10


@dataclass(frozen=True)
class CardView:
    index: int
    model: str
    memory_mib: int
    memory_used_mib: int
    core_used_percent: int
    whole: bool
    holders: tuple[str, ...]
    #: Measured (allocator/picture/measured.py; 0 without metrics).
    foreign_memory_mib: int = 0
    busy_percent: int = 0

    @property
    def core_width(self) -> int:
        return _percent(self.core_used_percent, 100)

    @property
    def memory_width(self) -> int:
        return _percent(self.memory_used_mib, self.memory_mib)


@dataclass(frozen=True)
class NodeView:
    name: str
    source: str
    problem: str
    #: What the node's pod records claim beyond its cards (the state's ``overCommitted``).
    over_committed: tuple[str, ...]
    cards: tuple[CardView, ...]


@dataclass(frozen=True)
class RefusalView:
    pod: str
    attempts: int
    nodes: int
    last_ago: str
    first_ago: str
    reasons: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class PreemptionView:
    """A preemption under way (``/status`` ``preemptions``, allocator/service/preemptions.py)."""

    pod: str
    node: str
    cards: str
    #: Each victim's name, with "(gone)" once the watch has seen it go.
    victims: tuple[str, ...]
    #: "in 42 s", or "passed".
    deadline: str
    #: "held", "waiting-for-victims" or "victims-gone".
    state: str

    @property
    def state_words(self) -> str:
        return _STATE_WORDS.get(self.state, self.state)


_STATE_WORDS = {"held": "cards held for it", "waiting-for-victims": "waiting for victims to go",
                "victims-gone": "victims gone, cards not held"}


def _percent(used: float, total: float) -> int:
    if total <= 0:
        return 0
    return max(0, min(100, round(100 * used / total)))


def _ago(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds} s ago"
    if seconds < 7200:
        return f"{seconds // 60} min ago"
    return f"{seconds // 3600} h ago"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


_STAGE_WORDS = {"inflight": "binding", "held": "held for its bind"}


def _holder(pod: Mapping[str, Any]) -> str:
    name = f"{_text(pod.get('namespace'))}/{_text(pod.get('name'))}"
    if name == "/":
        name = f"pod {_text(pod.get('uid'))}"
    container = _text(pod.get("container"))
    # "bound" and "confirmed" both mean bound; a bind still writing, or filter's hold for a
    # bind to come, are worth a word.
    stage = _STAGE_WORDS.get(_text(pod.get("stage")), "")
    extra = ", ".join(x for x in (container, stage) if x)
    return f"{name} ({extra})" if extra else name


def node_views(nodes: Sequence[Mapping[str, Any]]) -> list[NodeView]:
    out = []
    for node in nodes[:MAX_NODES]:
        cards = tuple(
            CardView(
                index=_int(c.get("index")),
                model=_text(c.get("model")),
                memory_mib=_int(c.get("memoryMiB")),
                memory_used_mib=_int(c.get("memoryUsedMiB")),
                core_used_percent=_int(c.get("coreUsedPercent")),
                whole=bool(c.get("whole")),
                holders=tuple(_holder(p) for p in c.get("pods") or []),
                foreign_memory_mib=_int(c.get("foreignMemoryMiB")),
                busy_percent=_int(c.get("busyPercent")),
            )
            for c in node.get("cards") or []
        )
        out.append(NodeView(_text(node.get("name")), _text(node.get("source")),
                            _text(node.get("problem")),
                            tuple(_text(p) for p in node.get("overCommitted") or []), cards))
    return out


def _victim(victim: Mapping[str, Any]) -> str:
    name = f"{_text(victim.get('namespace'))}/{_text(victim.get('name'))}"
    if name == "/":
        name = f"pod {_text(victim.get('uid'))}"
    return f"{name} (gone)" if victim.get("gone") is True else name


def preemption_views(preemptions: Sequence[Any]) -> list[PreemptionView]:
    out = []
    for p in preemptions[:MAX_PREEMPTIONS]:
        if not isinstance(p, Mapping):
            continue
        cards = [str(_int(c)) for c in p.get("cards") or []]
        left = _int(p.get("secondsLeft"))
        out.append(PreemptionView(
            f"{_text(p.get('namespace'))}/{_text(p.get('name'))}", _text(p.get("node")),
            f"card{'s' if len(cards) > 1 else ''} " + ", ".join(f"#{c}" for c in cards),
            tuple(_victim(v) for v in p.get("victims") or [] if isinstance(v, Mapping)),
            f"in {left} s" if left else "passed", _text(p.get("state"))))
    return out


def refusal_views(refusals: Sequence[Refusal], now: float) -> list[RefusalView]:
    return [RefusalView(r.pod.key, r.attempts, r.nodes, _ago(now - r.last), _ago(now - r.first),
                        r.reasons) for r in refusals]


def render(status: Mapping[str, Any], refusals: Sequence[Refusal], now: float) -> str:
    """The page for a ``/status`` document and the recent refusals, as of ``now``."""
    nodes = status.get("nodes") or []
    views = node_views(nodes)
    count = _int(status.get("nodeCount", len(nodes)))
    under_way = status.get("preemptions") or []
    return _TEMPLATE.render(
        status=status,
        nodes=views,
        node_count=count,
        hidden=max(0, count - len(views)),
        cards=sum(len(n.cards) for n in views),
        refusals=refusal_views(refusals, now),
        preemptions=preemption_views(under_way),
        preemptions_hidden=max(0, len(under_way) - MAX_PREEMPTIONS),
        as_of=datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        refresh=REFRESH_SECONDS,
        policy=META_POLICY,
    )


_ENV = Environment(autoescape=True, undefined=StrictUndefined, trim_blocks=True,
                   lstrip_blocks=True)
#: The template ships beside this module (package data, pyproject.toml).
_PAGE = resources.files("allocator.service") / "page.html"
_TEMPLATE = _ENV.from_string(_PAGE.read_text("utf-8"))
