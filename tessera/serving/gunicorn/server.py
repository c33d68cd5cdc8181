"""Start the webhook's server: gunicorn's arbiter in this process, with the asyncio worker
(:mod:`.worker`) on uvloop, the WSGI bridge (:mod:`.bridge`) and the certificate files hook
(:mod:`.handshakes`).

gunicorn's own messages (start, workers, errors) go through the root logger's JSON handler
(:class:`JsonLogger`), so the log is JSON from its first line to its last.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from gunicorn import glogging

from tessera.serving.config import ServingConfig
from tessera.serving.gunicorn.bridge import WsgiBridge
from tessera.serving.gunicorn.handshakes import CertificateFiles
from tessera.serving.policy import BodyPolicy, WsgiApp, hand_over_the_gil_often

#: gunicorn's worker class: its asyncio worker, stopping promptly (:mod:`.worker`).
WORKER_CLASS: Final = "tessera.serving.gunicorn.worker.Worker"
#: gunicorn's logger class (:class:`JsonLogger`).
LOGGER_CLASS: Final = "tessera.serving.gunicorn.server.JsonLogger"


class JsonLogger(glogging.Logger):  # type: ignore[misc]  # gunicorn ships no types
    """gunicorn's ``logger_class``: its error log propagates to our root JSON handler
    (:func:`tessera.logs.configure`) instead of writing plain-text lines of its own; its
    access log stays off (``accesslog`` None)."""

    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        for handler in list(self.error_log.handlers):
            self.error_log.removeHandler(handler)
        self.error_log.propagate = True


def post_worker_init(_worker: Any) -> None:
    """gunicorn's ``post_worker_init`` hook: the GIL switch interval both servers use."""
    hand_over_the_gil_often()


def gunicorn_options(
    serving: ServingConfig,
    *,
    proc_name: str,
    keepalive: int,
    timeout: int = 30,
    graceful_timeout: int = 10,
    workers: int | None = None,
) -> dict[str, Any]:
    """gunicorn settings for the asyncio worker; ``workers`` overrides ``serving.workers``.
    With a certificate, HTTPS; with a client CA too, a client certificate is required.
    Request threads are the bridge's (:func:`serve`), not gunicorn's."""
    options: dict[str, Any] = {
        "bind": [serving.bind],
        "workers": serving.workers if workers is None else workers,
        "worker_class": WORKER_CLASS,
        # uvloop: the worker's event loop and TLS transport in Cython instead of asyncio's
        # pure-Python ones (CPU per request: docs/benchmarks.md).
        "asgi_loop": "uvloop",
        "threads": 1,
        "proc_name": proc_name,
        "loglevel": serving.log_level.lower(),
        "logger_class": LOGGER_CLASS,
        "accesslog": None,
        "errorlog": "-",
        "timeout": timeout,
        "graceful_timeout": graceful_timeout,
        "keepalive": keepalive,
        # gunicorn's control socket defaults to one path per user ($HOME/.gunicorn), shared by
        # every instance on the host; nothing of ours uses it.
        "control_socket_disable": True,
        "post_worker_init": post_worker_init,
    }
    files = serving.tls_files()
    if files is not None:
        options["certfile"] = files.cert
        options["keyfile"] = files.key
        options["ssl_context"] = CertificateFiles(files)
    return options


def serve(app_factory: Callable[[], WsgiApp], options: Mapping[str, Any], *, threads: int,
          max_body_bytes: int) -> None:
    """Run gunicorn's arbiter in this process with ``options`` (it ends the process with
    ``sys.exit`` when it halts: gunicorn/arbiter.py ``Arbiter.halt()``).

    ``app_factory`` (a WSGI app) is called by ``load()`` in each worker after fork, so threads
    and API connections the app starts belong to the worker, not to the arbiter; it is served
    through :class:`~.bridge.WsgiBridge` with ``threads`` request threads and the body policy
    of ``max_body_bytes``."""
    from gunicorn.app.base import BaseApplication

    class Server(BaseApplication):  # type: ignore[misc]  # gunicorn ships no types
        def load_config(self) -> None:
            for key, value in options.items():
                self.cfg.set(key, value)

        def load(self) -> Any:
            return WsgiBridge(app_factory(), threads=threads,
                              body=BodyPolicy(max_body_bytes))

    Server().run()
