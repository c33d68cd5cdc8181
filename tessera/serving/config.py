"""What the webhook and the allocator share to be configured: listener, TLS files, flags.

Both services read ``TESSERA_*`` environment variables into one frozen value and refuse to start
with a :class:`~tessera.vocabulary.ConfigError` that names *every* problem at once (one round
trip to fix a manifest, not one per typo). Their ``tessera <service>`` subcommands map one flag
onto each variable, so the CLI and a bare server target (``webhook.app:create_app()``,
``allocator.service.app:create_app()``) read configuration the same way.

Pieces:

- :class:`EnvReader` reads text, whole numbers in a range, true/false switches and the log level,
  collecting problems; :meth:`EnvReader.listener` reads a :class:`Listener` (the
  ``<PREFIX>_HOST/_PORT/_TLS_*/_WORKERS/_THREADS`` family, its defaults, flags and help) into
  a :class:`ServingConfig`.
- :func:`add_env_flags` / :func:`env_with_flags`: flags over environment; the dialect
  variables both services accept (:data:`DIALECT_FLAGS`, :data:`DIALECT_ENV_HELP`).
- :func:`start`: configuration read at start (a problem is printed, exit status 2), logging set.

The servers that serve this configuration: :mod:`tessera.serving.gunicorn` (the webhook) and
:mod:`tessera.serving.granian` (the allocator).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final, Protocol, TypeVar

from tessera import logs
from tessera.serving.tls import TlsFiles
from tessera.vocabulary import ConfigError

#: A Kubernetes object name (Lease, scheduler): lowercase, digits, '-' and '.', at most 253.
OBJECT_NAME: Final = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
#: Accepted values of ``TESSERA_LOG_LEVEL`` (and ``--log-level``).
LOG_LEVELS: Final = ("DEBUG", "INFO", "WARNING", "ERROR")
_TRUE: Final = ("1", "true", "yes", "on")
_FALSE: Final = ("0", "false", "no", "off")

#: flag dest -> (flag, environment variable it overrides)
EnvFlags = Mapping[str, tuple[str, str]]

T = TypeVar("T")


@dataclass(frozen=True)
class ServingConfig:
    """Where and how one service listens: address, TLS files, request threads, workers."""

    host: str = "0.0.0.0"
    port: int = 8443
    tls_cert: str | None = None
    tls_key: str | None = None
    #: When set, clients must present a certificate this CA signed (mutual TLS).
    tls_client_ca: str | None = None
    threads: int = 4
    workers: int = 1
    log_level: str = "INFO"

    @property
    def bind(self) -> str:
        """``host:port``; an IPv6 host goes in brackets."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def tls_files(self) -> TlsFiles | None:
        """The files to serve HTTPS with; None (plain HTTP) unless a certificate and a key
        are both given."""
        if self.tls_cert and self.tls_key:
            return TlsFiles(self.tls_cert, self.tls_key, self.tls_client_ca)
        return None

    def missing_tls_files(self) -> list[str]:
        """A problem per given TLS file that does not exist (checked at start so a typo is a
        clear error, not a crash loop inside a server's worker boot)."""
        return [
            f"TLS {label} file {path!r} does not exist"
            for label, path in (
                ("certificate", self.tls_cert),
                ("key", self.tls_key),
                ("client CA", self.tls_client_ca),
            )
            if path and not os.path.isfile(path)
        ]


