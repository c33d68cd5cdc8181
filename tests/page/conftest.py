"""The allocator's page in a real browser: the allocator's test helpers are shared."""

from __future__ import annotations

import sys
from pathlib import Path

# alloc_harness and fake_kube live beside the allocator's tests (builders: tests/builders.py).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "allocator"))
