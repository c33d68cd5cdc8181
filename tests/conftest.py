"""Shared by every test directory: tests/builders.py, and the repository on the import path.

pytest puts tests/ on ``sys.path`` for this file, which is what makes ``from builders import
...`` work everywhere. The repository root goes before it: tests/webhook, tests/allocator and
tests/bench must never shadow the packages of the same name, and bench/ (benchmarks, not an
installed package) becomes importable.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[1])
if sys.path[:1] != [ROOT]:
    sys.path.insert(0, ROOT)
