"""The speed benchmarks' split of a process's CPU by thread (bench/speed/common.py): a real
child process with a named busy thread, read through /proc and py-spy as the e2e run reads
the allocator's worker."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.speed.common import (
    cpu_by_thread_name,
    machine_cpu_ticks,
    python_thread_names,
    stolen_share,
    thread_cpu_seconds,
)

BUSY = """
import threading, time
def spin():
    end = time.monotonic() + 30
    while time.monotonic() < end:
        pass
for i in range(2):
    threading.Thread(target=spin, name=f"request_{i}", daemon=True).start()
    threading.Thread(target=time.sleep, args=(30,), name=f"body-{i + 1}", daemon=True).start()
print("ready", flush=True)
time.sleep(30)
"""


@pytest.mark.serial  # its threads' CPU, which parallel tests would take
def test_a_named_busy_thread_gets_the_cpu_and_numbered_threads_count_as_one() -> None:
    child = subprocess.Popen([sys.executable, "-c", BUSY], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        before = thread_cpu_seconds(child.pid)
        time.sleep(1.0)
        after = thread_cpu_seconds(child.pid)
        names = python_thread_names(child.pid)
    finally:
        child.kill()
        child.wait()
        if child.stdout is not None:
            child.stdout.close()
    assert sorted(set(names.values())) == ["MainThread", "body", "request"]
    used = cpu_by_thread_name(before, after, names)
    assert used["request"] > 0.3  # two spinning threads for a second, on a busy machine
    assert used.get("MainThread", 0.0) < 0.1  # asleep


def test_threads_without_a_name_count_as_other() -> None:
    used = cpu_by_thread_name({1: 1.0, 2: 0.5}, {1: 3.0, 2: 0.75, 3: 1.0}, {1: "MainThread"})
    assert used == {"MainThread": 2.0, "other": 1.25}


def test_the_stolen_share_is_read_from_the_steal_column_of_proc_stat(tmp_path: Path) -> None:
    # proc(5): cpu user nice system idle iowait irq softirq steal guest guest_nice
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 0 50 800 10 0 5 35 20 0\ncpu0 50 0 25 400 5 0 2 18 10 0\n")
    before = machine_cpu_ticks(str(stat))
    assert before == (35, 1000)  # guest time is inside user already: not added again
    stat.write_text("cpu  200 0 100 1500 10 0 5 185 40 0\n")
    after = machine_cpu_ticks(str(stat))
    assert stolen_share(before, after) == 0.15  # 150 stolen ticks of 1,000
    assert stolen_share(after, after) == 0.0


def test_this_machine_reports_a_steal_column_that_only_grows() -> None:
    first = machine_cpu_ticks()
    time.sleep(0.05)
    second = machine_cpu_ticks()
    assert 0 <= first[0] <= second[0] and first[1] < second[1]
    assert 0.0 <= stolen_share(first, second) <= 1.0
