"""Child processes of the dev cluster: own process group, log file, clean teardown."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

from devcluster import DevClusterError

logger = logging.getLogger(__name__)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nobody listens on right now.

    There is a small window between closing the probe socket and the child binding the port;
    on a loopback-only test machine that is acceptable, and a failed bind shows in the log.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def no_proxy_env() -> dict[str, str]:
    """Our environment minus proxies: every address here is loopback."""
    env = {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy")}
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    return env


def tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


class ManagedProcess:
    """One child in its own session (process group) with stdout+stderr to a log file.

    The process group matters: gunicorn forks workers, and a SIGTERM to the master alone can
    leave them behind holding the port; killing the group takes everything.
    """

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        pipe_stdin: bool = False,
        stop_seconds: float = 10.0,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        #: Give the child a pipe on stdin (:attr:`stdin`) instead of /dev/null.
        self.pipe_stdin = pipe_stdin
        #: How long :meth:`stop` waits after its signal before SIGKILL, unless told.
        self.stop_seconds = stop_seconds
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def stdin(self) -> IO[bytes] | None:
        """The child's stdin when started with ``pipe_stdin``."""
        return self._proc.stdin if self._proc else None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            log.write(f"# {' '.join(self.argv)}\n".encode())
            log.flush()
            try:
                self._proc = subprocess.Popen(
                    self.argv,
                    stdin=subprocess.PIPE if self.pipe_stdin else subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=self.env,
                    cwd=self.cwd,
                    start_new_session=True,
                )
            except OSError as exc:
                raise DevClusterError(f"{self.name}: cannot start {self.argv[0]}: {exc}") from exc
        logger.info("started %s (pid %s), log %s", self.name, self._proc.pid, self.log_path)

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def check_alive(self) -> None:
        """Raise with the log's tail when the process has exited."""
        if self._proc is None:
            raise DevClusterError(f"{self.name} was never started")
        code = self._proc.poll()
        if code is not None:
            raise DevClusterError(
                f"{self.name} exited with code {code}; last lines of {self.log_path}:\n"
                f"{tail(self.log_path)}"
            )

    def terminate(self) -> None:
        """SIGTERM to the group, not waited for (:meth:`stop` waits): stops that overlap."""
        if self._proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGTERM)

    def stop(self, timeout: float | None = None, sig: int = signal.SIGTERM) -> None:
        """Signal the whole process group, wait (``timeout``, else :attr:`stop_seconds`),
        then SIGKILL what is left."""
        proc = self._proc
        if proc is None:
            return
        if timeout is None:
            timeout = self.stop_seconds
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            logger.warning("%s did not stop in %gs; killing", self.name, timeout)
        # Whatever the leader did, make sure no member of the group survives it.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            logger.error("%s (pid %s) survived SIGKILL", self.name, proc.pid)
        self._proc = None

    def kill(self) -> None:
        """SIGKILL the group at once: a crash, as the e2e restart test needs."""
        self.stop(timeout=5.0, sig=signal.SIGKILL)


def http_ok(url: str, context: ssl.SSLContext | None = None, timeout: float = 5) -> bool:
    """True when GET ``url`` answers 200; an HTTP error status means "not ready yet"."""
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=context) as resp:
            return bool(resp.status == 200)
    except urllib.error.HTTPError:
        return False


#: How often a start-up wait polls what is ready within a second or so (a health endpoint on
#: loopback); the API server's boot, seconds long, is polled at the default.
QUICK_POLL_S = 0.05


def wait_until(
    what: str,
    probe: Callable[[], bool],
    timeout: float,
    interval: float = 0.2,
    watch: Sequence[ManagedProcess] = (),
) -> None:
    """Poll ``probe`` until it returns True; fail fast when a watched process dies."""
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        for proc in watch:
            proc.check_alive()
        try:
            if probe():
                return
            last_error = None
        except Exception as exc:  # a probe failing is the normal "not yet"
            last_error = exc
        if time.monotonic() > deadline:
            detail = f" (last error: {last_error})" if last_error else ""
            logs = "".join(f"\n--- {p.log_path} ---\n{tail(p.log_path)}" for p in watch)
            raise DevClusterError(
                f"timed out after {timeout:.0f}s waiting for {what}{detail}{logs}"
            )
        time.sleep(interval)
