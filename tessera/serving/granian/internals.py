"""Where the allocator's server relies on granian's private internals: one function each.

granian 2.8 (``granian/server/common.py``, ``granian/server/mp.py``) has no public way to
give each new worker freshly resolved TLS files, to run a worker's exit hooks, or to say
when its main process gives up respawning; :mod:`.server` needs all three. :data:`RELIES_ON`
names, for each function (or value) here, the granian code it was written against and a
fingerprint of that code as read; tests/serving/test_internals.py fails when an installed
granian's code differs, so an upgrade is re-read before it is served.
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing.util
import ssl
from typing import Any, Final

from granian.server.mp import MPServer

logger = logging.getLogger(__name__)

#: our function or value -> (granian's function or method it relies on, sha256 of its source
#: as read, first 16 hex digits), for tests/serving/test_internals.py.
RELIES_ON: Final[dict[str, tuple[tuple[str, str], ...]]] = {
    "renewing_server": (
        # a worker is given self.ssl_ctx when it is spawned (first start and respawns alike);
        # build_ssl_context(cert, key, password, proto, ca, crl, client_verify) sets it
        ("granian.server.mp:MPServer._spawn_worker", "87b0a0e68f390bca"),
        ("granian.server.common:AbstractServer.build_ssl_context", "dc80c96c00298ccd"),
        ("granian.server.common:AbstractServer._respawn_workers", "164f5281ce938dbe"),
    ),
    "run_exit_hooks_at_worker_exit": (
        # the worker is a multiprocessing Process, which leaves through os._exit after
        # running multiprocessing's finalisers
        ("granian.server.mp:WorkerProcess._spawn", "b139771c9fd91967"),
    ),
    "RESPAWN_GIVE_UP_SECONDS": (
        ("granian.server.common:AbstractServer._serve_loop", "123ffa1d2e47bda9"),
    ),
    "GRANIAN_LOGGER": (
        ("granian.log:configure_logging", "8e098952ffd386bc"),
    ),
}

#: granian's main process stops respawning (and exits) when a worker it has respawned ends
#: within this long (``_serve_loop``: ``cycle - self.respawned_wrks[idx] <= 5.5``).
RESPAWN_GIVE_UP_SECONDS: Final = 5.5
#: The logger granian's own lines (from Rust too) come through.
GRANIAN_LOGGER: Final = "_granian"


def renewing_server(options: dict[str, Any]) -> type[MPServer]:
    """granian's server class, resolving the TLS files in ``options`` again for each worker
    it starts. granian resolves their symlinks once, when the server is made
    (``build_ssl_context``), and would hand a new worker the files a Secret volume's
    ``..data`` pointed to at the start."""

    class RenewingServer(MPServer):
        def _spawn_worker(self, *args: Any, **kwargs: Any) -> Any:
            try:
                self.build_ssl_context(options["ssl_cert"], options["ssl_key"], None,
                                       options["ssl_protocol_min"], options["ssl_ca"], [],
                                       options["ssl_client_verify"])
            except (OSError, ssl.SSLError) as exc:
                logger.warning("TLS files do not load (%s); the new worker serves the "
                               "previous ones", exc)
            return super()._spawn_worker(*args, **kwargs)

    return RenewingServer


def run_exit_hooks_at_worker_exit() -> None:
    """Run this worker's ``atexit`` handlers on its way out (the allocator's Lease release).
    granian's worker is a ``multiprocessing`` child, which leaves through ``os._exit``:
    ``atexit`` handlers would never run, its finalisers do."""
    multiprocessing.util.Finalize(None, atexit._run_exitfuncs, exitpriority=10)
