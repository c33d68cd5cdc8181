"""``tessera webhook``: validate configuration, then serve the app with gunicorn over TLS.

Flags override the ``TESSERA_*`` environment variables of the same meaning. gunicorn runs
programmatically (a ``BaseApplication``) with the gthread worker: it builds a fresh SSL context
for every accepted connection, so rotated certificate files are served to new connections
without a restart. Verified in gunicorn 27.0.1: ``gunicorn/workers/gthread.py`` ``TConn.init()``
calls ``sock.ssl_wrap_socket(self.sock, self.cfg)`` for each new connection, and
``gunicorn/sock.py`` ``ssl_wrap_socket()`` -> ``ssl_context(conf)`` creates a new
``SSLContext`` and calls ``load_cert_chain(certfile, keyfile)`` every time. A kept-alive
connection keeps the certificate it was opened with.
"""

from __future__ import annotations

import argparse
import logging
import os
import ssl
import sys
from typing import Any

from tessera import logs
from tessera.dialects import ConfigError
from webhook.config import ENV_VARS, WebhookConfig

logger = logging.getLogger(__name__)

#: flag dest -> environment variable it overrides
_FLAGS: dict[str, tuple[str, str]] = {
    "domain": ("--domain", "TESSERA_DOMAIN"),
    "dialects": ("--dialects", "TESSERA_DIALECTS"),
    "aliyun_memory_unit": ("--aliyun-memory-unit", "TESSERA_ALIYUN_MEMORY_UNIT"),
    "nano_gpu_memory_unit": ("--nano-gpu-memory-unit", "TESSERA_NANO_GPU_MEMORY_UNIT"),
    "scheduler_name": ("--scheduler-name", "TESSERA_SCHEDULER_NAME"),
    "host": ("--host", "TESSERA_WEBHOOK_HOST"),
    "port": ("--port", "TESSERA_WEBHOOK_PORT"),
    "tls_cert": ("--tls-cert", "TESSERA_WEBHOOK_TLS_CERT"),
    "tls_key": ("--tls-key", "TESSERA_WEBHOOK_TLS_KEY"),
    "tls_client_ca": ("--tls-client-ca", "TESSERA_WEBHOOK_TLS_CLIENT_CA"),
    "max_body_bytes": ("--max-body-bytes", "TESSERA_WEBHOOK_MAX_BODY_BYTES"),
    "workers": ("--workers", "TESSERA_WEBHOOK_WORKERS"),
    "threads": ("--threads", "TESSERA_WEBHOOK_THREADS"),
    "log_level": ("--log-level", "TESSERA_LOG_LEVEL"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for dest, (flag, env) in _FLAGS.items():
        parser.add_argument(flag, dest=dest, default=None, help=f"{ENV_VARS[env]} [{env}]")
    parser.add_argument(
        "--insecure-http",
        action="store_true",
        default=None,
        help=f"{ENV_VARS['TESSERA_WEBHOOK_INSECURE_HTTP']} [TESSERA_WEBHOOK_INSECURE_HTTP]",
    )


def config_from_args(args: argparse.Namespace, environ: dict[str, str]) -> WebhookConfig:
    """Flags over environment, validated; raises :class:`ConfigError`."""
    env = dict(environ)
    for dest, (_flag, name) in _FLAGS.items():
        value = getattr(args, dest, None)
        if value is not None:
            env[name] = str(value)
    if getattr(args, "insecure_http", None):
        env["TESSERA_WEBHOOK_INSECURE_HTTP"] = "true"
    config = WebhookConfig.from_env(env)
    config.check_serving()
    return config


def gunicorn_options(config: WebhookConfig) -> dict[str, Any]:
    options: dict[str, Any] = {
        "bind": [config.bind],
        "workers": config.workers,
        "worker_class": "gthread",
        "threads": config.threads,
        "proc_name": "tessera-webhook",
        "loglevel": config.log_level.lower(),
        "accesslog": None,
        "errorlog": "-",
        # The API server's webhook timeout is 10 s by default (max 30 s).
        "timeout": 30,
        "graceful_timeout": 10,
        "keepalive": 5,
    }
    if not config.insecure_http:
        options["certfile"] = config.tls_cert
        options["keyfile"] = config.tls_key
        if config.tls_client_ca:
            options["ca_certs"] = config.tls_client_ca
            options["cert_reqs"] = ssl.CERT_REQUIRED
    return options


def _server(config: WebhookConfig) -> Any:
    from gunicorn.app.base import BaseApplication

    from webhook.app import create_app

    class WebhookServer(BaseApplication):  # type: ignore[misc]  # gunicorn ships no types
        def load_config(self) -> None:
            for key, value in gunicorn_options(config).items():
                self.cfg.set(key, value)

        def load(self) -> Any:
            return create_app(config)

    return WebhookServer()


def run(args: argparse.Namespace) -> int:
    try:
        config = config_from_args(args, dict(os.environ))
    except ConfigError as exc:
        print(f"tessera webhook: {exc}", file=sys.stderr)
        return 2
    logs.configure(config.log_level)
    logger.info(
        "serving the admission webhook on %s (%s), dialects %s",
        config.bind,
        "plain HTTP" if config.insecure_http else "TLS",
        ",".join(sorted(config.dialects.enabled)),
    )
    _server(config).run()
    return 0
