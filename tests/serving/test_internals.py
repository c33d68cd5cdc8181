"""Each reliance of the two serving adapters on their server's private internals, against the
installed gunicorn and granian (tessera/serving/*/internals.py).

The fingerprint test fails on a version whose code behind an override changed: re-read that
code, adjust the override, then record the new fingerprint. The other tests run each
override against the installed server's own objects; the whole servers against real clients
are tests/serving/test_transport_tls.py and tests/deploy/test_cert_rotation.py.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import logging
import types
from pathlib import Path
from typing import Any

import pytest
from builders import write_tls_pair
from gunicorn.asgi.protocol import ASGIProtocol
from gunicorn.config import Config

from tessera.serving.config import ServingConfig
from tessera.serving.granian import internals as granian_internals
from tessera.serving.granian.server import server_options
from tessera.serving.gunicorn import internals as gunicorn_internals
from tessera.serving.policy import HANDSHAKE_SECONDS

RELIANCES = [
    pytest.param(upstream, fingerprint, id=f"{side.__name__.split('.')[2]}:{ours}->{upstream}")
    for side in (gunicorn_internals, granian_internals)
    for ours, relied in side.RELIES_ON.items()
    for upstream, fingerprint in relied
]


def source_fingerprint(name: str) -> str:
    """The first 16 hex digits of the sha256 of ``module:Qualified.name``'s source."""
    module, _, qualified = name.partition(":")
    obj: Any = importlib.import_module(module)
    for part in qualified.split("."):
        obj = getattr(obj, part)
    return hashlib.sha256(inspect.getsource(obj).encode()).hexdigest()[:16]


@pytest.mark.parametrize(("upstream", "fingerprint"), RELIANCES)
def test_the_server_code_an_override_relies_on_is_the_code_that_was_read(
        upstream: str, fingerprint: str) -> None:
    assert source_fingerprint(upstream) == fingerprint, (
        f"{upstream} changed in the installed version: re-read it and the override that "
        "relies on it (RELIES_ON in tessera/serving/*/internals.py), then record its new "
        "fingerprint")


def every_override_is_listed(module: types.ModuleType) -> set[str]:
    """The public functions of an internals module (each must say what it relies on)."""
    return {name for name, value in vars(module).items()
            if inspect.isfunction(value) and value.__module__ == module.__name__
            and not name.startswith("_")}


@pytest.mark.parametrize("module", [gunicorn_internals, granian_internals])
def test_every_override_names_what_it_relies_on(module: types.ModuleType) -> None:
    assert every_override_is_listed(module) <= set(module.RELIES_ON)


def protocol() -> Any:
    """gunicorn's own connection protocol, as its worker makes one per connection."""
    worker = types.SimpleNamespace(cfg=Config(), log=logging.getLogger("gunicorn.test"),
                                   asgi=None, alive=True, nr_conns=0)
    return ASGIProtocol(worker)


def test_a_new_connection_is_neither_awaiting_a_request_nor_idle() -> None:
    fresh = protocol()
    assert not gunicorn_internals.awaiting_first_request(fresh)
    assert not gunicorn_internals.idle(fresh)
    # as _handle_connection leaves it while it waits for the first request's headers
    fresh.req_count, fresh._awaiting_request = 1, True
    assert gunicorn_internals.awaiting_first_request(fresh)
    assert gunicorn_internals.idle(fresh)
    # a second request, while the first one's answer is still being written
    fresh.req_count, fresh._finishing_calls = 2, {object(): None}
    assert not gunicorn_internals.awaiting_first_request(fresh)
    assert not gunicorn_internals.idle(fresh)


class Transport:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.calls.append("write_eof")

    def close(self) -> None:
        self.calls.append("close")

    def abort(self) -> None:
        self.calls.append("abort")


def test_closing_an_idle_connection_closes_and_aborts_its_transport() -> None:
    idle = protocol()
    idle.transport = Transport()
    idle._request_ready = types.SimpleNamespace(set=lambda: idle.transport.calls.append("woken"))
    gunicorn_internals.close_idle(idle)
    assert idle.transport.calls == ["write_eof", "close", "woken", "abort"]
    assert idle._closed


def test_tracking_reports_each_connection_and_bounds_tls_handshakes() -> None:
    made: list[tuple[Any, dict[str, Any]]] = []

    def create_server(factory: Any, *args: Any, **kwargs: Any) -> str:
        made.append((factory(), kwargs))
        return "server"

    worker = types.SimpleNamespace(loop=types.SimpleNamespace(create_server=create_server))
    opened: list[Any] = []
    gunicorn_internals.track_connections(worker, opened.append)
    assert worker.loop.create_server(lambda: "conn", ssl="context") == "server"
    assert worker.loop.create_server(lambda: "plain") == "server"
    assert opened == ["conn", "plain"]
    assert made[0][1] == {"ssl": "context", "ssl_handshake_timeout": HANDSHAKE_SECONDS}
    assert "ssl_handshake_timeout" not in made[1][1]


def test_each_worker_granian_spawns_is_given_the_tls_files_resolved_again(
        tmp_path: Path) -> None:
    for version in ("old", "new"):
        (tmp_path / version).mkdir()
        write_tls_pair(tmp_path / version, version)
    current = tmp_path / "current"  # a Secret volume's ..data
    current.symlink_to(tmp_path / "old")
    serving = ServingConfig(host="127.0.0.1", port=9, tls_cert=str(current / "tls.crt"),
                            tls_key=str(current / "tls.key"))
    options = server_options(serving, threads=2)
    server = granian_internals.renewing_server(options)("test", **options)
    assert server.ssl_ctx[1] == str(tmp_path / "old" / "tls.crt")
    current.unlink()
    current.symlink_to(tmp_path / "new")  # the renewal
    server._sso = None  # made by serve() with the listening socket; not needed here
    worker = server._spawn_worker(idx=0, target=lambda *args: None,
                                  callback_loader=lambda: None)
    assert server.ssl_ctx[1] == str(tmp_path / "new" / "tls.crt")
    assert server.ssl_ctx in worker.inner._args  # what the new worker serves


def test_the_respawn_limit_is_what_granians_serve_loop_says() -> None:
    source = inspect.getsource(granian_internals.MPServer._serve_loop)
    assert f"<= {granian_internals.RESPAWN_GIVE_UP_SECONDS}" in source


def test_granian_logs_through_the_logger_named() -> None:
    source = inspect.getsource(importlib.import_module("granian.log"))
    assert f"logging.getLogger('{granian_internals.GRANIAN_LOGGER}')" in source


def _child_with_an_exit_hook(marker: str) -> None:
    import atexit

    atexit.register(Path(marker).write_text, "ran")
    granian_internals.run_exit_hooks_at_worker_exit()


def test_a_multiprocessing_worker_runs_its_exit_hooks_on_its_way_out(tmp_path: Path) -> None:
    import multiprocessing

    marker = tmp_path / "hook"
    child = multiprocessing.get_context("fork").Process(target=_child_with_an_exit_hook,
                                                        args=(str(marker),))
    child.start()
    child.join(30)
    assert child.exitcode == 0
    assert marker.read_text() == "ran"
