"""Every module that finds the checkout from its own path (`Path(__file__).resolve().parents[N]`)
lands on the repository's root: a module moved to a deeper folder must count one more."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PARENTS = re.compile(r"^\s*(\w+)\s*=\s*Path\(__file__\)\.resolve\(\)\.parents\[(\d+)\]", re.M)


def test_every_repo_path_is_the_checkout_root():
    found = []
    for f in sorted((REPO / "flashml").rglob("*.py")):
        for m in PARENTS.finditer(f.read_text()):
            root = f.resolve().parents[int(m.group(2))]
            found.append((f.relative_to(REPO), m.group(1)))
            assert (root / "pyproject.toml").is_file() and (root / "flashml").is_dir(), (
                f"{f.relative_to(REPO)}: {m.group(1)} = parents[{m.group(2)}] is {root}, "
                f"not the checkout's root {REPO}")
    assert len(found) >= 4, found
