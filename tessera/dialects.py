"""Every way a pod may ask for GPU, normalised into one :class:`PodRequest` (pure).

Used by the webhook at admission and by the allocator for pods that arrived without it
(:func:`read_pod_request`). The dialects, their units and the upstream files they were read
from are listed in docs/dialects.md; the short version:

===========  ========================================================  ========================
dialect      keys (container limits/requests unless noted)             unit
===========  ========================================================  ========================
elastic      ``<domain>/gpu-core``, ``<domain>/gpu-memory`` and the    core: % of a card, 100·k
             same under ``elasticgpu.io`` and ``elasticgpu.com``        = k cards; memory: MiB
percent      ``<domain>/gpu-percent``, ``nano-gpu/gpu-percent``         % of one card (1-100)
fraction     ``<domain>/gpu``                                           cards (0.25 share, 2)
nano-gpu     ``nano-gpu.io/gpu-core``, ``nano-gpu.io/gpu-memory``       as elastic; memory GiB
aliyun       ``aliyun.com/gpu-mem``                                     GiB (configurable)
genius       pod labels ``genius/gpu-number``,                          cards; MiB
             ``genius/gpu-memory-each`` (alias ``genius/gpu-memory``),
             ``genius/gpu-memory-total``, ``genius/gpu-model``
             (alias ``genius/model``)
volcano      ``volcano.sh/vgpu-number``, ``volcano.sh/vgpu-memory``,    vGPUs; MiB; %; %
             ``volcano.sh/vgpu-memory-percentage``,
             ``volcano.sh/vgpu-cores``
gpu-manager  ``tencent.com/vcuda-core``, ``tencent.com/vcuda-memory``   % of a card, 100·k = k
                                                                        cards; 256 MiB blocks
koordinator  ``koordinator.sh/gpu``, ``koordinator.sh/gpu-core``,       % of a card (100·k = k
             ``koordinator.sh/gpu-memory``,                             cards); bytes; %; cards
             ``koordinator.sh/gpu-memory-ratio``,
             ``koordinator.sh/gpu.shared``
hami         ``nvidia.com/gpu``, ``nvidia.com/gpumem``,                 vGPUs; MiB; %; %
(opt-in)     ``nvidia.com/gpumem-percentage``, ``nvidia.com/gpucores``
kai          pod annotations ``gpu-fraction``, ``gpu-memory``,          share of one card; MiB;
(opt-in)     ``gpu-fraction-num-devices``,                              cards; container name
             ``gpu-fraction-container-name``
===========  ========================================================  ========================

Every dialect found in one container must describe the same request; otherwise the pod is
refused with a message naming the container and both keys.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Decimal
from enum import StrEnum
from functools import cached_property
from typing import Any, Final

from tessera.agent_profiles import (
    ALIYUN_MEMORY_KEY,
    DEFAULT_PROFILE,
    HAMI_AGENT_ENV,
    HAMI_RESOURCES,
    MIB_PER_GIB,
    NANO_PERCENT_KEY,
    NVIDIA_GPU_KEY,
    PROFILE_ENV,
    VOLCANO_RESOURCES,
    AgentProfile,
    NodeAgent,
    VgpuResources,
    hami_agent_problem,
)
from tessera.hami_annotations import hami_policy
from tessera.quantity import QuantityError, parse_quantity
from tessera.vocabulary import (
    DEFAULT_DOMAIN,
    WHOLE_CARD_PERCENT,
    CodecError,
    ConfigError,
    ContainerRequest,
    PodRequest,
    RequestError,
    Vocabulary,
    decode_request,
)


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

#: Domains whose elastic keys are always read (upstream name drift: elastic-gpu-scheduler's
#: README and its agent use ``elasticgpu.io``; some of its manifests say ``elasticgpu.com``).
ELASTIC_DOMAINS: Final = (DEFAULT_DOMAIN, "elasticgpu.com")

BYTES_PER_MIB: Final = 1024 * 1024
#: Units a memory dialect may be configured with (names as Aliyun's ``--memory-unit`` flag).
MEMORY_UNITS: Final = {"MiB": 1, "GiB": MIB_PER_GIB}
#: Sanity bound: more than 16 TiB on one card is a typo, not a request.
MAX_MEMORY_MIB: Final = 16 * 1024 * 1024
#: Sanity bound on whole cards per container.
MAX_CARDS: Final = 1024

# nano-gpu 0.3 (percent-only). Source: elastic-ai/elastic-gpu-scheduler pkg/types/types.go
# (ResourceGPUPercent = "nano-gpu/gpu-percent", GPUPercentEachCard = 100) and
# elastic-ai/elastic-gpu-agent pkg/common/const.go.
# (NANO_PERCENT_KEY: tessera.agent_profiles, the resource nano-gpu-agent registers.)
# Older nano-gpu (core + memory). Source: nano-gpu-scheduler pkg/types/types.go
# (ResourceGPUCore = "nano-gpu.io/gpu-core", ResourceGPUMemory = "nano-gpu.io/gpu-memory",
# GPUCoreEachCard = 100) and its README example (gpu-core "20" + gpu-memory "1").
NANO_CORE_KEY: Final = "nano-gpu.io/gpu-core"
NANO_MEMORY_KEY: Final = "nano-gpu.io/gpu-memory"
# ALIYUN_MEMORY_KEY (tessera.agent_profiles): AliyunContainerService/gpushare-device-plugin
# pkg/gpu/nvidia/const.go; unit from cmd/nvidia/main.go (--memory-unit, default GiB).
# NVIDIA_GPU_KEY (tessera.agent_profiles): NVIDIA's whole-GPU resource, which KAI refuses next
# to a fraction (and Koordinator next to its own keys).
# Source: Project-HAMi/HAMi v2.10.0 pkg/device/nvidia/device.go (NvidiaConfig resource names,
# and GenerateResourceRequests: limits first, then requests; gpumem MiB; percentages of one
# card; defaultExclusiveCoreIfNeeded: a count without share keys is the whole card).
HAMI_KEYS: Final = HAMI_RESOURCES
# Volcano vGPU (HAMi's request model under Volcano's names). Source: volcano-sh/volcano v1.15.1
# pkg/scheduler/api/devices/config/vgpu.go (the four names) and pkg/scheduler/api/devices/util.go
# ExtractResourceRequest (a count, MiB, % of memory, % of compute; a memory key without a count
# means one vGPU). Memory is MiB: Project-HAMi/volcano-vgpu-device-plugin v1.12.0
# pkg/plugin/register.go registers each card's memory as total bytes / (1024*1024).
VOLCANO_KEYS: Final = VOLCANO_RESOURCES
# tkestack gpu-manager. Source: tkestack/gpu-manager v1.1.5 pkg/types/types.go (VCoreAnnotation,
# VMemoryAnnotation, MemoryBlockSize = 268435456 bytes) and
# pkg/services/allocator/nvidia/allocator.go allocateOne (rules, see _gpu_manager).
VCUDA_CORE_KEY: Final = "tencent.com/vcuda-core"
VCUDA_MEMORY_KEY: Final = "tencent.com/vcuda-memory"
VCUDA_MEMORY_BLOCK_MIB: Final = 256
# Koordinator. Source: koordinator-sh/koordinator v1.8.0 apis/extension/device_share.go
# (resource names) and pkg/scheduler/plugins/deviceshare/utils.go (combinations, see
# _koordinator). gpu-memory is bytes (docs/proposals/scheduling/
# 20220629-fine-grained-device-scheduling.md: "the memory capacity of the GPU in bytes").
KOORD_GPU_KEY: Final = "koordinator.sh/gpu"
KOORD_SHARED_KEY: Final = "koordinator.sh/gpu.shared"
KOORD_CORE_KEY: Final = "koordinator.sh/gpu-core"
KOORD_MEMORY_KEY: Final = "koordinator.sh/gpu-memory"
KOORD_RATIO_KEY: Final = "koordinator.sh/gpu-memory-ratio"
KOORD_KEYS: Final = (KOORD_GPU_KEY, KOORD_SHARED_KEY, KOORD_CORE_KEY, KOORD_MEMORY_KEY,
                     KOORD_RATIO_KEY)
# NVIDIA KAI-Scheduler pod annotations (no prefix). Source: NVIDIA/KAI-Scheduler v0.13.0
# pkg/common/constants/constants.go; rules in
# pkg/binder/plugins/gpusharing/gpu-request/gpu_request_validator.go (see _kai).
KAI_FRACTION_ANNOTATION: Final = "gpu-fraction"
KAI_MEMORY_ANNOTATION: Final = "gpu-memory"
KAI_DEVICES_ANNOTATION: Final = "gpu-fraction-num-devices"
KAI_CONTAINER_ANNOTATION: Final = "gpu-fraction-container-name"
#: The KAI annotations that make a pod a GPU pod (or a refused one): the container name alone
#: asks for nothing (KAI's RequestsGPUFraction reads fraction and memory only).
KAI_ANNOTATIONS: Final = (KAI_FRACTION_ANNOTATION, KAI_MEMORY_ANNOTATION, KAI_DEVICES_ANNOTATION)
# Genius pod labels. Source: the Genius scheduler-framework plugin, pkg/filter (PodFitsGPUNumber,
# PodFitsMemoryEach, PodFitsMemoryTotal, PodFitsModel). Memory values are compared with
# ObserverWard's per-card memory metrics, which Genius stores as MemorySizeMB ("in MB").
GENIUS_NUMBER_LABEL: Final = "genius/gpu-number"
GENIUS_MEMORY_EACH_LABEL: Final = "genius/gpu-memory-each"
GENIUS_MEMORY_LABEL: Final = "genius/gpu-memory"  # the name CONTRACTS.md uses; alias of -each
GENIUS_MEMORY_TOTAL_LABEL: Final = "genius/gpu-memory-total"
GENIUS_MODEL_LABEL: Final = "genius/gpu-model"
GENIUS_OLD_MODEL_LABEL: Final = "genius/model"  # an earlier Genius revision's name
GENIUS_LABELS: Final = (
    GENIUS_NUMBER_LABEL,
    GENIUS_MEMORY_EACH_LABEL,
    GENIUS_MEMORY_LABEL,
    GENIUS_MEMORY_TOTAL_LABEL,
    GENIUS_MODEL_LABEL,
    GENIUS_OLD_MODEL_LABEL,
)

_POLICY_NAME: Final = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


def _unique(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


@dataclass(frozen=True)
class DialectConfig:
    vocabulary: Vocabulary = field(default_factory=Vocabulary)
    #: MiB per unit of ``aliyun.com/gpu-mem`` (GiB by default, as the Aliyun device plugin).
    aliyun_memory_unit_mib: int = MIB_PER_GIB
    #: MiB per unit of ``nano-gpu.io/gpu-memory`` (GiB by default; see docs/dialects.md).
    nano_gpu_memory_unit_mib: int = MIB_PER_GIB
    #: Dialects the webhook rewrites; keys of other dialects are left untouched. The agent
    #: profile's own dialect is always added: a shaped pod must read back as itself.
    enabled: frozenset[Dialect] = DEFAULT_DIALECTS
    #: The node agent the cluster runs: the shape the webhook writes, what it refuses.
    agent_profile: AgentProfile = DEFAULT_PROFILE
    #: With the hami profile, an older HAMi release
    #: (:data:`tessera.agent_profiles.HAMI_AGENTS`); "" for the current one.
    hami_agent: str = ""

    def __post_init__(self) -> None:
        if problem := hami_agent_problem(self.agent_profile, self.hami_agent):
            raise ConfigError(problem)
        for name in ("aliyun_memory_unit_mib", "nano_gpu_memory_unit_mib"):
            if getattr(self, name) not in MEMORY_UNITS.values():
                raise ConfigError(
                    f"{name} must be 1 (MiB) or 1024 (GiB), got {getattr(self, name)}"
                )
        own = PROFILE_DIALECT[self.agent_profile]
        if own not in self.enabled:
            # Normalising a frozen value once, at construction.
            object.__setattr__(self, "enabled", self.enabled | {own})

    @property
    def agent(self) -> NodeAgent:
        """The agent profile with the vocabulary and units it shapes pods with."""
        return NodeAgent(self.agent_profile, self.vocabulary, self.aliyun_memory_unit_mib,
                         self.hami_agent)

    @property
    def hami(self) -> bool:
        """Whether HAMi's ``nvidia.com/*`` keys are read (opt-in)."""
        return Dialect.HAMI in self.enabled

    @cached_property
    def elastic_domains(self) -> tuple[str, ...]:
        return _unique((self.vocabulary.domain, *ELASTIC_DOMAINS))

    @cached_property
    def sources(self) -> tuple[_Source, ...]:
        """Container-level key families read under this configuration."""
        return tuple(s for s in _sources(self) if s.dialect in self.enabled)

    @cached_property
    def resource_keys(self) -> frozenset[str]:
        """Every container resource key some enabled dialect reads (and the webhook removes)."""
        return frozenset(k for s in self.sources for k in s.keys)

    @cached_property
    def label_keys(self) -> frozenset[str]:
        """Pod labels that make a pod a GPU pod under this configuration (Genius)."""
        return frozenset(GENIUS_LABELS) if Dialect.GENIUS in self.enabled else frozenset()

    @cached_property
    def annotation_keys(self) -> frozenset[str]:
        """Pod annotations that make a pod a GPU pod under this configuration (KAI)."""
        return frozenset(KAI_ANNOTATIONS) if Dialect.KAI in self.enabled else frozenset()

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> DialectConfig:
        """Read ``TESSERA_DOMAIN``, ``TESSERA_DIALECTS``, ``TESSERA_AGENT_PROFILE``,
        ``TESSERA_HAMI_AGENT``, ``TESSERA_ALIYUN_MEMORY_UNIT``,
        ``TESSERA_NANO_GPU_MEMORY_UNIT``; raise
        :class:`ConfigError` naming every bad one."""
        problems: list[str] = []
        domain = env.get("TESSERA_DOMAIN", "").strip() or DEFAULT_DOMAIN
        if not _is_dns_subdomain(domain):
            problems.append(f"TESSERA_DOMAIN={domain!r} is not a DNS subdomain like elasticgpu.io")
        enabled = _enabled_from_env(env, problems)
        profile = _profile_from_env(env, problems)
        hami_agent = env.get(HAMI_AGENT_ENV, "").strip()
        if problem := hami_agent_problem(profile, hami_agent):
            problems.append(problem)
        units = {var: _unit_from_env(env, var, problems)
                 for var in ("TESSERA_ALIYUN_MEMORY_UNIT", "TESSERA_NANO_GPU_MEMORY_UNIT")}
        if problem := NodeAgent(profile, Vocabulary(domain)).domain_problem():
            problems.append(problem)
        if problems:
            raise ConfigError("; ".join(problems))
        return cls(
            vocabulary=Vocabulary(domain),
            aliyun_memory_unit_mib=units["TESSERA_ALIYUN_MEMORY_UNIT"],
            nano_gpu_memory_unit_mib=units["TESSERA_NANO_GPU_MEMORY_UNIT"],
            enabled=enabled,
            agent_profile=profile,
            hami_agent=hami_agent,
        )