@dataclass(frozen=True)
class Listener:
    """One service's listener variables ``<prefix>_HOST``, ``_PORT``, ``_TLS_CERT``,
    ``_TLS_KEY``, ``_TLS_CLIENT_CA``, (``_WORKERS``), ``_THREADS`` and ``TESSERA_LOG_LEVEL``:
    their defaults, flags and help, kept in one place."""

    prefix: str
    port: int
    threads: int
    #: Default port when a certificate is given (TLS optional); None: ``port`` either way.
    tls_port: int | None = None
    #: Default of ``<prefix>_WORKERS``; None: always one process and no such variable.
    workers: int | None = None
    #: Who must present a certificate under mutual TLS (help text).
    clients: str = "clients"

    def defaults(self) -> ServingConfig:
        return ServingConfig(port=self.port, threads=self.threads, workers=self.workers or 1)

    def flags(self) -> dict[str, tuple[str, str]]:
        names = ["host", "port", "tls_cert", "tls_key", "tls_client_ca", "workers", "threads"]
        flags = {
            dest: (f"--{dest.replace('_', '-')}", f"{self.prefix}_{dest.upper()}")
            for dest in names
            if dest != "workers" or self.workers is not None
        }
        return flags | {"log_level": ("--log-level", "TESSERA_LOG_LEVEL")}

    def env_help(self) -> dict[str, str]:
        p = self.prefix
        with_tls = f", or {self.tls_port} with TLS" if self.tls_port is not None else ""
        optional = " (optional; HTTPS when set)" if self.tls_port is not None else ""
        threads = (
            f"request threads of the single worker (default {self.threads})"
            if self.workers is None
            else f"threads per worker (default {self.threads})"
        )
        described = {
            f"{p}_HOST": "address to listen on (default 0.0.0.0)",
            f"{p}_PORT": f"port to listen on (default {self.port}{with_tls})",
            f"{p}_TLS_CERT": f"PEM serving certificate (chain) file{optional}",
            f"{p}_TLS_KEY": "PEM private key file",
            f"{p}_TLS_CLIENT_CA": f"PEM CA file; when set, {self.clients} must present a cert "
            "it signed",
            f"{p}_THREADS": threads,
            "TESSERA_LOG_LEVEL": "DEBUG, INFO (default), WARNING or ERROR",
        }
        if self.workers is not None:
            described[f"{p}_WORKERS"] = f"gunicorn worker processes (default {self.workers})"
        return described


#: The dialect variables (read by :meth:`tessera.dialects.DialectConfig.from_env`) that both
#: services accept, as flag dest -> (flag, variable), and their meaning.
DIALECT_FLAGS: Final[EnvFlags] = {
    "domain": ("--domain", "TESSERA_DOMAIN"),
    "dialects": ("--dialects", "TESSERA_DIALECTS"),
    "agent_profile": ("--agent-profile", "TESSERA_AGENT_PROFILE"),
    "hami_agent": ("--hami-agent", "TESSERA_HAMI_AGENT"),
    "aliyun_memory_unit": ("--aliyun-memory-unit", "TESSERA_ALIYUN_MEMORY_UNIT"),
    "nano_gpu_memory_unit": ("--nano-gpu-memory-unit", "TESSERA_NANO_GPU_MEMORY_UNIT"),
}
DIALECT_ENV_HELP: Final[Mapping[str, str]] = {
    "TESSERA_DOMAIN": "vocabulary domain of canonical keys (default elasticgpu.io)",
    "TESSERA_DIALECTS": "comma-separated dialects to normalise (default "
    "elastic,percent,fraction,nano-gpu,aliyun,genius,volcano,gpu-manager,koordinator; "
    "add hami or kai to opt in)",
    "TESSERA_AGENT_PROFILE": "node agent the cluster's GPU nodes run, set alike on the "
    "webhook and the allocator: elastic (default), nano-gpu, aliyun, hami or volcano-vgpu "
    "(docs/agents.md)",
    "TESSERA_HAMI_AGENT": "with agent profile hami, an older HAMi release, set alike on the "
    "webhook and the allocator: hami-v2.8 (HAMi up to v2.8.x: GPU init containers are "
    "refused); empty (default) for v2.9 or later (docs/hami.md)",
    "TESSERA_ALIYUN_MEMORY_UNIT": "unit of aliyun.com/gpu-mem: GiB (default) or MiB",
    "TESSERA_NANO_GPU_MEMORY_UNIT": "unit of nano-gpu.io/gpu-memory: GiB (default) or MiB",
}


