"""The configuration and serving machinery both services share (tessera.serving)."""

from __future__ import annotations

import argparse
import importlib
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tessera import logs, transport
from tessera.serving import (
    EnvReader,
    Listener,
    ServingConfig,
    add_env_flags,
    env_with_flags,
    gunicorn_options,
    serve,
    start,
)
from tessera.transport import CertificateFiles, WsgiBridge
from tessera.vocabulary import ConfigError, TesseraError

FLAGS = {
    "host": ("--host", "TESSERA_X_HOST"),
    "port": ("--port", "TESSERA_X_PORT"),
    "log_level": ("--log-level", "TESSERA_LOG_LEVEL"),
}
HELP = {
    "TESSERA_X_HOST": "address to listen on",
    "TESSERA_X_PORT": "port to listen on",
    "TESSERA_LOG_LEVEL": "log level",
}


def read_listener(env: dict[str, str], **kwargs: Any) -> ServingConfig:
    reader = EnvReader(env)
    serving = reader.listener(Listener("TESSERA_X", **{"port": 8080, "threads": 4, **kwargs}))
    reader.check("invalid x configuration")
    return serving


def read_listener_of(listener: Listener, env: dict[str, str]) -> ServingConfig:
    return EnvReader(env).listener(listener)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_env_flags(parser, FLAGS, HELP)
    return parser.parse_args(argv)


def test_config_error_is_one_of_tesseras_own_errors() -> None:
    assert issubclass(ConfigError, TesseraError)


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"TESSERA_X_PORT": "eighty"}, ["TESSERA_X_PORT='eighty' must be a whole number 1-65535"]),
        ({"TESSERA_X_PORT": "\u00b2"}, ["TESSERA_X_PORT='\u00b2' must be a whole number 1-65535"]),
        (
            {"TESSERA_X_PORT": "0", "TESSERA_X_THREADS": "999", "TESSERA_LOG_LEVEL": "loud"},
            [
                "TESSERA_X_PORT='0' must be a whole number 1-65535",
                "TESSERA_X_THREADS='999' must be a whole number 1-256",
                "TESSERA_LOG_LEVEL='LOUD' must be one of DEBUG, INFO, WARNING, ERROR",
            ],
        ),
        (
            {"TESSERA_X_WORKERS": "-1", "TESSERA_X_PORT": "65536"},
            [
                "TESSERA_X_PORT='65536' must be a whole number 1-65535",
                "TESSERA_X_WORKERS='-1' must be a whole number 1-64",
            ],
        ),
    ],
)
def test_every_problem_is_named_in_one_error(env: dict[str, str], named: list[str]) -> None:
    with pytest.raises(ConfigError) as caught:
        read_listener(env, workers=2)
    message = str(caught.value)
    assert message.startswith("invalid x configuration: ")
    for problem in named:
        assert problem in message
    assert message.count(";") == len(named) - 1


@pytest.mark.parametrize(
    ("raw", "default", "expected"),
    [
        (None, True, True),
        (None, False, False),
        ("", True, True),
        ("  ", False, False),
        ("true", False, True),
        ("YES", False, True),
        ("on", False, True),
        ("1", False, True),
        ("false", True, False),
        ("No", True, False),
        ("off", True, False),
        ("0", True, False),
    ],
)
def test_a_switch_reads_true_or_false_and_blank_keeps_the_default(
    raw: str | None, default: bool, expected: bool
) -> None:
    reader = EnvReader({} if raw is None else {"TESSERA_X_ON": raw})
    assert reader.flag("TESSERA_X_ON", default) is expected
    assert reader.problems == []


@pytest.mark.parametrize("raw", ["maybe", "2", "y"])
def test_a_switch_that_is_neither_true_nor_false_is_a_problem(raw: str) -> None:
    reader = EnvReader({"TESSERA_X_ON": raw})
    assert reader.flag("TESSERA_X_ON", True) is True
    assert reader.problems == [f"TESSERA_X_ON={raw.lower()!r} must be true or false"]


