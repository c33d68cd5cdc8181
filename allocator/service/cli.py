"""``tessera allocator``: validate configuration, then serve the extender with granian.

Flags override the ``TESSERA_*`` environment variables of the same meaning (see
:mod:`allocator.service.config`). granian runs **one worker process** with request threads: the
cluster picture (card reservations) lives in that process's memory, and two worker processes
would each hold their own copy and hand the same card out twice. Threads give concurrency
(kube-scheduler binds many pods at once) while the state's locks keep one truth; connections,
TLS and HTTP are granian's (Rust), request bodies arrive complete or get 408, and renewed
certificate files are served by a new worker of the same process
(:mod:`tessera.serving.granian.server`). Serving without client certificates (mutual TLS) is refused
unless ``--allow-unauthenticated`` says so.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Mapping

from allocator.service.config import ENV_VARS, LISTENER, Settings
from tessera import serving

logger = logging.getLogger(__name__)

#: The name granian's lines give the server.
PROC_NAME = "tessera-allocator"

#: flag dest -> (flag, environment variable it overrides)
_FLAGS: serving.EnvFlags = {
    "kubeconfig": ("--kubeconfig", "TESSERA_KUBECONFIG"),
    **serving.DIALECT_FLAGS,
    "policy": ("--policy", "TESSERA_POLICY"),
    "agent_dialects": ("--agent-dialects", "TESSERA_AGENT_DIALECTS"),
    "seed": ("--seed", "TESSERA_SEED"),
    "node_resources": ("--node-resources", "TESSERA_NODE_RESOURCES"),
    "filter_best": ("--filter-best", "TESSERA_FILTER_BEST"),
    "preemption": ("--preemption", "TESSERA_PREEMPTION"),
    "url_prefix": ("--url-prefix", "TESSERA_ALLOCATOR_URL_PREFIX"),
    "max_body_bytes": ("--max-body-bytes", "TESSERA_ALLOCATOR_MAX_BODY_BYTES"),
    "leader_election": ("--leader-election", "TESSERA_LEADER_ELECTION"),
    "lease_name": ("--lease-name", "TESSERA_LEASE_NAME"),
    "lease_namespace": ("--lease-namespace", "TESSERA_LEASE_NAMESPACE"),
    "identity": ("--identity", "TESSERA_IDENTITY"),
    "prometheus_url": ("--prometheus-url", "TESSERA_PROMETHEUS_URL"),
    "prometheus_node_label": ("--prometheus-node-label", "TESSERA_PROMETHEUS_NODE_LABEL"),
    "prometheus_selector": ("--prometheus-selector", "TESSERA_PROMETHEUS_SELECTOR"),
    "prometheus_interval": ("--prometheus-interval-seconds",
                            "TESSERA_PROMETHEUS_INTERVAL_SECONDS"),
    "prometheus_stale": ("--prometheus-stale-seconds", "TESSERA_PROMETHEUS_STALE_SECONDS"),
    "prometheus_settle": ("--prometheus-settle-seconds", "TESSERA_PROMETHEUS_SETTLE_SECONDS"),
    **LISTENER.flags(),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    serving.add_env_flags(parser, _FLAGS, ENV_VARS)
    parser.add_argument(
        "--allow-unauthenticated",
        action="store_true",
        default=None,
        help=f"{ENV_VARS['TESSERA_ALLOCATOR_ALLOW_UNAUTHENTICATED']} "
        "[TESSERA_ALLOCATOR_ALLOW_UNAUTHENTICATED]",
    )


def settings_from_args(
    args: argparse.Namespace, environ: Mapping[str, str] | None = None
) -> Settings:
    """Flags over environment, validated (serving included); raises :class:`ConfigError`."""
    env = serving.env_with_flags(args, _FLAGS, environ)
    if getattr(args, "allow_unauthenticated", None):
        env["TESSERA_ALLOCATOR_ALLOW_UNAUTHENTICATED"] = "true"
    settings = Settings.from_env(env)
    settings.check_serving()
    return settings


def run(args: argparse.Namespace) -> int:
    settings = serving.start("tessera allocator", lambda: settings_from_args(args))
    if settings is None:
        return 2
    logger.info(
        "serving the scheduler extender on %s%s (%s), policy %s, agent profile %s, "
        "leader election %s",
        settings.serving.bind, settings.url_prefix,
        ("mutual TLS" if settings.serving.tls_client_ca
         else "TLS, NO client authentication" if settings.serving.tls_cert
         else "plain HTTP, NO client authentication"),
        settings.core.default_policy, settings.core.dialects.agent_profile.value,
        "on" if settings.leader_election else "off",
    )
    from allocator.service.app import create_app
    from tessera.serving.granian import server as granian_server

    # create_app runs in the worker after fork: its threads and API connections belong to it.
    # One worker, never more: the cache must not be split across processes (module doc).
    # Binds wait on the API server: slots of their own, so filter never waits behind them
    # (filter's holds keep the binds' picture in step: allocator.verbs.filter).
    granian_server.serve(lambda: create_app(settings), settings.serving,
                         threads=settings.serving.threads,
                         max_body_bytes=settings.max_body_bytes, proc_name=PROC_NAME,
                         slow_paths=frozenset({f"{settings.url_prefix}/bind"}))
    return 0
