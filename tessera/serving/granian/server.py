"""Start the allocator's server: granian's WSGI interface (Rust HTTP/1.1 and HTTP/2, rustls),
one worker process.

Why not the webhook's stack (gunicorn's asyncio worker, :mod:`tessera.serving.gunicorn`): on
the scheduling path every pod costs kube-scheduler two HTTPS calls to the extender. granian
parses them and does TLS outside Python, and it offers HTTP/2, which kube-scheduler's extender
client takes (apimachinery ``SetTransportDefaults``): every call shares one connection, so
no mutual-TLS handshake recurs (docs/benchmarks.md, issue 13's tenth pass).

What granian does not do, and this package does:

- **Complete bodies within a deadline**, as the one body policy says: :mod:`.bodies`.
- **Renewed TLS files reach the new worker.** granian resolves the files' symlinks once, when
  the server is made; :func:`serve` resolves them again for each worker it starts (a Secret
  volume's ``..data`` swap: :func:`.internals.renewing_server`).
- **Certificate renewal.** granian reads its TLS files when a worker starts. A
  :class:`TlsFilesWatch` thread in the worker notices changed files; once they load as a
  pair it stops the worker gracefully (the allocator steps down and releases its Lease) and
  granian's main process starts a new one, which serves the new files: the same process
  (pid), a new worker, as a restart of the allocator would be (it re-reads the cluster).
- **Exit hooks.** granian's worker leaves through ``os._exit``; its ``atexit`` handlers (the
  Lease release) run from a ``multiprocessing`` finaliser
  (:func:`.internals.run_exit_hooks_at_worker_exit`).
- **JSON logs.** granian's own lines (logger ``_granian``, from Rust too) go through the
  root logger's JSON handler (:mod:`tessera.logs`).

What is lost against the webhook's stack: failed TLS handshakes are not reported in an
INFO log line (rustls gives no hook; granian logs each at DEBUG, ``TCP handshake failed`` or,
from 2.8.9, ``TCP accept failed``) and new TLS connections are not counted.
"""

from __future__ import annotations

import logging
import os
import signal
import ssl
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from granian.constants import HTTPModes, Interfaces, Loops, SSLProtocols
from granian.http import HTTP1Settings
from granian.log import LogLevels

from tessera import logs
from tessera.serving.config import ServingConfig
from tessera.serving.granian.bodies import CompleteBodies
from tessera.serving.granian.internals import (
    GRANIAN_LOGGER,
    RESPAWN_GIVE_UP_SECONDS,
    renewing_server,
    run_exit_hooks_at_worker_exit,
)
from tessera.serving.policy import (
    FIRST_REQUEST_SECONDS,
    BodyPolicy,
    WsgiApp,
    hand_over_the_gil_often,
)
from tessera.serving.tls import TlsFiles

logger = logging.getLogger(__name__)

#: granian threads beyond the app's ``threads``, for requests waiting for their bodies
#: (:mod:`.bodies`); granian makes them on demand and ends them when idle.
BODY_WAIT_THREADS: Final = 128
#: How often the worker looks at its TLS files (a renewal is served within about this long,
#: plus a worker's start).
TLS_FILES_POLL_SECONDS: Final = 1.0
#: A worker restarts for new TLS files only once it is older than granian's main process
#: allows a respawned worker to end in (or the main process would give up and exit).
WORKER_MIN_AGE_SECONDS: Final = RESPAWN_GIVE_UP_SECONDS + 0.5
#: How long granian's main process waits for a stopping worker before killing it: the
#: allocator's exit hook waits up to 5 s for binds in flight, then releases its Lease.
WORKER_STOP_SECONDS: Final = 15


