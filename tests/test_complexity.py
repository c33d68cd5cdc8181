"""No function above radon's rank C (cyclomatic complexity over 20) in the shipped packages
and the dev harness the e2e tests trust: a function that branches more than that is split into
named steps a reader can follow. The reference ranker, the one newcomers read first, at B.

radon's own measure (``radon cc``), through its API; the same as
``.venv/bin/radon cc -n D -s allocator webhook tessera kubectl_tessera certs devcluster`` lists.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from radon.complexity import cc_rank, cc_visit
from radon.visitors import Function

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ["allocator", "webhook", "tessera", "kubectl_tessera", "certs", "devcluster"]
#: The worst rank allowed: A-C (complexity up to 20).
WORST = "C"


def functions(source: str) -> list[Function]:
    """Every function and method radon measures in ``source`` (its visit lists methods
    both on their own and in their class)."""
    return [block for block in cc_visit(source) if isinstance(block, Function)]


def above(package: str) -> list[str]:
    """``path:line name rank (complexity)`` of every function ranked above :data:`WORST`."""
    out = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for function in functions(path.read_text()):
            rank = cc_rank(function.complexity)
            if rank > WORST:
                out.append(f"{path.relative_to(ROOT)}:{function.lineno} "
                           f"{function.fullname} {rank} ({function.complexity})")
    return out


@pytest.mark.parametrize("package", PACKAGES)
def test_no_function_is_ranked_above_c(package: str) -> None:
    offenders = above(package)
    assert not offenders, (f"{len(offenders)} function(s) in {package}/ above radon rank "
                           f"{WORST}; split each into named steps:\n  " + "\n  ".join(offenders))


def test_the_reference_rankers_fit_reads_at_rank_b_or_better() -> None:
    """PlainRanker.fit, the reference docs/architecture.md walks first: complexity 10 at most."""
    source = (ROOT / "allocator" / "ranking" / "plain.py").read_text()
    (fit,) = [f for f in functions(source) if f.fullname == "PlainRanker.fit"]
    rank = cc_rank(fit.complexity)
    assert rank <= "B", f"PlainRanker.fit is {rank} ({fit.complexity}); split it into named steps"


def test_the_measure_sees_a_function_that_branches_too_much() -> None:
    branches = "\n".join(f"    if x == {i}:\n        return {i}" for i in range(25))
    (function,) = functions(f"def f(x):\n{branches}\n    return -1\n")
    assert cc_rank(function.complexity) == "D"
