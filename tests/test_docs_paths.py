"""The docs and the code's comments cite what exists (issue 45): every repository path a doc,
a comment or a docstring names is there, every module name resolves, every ``Class.member``
of a class of ours is declared, every relative link and anchor lands; the README's results
name the commit they were measured at; the benchmark page stays readable (at most 400 lines).

What counts as a path or a module name, and how another project's path is told from ours:
tests/doc_references.py.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
from doc_references import (
    Citation,
    ClassFacts,
    Passage,
    anchors,
    cited_members,
    cited_modules,
    cited_paths,
    classes_in,
    hash_comment_passages,
    markdown_links,
    markdown_passages,
    python_passages,
)

ROOT = Path(__file__).resolve().parents[1]
PYTHON_FOLDERS = ("allocator", "webhook", "tessera", "kubectl_tessera", "certs", "devcluster",
                  "bench", "hack", "tests")
BENCHMARK_PAGE_MAX_LINES = 400


def markdown_files() -> list[Path]:
    found = [ROOT / "README.md", *ROOT.glob("docs/**/*.md"), *ROOT.glob("charts/**/README*"),
             *ROOT.glob("manifests/**/*.md"), *ROOT.glob("examples/**/*.md"),
             *ROOT.glob("bench/**/*.md")]
    # bench/results holds what the benchmarks printed, not prose.
    return sorted(p for p in found if "results" not in p.relative_to(ROOT).parts)


def python_files() -> list[Path]:
    return sorted(p for folder in PYTHON_FOLDERS for p in (ROOT / folder).rglob("*.py"))


def script_and_manifest_files() -> list[Path]:
    found = [*ROOT.glob("hack/*.sh"), ROOT / "Dockerfile", ROOT / ".ci" / "run",
             ROOT / "pyproject.toml", ROOT / ".importlinter"]
    for folder in ("charts", "manifests", "examples", "plugins"):
        found += [p for p in (ROOT / folder).rglob("*")
                  if p.suffix in (".yaml", ".yml", ".tpl", ".txt")]
    return sorted(found)


def passages(path: Path) -> Iterator[Passage]:
    text = path.read_text()
    if path.suffix == ".py":
        return python_passages(text)
    if path.suffix == ".md" or path.name.startswith("README"):
        return markdown_passages(text)
    return hash_comment_passages(text)


@functools.cache
def every_passage() -> tuple[tuple[str, Passage], ...]:
    """Every passage of the docs, the code and the manifests, by the file it is in (read once
    for the tests below)."""
    return tuple((path.relative_to(ROOT).as_posix(), passage)
                 for path in [*markdown_files(), *python_files(), *script_and_manifest_files()]
                 for passage in passages(path))


def exists(name: str) -> bool:
    target = ROOT / name
    return target.is_dir() if name.endswith("/") else target.exists()


def has_member(owner: object, name: str) -> bool:
    """``getattr`` finds it, or the class declares it (a dataclass field without a default,
    an attribute its methods set on ``self``)."""
    if hasattr(owner, name):
        return True
    if not inspect.isclass(owner):
        return False
    for cls in owner.__mro__:
        if name in getattr(cls, "__annotations__", {}):
            return True
        try:
            source = inspect.getsource(cls)
        except (OSError, TypeError):
            continue
        if re.search(rf"\bself\.{name}\s*[:=]", source):
            return True
    return False


def resolves(dotted: str) -> bool:
    """The longest importable prefix of ``dotted``, then its attributes one by one."""
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            target: object = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for index, name in enumerate(parts[split:], split):
            if not has_member(target, name):
                return False
            if not hasattr(target, name):  # declared, not set on the class: nothing deeper
                return index == len(parts) - 1
            target = getattr(target, name)
        return True
    return False


Classes = dict[str, list[ClassFacts]]


def our_classes() -> Classes:
    index: Classes = {}
    for path in python_files():
        for name, facts in classes_in(path.read_text()):
            index.setdefault(name, []).append(facts)
    return index


def declares(classes: Classes, cls: str, member: str, seen: frozenset[str] = frozenset()
             ) -> bool:
    """Whether a class of ours by that name declares ``member``, itself or through a base;
    a base that is not ours (``Enum``, a library's class) may declare anything."""
    for facts in classes.get(cls, []):
        if member in facts.members:
            return True
        for base in facts.bases:
            if base not in classes or (base not in seen
                                       and declares(classes, base, member, seen | {cls})):
                return True
    return False


def report(found: Iterable[tuple[str, Citation]]) -> list[str]:
    return [f"{where}:{citation.line} {citation.name}" for where, citation in found]


def test_every_repository_path_a_doc_or_comment_names_exists() -> None:
    cited = [(where, c) for where, p in every_passage() for c in cited_paths(p)]
    assert len(cited) > 300  # the walk found the docs and the code
    missing = [(where, c) for where, c in cited if not c.upstream and not exists(c.name)]
    assert not missing, "\n".join(report(missing))


def test_every_module_a_doc_or_comment_names_resolves() -> None:
    cited = [(where, c) for where, p in every_passage() for c in cited_modules(p)]
    assert len(cited) > 100
    unresolved = [(where, c) for where, c in cited if not resolves(c.name)]
    assert not unresolved, "\n".join(report(unresolved))


def test_every_member_of_our_classes_a_doc_or_comment_names_exists() -> None:
    classes = our_classes()
    cited = [(where, c) for where, p in every_passage() for c in cited_members(p)
             if c.name.split(".")[0] in classes]
    assert len(cited) > 50
    unknown = [(where, c) for where, c in cited if not declares(classes, *c.name.split("."))]
    assert not unknown, "\n".join(report(unknown))


def test_every_relative_link_and_anchor_in_the_docs_lands() -> None:
    broken = []
    for page in markdown_files():
        for link in markdown_links(page.read_text()):
            file, _, anchor = link.name.partition("#")
            target = (page.parent / file).resolve() if file else page
            landed = target.exists() and (
                not anchor or target.suffix != ".md" or anchor in anchors(target.read_text()))
            if not landed:
                broken.append((page.relative_to(ROOT).as_posix(), link))
    assert not broken, "\n".join(report(broken))


def test_the_benchmark_page_is_at_most_400_lines() -> None:
    # One section per benchmark, current figures only; the history has a page of its own.
    lines = len((ROOT / "docs" / "benchmarks.md").read_text().splitlines())
    assert lines <= BENCHMARK_PAGE_MAX_LINES, f"docs/benchmarks.md: {lines} lines"


# The matcher on the mistakes it is there to catch, and on what it must leave alone.

STALE = "allocator/" + "fit.py"  # split so this file's own scan does not see it


@pytest.mark.parametrize(("text", "paths"), [
    (f"the allocator reserves both ({STALE}), so", [STALE]),
    (f"see `{STALE}`.", [STALE]),
    ("served by tessera/granian_server.py; the page: allocator/service/page.html",
     ["tessera/granian_server.py", "allocator/service/page.html"]),
    ("`allocator/hami/` holds the lock", ["allocator/hami/"]),
    ("Log: bench/results/openb/live_x.log.", ["bench/results/openb/live_x.log"]),
    ("HAMi `pkg/device/devices.go`, gunicorn `workers/gthread.py`", []),
    ("git show 03e613a:docs/benchmarks.md", []),
    ("https://github.com/Project-HAMi/HAMi/blob/v2.10.0/docs/develop/protocol.md", []),
    ("~/.cache/tessera/controlplane and ../shared/data/openb", []),
])
def test_the_paths_cited_in_prose(text: str, paths: list[str]) -> None:
    assert [c.name for c in cited_paths(Passage(1, text))] == paths


@pytest.mark.parametrize(("text", "upstream"), [
    ("reserves both (allocator/fit.py)", False),
    ("the strings of HAMi's\n`docs/develop/protocol.md`", True),
    ("KAI's docs/gpu-sharing/x.yaml", True),
    ("Volcano vGPU (volcano-sh/volcano docs/user-guide/x.md): one vGPU", True),
    ("the chart (charts/tessera/x.yaml)", False),
    ("`allocator/verbs/` docs/gone.md", False),  # a folder of ours is not another repository
    ("HAMi's own default is binpack (`charts/hami/values.yaml:76-78`)", True),
    ("the chart's Service selector `charts/hami/templates/service.yaml:34`", True),
    ("the chart's Service selector `charts/hami/templates/service.yaml`", False),
    ("Tessera's docs/gone.md", False),
    ("Project-HAMi/HAMi ``v2.10.0``: ``charts/hami/values.yaml``", True),
    ("(`pkg/device/devices.go`); the example of `docs/develop/protocol.md`", True),
    ("docs/develop/protocol.md, then HAMi v2.10.0", False),  # the version comes after it
])
def test_another_projects_path_is_told_by_what_comes_before_it(
        text: str, upstream: bool) -> None:
    *_, last = cited_paths(Passage(1, text))
    assert last.upstream is upstream


def test_a_stale_path_in_a_comment_is_found_on_its_line() -> None:
    source = f'"""Docs."""\n\nx = 1\n# one line\n# the allocator reserves ({STALE})\n'
    found = [c for p in python_passages(source) for c in cited_paths(p)]
    assert found == [Citation(STALE, 5)]
    assert not exists(STALE)


def test_a_stale_path_in_a_docstring_paragraph_and_a_table_cell_is_found() -> None:
    source = f'def f() -> None:\n    """Do.\n\n    As {STALE} did."""\n'
    assert [c.line for p in python_passages(source) for c in cited_paths(p)] == [4]
    table = f"| a | b |\n|---|---|\n| `{STALE}` | HAMi v2.10 `docs/x.md` |\n"
    found = [c for p in markdown_passages(table) for c in cited_paths(p)]
    assert [(c.name, c.line, c.upstream) for c in found] == [
        (STALE, 3, False), ("docs/x.md", 3, True)]


@pytest.mark.parametrize(("text", "modules"), [
    ("(:mod:`tessera.granian_server`)", ["tessera.granian_server"]),
    ("(:meth:`~allocator.state.ClusterState.apply_sample`)",
     ["allocator.state.ClusterState.apply_sample"]),
    ("is spelled out (`allocator.core.event_safe`).", ["allocator.core.event_safe"]),
    ("target (``allocator.app:create_app()``)", ["allocator.app.create_app"]),
    ("`allocator.replicas`, `devcluster.tessera.dev/hami-envs`, allocator.md", []),
    (":data:`WORST`", []),
])
def test_the_module_names_cited_in_prose(text: str, modules: list[str]) -> None:
    assert [c.name for c in cited_modules(Passage(1, text))] == modules


@pytest.mark.parametrize(("dotted", "found"), [
    ("allocator.verbs.filter", True),
    ("allocator.picture.state.ClusterState", True),
    ("tessera.serving.granian.server.serve", True),
    ("tessera.granian_server", False),
    ("allocator.core.event_safe", False),
    ("allocator.picture.state.ClusterState.no_such_method", False),
])
def test_a_module_name_resolves_to_a_module_or_its_attribute(dotted: str, found: bool) -> None:
    assert resolves(dotted) is found


def test_a_member_is_found_in_the_class_or_its_bases() -> None:
    source = ("import enum\nclass Base:\n    def hold(self) -> None:\n        self.until = 1\n"
              "class State(Base):\n    size: int\nclass Stage(enum.Enum):\n    HELD = 1\n")
    classes: Classes = {}
    for name, facts in classes_in(source):
        classes.setdefault(name, []).append(facts)
    found = {c: declares(classes, *c.split(".")) for c in
             ("State.hold", "State.until", "State.size", "State.gone", "Stage.anything")}
    assert found == {"State.hold": True, "State.until": True, "State.size": True,
                     "State.gone": False, "Stage.anything": True}
    text = "as `Allocator._hold` did; ClusterState.apply_pod's rules; allocator.Foo.bar"
    assert [c.name for c in cited_members(Passage(1, text))] == [
        "Allocator._hold", "ClusterState.apply_pod"]


def test_github_anchors_of_headings() -> None:
    page = "# Benchmarks\n## Issue 38: end to end before and after\n## `x` (y)\n## Summary\n" \
           "```\n# not a heading\n```\n## Summary\n"
    assert anchors(page) == {"benchmarks", "issue-38-end-to-end-before-and-after", "x-y",
                             "summary", "summary-1"}


def results_rows(readme: str) -> list[dict[str, str]]:
    """The README's *Results* table, a dict per row keyed by the header's cells."""
    [section] = [part for part in re.split(r"^## ", readme, flags=re.MULTILINE)
                 if part.startswith("Results\n")]
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in section.splitlines() if line.startswith("|")]
    header, body = rows[0], rows[2:]
    return [dict(zip(header, row, strict=True)) for row in body]


def test_every_readme_figure_names_the_commit_and_date_it_was_measured_at() -> None:
    rows = results_rows((ROOT / "README.md").read_text())
    assert len(rows) >= 5
    undated = [row["metric"] for row in rows
               if not re.search(r"\b[0-9a-f]{7,40}\b.*\b20\d\d-\d\d-\d\d\b", row["measured"])]
    assert not undated, undated


def test_the_results_table_is_read_by_its_header() -> None:
    readme = "## Results\n\n| metric | measured |\n|---|---|\n| a | 6677ec0, 2026-11-27 |\n" \
             "| b | |\n\n## Layout\n| x | y |\n"
    rows = results_rows(readme)
    assert rows == [{"metric": "a", "measured": "6677ec0, 2026-11-27"},
                    {"metric": "b", "measured": ""}]