@pytest.mark.parametrize(
    ("raw", "expected", "problems"),
    [
        (None, 7, 0),
        ("  12 ", 12, 0),
        ("1", 1, 0),
        ("20", 20, 0),
        ("21", 7, 1),
        ("0", 7, 1),
        ("1.5", 7, 1),
        ("-3", 7, 1),
        ("ten", 7, 1),
    ],
)
def test_a_whole_number_outside_its_range_is_a_problem_and_the_default_stands_in(
    raw: str | None, expected: int, problems: int
) -> None:
    reader = EnvReader({} if raw is None else {"TESSERA_X_N": raw})
    assert reader.integer("TESSERA_X_N", 7, 1, 20) == expected
    assert len(reader.problems) == problems


@pytest.mark.parametrize(
    ("raw", "expected"), [(None, "INFO"), ("debug", "DEBUG"), (" Warning ", "WARNING")]
)
def test_the_log_level_is_read_in_any_case(raw: str | None, expected: str) -> None:
    reader = EnvReader({} if raw is None else {"TESSERA_LOG_LEVEL": raw})
    assert reader.log_level() == expected
    assert reader.problems == []


def test_a_nested_readers_error_joins_the_others() -> None:
    def nested(env: object) -> str:
        raise ConfigError("TESSERA_DIALECTS: 'kueue' is not a dialect")

    reader = EnvReader({"TESSERA_X_PORT": "x"})
    assert reader.collect(nested, "fallback") == "fallback"
    reader.listener(Listener("TESSERA_X", port=1, threads=1))
    with pytest.raises(ConfigError, match=r"kueue.*TESSERA_X_PORT"):
        reader.check("invalid")


@pytest.mark.parametrize(
    ("env", "kwargs", "expected"),
    [
        ({}, {}, ServingConfig(port=8080, threads=4, workers=1)),
        ({}, {"workers": 2}, ServingConfig(port=8080, threads=4, workers=2)),
        ({"TESSERA_X_WORKERS": "9"}, {}, ServingConfig(port=8080, threads=4, workers=1)),
        ({"TESSERA_X_WORKERS": "9"}, {"workers": 2}, ServingConfig(port=8080, workers=9)),
        (
            {"TESSERA_X_TLS_CERT": "c", "TESSERA_X_TLS_KEY": "k"},
            {"tls_port": 8443},
            ServingConfig(port=8443, tls_cert="c", tls_key="k"),
        ),
        (
            {"TESSERA_X_TLS_CERT": "c", "TESSERA_X_PORT": "9000"},
            {"tls_port": 8443},
            ServingConfig(port=9000, tls_cert="c"),
        ),
        (
            {"TESSERA_X_HOST": " ::1 ", "TESSERA_X_THREADS": "32", "TESSERA_LOG_LEVEL": "error",
             "TESSERA_X_TLS_CLIENT_CA": "ca"},
            {},
            ServingConfig(host="::1", port=8080, threads=32, log_level="ERROR",
                          tls_client_ca="ca"),
        ),
    ],
)
def test_the_listener_family_of_variables_is_read_with_defaults(
    env: dict[str, str], kwargs: dict[str, Any], expected: ServingConfig
) -> None:
    assert read_listener(env, **kwargs) == expected


@pytest.mark.parametrize(
    ("listener", "flags"),
    [
        (
            Listener("TESSERA_X", port=80, threads=2),
            {"--host": "TESSERA_X_HOST", "--port": "TESSERA_X_PORT",
             "--tls-cert": "TESSERA_X_TLS_CERT", "--tls-key": "TESSERA_X_TLS_KEY",
             "--tls-client-ca": "TESSERA_X_TLS_CLIENT_CA", "--threads": "TESSERA_X_THREADS",
             "--log-level": "TESSERA_LOG_LEVEL"},
        ),
        (
            Listener("TESSERA_Y", port=80, threads=2, workers=3),
            {"--host": "TESSERA_Y_HOST", "--port": "TESSERA_Y_PORT",
             "--tls-cert": "TESSERA_Y_TLS_CERT", "--tls-key": "TESSERA_Y_TLS_KEY",
             "--tls-client-ca": "TESSERA_Y_TLS_CLIENT_CA", "--workers": "TESSERA_Y_WORKERS",
             "--threads": "TESSERA_Y_THREADS", "--log-level": "TESSERA_LOG_LEVEL"},
        ),
    ],
)
def test_a_listener_has_one_described_flag_per_variable(
    listener: Listener, flags: dict[str, str]
) -> None:
    got = listener.flags()
    assert {flag: env for flag, env in got.values()} == flags
    assert all(dest == flag[2:].replace("-", "_") for dest, (flag, _env) in got.items())
    assert sorted(listener.env_help()) == sorted(flags.values())