#: The dialect that reads each agent profile's shape back (so a shaped pod admitted again,
#: or read by the allocator without its annotation, is the same request).
PROFILE_DIALECT: Final[Mapping[AgentProfile, Dialect]] = {
    AgentProfile.ELASTIC: Dialect.ELASTIC,
    AgentProfile.NANO_GPU: Dialect.PERCENT,
    AgentProfile.ALIYUN: Dialect.ALIYUN,
    AgentProfile.HAMI: Dialect.HAMI,
    AgentProfile.VOLCANO_VGPU: Dialect.VOLCANO,
}

#: The allocator's setting that the agent profile replaced (one value per cluster, read by
#: both services, where the allocator alone wrote keys of several agents).
REMOVED_AGENT_ENV: Final = "TESSERA_AGENT_DIALECTS"


def _enabled_from_env(env: Mapping[str, str], problems: list[str]) -> frozenset[Dialect]:
    raw = env.get("TESSERA_DIALECTS", "").strip()
    if not raw:
        return DEFAULT_DIALECTS
    names = [n.strip() for n in raw.split(",") if n.strip()]
    unknown = [n for n in names if n not in {d.value for d in Dialect}]
    if unknown:
        problems.append(
            f"TESSERA_DIALECTS has unknown dialect(s) {unknown}; "
            f"known: {', '.join(d.value for d in Dialect)}"
        )
        return DEFAULT_DIALECTS
    return frozenset(Dialect(n) for n in names)


