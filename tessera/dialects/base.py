"""What every dialect family shares (pure): the dialect names, the sanity bounds, one
container's keys as the parsers read them, and the shape of a family's parser."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Final, TypeAlias

from tessera.agent_profiles import MIB_PER_GIB
from tessera.quantity import QuantityError, parse_quantity
from tessera.vocabulary import ContainerRequest, RequestError

if TYPE_CHECKING:
    from tessera.dialects.config import DialectConfig

class Dialect(StrEnum):
    """A family of keys some GPU scheduler taught users to write."""

    ELASTIC = "elastic"
    PERCENT = "percent"
    FRACTION = "fraction"
    NANO_GPU = "nano-gpu"
    ALIYUN = "aliyun"
    GENIUS = "genius"
    VOLCANO = "volcano"
    GPU_MANAGER = "gpu-manager"
    KOORDINATOR = "koordinator"
    HAMI = "hami"
    KAI = "kai"


#: Dialects read only when named in ``--dialects``: their keys are not ours to take by default.
#: Plain ``nvidia.com/gpu`` belongs to NVIDIA's own device plugin (HAMi); KAI's annotations
#: carry no prefix, so ``gpu-memory`` on a pod may mean something to another tool. Every other
#: dialect uses keys under its own system's domain, which only that system (the one Tessera
#: replaces) reads.
OPT_IN_DIALECTS: Final = frozenset({Dialect.HAMI, Dialect.KAI})
DEFAULT_DIALECTS: Final = frozenset(Dialect) - OPT_IN_DIALECTS

BYTES_PER_MIB: Final = 1024 * 1024
#: Units a memory dialect may be configured with (names as Aliyun's ``--memory-unit`` flag).
MEMORY_UNITS: Final = {"MiB": 1, "GiB": MIB_PER_GIB}
#: Sanity bound: more than 16 TiB on one card is a typo, not a request.
MAX_MEMORY_MIB: Final = 16 * 1024 * 1024
#: Sanity bound on whole cards per container.
MAX_CARDS: Final = 1024


def unique(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


@dataclass(frozen=True)
class ContainerResources:
    """One container's resources as the parsers see them."""

    name: str
    init: bool
    limits: Mapping[str, Any]
    requests: Mapping[str, Any]
    #: An init container with ``restartPolicy: Always`` (a sidecar): it runs beside the app
    #: containers, and kubelet hands its devices to none of them.
    restartable: bool = False

    def has(self, key: str) -> bool:
        return key in self.limits or key in self.requests

    def value(self, key: str, *, binary: bool = False, unit_hint: str = "") -> Decimal | None:
        """The key's value; limits and requests must agree when both are given. Binary
        suffixes (``Gi``) are refused unless the key is a number of bytes (``binary``), with
        ``unit_hint`` (the family's own unit; else one read from the key's name)."""
        found: list[tuple[str, Decimal]] = []
        for where, mapping in (("limits", self.limits), ("requests", self.requests)):
            if key in mapping:
                raw = mapping[key]
                try:
                    quantity = parse_quantity(raw)
                except QuantityError as exc:
                    raise RequestError(f"container {self.name!r}: {key} in {where}: {exc}") from exc
                if quantity.binary_suffix and not binary:
                    raise RequestError(
                        f"container {self.name!r}: {key}={raw!r} in {where}: binary suffixes "
                        f"(Ki, Mi, Gi) are not units here; write a plain number "
                        f"({unit_hint or _unit_hint(key)})"
                    )
                found.append((where, quantity.value))
        if not found:
            return None
        if len(found) == 2 and found[0][1] != found[1][1]:
            raise RequestError(
                f"container {self.name!r}: {key} is {plain_number(found[1][1])} in requests but "
                f"{plain_number(found[0][1])} in limits; set it in limits only, or equal in both"
            )
        return found[0][1]

    def integer(self, key: str, *, low: int, high: int, valid: str,
                unit_hint: str = "") -> int | None:
        value = self.value(key, unit_hint=unit_hint)
        if value is None:
            return None
        if value != value.to_integral_value() or not low <= value <= high:
            bound = f" (at most {high})" if value > high else ""
            raise RequestError(
                f"container {self.name!r}: {key}={plain_number(value)} is invalid; {valid}{bound}"
            )
        return int(value)

    def mebibytes(self, key: str) -> int | None:
        """A number of bytes (a quantity such as ``4Gi``) in MiB, rounded up: the share is
        never smaller than asked."""
        value = self.value(key, binary=True)
        if value is None:
            return None
        if not 0 <= value <= MAX_MEMORY_MIB * BYTES_PER_MIB:
            raise RequestError(
                f"container {self.name!r}: {key}={plain_number(value)} is invalid; GPU memory is a "
                f"number of bytes >= 0 of at most {MAX_MEMORY_MIB // MIB_PER_GIB} GiB, e.g. 4Gi"
            )
        return int((value / BYTES_PER_MIB).to_integral_value(rounding=ROUND_CEILING))


def plain_number(value: Decimal) -> str:
    return format(value.normalize(), "f")


def _unit_hint(key: str) -> str:
    if key.endswith(("gpu-memory", "gpumem")):
        return "a count of MiB or of the dialect's memory unit, e.g. 1024"
    return "e.g. 25"


def containers_of(pod: Mapping[str, Any]) -> list[ContainerResources]:
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        raise RequestError("pod has no spec object")
    result: list[ContainerResources] = []
    for field_name, init in (("initContainers", True), ("containers", False)):
        items = spec.get(field_name) or []
        if not isinstance(items, list):
            raise RequestError(f"pod spec.{field_name} must be a list")
        for index, item in enumerate(items):
            if not isinstance(item, Mapping):
                raise RequestError(f"pod spec.{field_name}[{index}] must be an object")
            name = item.get("name")
            if not isinstance(name, str) or not name:
                raise RequestError(f"pod spec.{field_name}[{index}] has no name")
            resources = item.get("resources") or {}
            if not isinstance(resources, Mapping):
                raise RequestError(f"container {name!r}: resources must be an object")
            limits = resources.get("limits") or {}
            requests = resources.get("requests") or {}
            if not isinstance(limits, Mapping) or not isinstance(requests, Mapping):
                raise RequestError(f"container {name!r}: resources limits/requests must be maps")
            restartable = init and item.get("restartPolicy") == "Always"
            result.append(ContainerResources(name, init, limits, requests, restartable))
    return result

def labels_of(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = pod.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    return labels if isinstance(labels, Mapping) else {}


def annotations_of(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = pod.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    return annotations if isinstance(annotations, Mapping) else {}


#: How a family turns one container's keys into a request (None: they ask for no GPU).
Parser: TypeAlias = Callable[["ContainerResources", "DialectConfig"], ContainerRequest | None]


@dataclass(frozen=True)
class Source:
    """One family of container keys and the parser that turns them into a request."""

    dialect: Dialect
    keys: tuple[str, ...]
    parse: Parser
