"""The openb trace for the benchmark's tests: the real one, or a synthetic one in its format.

Tests of facts about the real trace take ``openb_trace`` and skip where it is missing; tests
of the replay machinery take ``synthetic_openb`` and run in any clone (tests/openb_synthetic.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from openb_synthetic import real_trace_or_skip, synthetic_trace


@pytest.fixture(scope="session")
def openb_trace() -> Path:
    return real_trace_or_skip()


@pytest.fixture(scope="module")
def synthetic_openb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with synthetic_trace(tmp_path_factory.mktemp("openb")) as directory:
        yield directory