class TlsFilesWatch:
    """Watches the serving TLS files and calls ``on_change`` once when they changed and
    load (a half-written renewal is waited out), not before ``not_before`` (monotonic)."""

    def __init__(self, files: TlsFiles, on_change: Callable[[], None], *,
                 not_before: float = 0.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.files = files
        self.on_change = on_change
        self.not_before = not_before
        self.clock = clock
        self.served = self.files.stamp()
        self._reported: tuple[Any, ...] | None = None

    def check(self) -> bool:
        """Whether the files changed since the worker loaded them and now load."""
        stamp = self.files.stamp()
        if stamp == self.served:
            return False
        try:
            self.files.load()
        except (OSError, ssl.SSLError) as exc:
            if stamp != self._reported:
                self._reported = stamp
                logger.warning("TLS files %s changed but do not load (%s); serving the "
                               "previous certificate", ", ".join(self.files.paths()), exc)
            return False
        return self.clock() >= self.not_before

    def run(self, stop: threading.Event, interval: float = TLS_FILES_POLL_SECONDS) -> None:
        while not stop.wait(interval):
            if self.check():
                self.on_change()
                return


def _stop_this_worker() -> None:
    logger.info("TLS files changed: stopping this worker; a new one serves them")
    os.kill(os.getpid(), signal.SIGTERM)


class WithoutThreadAdvice(logging.Filter):
    """Drops granian's warning that more request threads than twice the cores "seems quite
    high": the allocator's threads mostly wait on the API server (a bind), by design."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Configuration allows spawning up to")


def _granian_log_config() -> dict[str, Any]:
    """granian's loggers with no handler of their own: their lines reach the root logger's
    JSON handler (:func:`tessera.logs.configure`)."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {},
        "handlers": {},
        "filters": {"thread_advice": {"()": WithoutThreadAdvice}},
        "loggers": {
            GRANIAN_LOGGER: {"handlers": [], "propagate": True, "filters": ["thread_advice"]},
            "granian.access": {"handlers": [], "propagate": True},
        },
    }


def server_options(serving: ServingConfig, *, threads: int) -> dict[str, Any]:
    """granian ``Server`` settings: one worker, with threads for ``threads`` app slots (the
    slow paths' included) and for requests waiting for their bodies (module doc); with a
    certificate, HTTPS (TLS 1.2 or 1.3) with HTTP/2 offered; with a client CA too, a client
    certificate is required. A worker that ends is started again (a TLS renewal ends it)."""
    tls = bool(serving.tls_cert and serving.tls_key)
    return {
        "address": serving.host, "port": serving.port, "interface": Interfaces.WSGI,
        "workers": 1, "blocking_threads": threads + BODY_WAIT_THREADS, "loop": Loops.uvloop,
        "http": HTTPModes.auto, "websockets": False,
        "http1_settings": HTTP1Settings(header_read_timeout=int(FIRST_REQUEST_SECONDS * 1000)),
        "ssl_cert": Path(serving.tls_cert) if tls and serving.tls_cert else None,
        "ssl_key": Path(serving.tls_key) if tls and serving.tls_key else None,
        "ssl_ca": Path(serving.tls_client_ca) if tls and serving.tls_client_ca else None,
        "ssl_client_verify": bool(tls and serving.tls_client_ca),
        "ssl_protocol_min": SSLProtocols.tls12,
        "log_level": LogLevels(serving.log_level.lower()),
        "log_dictconfig": _granian_log_config(),
        "respawn_failed_workers": True, "workers_kill_timeout": WORKER_STOP_SECONDS,
    }


def serve(app_factory: Callable[[], WsgiApp], serving: ServingConfig, *, threads: int,
          max_body_bytes: int, proc_name: str,
          slow_paths: frozenset[str] = frozenset()) -> None:
    """Serve ``app_factory()`` (a WSGI app, made in the worker after fork, so its threads and
    API connections belong to it) as :func:`server_options` says, with the body policy of
    ``max_body_bytes``, ``threads`` app slots and as many for ``slow_paths``
    (:class:`~.bodies.CompleteBodies`), until SIGTERM or SIGINT."""
    body = BodyPolicy(max_body_bytes)

    def load() -> WsgiApp:
        logs.configure(serving.log_level)
        hand_over_the_gil_often()
        app = CompleteBodies(app_factory(), threads=threads, body=body, slow_paths=slow_paths)
        run_exit_hooks_at_worker_exit()  # the app's exit hooks (module doc)
        files = serving.tls_files()
        if files is not None:
            watch = TlsFilesWatch(files, _stop_this_worker,
                                  not_before=time.monotonic() + WORKER_MIN_AGE_SECONDS)
            threading.Thread(target=watch.run, args=(threading.Event(),),
                             name="tls-files", daemon=True).start()
        return app

    options = server_options(serving, threads=threads * 2 if slow_paths else threads)
    renewing_server(options)(proc_name, **options).serve(target_loader=load, wrap_loader=False)
