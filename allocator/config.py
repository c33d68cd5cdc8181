"""Allocator configuration: one frozen value, read from ``TESSERA_*`` environment variables.

``tessera allocator`` maps its flags onto the same variables, so the CLI and a bare gunicorn
target (``allocator.app:create_app()``) read configuration the same way.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from allocator import agents
from allocator.core import AllocatorConfig
from allocator.policies import DEFAULT_POLICY, REGISTRY
from tessera.dialects import ConfigError, DialectConfig

ENV_VARS: Final = {
    "TESSERA_DOMAIN": "vocabulary domain of canonical keys (default elasticgpu.io)",
    "TESSERA_DIALECTS": "request dialects read from pods without the canonical annotation "
    "(as the webhook's)",
    "TESSERA_ALIYUN_MEMORY_UNIT": "unit of aliyun.com/gpu-mem and of the gpushare agent: "
    "GiB (default) or MiB",
    "TESSERA_NANO_GPU_MEMORY_UNIT": "unit of nano-gpu.io/gpu-memory: GiB (default) or MiB",
    "TESSERA_POLICY": f"cluster default placement policy (default {DEFAULT_POLICY}; "
    f"known: {', '.join(sorted(REGISTRY))})",
    "TESSERA_AGENT_DIALECTS": "node-agent dialects written at bind, comma-separated "
    f"(default elastic; known: {', '.join(agents.DIALECTS)})",
    "TESSERA_SEED": "seed of the random policy (default 0)",
    "TESSERA_ALLOCATOR_URL_PREFIX": "URL prefix of the extender verbs (default /scheduler)",
    "TESSERA_ALLOCATOR_HOST": "address to listen on (default 0.0.0.0)",
    "TESSERA_ALLOCATOR_PORT": "port to listen on (default 8080, or 8443 with TLS)",
    "TESSERA_ALLOCATOR_TLS_CERT": "PEM serving certificate file (optional; HTTPS when set)",
    "TESSERA_ALLOCATOR_TLS_KEY": "PEM private key file",
    "TESSERA_ALLOCATOR_TLS_CLIENT_CA": "PEM CA file; when set, clients (kube-scheduler) must "
    "present a cert it signed",
    "TESSERA_ALLOCATOR_THREADS": "request threads of the single worker (default 16)",
    "TESSERA_ALLOCATOR_MAX_BODY_BYTES": "largest request body accepted (default 8388608)",
    "TESSERA_KUBECONFIG": "kubeconfig file (default: in-cluster config, then KUBECONFIG)",
    "TESSERA_LEADER_ELECTION": "'true' (default) to elect a leader through a Lease",
    "TESSERA_LEASE_NAME": "Lease name (default tessera-allocator)",
    "TESSERA_LEASE_NAMESPACE": "Lease namespace (default: POD_NAMESPACE, else tessera-system)",
    "TESSERA_IDENTITY": "this replica's identity in the Lease (default: hostname)",
    "TESSERA_LOG_LEVEL": "DEBUG, INFO (default), WARNING or ERROR",
}

#: ExtenderArgs with NodeNames for 5,000 nodes is ~100 KiB plus the pod; 8 MiB is far above
#: anything kube-scheduler sends (even without nodeCacheCapable) and bounds a hostile body.
DEFAULT_MAX_BODY_BYTES: Final = 8 * 1024 * 1024
_LOG_LEVELS: Final = ("DEBUG", "INFO", "WARNING", "ERROR")
_NAME: Final = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_TRUE: Final = ("1", "true", "yes", "on")
_FALSE: Final = ("0", "false", "no", "off")


@dataclass(frozen=True)
class Settings:
    core: AllocatorConfig = field(default_factory=AllocatorConfig)
    url_prefix: str = "/scheduler"
    host: str = "0.0.0.0"
    port: int = 8080
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_client_ca: str | None = None
    threads: int = 16
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    kubeconfig: str | None = None
    leader_election: bool = True
    lease_name: str = "tessera-allocator"
    lease_namespace: str = "tessera-system"
    identity: str = "tessera-allocator"
    log_level: str = "INFO"

    @property
    def bind(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read and validate; a :class:`ConfigError` names every problem at once."""
        env = os.environ if env is None else env
        problems: list[str] = []
        try:
            dialects = DialectConfig.from_env(env)
        except ConfigError as exc:
            problems.append(str(exc))
            dialects = DialectConfig()

        def text(name: str) -> str | None:
            return env.get(name, "").strip() or None

        def integer(name: str, default: int, low: int, high: int) -> int:
            raw = text(name)
            if raw is None:
                return default
            if not raw.isdigit() or not low <= int(raw) <= high:
                problems.append(f"{name}={raw!r} must be a whole number {low}-{high}")
                return default
            return int(raw)

        def flag(name: str, default: bool) -> bool:
            raw = (text(name) or "").lower()
            if not raw:
                return default
            if raw not in _TRUE + _FALSE:
                problems.append(f"{name}={raw!r} must be true or false")
                return default
            return raw in _TRUE

        policy = text("TESSERA_POLICY") or DEFAULT_POLICY
        if policy not in REGISTRY:
            problems.append(f"TESSERA_POLICY={policy!r} is not one of "
                            f"{', '.join(sorted(REGISTRY))}")
            policy = DEFAULT_POLICY
        agent_raw = text("TESSERA_AGENT_DIALECTS") or agents.ELASTIC
        agent_dialects = tuple(d.strip() for d in agent_raw.split(",") if d.strip())
        unknown = [d for d in agent_dialects if d not in agents.DIALECTS]
        if unknown or not agent_dialects:
            problems.append(f"TESSERA_AGENT_DIALECTS={agent_raw!r}: choose from "
                            f"{', '.join(agents.DIALECTS)}")
            agent_dialects = (agents.ELASTIC,)
        prefix = "/" + (text("TESSERA_ALLOCATOR_URL_PREFIX") or "/scheduler").strip("/")
        if not re.match(r"^/[A-Za-z0-9._~/-]*$", prefix):
            problems.append(f"TESSERA_ALLOCATOR_URL_PREFIX={prefix!r} is not a URL path")
        lease_name = text("TESSERA_LEASE_NAME") or "tessera-allocator"
        lease_ns = (text("TESSERA_LEASE_NAMESPACE") or text("POD_NAMESPACE")
                    or "tessera-system")
        for name, value in (("TESSERA_LEASE_NAME", lease_name),
                            ("TESSERA_LEASE_NAMESPACE", lease_ns)):
            if not _NAME.match(value):
                problems.append(f"{name}={value!r} is not a valid object name")
        kubeconfig = text("TESSERA_KUBECONFIG")
        if kubeconfig and not os.path.isfile(kubeconfig):
            problems.append(f"TESSERA_KUBECONFIG file {kubeconfig!r} does not exist")
        tls_cert, tls_key = text("TESSERA_ALLOCATOR_TLS_CERT"), text("TESSERA_ALLOCATOR_TLS_KEY")
        tls_ca = text("TESSERA_ALLOCATOR_TLS_CLIENT_CA")
        if bool(tls_cert) != bool(tls_key):
            problems.append("TLS needs both TESSERA_ALLOCATOR_TLS_CERT and _TLS_KEY")
        if tls_ca and not tls_cert:
            problems.append("mutual TLS (TESSERA_ALLOCATOR_TLS_CLIENT_CA) needs a serving cert")
        for label, path in (("certificate", tls_cert), ("key", tls_key), ("client CA", tls_ca)):
            if path and not os.path.isfile(path):
                problems.append(f"TLS {label} file {path!r} does not exist")
        log_level = (text("TESSERA_LOG_LEVEL") or "INFO").upper()
        if log_level not in _LOG_LEVELS:
            problems.append(f"TESSERA_LOG_LEVEL={log_level!r} must be one of "
                            f"{', '.join(_LOG_LEVELS)}")
        settings = cls(
            core=AllocatorConfig(
                dialects=dialects,
                default_policy=policy,
                agent_dialects=agent_dialects,
                seed=integer("TESSERA_SEED", 0, 0, 2**63 - 1),
            ),
            url_prefix="" if prefix == "/" else prefix,
            host=text("TESSERA_ALLOCATOR_HOST") or "0.0.0.0",
            port=integer("TESSERA_ALLOCATOR_PORT", 8443 if tls_cert else 8080, 1, 65535),
            tls_cert=tls_cert,
            tls_key=tls_key,
            tls_client_ca=tls_ca,
            threads=integer("TESSERA_ALLOCATOR_THREADS", 16, 1, 256),
            max_body_bytes=integer("TESSERA_ALLOCATOR_MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES,
                                   1024, 256 * 1024 * 1024),
            kubeconfig=kubeconfig,
            leader_election=flag("TESSERA_LEADER_ELECTION", True),
            lease_name=lease_name,
            lease_namespace=lease_ns,
            identity=text("TESSERA_IDENTITY") or socket.gethostname(),
            log_level=log_level,
        )
        if problems:
            raise ConfigError("invalid allocator configuration: " + "; ".join(problems))
        return settings