class EnvReader:
    """Reads variables from ``env``; a bad value is noted in :attr:`problems` and replaced by
    its default, so reading goes on and :meth:`check` can name every problem at once."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env
        self.problems: list[str] = []

    def problem(self, message: str) -> None:
        self.problems.append(message)

    def text(self, name: str) -> str | None:
        """The stripped value; unset and blank are both None."""
        return self.env.get(name, "").strip() or None

    def integer(self, name: str, default: int, low: int, high: int) -> int:
        raw = self.text(name)
        if raw is None:
            return default
        # isascii: "²".isdigit() is True but int() refuses it (a traceback, not a problem).
        if not (raw.isascii() and raw.isdigit()) or not low <= int(raw) <= high:
            self.problem(f"{name}={raw!r} must be a whole number {low}-{high}")
            return default
        return int(raw)

    def flag(self, name: str, default: bool) -> bool:
        raw = (self.text(name) or "").lower()
        if not raw:
            return default
        if raw not in _TRUE + _FALSE:
            self.problem(f"{name}={raw!r} must be true or false")
            return default
        return raw in _TRUE

    def log_level(self, name: str = "TESSERA_LOG_LEVEL") -> str:
        level = (self.text(name) or "INFO").upper()
        if level not in LOG_LEVELS:
            self.problem(f"{name}={level!r} must be one of {', '.join(LOG_LEVELS)}")
        return level

    def collect(self, read: Callable[[Mapping[str, str]], T], fallback: T) -> T:
        """``read(env)``, a reader of its own that raises :class:`ConfigError`: its message
        joins ours and ``fallback`` stands in."""
        try:
            return read(self.env)
        except ConfigError as exc:
            self.problem(str(exc))
            return fallback

    def listener(self, spec: Listener) -> ServingConfig:
        """The variables of ``spec`` (see :meth:`Listener.env_help`) and ``TESSERA_LOG_LEVEL``.
        File existence is not checked here (see :meth:`ServingConfig.missing_tls_files`)."""
        prefix = spec.prefix
        tls_cert = self.text(f"{prefix}_TLS_CERT")
        port = spec.tls_port if spec.tls_port is not None and tls_cert else spec.port
        return ServingConfig(
            host=self.text(f"{prefix}_HOST") or "0.0.0.0",
            port=self.integer(f"{prefix}_PORT", port, 1, 65535),
            tls_cert=tls_cert,
            tls_key=self.text(f"{prefix}_TLS_KEY"),
            tls_client_ca=self.text(f"{prefix}_TLS_CLIENT_CA"),
            threads=self.integer(f"{prefix}_THREADS", spec.threads, 1, 256),
            workers=(1 if spec.workers is None
                     else self.integer(f"{prefix}_WORKERS", spec.workers, 1, 64)),
            log_level=self.log_level(),
        )

    def check(self, heading: str) -> None:
        """Raise one :class:`ConfigError` ``"<heading>: p1; p2; ..."`` if anything was wrong."""
        if self.problems:
            raise ConfigError(f"{heading}: " + "; ".join(self.problems))


def add_env_flags(
    parser: argparse.ArgumentParser, flags: EnvFlags, env_help: Mapping[str, str]
) -> None:
    """One flag per variable, default None (= not given), help ``"<meaning> [<VARIABLE>]"``."""
    for dest, (flag, env) in flags.items():
        parser.add_argument(flag, dest=dest, default=None, help=f"{env_help[env]} [{env}]")


def env_with_flags(
    args: argparse.Namespace, flags: EnvFlags, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """A copy of ``environ`` (default: this process's) in which every flag given overrides
    its variable."""
    env = dict(os.environ if environ is None else environ)
    for dest, (_flag, name) in flags.items():
        value = getattr(args, dest, None)
        if value is not None:
            env[name] = str(value)
    return env


class _Served(Protocol):
    @property
    def serving(self) -> ServingConfig: ...


S = TypeVar("S", bound=_Served)


def start(command: str, read: Callable[[], S]) -> S | None:
    """A service's configuration at start: ``read()``, then logging set to its level. A
    :class:`ConfigError` is printed as ``<command>: <message>`` on stderr and None returned
    (the caller exits with status 2, bad usage)."""
    try:
        config = read()
    except ConfigError as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return None
    logs.configure(config.serving.log_level)
    return config