def _profile_from_env(env: Mapping[str, str], problems: list[str]) -> AgentProfile:
    known = ", ".join(p.value for p in AgentProfile)
    old = env.get(REMOVED_AGENT_ENV, "").strip()
    if old:
        problems.append(
            f"{REMOVED_AGENT_ENV}={old!r} is replaced by {PROFILE_ENV} (--agent-profile), one "
            f"node agent per cluster set alike on the webhook and the allocator: set "
            f"{PROFILE_ENV} to one of {known} and unset {REMOVED_AGENT_ENV}"
        )
    raw = env.get(PROFILE_ENV, "").strip()
    if not raw:
        return DEFAULT_PROFILE
    if raw not in {p.value for p in AgentProfile}:
        problems.append(f"{PROFILE_ENV}={raw!r} is not an agent profile; known: {known}")
        return DEFAULT_PROFILE
    return AgentProfile(raw)


def _unit_from_env(env: Mapping[str, str], var: str, problems: list[str]) -> int:
    raw = env.get(var, "").strip() or "GiB"
    if raw not in MEMORY_UNITS:
        problems.append(f"{var}={raw!r} must be one of {', '.join(MEMORY_UNITS)}")
    return MEMORY_UNITS.get(raw, MIB_PER_GIB)


def _is_dns_subdomain(value: str) -> bool:
    return len(value) <= 253 and re.fullmatch(
        r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*", value
    ) is not None


# ----------------------------------------------------------------------------- reading values


@dataclass(frozen=True)
class _Container:
    """One container's resources as the parsers see them."""

    name: str
    init: bool
    limits: Mapping[str, Any]
    requests: Mapping[str, Any]

    def has(self, key: str) -> bool:
        return key in self.limits or key in self.requests

    def value(self, key: str, *, binary: bool = False) -> Decimal | None:
        """The key's value; limits and requests must agree when both are given. Binary
        suffixes (``Gi``) are refused unless the key is a number of bytes (``binary``)."""
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
                        f"({_unit_hint(key)})"
                    )
                found.append((where, quantity.value))
        if not found:
            return None
        if len(found) == 2 and found[0][1] != found[1][1]:
            raise RequestError(
                f"container {self.name!r}: {key} is {_fmt(found[1][1])} in requests but "
                f"{_fmt(found[0][1])} in limits; set it in limits only, or equal in both"
            )
        return found[0][1]

    def integer(self, key: str, *, low: int, high: int, valid: str) -> int | None:
        value = self.value(key)
        if value is None:
            return None
        if value != value.to_integral_value() or not low <= value <= high:
            bound = f" (at most {high})" if value > high else ""
            raise RequestError(
                f"container {self.name!r}: {key}={_fmt(value)} is invalid; {valid}{bound}"
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
                f"container {self.name!r}: {key}={_fmt(value)} is invalid; GPU memory is a "
                f"number of bytes >= 0 of at most {MAX_MEMORY_MIB // MIB_PER_GIB} GiB, e.g. 4Gi"
            )
        return int((value / BYTES_PER_MIB).to_integral_value(rounding=ROUND_CEILING))


