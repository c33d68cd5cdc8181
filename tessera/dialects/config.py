"""Which dialects are read, in which units, for which node agent (:class:`DialectConfig`), and
its reading from the environment both services share."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Final

from tessera.agent_profiles import (
    DEFAULT_PROFILE,
    HAMI_AGENT_ENV,
    MIB_PER_GIB,
    PROFILE_ENV,
    AgentProfile,
    NodeAgent,
    hami_agent_problem,
)
from tessera.dialects import families
from tessera.dialects.base import DEFAULT_DIALECTS, MEMORY_UNITS, Dialect, Source, unique
from tessera.dialects.elastic import ELASTIC_DOMAINS
from tessera.dialects.genius import GENIUS_LABELS
from tessera.dialects.kai import KAI_ANNOTATIONS
from tessera.vocabulary import DEFAULT_DOMAIN, ConfigError, Vocabulary


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
        return unique((self.vocabulary.domain, *ELASTIC_DOMAINS))

    @cached_property
    def sources(self) -> tuple[Source, ...]:
        """Container-level key families read under this configuration."""
        return tuple(s for s in families.sources(self) if s.dialect in self.enabled)

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