@pytest.mark.parametrize(
    ("listener", "variable", "meaning"),
    [
        (Listener("TESSERA_X", port=8443, threads=4, workers=2), "TESSERA_X_PORT",
         "port to listen on (default 8443)"),
        (Listener("TESSERA_X", port=8080, threads=16, tls_port=8443), "TESSERA_X_PORT",
         "port to listen on (default 8080, or 8443 with TLS)"),
        (Listener("TESSERA_X", port=8443, threads=4, workers=2), "TESSERA_X_THREADS",
         "threads per worker (default 4)"),
        (Listener("TESSERA_X", port=8080, threads=16), "TESSERA_X_THREADS",
         "request threads of the single worker (default 16)"),
        (Listener("TESSERA_X", port=8443, threads=4, workers=2), "TESSERA_X_WORKERS",
         "gunicorn worker processes (default 2)"),
        (Listener("TESSERA_X", port=1, threads=1, clients="clients (kube-scheduler)"),
         "TESSERA_X_TLS_CLIENT_CA",
         "PEM CA file; when set, clients (kube-scheduler) must present a cert it signed"),
    ],
)
def test_the_help_of_a_listener_states_its_defaults(
    listener: Listener, variable: str, meaning: str
) -> None:
    assert listener.env_help()[variable] == meaning
    assert listener.defaults() == read_listener_of(listener, {})


@pytest.mark.parametrize("service", ["webhook", "allocator.service"])
def test_every_flag_of_each_service_is_described_by_its_variable(service: str) -> None:
    cli = importlib.import_module(f"{service}.cli")
    config = importlib.import_module(f"{service}.config")
    variables = [env for _flag, env in cli._FLAGS.values()]
    assert len(set(variables)) == len(variables)
    assert set(variables) <= set(config.ENV_VARS)


@pytest.mark.parametrize(
    ("host", "bind"),
    [("0.0.0.0", "0.0.0.0:8443"), ("::", "[::]:8443"), ("fd00::1", "[fd00::1]:8443")],
)
def test_an_ipv6_host_is_bracketed_in_the_bind_address(host: str, bind: str) -> None:
    assert ServingConfig(host=host).bind == bind


def test_every_missing_tls_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "tls.crt").write_text("x")
    serving = ServingConfig(tls_cert=str(tmp_path / "tls.crt"), tls_key=str(tmp_path / "k"),
                            tls_client_ca=str(tmp_path / "ca"))
    assert serving.missing_tls_files() == [
        f"TLS key file {str(tmp_path / 'k')!r} does not exist",
        f"TLS client CA file {str(tmp_path / 'ca')!r} does not exist",
    ]
    assert ServingConfig().missing_tls_files() == []


@pytest.mark.parametrize(
    ("argv", "environ", "expected"),
    [
        ([], {"TESSERA_X_PORT": "1"}, {"TESSERA_X_PORT": "1"}),
        (["--port", "2"], {"TESSERA_X_PORT": "1"}, {"TESSERA_X_PORT": "2"}),
        (["--host", "::"], {"OTHER": "kept"}, {"OTHER": "kept", "TESSERA_X_HOST": "::"}),
        (
            ["--log-level", "debug", "--port", "3"],
            {"TESSERA_LOG_LEVEL": "ERROR"},
            {"TESSERA_LOG_LEVEL": "debug", "TESSERA_X_PORT": "3"},
        ),
    ],
)
def test_flags_override_the_environment_and_leave_the_rest(
    argv: list[str], environ: dict[str, str], expected: dict[str, str]
) -> None:
    before = dict(environ)
    assert env_with_flags(parse(argv), FLAGS, environ) == expected
    assert environ == before


def test_each_flag_is_documented_with_its_variable() -> None:
    parser = argparse.ArgumentParser()
    add_env_flags(parser, FLAGS, HELP)
    text = parser.format_help()
    for name, meaning in HELP.items():
        assert f"{meaning} [{name}]" in " ".join(text.split())


