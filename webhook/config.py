"""Webhook configuration: one frozen value, read from ``TESSERA_*`` environment variables.

``tessera webhook`` maps its flags onto the same variables, so the CLI and a bare gunicorn
target (``webhook.app:create_app()``) read configuration the same way.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from tessera.dialects import ConfigError, DialectConfig

#: Every variable the webhook reads, with its meaning (the CLI help is built from this).
ENV_VARS: Final = {
    "TESSERA_DOMAIN": "vocabulary domain of canonical keys (default elasticgpu.io)",
    "TESSERA_DIALECTS": "comma-separated dialects to normalise "
    "(default elastic,percent,fraction,nano-gpu,aliyun,genius; add hami to opt in)",
    "TESSERA_ALIYUN_MEMORY_UNIT": "unit of aliyun.com/gpu-mem: GiB (default) or MiB",
    "TESSERA_NANO_GPU_MEMORY_UNIT": "unit of nano-gpu.io/gpu-memory: GiB (default) or MiB",
    "TESSERA_SCHEDULER_NAME": "schedulerName to set on GPU pods (default: leave unchanged)",
    "TESSERA_WEBHOOK_HOST": "address to listen on (default 0.0.0.0)",
    "TESSERA_WEBHOOK_PORT": "port to listen on (default 8443)",
    "TESSERA_WEBHOOK_TLS_CERT": "PEM serving certificate (chain) file",
    "TESSERA_WEBHOOK_TLS_KEY": "PEM private key file",
    "TESSERA_WEBHOOK_TLS_CLIENT_CA": "PEM CA file; when set, clients must present a cert it signed",
    "TESSERA_WEBHOOK_INSECURE_HTTP": "'true' to serve plain HTTP (local development only)",
    "TESSERA_WEBHOOK_MAX_BODY_BYTES": "largest AdmissionReview accepted (default 4194304)",
    "TESSERA_WEBHOOK_WORKERS": "gunicorn worker processes (default 2)",
    "TESSERA_WEBHOOK_THREADS": "threads per worker (default 4)",
    "TESSERA_LOG_LEVEL": "DEBUG, INFO (default), WARNING or ERROR",
}

#: A pod AdmissionReview is at most about twice the object (UPDATE carries oldObject), and
#: objects are capped at 1.5 MiB by etcd.
DEFAULT_MAX_BODY_BYTES: Final = 4 * 1024 * 1024
_LOG_LEVELS: Final = ("DEBUG", "INFO", "WARNING", "ERROR")
_SCHEDULER_NAME: Final = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_TRUE: Final = ("1", "true", "yes", "on")
_FALSE: Final = ("", "0", "false", "no", "off")


@dataclass(frozen=True)
class WebhookConfig:
    dialects: DialectConfig = field(default_factory=DialectConfig)
    #: schedulerName written on GPU pods; None leaves the pod's own.
    scheduler_name: str | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    host: str = "0.0.0.0"
    port: int = 8443
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_client_ca: str | None = None
    insecure_http: bool = False
    workers: int = 2
    threads: int = 4
    log_level: str = "INFO"

    @property
    def bind(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> WebhookConfig:
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

        scheduler_name = text("TESSERA_SCHEDULER_NAME")
        if scheduler_name is not None and not _SCHEDULER_NAME.match(scheduler_name):
            problems.append(
                f"TESSERA_SCHEDULER_NAME={scheduler_name!r} is not a valid scheduler name "
                f"(lowercase DNS subdomain, e.g. tessera-scheduler)"
            )
        insecure_raw = (text("TESSERA_WEBHOOK_INSECURE_HTTP") or "").lower()
        if insecure_raw not in _TRUE + _FALSE:
            problems.append(f"TESSERA_WEBHOOK_INSECURE_HTTP={insecure_raw!r} must be true or false")
        log_level = (text("TESSERA_LOG_LEVEL") or "INFO").upper()
        if log_level not in _LOG_LEVELS:
            problems.append(
                f"TESSERA_LOG_LEVEL={log_level!r} must be one of {', '.join(_LOG_LEVELS)}"
            )
        config = cls(
            dialects=dialects,
            scheduler_name=scheduler_name,
            max_body_bytes=integer(
                "TESSERA_WEBHOOK_MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES, 1024, 64 * 1024 * 1024
            ),
            host=text("TESSERA_WEBHOOK_HOST") or "0.0.0.0",
            port=integer("TESSERA_WEBHOOK_PORT", 8443, 1, 65535),
            tls_cert=text("TESSERA_WEBHOOK_TLS_CERT"),
            tls_key=text("TESSERA_WEBHOOK_TLS_KEY"),
            tls_client_ca=text("TESSERA_WEBHOOK_TLS_CLIENT_CA"),
            insecure_http=insecure_raw in _TRUE,
            workers=integer("TESSERA_WEBHOOK_WORKERS", 2, 1, 64),
            threads=integer("TESSERA_WEBHOOK_THREADS", 4, 1, 256),
            log_level=log_level,
        )
        if problems:
            raise ConfigError("invalid webhook configuration: " + "; ".join(problems))
        return config

    def check_serving(self) -> None:
        """What serving needs beyond a valid config: TLS material that exists (checked at start
        so a typo is a clear error, not a crash loop inside gunicorn's worker boot)."""
        problems: list[str] = []
        if self.insecure_http:
            if self.tls_cert or self.tls_key:
                problems.append("TLS files given together with insecure HTTP; choose one")
        else:
            if not (self.tls_cert and self.tls_key):
                problems.append(
                    "TLS is required (the API server calls webhooks only over HTTPS): set "
                    "--tls-cert/--tls-key (TESSERA_WEBHOOK_TLS_CERT/_KEY), or --insecure-http "
                    "for local development"
                )
            for label, path in (
                ("certificate", self.tls_cert),
                ("key", self.tls_key),
                ("client CA", self.tls_client_ca),
            ):
                if path and not os.path.isfile(path):
                    problems.append(f"TLS {label} file {path!r} does not exist")
        if problems:
            raise ConfigError("cannot serve the webhook: " + "; ".join(problems))
