"""No module in allocator/ over 400 lines (issue 38): a module that grows past that is split
along a seam a reader can name (as allocator/hami/ is: the register annotation, the pod's
annotations and the node lock's format, the bind's writer, the lock's protocol)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 400


def line_count(path: Path) -> int:
    """Lines as ``wc -l`` counts them (a last line without a newline counts too)."""
    return len(path.read_text().splitlines())


def test_no_module_in_the_allocator_is_over_400_lines() -> None:
    sizes = {path.relative_to(ROOT).as_posix(): line_count(path)
             for path in sorted((ROOT / "allocator").rglob("*.py"))}
    assert len(sizes) > 20  # the walk found the package
    over = [f"{name}: {lines} lines" for name, lines in sizes.items() if lines > MAX_LINES]
    assert over == [], f"over {MAX_LINES} lines: {over}"


def test_the_count_is_wc_l(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x = 1\ny = 2\n")
    (tmp_path / "b.py").write_text("x = 1\ny = 2")
    assert [line_count(tmp_path / n) for n in ("a.py", "b.py")] == [2, 2]
