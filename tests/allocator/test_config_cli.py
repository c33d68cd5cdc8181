"""Configuration from flags and TESSERA_* variables, and the server options."""

from __future__ import annotations

import pathlib

import pytest

from allocator.service import cli
from allocator.service.config import Settings
from tessera.agent_profiles import AgentProfile
from tessera.cli import build_parser
from tessera.serving.granian.server import server_options
from tessera.vocabulary import ConfigError


def test_defaults_are_valid_and_single_process() -> None:
    settings = Settings.from_env({})
    assert settings.url_prefix == "/scheduler"
    assert settings.core.default_policy == "fgd-cpu"
    assert settings.core.dialects.agent_profile == AgentProfile.ELASTIC
    assert settings.leader_election is True
    assert settings.core.preemption is True  # as kube-scheduler preempts by default
    options = server_options(settings.serving, threads=settings.serving.threads)
    assert options["workers"] == 1 and options["interface"] == "wsgi"
    assert options["ssl_cert"] is None and not options["ssl_client_verify"]


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"TESSERA_POLICY": "fastest"}, "TESSERA_POLICY='fastest'"),
        ({"TESSERA_AGENT_DIALECTS": "nano-gpu"},
         "TESSERA_AGENT_DIALECTS='nano-gpu' is replaced by TESSERA_AGENT_PROFILE"),
        ({"TESSERA_AGENT_PROFILE": "gpushare"}, "not an agent profile"),
        ({"TESSERA_DOMAIN": "gpu.example.com"}, "elastic-gpu-agent reads only"),
        ({"TESSERA_ALLOCATOR_PORT": "0"}, "TESSERA_ALLOCATOR_PORT"),
        ({"TESSERA_LEADER_ELECTION": "maybe"}, "must be true or false"),
        ({"TESSERA_ALLOCATOR_TLS_CERT": "/nonexistent.crt"}, "needs both"),
        ({"TESSERA_ALLOCATOR_TLS_CLIENT_CA": "/x.pem"}, "needs a serving cert"),
        ({"TESSERA_KUBECONFIG": "/nonexistent/kubeconfig"}, "does not exist"),
        ({"TESSERA_LEASE_NAME": "Bad_Name"}, "not a valid object name"),
        ({"TESSERA_DOMAIN": "not a domain"}, "TESSERA_DOMAIN"),
    ],
)
def test_bad_configuration_is_refused_at_start_with_the_variable_named(
    env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        Settings.from_env(env)


def test_flags_override_environment_and_tls_enables_mutual_auth(
    tmp_path: pathlib.Path,
) -> None:
    for name in ("tls.crt", "tls.key", "ca.crt"):
        (tmp_path / name).write_text("x")
    argv = ["allocator", "--policy", "spread", "--agent-profile", "nano-gpu",
            "--tls-cert", str(tmp_path / "tls.crt"), "--tls-key", str(tmp_path / "tls.key"),
            "--tls-client-ca", str(tmp_path / "ca.crt"), "--leader-election", "false",
            "--url-prefix", "/gpu/"]
    args = build_parser(argv).parse_args(argv)
    settings = cli.settings_from_args(args, {"TESSERA_POLICY": "random"})
    assert settings.core.default_policy == "spread"
    assert settings.core.dialects.agent_profile == AgentProfile.NANO_GPU
    assert settings.url_prefix == "/gpu"
    assert settings.serving.port == 8443 and not settings.leader_election
    options = server_options(settings.serving, threads=settings.serving.threads)
    assert options["ssl_ca"] == tmp_path / "ca.crt" and options["ssl_client_verify"]


def test_preemption_is_on_by_default_and_turned_off_by_the_variable_or_the_flag() -> None:
    assert Settings.from_env({}).core.preemption is True
    assert Settings.from_env({"TESSERA_PREEMPTION": "false"}).core.preemption is False
    argv = ["allocator", "--preemption", "false", "--allow-unauthenticated"]
    args = build_parser(argv).parse_args(argv)
    assert cli.settings_from_args(args, {"TESSERA_PREEMPTION": "true"}).core.preemption is False
    with pytest.raises(ConfigError, match="TESSERA_PREEMPTION"):
        Settings.from_env({"TESSERA_PREEMPTION": "sometimes"})


@pytest.mark.parametrize(
    ("argv", "env", "refused"),
    [
        ([], {}, True),  # plain HTTP by default: refused
        (["--tls-cert", "{d}/tls.crt", "--tls-key", "{d}/tls.key"], {}, True),
        (["--allow-unauthenticated"], {}, False),
        ([], {"TESSERA_ALLOCATOR_ALLOW_UNAUTHENTICATED": "true"}, False),
        (["--tls-cert", "{d}/tls.crt", "--tls-key", "{d}/tls.key",
          "--tls-client-ca", "{d}/ca.crt"], {}, False),
    ],
)
def test_serving_without_client_certificates_is_an_explicit_choice(
    tmp_path: pathlib.Path, argv: list[str], env: dict[str, str], refused: bool,
) -> None:
    for name in ("tls.crt", "tls.key", "ca.crt"):
        (tmp_path / name).write_text("x")
    full = ["allocator", *(a.format(d=tmp_path) for a in argv)]
    args = build_parser(full).parse_args(full)
    if refused:
        with pytest.raises(ConfigError, match="--allow-unauthenticated"):
            cli.settings_from_args(args, env)
    else:
        settings = cli.settings_from_args(args, env)
        assert settings.allow_unauthenticated is (not settings.serving.tls_client_ca)


def test_run_reports_bad_configuration_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["allocator", "--policy", "nope"]
    args = build_parser(argv).parse_args(argv)
    assert cli.run(args) == 2
    assert "TESSERA_POLICY='nope'" in capsys.readouterr().err
