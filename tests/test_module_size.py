"""No module over 400 lines in the shipped packages and the dev harness (issues 38 and 45): a
module that grows past that is split along a seam a reader can name (as allocator/hami/ is: the
register annotation, the pod's annotations and the node lock's format, the bind's writer, the
lock's protocol; as tessera/dialects/ is: one module per dialect family)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 400
#: Every shipped package, and the dev harness the e2e tests trust.
PACKAGES = ["allocator", "webhook", "tessera", "kubectl_tessera", "certs", "devcluster"]


def line_count(path: Path) -> int:
    """Lines as ``wc -l`` counts them (a last line without a newline counts too)."""
    return len(path.read_text().splitlines())


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_is_over_400_lines(package: str) -> None:
    sizes = {path.relative_to(ROOT).as_posix(): line_count(path)
             for path in sorted((ROOT / package).rglob("*.py"))}
    assert len(sizes) > 5  # the walk found the package
    over = [f"{name}: {lines} lines" for name, lines in sizes.items() if lines > MAX_LINES]
    assert over == [], f"over {MAX_LINES} lines in {package}/: {over}"


def test_the_count_is_wc_l(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x = 1\ny = 2\n")
    (tmp_path / "b.py").write_text("x = 1\ny = 2")
    assert [line_count(tmp_path / n) for n in ("a.py", "b.py")] == [2, 2]
