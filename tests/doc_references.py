"""What the docs and the code's comments cite of this repository: the paths, module names and
class members a reader would look up, found in prose (pure; the test walks the files).

A *passage* is the prose one citation belongs to: a Markdown paragraph or table cell, a block
of ``#`` comments (Python, shell, YAML), a paragraph of a docstring, any other line of a
script or manifest.

A *path* starts at one of the repository's top-level folders (:data:`TOP_LEVEL`) and ends in a
file name with a known extension, or in ``/`` (a folder). A path that does not exist is
*upstream*, another project's, when its passage cites another project before it: a version
tag (``v2.10.0``), ``github.com``, a Go source layout (``pkg/``, ``cmd/``, ``staging/``...),
or an upstream name's possessive or repository right before it (``HAMi's
docs/develop/protocol.md``, ``volcano-sh/volcano docs/user-guide/...``); or when it is cited
with a line (``charts/hami/values.yaml:76-78``: this repository's own files never are).

A *module name* is a dotted name that starts at one of the packages: in a Sphinx role
(``:mod:``, ``:func:``...), in entry-point form (``pkg.module:attr``), or of three or more
parts in prose. A *member* is ``Class.member``, checked when the class is one of ours.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass

#: The repository's top-level folders a cited path may start at.
TOP_LEVEL = ("allocator", "webhook", "tessera", "kubectl_tessera", "certs", "devcluster",
             "bench", "tests", "docs", "manifests", "charts", "hack", "examples", "plugins")
#: The importable packages a dotted name may start at.
PACKAGES = ("allocator", "webhook", "tessera", "kubectl_tessera", "certs", "devcluster",
            "bench")
_EXTENSIONS = "py|md|sh|yaml|yml|html|json|jsonl|txt|csv|png|log|toml|tpl"

# Not after a character that would make the token the tail of a longer path, a URL, a git
# revision (``03e613a:docs/...``) or an e-mail.
_NOT_A_TAIL = r"(?<![\w./@~:$-])"
PATH = re.compile(
    _NOT_A_TAIL + rf"((?:{'|'.join(TOP_LEVEL)})/(?:[\w-][\w.-]*/)*"
    rf"(?:[\w-][\w.-]*?\.(?:{_EXTENSIONS})(?![\w-])|(?<=/)))")
_UPSTREAM_BEFORE = re.compile(
    r"\bv\d+\.\d+|github\.com/|(?<![\w./-])(?:pkg|cmd|staging|internal|apis|web|vendor)/")
# Right before the path: a capitalised name's possessive ("HAMi's docs/...", "KAI's
# `docs/...`") or a repository that is not ours ("volcano-sh/volcano docs/...").
_NAMED_BEFORE = re.compile(
    r"(?:\b(?!Tessera)[A-Z][\w-]*'s|"
    rf"(?<![\w./-])(?!(?:{'|'.join(TOP_LEVEL)})/)[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)[\s`]*$")

_ROLE = re.compile(r":(?:mod|func|class|meth|attr|data|obj|exc):`~?([\w.]+)`")
_PACKAGE_NAME = rf"(?:{'|'.join(PACKAGES)})"
_ENTRY_POINT = re.compile(_NOT_A_TAIL + rf"({_PACKAGE_NAME}(?:\.\w+)+):(\w+)")
# Three parts or more; not a host or a label key's prefix (``devcluster.tessera.dev/x``).
_DOTTED = re.compile(_NOT_A_TAIL + rf"({_PACKAGE_NAME}(?:\.[A-Za-z_]\w*){{2,}})(?![\w/-])")


@dataclass(frozen=True)
class Passage:
    """Prose that cites: ``line`` is the line of the file its ``text`` starts on."""

    line: int
    text: str

    def line_of(self, offset: int) -> int:
        return self.line + self.text.count("\n", 0, offset)


@dataclass(frozen=True)
class Citation:
    """A path or module name cited on ``line``; ``upstream`` when the passage says it is
    another project's."""

    name: str
    line: int
    upstream: bool = False


def is_upstream(before: str, after: str = "") -> bool:
    """Whether the passage's text before a path cites another project, or the path is cited
    with a line (``values.yaml:76-78``: our own files are never cited by line)."""
    return bool(_UPSTREAM_BEFORE.search(before) or _NAMED_BEFORE.search(before)
                or re.match(r":\d", after))


def cited_paths(passage: Passage) -> list[Citation]:
    text = passage.text
    return [Citation(m.group(1), passage.line_of(m.start()),
                     is_upstream(text[:m.start()], text[m.end():]))
            for m in PATH.finditer(text)]


