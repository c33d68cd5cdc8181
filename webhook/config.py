"""Webhook configuration: one frozen value, read from ``TESSERA_*`` environment variables.

``tessera webhook`` maps its flags onto the same variables, so the CLI and a bare gunicorn
target (``webhook.app:create_app()``) read configuration the same way.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from tessera.dialects import DialectConfig
from tessera.serving import DIALECT_ENV_HELP, OBJECT_NAME, EnvReader, Listener, ServingConfig
from tessera.vocabulary import ConfigError
from webhook.hami_extras import CORE_POLICIES, HamiAdmission
from webhook.mutation import MutationConfig

#: A pod AdmissionReview is at most about twice the object (UPDATE carries oldObject), and
#: objects are capped at 1.5 MiB by etcd.
DEFAULT_MAX_BODY_BYTES: Final = 4 * 1024 * 1024

#: The listener: ``TESSERA_WEBHOOK_HOST``, ``_PORT``, ``_TLS_*``, ``_WORKERS``, ``_THREADS``.
LISTENER: Final = Listener("TESSERA_WEBHOOK", port=8443, threads=4, workers=2)

#: Every variable the webhook reads, with its meaning (the CLI help is built from this).
ENV_VARS: Final = {
    **DIALECT_ENV_HELP,
    "TESSERA_SCHEDULER_NAME": "schedulerName to set on GPU pods (default: leave unchanged)",
    "TESSERA_GENIUS_PRIORITY_LEVELS": "N > 0: a GPU pod's genius/priority label (clamped to "
    "0..N) becomes PriorityClass tessera-genius-priority-<level> (default 0: off)",
    "TESSERA_HAMI_GPU_CORE_POLICY": "agent profile hami: HAMi's devices.nvidia.gpuCorePolicy "
    f"({', '.join(CORE_POLICIES)}); not default: GPU_CORE_UTILIZATION_POLICY on every container "
    "of a GPU pod, as HAMi's webhook (default: default)",
    "TESSERA_HAMI_RUNTIME_CLASS": "agent profile hami: HAMi's devicePlugin.runtimeClassName, "
    "set on GPU pods that name none (default: none)",
    "TESSERA_HAMI_OVERWRITE_ENV": "agent profile hami: HAMi's scheduler.overwriteEnv; true: "
    "NVIDIA_VISIBLE_DEVICES=none on every container of a GPU pod that asks for no GPU (pods "
    "without any GPU key are not sent to the webhook) (default: false)",
    "TESSERA_WEBHOOK_INSECURE_HTTP": "'true' to serve plain HTTP (local development only)",
    "TESSERA_WEBHOOK_MAX_BODY_BYTES": "largest AdmissionReview accepted "
    f"(default {DEFAULT_MAX_BODY_BYTES})",
    **LISTENER.env_help(),
}


@dataclass(frozen=True)
class WebhookConfig:
    #: What the pure rewrite reads (dialects, schedulerName).
    mutation: MutationConfig = field(default_factory=MutationConfig)
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    serving: ServingConfig = field(default_factory=LISTENER.defaults)
    insecure_http: bool = False

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> WebhookConfig:
        """Read and validate; a :class:`ConfigError` names every problem at once."""
        read = EnvReader(os.environ if env is None else env)
        dialects = read.collect(DialectConfig.from_env, DialectConfig())
        scheduler_name = read.text("TESSERA_SCHEDULER_NAME")
        if scheduler_name is not None and not OBJECT_NAME.match(scheduler_name):
            read.problem(
                f"TESSERA_SCHEDULER_NAME={scheduler_name!r} is not a valid scheduler name "
                f"(lowercase DNS subdomain, e.g. tessera-scheduler)"
            )
        hami = _hami_admission(read, dialects)
        config = cls(
            mutation=MutationConfig(dialects, scheduler_name, read.integer(
                "TESSERA_GENIUS_PRIORITY_LEVELS", 0, 0, 1000), hami),
            max_body_bytes=read.integer(
                "TESSERA_WEBHOOK_MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES, 1024, 64 * 1024 * 1024
            ),
            serving=read.listener(LISTENER),
            insecure_http=read.flag("TESSERA_WEBHOOK_INSECURE_HTTP", False),
        )
        read.check("invalid webhook configuration")
        return config

    def check_serving(self) -> None:
        """What serving needs beyond a valid config: TLS material that exists."""
        serving = self.serving
        problems: list[str] = []
        if self.insecure_http:
            if serving.tls_cert or serving.tls_key:
                problems.append("TLS files given together with insecure HTTP; choose one")
        else:
            if not (serving.tls_cert and serving.tls_key):
                problems.append(
                    "TLS is required (the API server calls webhooks only over HTTPS): set "
                    "--tls-cert/--tls-key (TESSERA_WEBHOOK_TLS_CERT/_KEY), or --insecure-http "
                    "for local development"
                )
            problems += serving.missing_tls_files()
        if problems:
            raise ConfigError("cannot serve the webhook: " + "; ".join(problems))


def _hami_admission(read: EnvReader, dialects: DialectConfig) -> HamiAdmission:
    policy = read.text("TESSERA_HAMI_GPU_CORE_POLICY") or "default"
    runtime_class = read.text("TESSERA_HAMI_RUNTIME_CLASS") or ""
    if runtime_class and not OBJECT_NAME.match(runtime_class):
        read.problem(f"TESSERA_HAMI_RUNTIME_CLASS={runtime_class!r} is not a valid "
                     f"RuntimeClass name (lowercase DNS subdomain, e.g. nvidia)")
        runtime_class = ""
    if policy not in CORE_POLICIES:
        read.problem(f"TESSERA_HAMI_GPU_CORE_POLICY={policy!r} is not one of "
                     f"{', '.join(CORE_POLICIES)}")
        policy = "default"
    settings = HamiAdmission(policy, runtime_class,
                             read.flag("TESSERA_HAMI_OVERWRITE_ENV", False))
    if problem := settings.problem(dialects.agent_profile):
        read.problem("TESSERA_HAMI_GPU_CORE_POLICY / TESSERA_HAMI_RUNTIME_CLASS / "
                     f"TESSERA_HAMI_OVERWRITE_ENV: {problem}")
        return HamiAdmission()
    return settings