@pytest.mark.parametrize(
    ("serving", "files"),
    [
        (ServingConfig(), None),
        (ServingConfig(tls_client_ca="ca"), None),
        (ServingConfig(tls_cert="c", tls_key="k"), ("c", "k", None)),
        (ServingConfig(tls_cert="c", tls_key="k", tls_client_ca="ca"), ("c", "k", "ca")),
    ],
)
def test_gunicorn_serves_https_with_a_certificate_and_requires_clients_with_a_ca(
    serving: ServingConfig, files: tuple[str, str, str | None] | None
) -> None:
    options = gunicorn_options(serving, proc_name="p", keepalive=5)
    hook = options.get("ssl_context")
    if files is None:
        assert hook is None and "certfile" not in options
    else:
        assert isinstance(hook, CertificateFiles)
        assert (hook.cert, hook.key, hook.client_ca) == files
        assert (options["certfile"], options["keyfile"]) == files[:2]
    assert options["worker_class"] == "tessera.worker.Worker"


def test_the_worker_hands_the_gil_over_every_millisecond() -> None:
    options = gunicorn_options(ServingConfig(), proc_name="p", keepalive=5)
    before = sys.getswitchinterval()
    try:
        sys.setswitchinterval(0.005)
        options["post_worker_init"](object())
        assert sys.getswitchinterval() == pytest.approx(transport.GIL_SWITCH_SECONDS)
    finally:
        sys.setswitchinterval(before)


def test_the_worker_runs_on_uvloop_which_is_installed() -> None:
    import uvloop

    options = gunicorn_options(ServingConfig(), proc_name="p", keepalive=5)
    assert options["asgi_loop"] == "uvloop"
    assert callable(uvloop.new_event_loop)


@pytest.mark.parametrize(("workers", "expected"), [(None, 3), (1, 1)])
def test_the_worker_count_can_be_forced(workers: int | None, expected: int) -> None:
    serving = ServingConfig(host="::", port=9, threads=7, workers=3, log_level="WARNING")
    options = gunicorn_options(serving, proc_name="tessera-x", keepalive=30, timeout=20,
                               workers=workers)
    assert options == {
        "bind": ["[::]:9"], "workers": expected, "worker_class": "tessera.worker.Worker",
        "asgi_loop": "uvloop", "threads": 1, "proc_name": "tessera-x", "loglevel": "warning",
        "logger_class": "tessera.logs.GunicornLogger", "accesslog": None, "errorlog": "-",
        "timeout": 20, "graceful_timeout": 10, "keepalive": 30, "control_socket_disable": True,
        "post_worker_init": transport.hand_over_the_gil_often,
    }


def test_serve_hands_gunicorn_the_options_and_builds_the_app_in_load(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gunicorn.app.base import BaseApplication

    ran: list[Any] = []
    monkeypatch.setattr(BaseApplication, "run", lambda self: ran.append(self))
    built: list[str] = []

    def factory() -> str:
        built.append("app")
        return "the app"

    serve(factory, gunicorn_options(ServingConfig(port=9, threads=3, workers=2),
                                    proc_name="tessera-x", keepalive=5),
          threads=3, max_body_bytes=1024)
    (server,) = ran
    assert built == []  # nothing built until a worker loads it
    assert (server.cfg.workers, server.cfg.proc_name) == (2, "tessera-x")
    assert server.cfg.bind == ["0.0.0.0:9"]
    bridge = server.load()
    assert isinstance(bridge, WsgiBridge) and built == ["app"]
    assert (bridge.app, bridge.threads, bridge.max_body_bytes) == ("the app", 3, 1024)


@dataclass(frozen=True)
class Served:
    serving: ServingConfig


@pytest.mark.parametrize(
    ("problem", "started", "stderr", "levels"),
    [
        (None, True, "", ["DEBUG"]),
        ("TESSERA_X_PORT='x' is bad", False, "tessera x: TESSERA_X_PORT='x' is bad\n", []),
    ],
)
def test_a_service_starts_with_its_log_level_or_prints_the_configuration_error(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    problem: str | None,
    started: bool,
    stderr: str,
    levels: list[str],
) -> None:
    configured: list[str] = []
    monkeypatch.setattr(logs, "configure", configured.append)
    config = Served(ServingConfig(log_level="DEBUG"))

    def read() -> Served:
        if problem is not None:
            raise ConfigError(problem)
        return config

    assert start("tessera x", read) == (config if started else None)
    assert capsys.readouterr().err == stderr
    assert configured == levels
