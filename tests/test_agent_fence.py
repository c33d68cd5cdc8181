"""One node agent's behaviour lives in its own folders (issue 45): outside allocator/hami/ and
allocator/agents/, HAMi is named (case-insensitive) in at most two allocator modules. Today
those two are ranking/cards.py and ranking/fit.py: the share cap cites HAMi's split count
upstream, and an Unfit reason names it to the user. A new mention means a HAMi branch in
the generic code: it belongs behind the node-agent port (allocator/agents/port.py).

hami-scheduler's own node and card policies (allocator/ranking/policies/hami.py, which the
policy registry lists by name) are placement policies any profile may choose, as fgd is, not
the agent's behaviour: that module and the registry are not counted."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
AGENT_FOLDERS = ("allocator/hami/", "allocator/agents/")
#: hami-scheduler's policies and the registry naming them (see above).
SCHEDULER_POLICIES = ("allocator/ranking/policies/hami.py",
                      "allocator/ranking/policies/__init__.py")
MAX_MODULES = 2


def naming(word: str, root: Path = ROOT) -> list[str]:
    """The allocator modules outside the agents' folders whose text names ``word``."""
    pattern = re.compile(re.escape(word), re.IGNORECASE)
    found = []
    for path in sorted((root / "allocator").rglob("*.py")):
        name = path.relative_to(root).as_posix()
        if name.startswith(AGENT_FOLDERS) or name in SCHEDULER_POLICIES:
            continue
        if pattern.search(path.read_text()):
            found.append(name)
    return found


def test_hami_is_named_in_at_most_two_generic_allocator_modules() -> None:
    found = naming("hami")
    assert len(found) <= MAX_MODULES, f"HAMi named outside its folders in {found}"


def test_the_walk_sees_the_agents_folders_and_the_rest(tmp_path: Path) -> None:
    for name, text in (("allocator/hami/lock.py", "HAMi"), ("allocator/agents/hami.py", "hami"),
                       ("allocator/verbs/filter.py", "# HAMi's lock"),
                       ("allocator/verbs/bind.py", "pass")):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert naming("hami", tmp_path) == ["allocator/verbs/filter.py"]
