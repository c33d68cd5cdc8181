"""``bench.speed.extender_http --pause-node-writes``: the node stand-in really stops while the
reference rows are timed, and runs again after, also when the timing fails."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from bench.speed.extender_http import stopped


def state(pid: int) -> str:
    # /proc/PID/stat: "pid (comm) S ...": the state letter follows the command's ')'.
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def wait_state(pid: int, wanted: set[str]) -> str:
    deadline = time.monotonic() + 5
    while (now := state(pid)) not in wanted and time.monotonic() < deadline:
        time.sleep(0.01)
    return now


def test_the_process_group_is_stopped_inside_and_continued_after() -> None:
    child = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        with pytest.raises(RuntimeError), stopped(child.pid):
            assert wait_state(child.pid, {"T"}) == "T"
            raise RuntimeError("the timing failed")
        assert wait_state(child.pid, {"S", "R"}) in {"S", "R"}
    finally:
        child.kill()
        child.wait()
