"""The C runtime's layering (ARCHITECTURE.md, "The C runtime's folders"): `runtime/src/` is a
kernel (`engine/`, `policies/`, `trace/`, `util/`), one folder per system (named as its folder
in `flashml/systems/`) and the command line (`cli/`, `fuse/`). Every `#include "..."` under
`runtime/src` keeps the rule: the kernel includes only the kernel's headers; a system folder
includes the kernel's and its own, never another system's (its command, `cli_*`, also the
command line's `cli/` headers); the command line includes anything. What the kernel calls in a
system it declares in a header of its own (engine/policy_slots.h, policies/policy_loader.h,
engine/backing_internal.h), so no include has to point up."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import REPO

SRC = REPO / "runtime" / "src"
KERNEL = ("engine", "policies", "trace", "util")
COMMAND_LINE = ("cli", "fuse")
INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.MULTILINE)


def folders(src: Path = SRC) -> list[str]:
    return sorted(p.name for p in src.iterdir() if p.is_dir())


def systems(src: Path = SRC) -> list[str]:
    return [f for f in folders(src) if f not in KERNEL + COMMAND_LINE]


def sources(src: Path = SRC) -> list[Path]:
    return sorted(p for p in src.rglob("*") if p.suffix in (".c", ".h") and p.is_file())


def folder_of(header: str, including: Path, src: Path) -> str | None:
    """The folder of `src` that `#include "header"` in `including` reaches (as the compiler
    looks: beside the file, then -Isrc), None for a header outside `src` (flashrt.h,
    flashml_policy.h)."""
    for base in (including.parent, src):
        cand = (base / header).resolve()
        if cand.is_file() and cand.is_relative_to(src.resolve()):
            return cand.relative_to(src.resolve()).parts[0]
    return None


def crossings(path: Path, src: Path = SRC) -> list[str]:
    """The includes of `path` (a file under `src`) that the rule refuses."""
    mine = path.relative_to(src).parts[0]
    if mine in COMMAND_LINE:
        return []
    out = []
    text = path.read_text()
    for m in INCLUDE.finditer(text):
        theirs = folder_of(m.group(1), path, src)
        if theirs is None or theirs == mine or theirs in KERNEL:
            continue
        if mine not in KERNEL and theirs == "cli" and path.name.startswith("cli_"):
            continue
        line = text.count("\n", 0, m.start()) + 1
        who = "the kernel" if mine in KERNEL else f"system {mine}"
        what = "the command line" if theirs in COMMAND_LINE else f"system {theirs}"
        out.append(f"{path.relative_to(src)}:{line}: {who} includes \"{m.group(1)}\" ({what})")
    return out


def test_no_system_includes_another_and_the_kernel_includes_none() -> None:
    found = [c for path in sources() for c in crossings(path)]
    assert found == [], "\n".join(found)


def test_every_system_folder_is_a_system_of_the_package() -> None:
    """A folder of runtime/src is the kernel's, the command line's or a system's, and a
    system's folder has its name in every language (flashml/systems/<name>/)."""
    python = {p.name for p in (REPO / "flashml" / "systems").iterdir()
              if (p / "__init__.py").is_file()}
    assert systems(), folders()
    assert set(systems()) <= python, (systems(), sorted(python))
    assert set(KERNEL + COMMAND_LINE) <= set(folders())


def test_the_check_catches_an_include_across_systems(tmp_path: Path) -> None:
    src = tmp_path / "src"
    for d in ("engine", "policies", "mat", "kml", "cli"):
        (src / d).mkdir(parents=True)
    for h in ("engine/region.h", "mat/mat_alg.h", "kml/ra_hook.h", "cli/cli.h"):
        (src / h).write_text("\n")
    up = src / "engine" / "engine.c"
    up.write_text('#include "engine/region.h"\n#include "kml/ra_hook.h"\n#include "flashrt.h"\n')
    across = src / "mat" / "mat.c"
    across.write_text('#include "mat_alg.h"\n#  include "../kml/ra_hook.h"\n#include "cli/cli.h"\n')
    command = src / "mat" / "cli_mat.c"
    command.write_text('#include "cli/cli.h"\n#include "mat/mat_alg.h"\n'
                       '#include "engine/region.h"\n')
    top = src / "cli" / "main.c"
    top.write_text('#include "mat/mat_alg.h"\n#include "kml/ra_hook.h"\n')
    assert systems(src) == ["kml", "mat"]
    assert crossings(up, src) == [
        'engine/engine.c:2: the kernel includes "kml/ra_hook.h" (system kml)']
    assert crossings(across, src) == [
        'mat/mat.c:2: system mat includes "../kml/ra_hook.h" (system kml)',
        'mat/mat.c:3: system mat includes "cli/cli.h" (the command line)']
    assert crossings(command, src) == []
    assert crossings(top, src) == []
