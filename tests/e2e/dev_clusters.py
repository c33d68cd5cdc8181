"""How a test module runs its dev cluster: started, and stopped at the end with its files kept
(and where said) when a test failed meanwhile; or shared with the modules that import its
fixture and run right after it."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import pytest

from devcluster.cluster import DevCluster
from devcluster.nodes import GpuNodeSpec

#: The dev clusters handed on to the next module, by the fixture that made them, with the
#: session's failure count when each started.
_HANDED_ON: dict[object, tuple[DevCluster, int]] = {}


@contextmanager
def running(dev: DevCluster, request: pytest.FixtureRequest, label: str,
            nodes: Sequence[GpuNodeSpec] = ()) -> Iterator[DevCluster]:
    """``dev`` started with ``nodes``; stopped on leaving, its logs kept if a test failed."""
    failed_before = request.session.testsfailed
    dev.start(nodes)
    try:
        yield dev
    finally:
        _stop(dev, request, label, failed_before)


def _stop(dev: DevCluster, request: pytest.FixtureRequest, label: str,
          failed_before: int) -> None:
    failed = request.session.testsfailed > failed_before
    dev.stop(keep_files=failed)
    if failed:
        print(f"\ne2e: {label} logs kept in {dev.workdir}", file=sys.stderr)


@contextmanager
def shared(make: Callable[[], DevCluster], request: pytest.FixtureRequest,
           label: str) -> Iterator[DevCluster]:
    """A module-scoped fixture's dev cluster that the next module of the run keeps when it
    imports the same fixture (``from test_hami import cluster``): made and started by the
    first of them, stopped (as :func:`running` does) after the last; stopped at the end of
    the session whatever happens."""
    fixture = getattr(request.module, request.fixturename)
    if fixture in _HANDED_ON:
        dev, failed_before = _HANDED_ON.pop(fixture)
    else:
        dev, failed_before = make(), request.session.testsfailed
        dev.start()
        request.config.add_cleanup(lambda: _stop_handed_on(fixture, request, label))
    try:
        yield dev
    finally:
        if _next_module_imports(request, fixture):
            _HANDED_ON[fixture] = (dev, failed_before)
        else:
            _stop(dev, request, label, failed_before)


def _next_module_imports(request: pytest.FixtureRequest, fixture: object) -> bool:
    """Whether the module run after this one (in the session's selection) has ``fixture``."""
    items = request.session.items
    mine = [i for i, item in enumerate(items) if getattr(item, "module", None) is request.module]
    if not mine or mine[-1] + 1 >= len(items) or request.session.shouldstop:
        return False
    following = getattr(items[mine[-1] + 1], "module", None)
    return getattr(following, request.fixturename, None) is fixture


def _stop_handed_on(fixture: object, request: pytest.FixtureRequest, label: str) -> None:
    """A cluster handed on to a module that never ran (the session stopped early)."""
    handed = _HANDED_ON.pop(fixture, None)
    if handed is not None:
        dev, failed_before = handed
        _stop(dev, request, label, failed_before)
