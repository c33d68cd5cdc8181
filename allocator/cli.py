"""``tessera allocator``: validate configuration, then serve the extender with gunicorn.

Flags override the ``TESSERA_*`` environment variables of the same meaning (see
:mod:`allocator.config`). gunicorn runs with **one worker process** and gthread threads: the
cluster picture (card reservations) lives in that process's memory, and two worker processes
would each hold their own copy and hand the same card out twice. Threads give concurrency
(kube-scheduler binds many pods at once) while the state's locks keep one truth. With TLS
files, the gthread worker loads them for every new connection (see webhook/cli.py for the
gunicorn source reference), so rotated certificates are picked up without a restart.
"""

from __future__ import annotations

import argparse
import logging
import os
import ssl
import sys
from typing import Any

from allocator.config import ENV_VARS, Settings
from tessera import logs
from tessera.dialects import ConfigError

logger = logging.getLogger(__name__)

_FLAGS: dict[str, tuple[str, str]] = {
    "kubeconfig": ("--kubeconfig", "TESSERA_KUBECONFIG"),
    "domain": ("--domain", "TESSERA_DOMAIN"),
    "dialects": ("--dialects", "TESSERA_DIALECTS"),
    "aliyun_memory_unit": ("--aliyun-memory-unit", "TESSERA_ALIYUN_MEMORY_UNIT"),
    "nano_gpu_memory_unit": ("--nano-gpu-memory-unit", "TESSERA_NANO_GPU_MEMORY_UNIT"),
    "policy": ("--policy", "TESSERA_POLICY"),
    "agent_dialects": ("--agent-dialects", "TESSERA_AGENT_DIALECTS"),
    "seed": ("--seed", "TESSERA_SEED"),
    "url_prefix": ("--url-prefix", "TESSERA_ALLOCATOR_URL_PREFIX"),
    "host": ("--host", "TESSERA_ALLOCATOR_HOST"),
    "port": ("--port", "TESSERA_ALLOCATOR_PORT"),
    "tls_cert": ("--tls-cert", "TESSERA_ALLOCATOR_TLS_CERT"),
    "tls_key": ("--tls-key", "TESSERA_ALLOCATOR_TLS_KEY"),
    "tls_client_ca": ("--tls-client-ca", "TESSERA_ALLOCATOR_TLS_CLIENT_CA"),
    "threads": ("--threads", "TESSERA_ALLOCATOR_THREADS"),
    "max_body_bytes": ("--max-body-bytes", "TESSERA_ALLOCATOR_MAX_BODY_BYTES"),
    "leader_election": ("--leader-election", "TESSERA_LEADER_ELECTION"),
    "lease_name": ("--lease-name", "TESSERA_LEASE_NAME"),
    "lease_namespace": ("--lease-namespace", "TESSERA_LEASE_NAMESPACE"),
    "identity": ("--identity", "TESSERA_IDENTITY"),
    "log_level": ("--log-level", "TESSERA_LOG_LEVEL"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for dest, (flag, env) in _FLAGS.items():
        parser.add_argument(flag, dest=dest, default=None, help=f"{ENV_VARS[env]} [{env}]")


def environment_from_args(args: argparse.Namespace, environ: dict[str, str]) -> dict[str, str]:
    env = dict(environ)
    for dest, (_flag, name) in _FLAGS.items():
        value = getattr(args, dest, None)
        if value is not None:
            env[name] = str(value)
    return env


def gunicorn_options(settings: Settings) -> dict[str, Any]:
    options: dict[str, Any] = {
        "bind": [settings.bind],
        "workers": 1,  # never more: the cache must not be split across processes
        "worker_class": "gthread",
        "threads": settings.threads,
        "proc_name": "tessera-allocator",
        "loglevel": settings.log_level.lower(),
        "accesslog": None,
        "errorlog": "-",
        # Watches and leader election run in background threads of the worker; the
        # extender's own httpTimeout is 5 s, a bind never takes longer than ~10 s.
        "timeout": 30,
        "graceful_timeout": 10,
        "keepalive": 30,
    }
    if settings.tls_cert:
        options["certfile"] = settings.tls_cert
        options["keyfile"] = settings.tls_key
        if settings.tls_client_ca:
            options["ca_certs"] = settings.tls_client_ca
            options["cert_reqs"] = ssl.CERT_REQUIRED
    return options


def _server(settings: Settings) -> Any:
    from gunicorn.app.base import BaseApplication

    from allocator.app import create_app

    class AllocatorServer(BaseApplication):  # type: ignore[misc]  # gunicorn ships no types
        def load_config(self) -> None:
            for key, value in gunicorn_options(settings).items():
                self.cfg.set(key, value)

        def load(self) -> Any:
            # Called in the worker after fork: threads and API connections belong to it.
            return create_app(settings)

    return AllocatorServer()


def run(args: argparse.Namespace) -> int:
    try:
        settings = Settings.from_env(environment_from_args(args, dict(os.environ)))
    except ConfigError as exc:
        print(f"tessera allocator: {exc}", file=sys.stderr)
        return 2
    logs.configure(settings.log_level)
    logger.info(
        "serving the scheduler extender on %s%s (%s), policy %s, agent dialects %s, "
        "leader election %s",
        settings.bind, settings.url_prefix, "TLS" if settings.tls_cert else "plain HTTP",
        settings.core.default_policy, ",".join(settings.core.agent_dialects),
        "on" if settings.leader_election else "off",
    )
    _server(settings).run()
    return 0
