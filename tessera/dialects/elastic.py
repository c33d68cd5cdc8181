"""elastic-gpu-scheduler's keys (pure): ``<domain>/gpu-core`` with ``<domain>/gpu-memory``, the
percent form ``<domain>/gpu-percent`` and the fraction form ``<domain>/gpu``, under the
configured domain and the names upstream drifted to. Its core-and-memory and percent readings
are nano-gpu's too (:mod:`tessera.dialects.nano_gpu`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from tessera.dialects.base import (
    MAX_CARDS,
    MAX_MEMORY_MIB,
    ContainerResources,
    Parser,
    plain_number,
)
from tessera.vocabulary import DEFAULT_DOMAIN, WHOLE_CARD_PERCENT, ContainerRequest, RequestError

if TYPE_CHECKING:
    from tessera.dialects.config import DialectConfig

#: Domains whose elastic keys are always read (upstream name drift: elastic-gpu-scheduler's
#: README and its agent use ``elasticgpu.io``; some of its manifests say ``elasticgpu.com``).
ELASTIC_DOMAINS: Final = (DEFAULT_DOMAIN, "elasticgpu.com")


def core_memory(
    c: ContainerResources, core_key: str, memory_key: str, memory_unit_mib: int, unit_name: str
) -> ContainerRequest | None:
    """elastic-gpu-scheduler semantics (pkg/scheduler/gpu.go NewGPURequest): core 0 and memory 0
    = no GPU; core >= 100 = core/100 whole cards. Upstream truncates 150 to one card; we refuse."""
    core = c.integer(
        core_key, low=0, high=MAX_CARDS * WHOLE_CARD_PERCENT,
        valid="core is a percent of one card: 1-99 for a share, 100·k for k whole cards",
    ) or 0
    memory = c.integer(
        memory_key, low=0, high=MAX_MEMORY_MIB // memory_unit_mib,
        valid=f"memory is a whole number of {unit_name} >= 0",
    ) or 0
    if core == 0 and memory == 0:
        return None
    if core >= WHOLE_CARD_PERCENT:
        if core % WHOLE_CARD_PERCENT:
            raise RequestError(
                f"container {c.name!r}: {core_key}={core} is invalid; 1-99 is a share of one "
                f"card and 100·k is k whole cards (100, 200, ...)"
            )
        if memory:
            raise RequestError(
                f"container {c.name!r}: {core_key}={core} asks for whole cards, which take all "
                f"their memory; remove {memory_key}={memory} (or ask for a share: core 1-99)"
            )
        return ContainerRequest(c.name, cards=core // WHOLE_CARD_PERCENT, init=c.init)
    return ContainerRequest(
        c.name, core_percent=core, memory_mib=memory * memory_unit_mib, init=c.init
    )


def percent(c: ContainerResources, key: str) -> ContainerRequest | None:
    value = c.integer(
        key, low=1, high=WHOLE_CARD_PERCENT,
        valid="a percent of one card is 1-100 (use gpu-core 200 for two whole cards)",
    )
    if value is None:
        return None
    if value == WHOLE_CARD_PERCENT:
        return ContainerRequest(c.name, cards=1, init=c.init)
    return ContainerRequest(c.name, core_percent=value, memory_percent=value, init=c.init)


def fraction(c: ContainerResources, key: str) -> ContainerRequest | None:
    value = c.value(key)
    if value is None:
        return None
    valid = (
        "below 1 it is a share of one card in hundredths (0.01-0.99, e.g. 0.25); "
        "from 1 it is a whole number of cards (1, 2, ...)"
    )
    if value <= 0:
        raise RequestError(f"container {c.name!r}: {key}={plain_number(value)} is invalid; {valid}")
    if value < 1:
        percent = value * WHOLE_CARD_PERCENT
        if percent != percent.to_integral_value():
            raise RequestError(
                f"container {c.name!r}: {key}={plain_number(value)} is invalid; {valid}"
            )
        return ContainerRequest(
            c.name, core_percent=int(percent), memory_percent=int(percent), init=c.init
        )
    if value != value.to_integral_value() or value > MAX_CARDS:
        raise RequestError(
            f"container {c.name!r}: {key}={plain_number(value)} is invalid; {valid} "
            f"(a share spread over several cards is not possible)"
        )
    return ContainerRequest(c.name, cards=int(value), init=c.init)


def elastic_parser(core: str, memory: str) -> Parser:
    def parse(c: ContainerResources, _cfg: DialectConfig) -> ContainerRequest | None:
        return core_memory(c, core, memory, 1, "MiB")

    return parse


def percent_parser(key: str) -> Parser:
    def parse(c: ContainerResources, _cfg: DialectConfig) -> ContainerRequest | None:
        return percent(c, key)

    return parse


def fraction_parser(key: str) -> Parser:
    def parse(c: ContainerResources, _cfg: DialectConfig) -> ContainerRequest | None:
        return fraction(c, key)

    return parse
