"""The README's main job: the demo (`python -m devcluster`, as hack/demo.sh runs it) on its own
control plane, start to first table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from devcluster.binaries import repo_root

pytestmark = pytest.mark.e2e


def test_the_demo_places_every_example_and_every_applied_workload(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "devcluster", "--no-wait", "--workdir", str(tmp_path / "demo")],
        capture_output=True, text=True, timeout=600, check=False, cwd=repo_root(),
    )
    out = result.stdout
    assert result.returncode == 0, result.stderr[-3000:]
    assert "refused" not in out and "invalid" not in out.lower(), out
    assert "deployment.apps/cuda-10c created" in out
    assert "job.batch/quarter-card-job created" in out
    # --no-wait stops at once: no playground is offered for a cluster about to be deleted.
    assert "playground" not in out and "export PATH" not in out, out
    table = out[out.index("Who got which card"):]
    assert "`kubectl tessera inspect`'s table" in table.splitlines()[0]
    # Pods the controllers made from the applied Deployments and Job hold cards.
    assert table.count("demo/cuda-10c-") == 3, table
    assert table.count("demo/cuda-gpu-test-") == 1, table
    assert table.count("demo/quarter-card-job-") == 2, table
    # The one impossible example is the only pod left waiting, with the allocator's reason.
    pending_block = table[table.index("Still Pending"):].split("\n\n")[0].splitlines()[1:]
    assert len(pending_block) == 1, pending_block
    assert pending_block[0].startswith("  genius-five-cards: ")
    assert "needs 5 whole cards" in pending_block[0]
