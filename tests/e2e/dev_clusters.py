"""One way for a test module to run its dev cluster: started, and stopped at the end with its
files kept (and where said) when a test failed meanwhile."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import pytest

from devcluster.cluster import DevCluster
from devcluster.nodes import GpuNodeSpec


@contextmanager
def running(dev: DevCluster, request: pytest.FixtureRequest, label: str,
            nodes: Sequence[GpuNodeSpec] = ()) -> Iterator[DevCluster]:
    """``dev`` started with ``nodes``; stopped on leaving, its logs kept if a test failed."""
    failed_before = request.session.testsfailed
    dev.start(nodes)
    try:
        yield dev
    finally:
        failed = request.session.testsfailed > failed_before
        dev.stop(keep_files=failed)
        if failed:
            print(f"\ne2e: {label} logs kept in {dev.workdir}", file=sys.stderr)