def cited_modules(passage: Passage) -> list[Citation]:
    """Dotted names (``tessera.vocabulary.PodRequest``) and entry points
    (``webhook.app:create_app``, cited as ``webhook.app.create_app``)."""
    text = passage.text
    found = {m.start(): Citation(f"{m.group(1)}.{m.group(2)}", passage.line_of(m.start()))
             for m in _ENTRY_POINT.finditer(text)}
    for m in _DOTTED.finditer(text):
        found.setdefault(m.start(), Citation(m.group(1), passage.line_of(m.start())))
    for m in _ROLE.finditer(text):
        if m.group(1).split(".")[0] in PACKAGES:
            found.setdefault(m.start(1), Citation(m.group(1), passage.line_of(m.start())))
    return [found[offset] for offset in sorted(found)]


def markdown_passages(text: str) -> Iterator[Passage]:
    """Paragraphs (blank lines and headings end them) and each cell of a table row."""
    paragraph: list[str] = []
    start = 1
    for number, line in enumerate([*text.splitlines(), ""], 1):
        if line.lstrip().startswith("|"):
            yield from (Passage(number, cell) for cell in line.split("|"))
            line = ""
        if not line.strip() or line.startswith("#"):
            if paragraph:
                yield Passage(start, "\n".join(paragraph))
            paragraph, start = ([line], number) if line.strip() else ([], number + 1)
            continue
        paragraph.append(line)


def python_passages(source: str) -> Iterator[Passage]:
    """Each block of consecutive ``#`` comments and each paragraph of every docstring."""
    yield from _comment_blocks(source)
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            yield from _docstring_paragraphs(node)


def hash_comment_passages(text: str) -> Iterator[Passage]:
    """Shell, Dockerfile, YAML: each block of consecutive ``#`` lines, and every other line."""
    block: list[str] = []
    start = 0
    for number, line in enumerate([*text.splitlines(), ""], 1):
        if line.lstrip().startswith("#"):
            start = start if block else number
            block.append(line.lstrip().lstrip("#").strip())
            continue
        if block:
            yield Passage(start, "\n".join(block))
            block = []
        yield Passage(number, line)


def _comment_blocks(source: str) -> Iterator[Passage]:
    block: list[str] = []
    start = last = 0
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type != tokenize.COMMENT:
            continue
        row = token.start[0]
        if block and row != last + 1:
            yield Passage(start, "\n".join(block))
            block = []
        if not block:
            start = row
        block.append(token.string.lstrip("#:").strip())
        last = row
    if block:
        yield Passage(start, "\n".join(block))


def _docstring_paragraphs(node: ast.AST) -> Iterator[Passage]:
    body = getattr(node, "body", [])
    if not (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)):
        return
    line = body[0].lineno
    for paragraph in body[0].value.value.split("\n\n"):
        yield Passage(line, paragraph)
        line += paragraph.count("\n") + 2


_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*$", re.MULTILINE)


def markdown_links(text: str) -> Iterator[Citation]:
    """The targets of relative links (``[x](benchmarks.md#summary)``), not URLs."""
    for number, line in enumerate(text.splitlines(), 1):
        for m in _LINK.finditer(line):
            if not re.match(r"[a-z][a-z0-9+.-]*:", m.group(1)):
                yield Citation(m.group(1), number)


def anchors(text: str) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces as
    hyphens, a repeated heading numbered (``-1``, ``-2``)."""
    seen: dict[str, int] = {}
    out = set()
    for heading in _HEADING.findall(_without_code_blocks(text)):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        out.add(f"{slug}-{count}" if count else slug)
    return out


def _without_code_blocks(text: str) -> str:
    return re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)


# ``ClusterState.apply_pod``, ``FastRanker.best_known``: a capitalised name, one member.
_MEMBER = re.compile(r"(?<![\w.])([A-Z]\w*)\.(_*[a-z]\w*)\b")


@dataclass(frozen=True)
class ClassFacts:
    """What a class statement declares: its methods and attributes (set on ``self`` too),
    and the names of its bases."""

    members: frozenset[str]
    bases: tuple[str, ...]


def cited_members(passage: Passage) -> list[Citation]:
    """``Class.member`` names; the test checks those whose class is one of ours."""
    return [Citation(f"{m.group(1)}.{m.group(2)}", passage.line_of(m.start()))
            for m in _MEMBER.finditer(passage.text)]


def classes_in(source: str) -> Iterator[tuple[str, ClassFacts]]:
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            bases = tuple(b.id if isinstance(b, ast.Name) else getattr(b, "attr", "")
                          for b in node.bases)
            yield node.name, ClassFacts(frozenset(_members(node)), bases)


def _members(cls: ast.ClassDef) -> Iterator[str]:
    for statement in cls.body:
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            yield statement.name
        elif isinstance(statement, ast.Assign):
            yield from (t.id for t in statement.targets if isinstance(t, ast.Name))
        elif isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
            yield statement.target.id
    for node in ast.walk(cls):
        if (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name) and node.value.id == "self"):
            yield node.attr
