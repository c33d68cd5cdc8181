"""``tessera webhook``: validate configuration, then serve the app with gunicorn over TLS.

Flags override the ``TESSERA_*`` environment variables of the same meaning. gunicorn runs in
this process with its asyncio worker (:mod:`tessera.serving.gunicorn`: slow clients hold no
request thread, rotated certificate files are served to new connections without a restart).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from tessera import serving
from tessera.dialects import DialectConfig
from tessera.serving.gunicorn import server as gunicorn_server
from tessera.vocabulary import ConfigError
from webhook.config import ENV_VARS, LISTENER, WebhookConfig
from webhook.registration import match_conditions_yaml

logger = logging.getLogger(__name__)

#: How long an idle kept-alive connection stays open. Longer than the API server's own idle
#: timeout (90 s: client-go's webhook transport takes Go's ``http.DefaultTransport``
#: default through ``k8s.io/apimachinery/pkg/util/net.SetTransportDefaults``), so the API
#: server closes an idle connection before we do. When the server closes it first, a
#: request the API server writes on it at that moment is lost (Go's client does not retry a
#: POST), the admission fails with ``EOF``, and with ``failurePolicy: Fail`` so does the
#: pod's create. An idle connection costs the event loop a socket, no thread.
KEEPALIVE_SECONDS = 120

#: flag dest -> (flag, environment variable it overrides)
_FLAGS: serving.EnvFlags = {
    **serving.DIALECT_FLAGS,
    "scheduler_name": ("--scheduler-name", "TESSERA_SCHEDULER_NAME"),
    "genius_priority_levels": ("--genius-priority-levels", "TESSERA_GENIUS_PRIORITY_LEVELS"),
    "max_body_bytes": ("--max-body-bytes", "TESSERA_WEBHOOK_MAX_BODY_BYTES"),
    "hami_gpu_core_policy": ("--hami-gpu-core-policy", "TESSERA_HAMI_GPU_CORE_POLICY"),
    "hami_runtime_class": ("--hami-runtime-class", "TESSERA_HAMI_RUNTIME_CLASS"),
    "hami_overwrite_env": ("--hami-overwrite-env", "TESSERA_HAMI_OVERWRITE_ENV"),
    **LISTENER.flags(),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    serving.add_env_flags(parser, _FLAGS, ENV_VARS)
    parser.add_argument(
        "--insecure-http",
        action="store_true",
        default=None,
        help=f"{ENV_VARS['TESSERA_WEBHOOK_INSECURE_HTTP']} [TESSERA_WEBHOOK_INSECURE_HTTP]",
    )
    parser.add_argument(
        "--print-match-conditions",
        action="store_true",
        help="print the matchConditions that send this configuration's GPU pods (--dialects, "
        "--domain) to the webhook, as YAML for the MutatingWebhookConfiguration, and exit",
    )


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """``tessera webhook`` arguments (for callers that hold the argv, like the dev cluster)."""
    parser = argparse.ArgumentParser(prog="tessera webhook")
    add_arguments(parser)
    return parser.parse_args(list(argv))


def dialects_from_args(
    args: argparse.Namespace, environ: Mapping[str, str] | None = None
) -> DialectConfig:
    """The dialect configuration alone, flags over environment (no listener or TLS checks):
    what the webhook's registration is built from. Raises :class:`ConfigError`."""
    return DialectConfig.from_env(serving.env_with_flags(args, serving.DIALECT_FLAGS, environ))


def config_from_args(
    args: argparse.Namespace, environ: Mapping[str, str] | None = None
) -> WebhookConfig:
    """Flags over environment, validated; raises :class:`ConfigError`."""
    env = serving.env_with_flags(args, _FLAGS, environ)
    if getattr(args, "insecure_http", None):
        env["TESSERA_WEBHOOK_INSECURE_HTTP"] = "true"
    config = WebhookConfig.from_env(env)
    config.check_serving()
    return config


def gunicorn_options(config: WebhookConfig) -> dict[str, Any]:
    # The API server's webhook timeout is 10 s by default (max 30 s).
    return gunicorn_server.gunicorn_options(
        config.serving, proc_name="tessera-webhook", keepalive=KEEPALIVE_SECONDS, timeout=30
    )


def run(args: argparse.Namespace) -> int:
    if args.print_match_conditions:
        try:
            dialects = dialects_from_args(args)
        except ConfigError as exc:
            print(f"tessera webhook: {exc}", file=sys.stderr)
            return 2
        print(match_conditions_yaml(dialects), end="")
        return 0
    config = serving.start("tessera webhook", lambda: config_from_args(args))
    if config is None:
        return 2
    logger.info(
        "serving the admission webhook on %s (%s), dialects %s",
        config.serving.bind,
        "plain HTTP" if config.insecure_http else "TLS",
        ",".join(sorted(config.mutation.dialects.enabled)),
    )
    from webhook.app import create_app

    gunicorn_server.serve(lambda: create_app(config), gunicorn_options(config),
                  threads=config.serving.threads, max_body_bytes=config.max_body_bytes)
    return 0