def _fmt(value: Decimal) -> str:
    return format(value.normalize(), "f")


def _unit_hint(key: str) -> str:
    if key.endswith(("gpu-memory", "gpumem")):
        return "a count of MiB or of the dialect's memory unit, e.g. 1024"
    if key == ALIYUN_MEMORY_KEY:
        return "a count of the configured unit, GiB by default, e.g. 5"
    if key == VCUDA_MEMORY_KEY:
        return f"a count of {VCUDA_MEMORY_BLOCK_MIB} MiB blocks, e.g. 16 for 4 GiB"
    return "e.g. 25"


def _containers(pod: Mapping[str, Any]) -> list[_Container]:
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        raise RequestError("pod has no spec object")
    result: list[_Container] = []
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
            result.append(_Container(name, init, limits, requests))
    return result


# ----------------------------------------------------------------------------- dialect parsers

_Parser = Callable[[_Container, DialectConfig], ContainerRequest | None]


@dataclass(frozen=True)
class _Source:
    """One family of container keys and the parser that turns them into a request."""

    dialect: Dialect
    keys: tuple[str, ...]
    parse: _Parser


def _core_memory(
    c: _Container, core_key: str, memory_key: str, memory_unit_mib: int, unit_name: str
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


def _percent(c: _Container, key: str) -> ContainerRequest | None:
    value = c.integer(
        key, low=1, high=WHOLE_CARD_PERCENT,
        valid="a percent of one card is 1-100 (use gpu-core 200 for two whole cards)",
    )
    if value is None:
        return None
    if value == WHOLE_CARD_PERCENT:
        return ContainerRequest(c.name, cards=1, init=c.init)
    return ContainerRequest(c.name, core_percent=value, memory_percent=value, init=c.init)


def _fraction(c: _Container, key: str) -> ContainerRequest | None:
    value = c.value(key)
    if value is None:
        return None
    valid = (
        "below 1 it is a share of one card in hundredths (0.01-0.99, e.g. 0.25); "
        "from 1 it is a whole number of cards (1, 2, ...)"
    )
    if value <= 0:
        raise RequestError(f"container {c.name!r}: {key}={_fmt(value)} is invalid; {valid}")
    if value < 1:
        percent = value * WHOLE_CARD_PERCENT
        if percent != percent.to_integral_value():
            raise RequestError(f"container {c.name!r}: {key}={_fmt(value)} is invalid; {valid}")
        return ContainerRequest(
            c.name, core_percent=int(percent), memory_percent=int(percent), init=c.init
        )
    if value != value.to_integral_value() or value > MAX_CARDS:
        raise RequestError(
            f"container {c.name!r}: {key}={_fmt(value)} is invalid; {valid} "
            f"(a share spread over several cards is not possible)"
        )
    return ContainerRequest(c.name, cards=int(value), init=c.init)


def _aliyun(c: _Container, cfg: DialectConfig) -> ContainerRequest | None:
    unit = cfg.aliyun_memory_unit_mib
    unit_name = "GiB" if unit == MIB_PER_GIB else "MiB"
    value = c.integer(
        ALIYUN_MEMORY_KEY, low=0, high=MAX_MEMORY_MIB // unit,
        valid=f"GPU memory is a whole number of {unit_name} >= 0 (the configured unit)",
    )
    if not value:
        return None
    return ContainerRequest(c.name, memory_mib=value * unit, init=c.init)


def _vgpu(c: _Container, k: VgpuResources) -> ContainerRequest | None:
    """HAMi semantics (pkg/device/nvidia/device.go; Volcano's devices/util.go reads its keys the
    same way): ``count`` n vGPUs, each on its own card; without memory keys a vGPU gets 100% of
    the card's memory (defaultMemory 0); without cores it reserves no compute (defaultCores 0);
    share keys without a count mean one vGPU (defaultGPUNum 1)."""
    count = c.integer(k.count, low=0, high=MAX_CARDS, valid="the number of (v)GPUs is a whole "
                      "number >= 0")
    memory = c.integer(
        k.memory, low=0, high=MAX_MEMORY_MIB, valid="memory is a whole number of MiB >= 0"
    )
    memory_percent = c.integer(
        k.memory_percent, low=1, high=100, valid="a percent of the card's memory is 1-100"
    )
    cores = c.integer(k.cores, low=0, high=100, valid="cores are a percent 0-100")
    share_keys_given = memory is not None or memory_percent is not None or cores is not None
    if count is None:
        if not share_keys_given:
            return None
        count = 1
    if count == 0:
        return None
    if memory and memory_percent is not None:
        # HAMi documents the two as exclusive (CHANGELOG v1.0.1.4: gpumem-percentage "can not
        # be used with nvidia.com/gpumem"); Volcano silently prefers the percentage (vgpu
        # utils.go). Either way one of the two numbers would be ignored.
        raise RequestError(
            f"container {c.name!r}: {k.memory} and {k.memory_percent} cannot be used "
            f"together; keep one of them"
        )
    whole_memory = not memory and memory_percent in (None, 100)
    if whole_memory and cores in (None, 0, 100):
        return ContainerRequest(c.name, cards=count, init=c.init)
    if count > 1:
        raise RequestError(
            f"container {c.name!r}: {k.count}={count} with a share asks for a share on each "
            f"of {count} cards; Tessera places a share on exactly one card: use {k.count}=1, or "
            f"whole cards (no {k.memory}, {k.memory_percent} or {k.cores})"
        )
    if cores == 100:
        raise RequestError(
            f"container {c.name!r}: {k.cores}=100 with a memory share is invalid; a share takes "
            f"1-99% of compute, or drop the memory keys for a whole card"
        )
    if not cores and not memory:
        raise RequestError(
            f"container {c.name!r}: {k.memory_percent}={memory_percent} without {k.cores} "
            f"reserves nothing the scheduler can count; add {k.cores} (1-99) or give memory "
            f"in MiB with {k.memory}"
        )
    return ContainerRequest(
        c.name,
        core_percent=cores or 0,
        memory_mib=memory or 0,
        memory_percent=0 if memory else (memory_percent or 100),
        init=c.init,
    )


def _gpu_manager(c: _Container, _cfg: DialectConfig) -> ContainerRequest | None:
    """tkestack gpu-manager semantics (pkg/services/allocator/nvidia/allocator.go allocateOne):
    core and memory 0 = no GPU ("Zero request"); core > 100 must be a multiple of 100; core >= 100
    is whole cards and the memory request is not looked at (the evaluators get memory 0); below
    100 is a share, and "cores or memory is zero is not permitted in share mode"."""
    core = c.integer(
        VCUDA_CORE_KEY, low=0, high=MAX_CARDS * WHOLE_CARD_PERCENT,
        valid="vcuda-core is a percent of one card: 1-99 for a share, 100·k for k whole cards",
    ) or 0
    blocks = c.integer(
        VCUDA_MEMORY_KEY, low=0, high=MAX_MEMORY_MIB // VCUDA_MEMORY_BLOCK_MIB,
        valid=f"vcuda-memory is a whole number of {VCUDA_MEMORY_BLOCK_MIB} MiB blocks >= 0",
    ) or 0
    if core == 0 and blocks == 0:
        return None
    if core >= WHOLE_CARD_PERCENT:
        if core % WHOLE_CARD_PERCENT:
            raise RequestError(
                f"container {c.name!r}: {VCUDA_CORE_KEY}={core} is invalid; gpu-manager takes "
                f"1-99 for a share of one card and 100·k for k whole cards (100, 200, ...)"
            )
        return ContainerRequest(c.name, cards=core // WHOLE_CARD_PERCENT, init=c.init)
    if core == 0 or blocks == 0:
        missing, given = (
            (VCUDA_CORE_KEY, f"{VCUDA_MEMORY_KEY}={blocks}") if core == 0
            else (VCUDA_MEMORY_KEY, f"{VCUDA_CORE_KEY}={core}")
        )
        raise RequestError(
            f"container {c.name!r}: {given} without {missing} is not a share gpu-manager "
            f"accepts; a share needs both (compute 1-99 and memory in "
            f"{VCUDA_MEMORY_BLOCK_MIB} MiB blocks)"
        )
    return ContainerRequest(
        c.name, core_percent=core, memory_mib=blocks * VCUDA_MEMORY_BLOCK_MIB, init=c.init
    )


#: The key sets Koordinator accepts for a GPU: pkg/scheduler/plugins/deviceshare/utils.go
#: ValidDeviceResourceCombinations (its NVIDIA-card entries; the others are Huawei NPU keys).
_KOORD_COMBINATIONS: Final = frozenset(frozenset(keys) for keys in (
    (KOORD_GPU_KEY,),
    (KOORD_MEMORY_KEY,),
    (KOORD_RATIO_KEY,),
    (KOORD_CORE_KEY, KOORD_MEMORY_KEY),
    (KOORD_CORE_KEY, KOORD_RATIO_KEY),
    (KOORD_SHARED_KEY, KOORD_MEMORY_KEY),
    (KOORD_SHARED_KEY, KOORD_RATIO_KEY),
    (KOORD_SHARED_KEY, KOORD_CORE_KEY, KOORD_MEMORY_KEY),
    (KOORD_SHARED_KEY, KOORD_CORE_KEY, KOORD_RATIO_KEY),
))


def _koordinator(c: _Container, _cfg: DialectConfig) -> ContainerRequest | None:
    """Koordinator semantics, read per container (pkg/scheduler/plugins/deviceshare: utils.go
    ValidateDeviceRequest and ResourceCombinationsMapper, devicehandler_gpu.go
    calcDesiredRequestsAndCountForGPU). Zero values are dropped first (quotav1.RemoveZeros).

    ``gpu`` g is core g and memory ratio g. Without ``gpu.shared`` a core or ratio above 100
    must be a multiple of 100 and the ratio sets the number of cards (ratio/100); with
    ``gpu.shared`` s the request is split over s cards, so core and ratio must be multiples of
    s and at most 100 per card. A ratio without a core is read as the percent form (the same
    share of compute): upstream reserves no compute for it, but a share with only a percent of
    memory has no canonical resource kube-scheduler could route to the allocator.
    """
    percent = "a percent of one card: 1-100, or 100·k for k cards"
    gpu, core, ratio = (
        c.integer(key, low=0, high=MAX_CARDS * WHOLE_CARD_PERCENT, valid=percent) or 0
        for key in (KOORD_GPU_KEY, KOORD_CORE_KEY, KOORD_RATIO_KEY)
    )
    shared = c.integer(
        KOORD_SHARED_KEY, low=0, high=MAX_CARDS,
        valid="the number of cards the request is split over, a whole number >= 1",
    ) or 0
    memory = c.mebibytes(KOORD_MEMORY_KEY) or 0
    values = {KOORD_GPU_KEY: gpu, KOORD_SHARED_KEY: shared, KOORD_CORE_KEY: core,
              KOORD_MEMORY_KEY: memory, KOORD_RATIO_KEY: ratio}
    given = [key for key in KOORD_KEYS if values[key]]
    if not given:
        return None
    where = f"container {c.name!r}"
    written = " + ".join(given)
    _koord_check_combination(c, given, where, written)
    if gpu:
        core = ratio = gpu
    count = _koord_count(where, values, core, ratio, shared)
    card_ratio = ratio // count
    card_core = core // count if core else card_ratio
    if card_core == card_ratio == WHOLE_CARD_PERCENT and not memory:
        return ContainerRequest(c.name, cards=count, init=c.init)
    _koord_check_share(where, written, count, core, card_core, memory)
    return ContainerRequest(
        c.name,
        core_percent=card_core,
        memory_mib=memory,
        memory_percent=0 if memory else card_ratio,
        init=c.init,
    )


def _koord_check_combination(c: _Container, given: Sequence[str], where: str,
                             written: str) -> None:
    if c.has(NVIDIA_GPU_KEY) or frozenset(given) not in _KOORD_COMBINATIONS:
        also = f"{NVIDIA_GPU_KEY} + " if c.has(NVIDIA_GPU_KEY) else ""
        raise RequestError(
            f"{where}: {also}{written} is not a combination Koordinator accepts; write "
            f"{KOORD_GPU_KEY} alone, {KOORD_MEMORY_KEY} or {KOORD_RATIO_KEY} alone, or "
            f"{KOORD_CORE_KEY} with one of those two (each optionally with {KOORD_SHARED_KEY})"
        )


def _koord_count(where: str, values: Mapping[str, int], core: int, ratio: int,
                 shared: int) -> int:
    """The number of cards the request is split over (checking the values split evenly)."""
    if shared:
        for key, value in ((KOORD_CORE_KEY, core), (KOORD_RATIO_KEY, ratio)):
            if value and (value % shared or value // shared > WHOLE_CARD_PERCENT):
                raise RequestError(
                    f"{where}: {key}={value} with {KOORD_SHARED_KEY}={shared} is invalid; it is "
                    f"split evenly over {shared} card(s), so it must be a multiple of {shared} "
                    f"and at most {shared * WHOLE_CARD_PERCENT}"
                )
        return shared
    for key in (KOORD_GPU_KEY, KOORD_CORE_KEY, KOORD_RATIO_KEY):
        value = values[key]
        if value > WHOLE_CARD_PERCENT and value % WHOLE_CARD_PERCENT:
            raise RequestError(
                f"{where}: {key}={value} is invalid; 1-100 is a share of one card, above 100 "
                f"only multiples of 100 (k cards)"
            )
    return ratio // WHOLE_CARD_PERCENT if ratio > WHOLE_CARD_PERCENT else 1


def _koord_check_share(where: str, written: str, count: int, core: int, card_core: int,
                       memory: int) -> None:
    """A share is of one card and takes 1-99% of its compute."""
    if count > 1:
        raise RequestError(
            f"{where}: {written} asks for a share on each of {count} cards; Tessera places a "
            f"share on exactly one card: ask for a share of one card, or for whole cards "
            f"({KOORD_GPU_KEY}={count * WHOLE_CARD_PERCENT})"
        )
    if card_core >= WHOLE_CARD_PERCENT:
        memory_key = KOORD_MEMORY_KEY if memory else KOORD_RATIO_KEY
        how_much = (
            "all of one card's compute but only part of its memory"
            if card_core == WHOLE_CARD_PERCENT
            # Koordinator takes the number of cards from the memory key: the core lands on one.
            else f"more compute than one card has, on the one card {memory_key} describes"
        )
        raise RequestError(
            f"{where}: {KOORD_CORE_KEY}={core} with {memory_key} asks for {how_much}; a share "
            f"takes 1-99% of one card's compute: lower {KOORD_CORE_KEY}, or ask for whole cards "
            f"with {KOORD_GPU_KEY}=100·k"
        )


def _elastic_parser(core: str, memory: str) -> _Parser:
    def parse(c: _Container, _cfg: DialectConfig) -> ContainerRequest | None:
        return _core_memory(c, core, memory, 1, "MiB")

    return parse


def _percent_parser(key: str) -> _Parser:
    def parse(c: _Container, _cfg: DialectConfig) -> ContainerRequest | None:
        return _percent(c, key)

    return parse


def _fraction_parser(key: str) -> _Parser:
    def parse(c: _Container, _cfg: DialectConfig) -> ContainerRequest | None:
        return _fraction(c, key)

    return parse


def _vgpu_parser(keys: VgpuResources) -> _Parser:
    def parse(c: _Container, _cfg: DialectConfig) -> ContainerRequest | None:
        return _vgpu(c, keys)

    return parse


def _nano_gpu(c: _Container, cfg: DialectConfig) -> ContainerRequest | None:
    unit = cfg.nano_gpu_memory_unit_mib
    return _core_memory(
        c, NANO_CORE_KEY, NANO_MEMORY_KEY, unit, "GiB" if unit == MIB_PER_GIB else "MiB"
    )


def _sources(cfg: DialectConfig) -> list[_Source]:
    sources: list[_Source] = []
    for domain in cfg.elastic_domains:
        core, memory = f"{domain}/gpu-core", f"{domain}/gpu-memory"
        percent, fraction = f"{domain}/gpu-percent", f"{domain}/gpu"
        sources += [
            _Source(Dialect.ELASTIC, (core, memory), _elastic_parser(core, memory)),
            _Source(Dialect.PERCENT, (percent,), _percent_parser(percent)),
            _Source(Dialect.FRACTION, (fraction,), _fraction_parser(fraction)),
        ]
    sources += [
        _Source(Dialect.PERCENT, (NANO_PERCENT_KEY,), _percent_parser(NANO_PERCENT_KEY)),
        _Source(Dialect.NANO_GPU, (NANO_CORE_KEY, NANO_MEMORY_KEY), _nano_gpu),
        _Source(Dialect.ALIYUN, (ALIYUN_MEMORY_KEY,), _aliyun),
        _Source(Dialect.VOLCANO, VOLCANO_KEYS.all, _vgpu_parser(VOLCANO_KEYS)),
        _Source(Dialect.GPU_MANAGER, (VCUDA_CORE_KEY, VCUDA_MEMORY_KEY), _gpu_manager),
        _Source(Dialect.KOORDINATOR, KOORD_KEYS, _koordinator),
        _Source(Dialect.HAMI, HAMI_KEYS.all, _vgpu_parser(HAMI_KEYS)),
    ]
    return sources


# ----------------------------------------------------------------------------- pod level


def _merge(
    container: str, found: Sequence[tuple[str, ContainerRequest]]
) -> ContainerRequest | None:
    if not found:
        return None
    first_label, first = found[0]
    for label, other in found[1:]:
        if other != first:
            raise RequestError(
                f"container {container!r}: {first_label} asks for {first.describe()} but "
                f"{label} asks for {other.describe()}; write the request once, in one dialect"
            )
    return first


def _labels(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = pod.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    return labels if isinstance(labels, Mapping) else {}


def _annotations(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = pod.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    return annotations if isinstance(annotations, Mapping) else {}


def _label_int(labels: Mapping[str, Any], key: str, valid: str) -> int | None:
    raw = labels.get(key)
    if raw is None:
        return None
    text = str(raw).strip()
    if not (text.isascii() and text.isdigit()) or len(text) > 9:  # "²".isdigit() is True
        raise RequestError(f"pod label {key}={raw!r} is invalid; {valid}")
    return int(text)


@dataclass(frozen=True)
class _Genius:
    cards: int
    min_card_memory_mib: int
    models: tuple[str, ...]


def _genius(labels: Mapping[str, Any]) -> _Genius | None:
    present = [k for k in GENIUS_LABELS if k in labels]
    if not present:
        return None
    number = _label_int(labels, GENIUS_NUMBER_LABEL, "the number of whole cards, e.g. \"1\"")
    if not number:
        raise RequestError(
            f"pod labels {', '.join(present)} need {GENIUS_NUMBER_LABEL} (whole cards, >= 1)"
        )
    if number > MAX_CARDS:
        raise RequestError(f"pod label {GENIUS_NUMBER_LABEL}={number} is more cards than possible")
    each = 0
    for key in (GENIUS_MEMORY_EACH_LABEL, GENIUS_MEMORY_LABEL):
        value = _label_int(labels, key, "free memory each card must have, in MiB, e.g. \"8000\"")
        each = max(each, value or 0)
    total = _label_int(labels, GENIUS_MEMORY_TOTAL_LABEL, "total memory in MiB, e.g. \"16000\"")
    if total:
        # Genius compares the total with the node's total free memory; with whole cards that
        # nobody else uses the closest per-card form is an even split, rounded up.
        each = max(each, -(-total // number))
    models = _unique(
        str(labels[k]).strip() for k in (GENIUS_MODEL_LABEL, GENIUS_OLD_MODEL_LABEL)
        if k in labels and str(labels[k]).strip()
    )
    return _Genius(number, each, models)


def _split_models(raw: str) -> tuple[str, ...]:
    return _unique(m.strip() for m in re.split(r"[|,]", raw) if m.strip())


def _models(
    annotations: Mapping[str, Any], genius: _Genius | None, vocabulary: Vocabulary
) -> tuple[str, ...]:
    key = vocabulary.model_annotation
    allowed: tuple[str, ...] = ()
    if key in annotations:
        allowed = _split_models(str(annotations[key]))
        if not allowed:
            raise RequestError(
                f"pod annotation {key} is empty; list allowed GPU models separated by '|' or ','"
            )
    if genius and genius.models:
        if not allowed:
            return genius.models
        wanted = {m.lower() for m in genius.models}
        both = tuple(m for m in allowed if m.lower() in wanted)
        if not both:
            raise RequestError(
                f"pod annotation {key}={annotations[key]!r} and label {GENIUS_MODEL_LABEL} "
                f"({', '.join(genius.models)}) allow no model in common"
            )
        return both
    return allowed


def _policy(annotations: Mapping[str, Any], vocabulary: Vocabulary) -> str | None:
    key = vocabulary.policy_annotation
    if key not in annotations:
        return None
    value = str(annotations[key]).strip()
    if not _POLICY_NAME.match(value):
        raise RequestError(
            f"pod annotation {key}={annotations[key]!r} is not a policy name "
            f"(lowercase letters, digits and '-', e.g. binpack)"
        )
    return value


def _mixed_models(annotations: Mapping[str, Any], vocabulary: Vocabulary) -> bool:
    key = vocabulary.mixed_models_annotation
    if key not in annotations:
        return False
    value = str(annotations[key]).strip().lower()
    if value not in ("true", "false"):
        raise RequestError(f"pod annotation {key}={annotations[key]!r} must be \"true\" or "
                           f"\"false\"")
    return value == "true"


#: What Go's strconv.ParseUint(s, 10, 64) accepts, kept to 18 digits (ASCII only: ``"²"`` is
#: a digit to Python's ``isdigit`` but not to Go or ``int``).
_GO_UINT: Final = re.compile(r"[0-9]{1,18}")
#: The decimal forms of Go's strconv.ParseFloat (no hex, inf or NaN; exponent kept small).
_GO_DECIMAL: Final = re.compile(
    r"[+-]?(?:[0-9]{1,18}(?:\.[0-9]{0,18})?|\.[0-9]{1,18})(?:[eE][+-]?[0-9]{1,3})?"
)


def _kai_text(annotations: Mapping[str, Any], key: str) -> str | None:
    if key not in annotations:
        return None
    raw = annotations[key]
    if isinstance(raw, str):
        return raw
    raise RequestError(f"pod annotation {key}={raw!r} must be a string")


def _kai_target(annotations: Mapping[str, Any], containers: Sequence[_Container]) -> _Container:
    """The container a KAI share is for: the one ``gpu-fraction-container-name`` names (an init
    or app container), else the first app container (pkg/binder/common/gpu_access.go
    GetFractionContainerRef)."""
    name = _kai_text(annotations, KAI_CONTAINER_ANNOTATION)
    if name is None:
        first = next((c for c in containers if not c.init), None)
        if first is None:
            raise RequestError("pod has no containers for its KAI GPU share")
        return first
    named = next((c for c in containers if c.name == name), None)
    if named is None:
        raise RequestError(
            f"pod annotation {KAI_CONTAINER_ANNOTATION}={name!r} names no container of this pod "
            f"(it has {', '.join(repr(c.name) for c in containers)})"
        )
    return named


def _kai(
    annotations: Mapping[str, Any], containers: Sequence[_Container]
) -> tuple[str, ContainerRequest] | None:
    """KAI-Scheduler's share annotations as (label, request of the target container).

    Refused as KAI refuses them (gpu_request_validator.go ValidateGpuRequests): a fraction
    outside (0, 1), memory that is not a whole number of MiB > 0, both together, either next to
    an ``nvidia.com/gpu`` limit, a device count without either. KAI's own unit for a fraction is
    a share of the card (its docs/gpu-sharing: half of the card's memory for 0.5; the
    scheduler counts it as 0.5 of the device), which Tessera reads as the percent form: the same
    share of compute and memory.
    """
    if not any(k in annotations for k in KAI_ANNOTATIONS):
        return None
    fraction_text = _kai_text(annotations, KAI_FRACTION_ANNOTATION)
    memory_text = _kai_text(annotations, KAI_MEMORY_ANNOTATION)
    devices_text = _kai_text(annotations, KAI_DEVICES_ANNOTATION)
    target = _kai_target(annotations, containers)
    where = f"container {target.name!r}: pod annotation"
    if fraction_text is None and memory_text is None:
        raise RequestError(
            f"{where} {KAI_DEVICES_ANNOTATION}={devices_text!r} needs {KAI_FRACTION_ANNOTATION} "
            f"or {KAI_MEMORY_ANNOTATION} (the share to take on each card), as in KAI"
        )
    if fraction_text is not None and memory_text is not None:
        raise RequestError(
            f"{where}s {KAI_FRACTION_ANNOTATION} and {KAI_MEMORY_ANNOTATION} cannot be used "
            f"together (KAI refuses both); keep one of them"
        )
    key = KAI_FRACTION_ANNOTATION if fraction_text is not None else KAI_MEMORY_ANNOTATION
    whole = next((c for c in containers if NVIDIA_GPU_KEY in c.limits), None)
    if whole is not None:
        raise RequestError(
            f"container {whole.name!r}: {NVIDIA_GPU_KEY} in limits together with pod annotation "
            f"{key}; KAI refuses a share next to whole GPUs: remove one of them"
        )
    if devices_text is not None:
        _kai_check_devices(where, devices_text)
    label = f"pod annotation {key}"
    if memory_text is not None:
        return label, _kai_memory(where, memory_text, target)
    assert fraction_text is not None  # one of the two is given (checked above)
    return label, _kai_fraction(where, fraction_text, target)


def _kai_check_devices(where: str, devices_text: str) -> None:
    if not _GO_UINT.fullmatch(devices_text) or int(devices_text) == 0:
        raise RequestError(
            f"{where} {KAI_DEVICES_ANNOTATION}={devices_text!r} is invalid; it is a whole "
            f"number of cards >= 1"
        )
    if int(devices_text) > 1:
        raise RequestError(
            f"{where} {KAI_DEVICES_ANNOTATION}={devices_text} asks for a share on each of "
            f"{int(devices_text)} cards; Tessera places a share on exactly one card: remove "
            f"{KAI_DEVICES_ANNOTATION} (or set it to 1)"
        )


def _kai_memory(where: str, memory_text: str, target: _Container) -> ContainerRequest:
    if not _GO_UINT.fullmatch(memory_text) or not 0 < int(memory_text) <= MAX_MEMORY_MIB:
        raise RequestError(
            f"{where} {KAI_MEMORY_ANNOTATION}={memory_text!r} is invalid; it is a whole "
            f"number of MiB from 1 to {MAX_MEMORY_MIB}, e.g. \"2000\""
        )
    return ContainerRequest(target.name, memory_mib=int(memory_text), init=target.init)


def _kai_fraction(where: str, fraction_text: str, target: _Container) -> ContainerRequest:
    valid = (
        "it is a share of one card strictly between 0 and 1 (e.g. \"0.5\"), in hundredths "
        "(Tessera counts shares in whole percents: 0.33, not 0.333)"
    )
    percent = (
        Decimal(fraction_text) * WHOLE_CARD_PERCENT
        if _GO_DECIMAL.fullmatch(fraction_text) else Decimal(-1)
    )
    if not 0 < percent < WHOLE_CARD_PERCENT or percent != percent.to_integral_value():
        raise RequestError(
            f"{where} {KAI_FRACTION_ANNOTATION}={fraction_text!r} is invalid; {valid}"
        )
    share = int(percent)
    return ContainerRequest(
        target.name, core_percent=share, memory_percent=share, init=target.init
    )


def asks_for_gpu(pod: Mapping[str, Any], config: DialectConfig) -> bool:
    """Cheap test: does any container carry a key an enabled dialect reads, or the pod a label
    or annotation one reads (Genius, KAI)? The webhook's matchConditions say the same in CEL
    (webhook/registration.py builds them from the same key sets)."""
    keys = config.resource_keys
    try:
        containers = _containers(pod)
    except RequestError:
        return True  # let parse_pod report it
    for c in containers:
        if not keys.isdisjoint(c.limits) or not keys.isdisjoint(c.requests):
            return True
    return not (
        config.label_keys.isdisjoint(_labels(pod))
        and config.annotation_keys.isdisjoint(_annotations(pod))
    )


def parse_pod(pod: Mapping[str, Any], config: DialectConfig) -> PodRequest | None:
    """The pod's GPU request in any dialect, or None when it asks for no GPU.

    Raises :class:`tessera.vocabulary.RequestError` with a message naming the container, the
    key and what would be valid (several problems are joined with ``"; "``).
    """
    if not isinstance(pod, Mapping):
        raise RequestError("a pod must be a JSON object")
    if not asks_for_gpu(pod, config):
        return None
    containers = _containers(pod)
    annotations = _annotations(pod)
    problems: list[str] = []
    genius = _genius(_labels(pod)) if Dialect.GENIUS in config.enabled else None
    pod_level = _pod_level_requests(annotations, containers, genius, config, problems)
    requests: list[ContainerRequest] = []
    for c in containers:
        try:
            merged = _container_request(c, pod_level, config)
        except RequestError as exc:
            problems.append(str(exc))
            continue
        if merged is not None:
            requests.append(merged)
    try:
        models = _models(annotations, genius, config.vocabulary)
        policy = _policy(annotations, config.vocabulary)
        policy = hami_policy(annotations, config.vocabulary, policy)  # HAMi's, or refused
        mixed_models = _mixed_models(annotations, config.vocabulary)
    except RequestError as exc:
        problems.append(str(exc))
    if problems:
        raise RequestError("; ".join(problems))
    if not requests:
        return None
    return PodRequest(
        containers=tuple(requests),
        models=models,
        min_card_memory_mib=genius.min_card_memory_mib if genius else 0,
        policy=policy,
        mixed_models=mixed_models,
    )


def _pod_level_requests(
    annotations: Mapping[str, Any], containers: Sequence[_Container], genius: _Genius | None,
    config: DialectConfig, problems: list[str],
) -> list[tuple[str, ContainerRequest]]:
    """Requests written on the pod rather than a container, as (label, request of one
    container): Genius labels (for the pod's first app container) and KAI's annotations. A
    KAI problem is added to ``problems``."""
    pod_level: list[tuple[str, ContainerRequest]] = []
    genius_target = next((c.name for c in containers if not c.init), None)
    if genius is not None and genius_target is not None:
        pod_level.append(("pod label " + GENIUS_NUMBER_LABEL,
                          ContainerRequest(genius_target, cards=genius.cards)))
    if Dialect.KAI in config.enabled:
        try:
            if (kai := _kai(annotations, containers)) is not None:
                pod_level.append(kai)
        except RequestError as exc:
            problems.append(str(exc))
    return pod_level


def _container_request(c: _Container, pod_level: Sequence[tuple[str, ContainerRequest]],
                       config: DialectConfig) -> ContainerRequest | None:
    """The one request every dialect found for container ``c`` describes (or None)."""
    found: list[tuple[str, ContainerRequest]] = []
    for source in config.sources:
        present = [k for k in source.keys if c.has(k)]
        if present and (parsed := source.parse(c, config)) is not None:
            found.append((" + ".join(present), parsed))
    found += [(label, r) for label, r in pod_level if r.name == c.name]
    return _merge(c.name, found)


def read_pod_request(pod: Mapping[str, Any], config: DialectConfig) -> PodRequest | None:
    """The allocator's view: the canonical annotation when present, else :func:`parse_pod`;
    either one as placed for the cluster's node agent, which must be able to run it
    (:meth:`tessera.agent_profiles.NodeAgent.admit`: the webhook already did, but a pod may
    have been admitted without it, or by an earlier configuration).

    A present but undecodable annotation is a :class:`RequestError` (never silently re-parsed:
    the annotation is what the webhook promised the pod would get).
    """
    key = config.vocabulary.request_annotation
    annotations = _annotations(pod)
    if key in annotations:
        try:
            request: PodRequest | None = decode_request(str(annotations[key]))
        except CodecError as exc:
            raise RequestError(f"pod annotation {key}: {exc}") from exc
    else:
        request = parse_pod(pod, config)
    return None if request is None else config.agent.admit(request)
