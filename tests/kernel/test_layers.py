"""The package's layering (ARCHITECTURE.md): folders are import paths, a module never
imports a layer above its own, at the top of a file or inside a function, and a system
(`flashml/systems/<name>/`) is a folder no other part of the package reaches into: a system
never imports another system, and the kernel (every module outside `flashml/systems/`) never
imports a system; only the CLI (`commands/`, `cli.py`) does."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import REPO

# Lowest first. A module's layer is the one of its longest matching prefix.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("flashml", "flashml.config", "flashml.errors", "flashml.files", "flashml.settings",
     "flashml.tracking", "flashml.knobs"),
    ("flashml.trace",),
    ("flashml.features",),
    ("flashml.compiler",),
    ("flashml.simulation", "flashml.device"),
    ("flashml.policies",),
    ("flashml.models",),
    ("flashml.jobs",),
    ("flashml.systems",),
    ("flashml.commands", "flashml.cli"),
)
SYSTEMS_PACKAGE = "flashml.systems"
#: The kernel modules allowed to import a system: the CLI.
SYSTEM_IMPORTERS = ("flashml.commands", "flashml.cli")


def layer_of(module: str) -> int:
    best, level = -1, -1
    for i, prefixes in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best:
                best, level = len(p), i
    return level


def module_name(path: Path, root: Path = REPO) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
            # `from flashml.systems.baleen import job as baleen` imports flashml.systems.baleen.job
            out += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return [(n, m) for n, m in out if m == "flashml" or m.startswith("flashml.")]


def package_files() -> list[Path]:
    return sorted((REPO / "flashml").rglob("*.py"))


def test_every_module_has_a_layer() -> None:
    missing = [module_name(p) for p in package_files() if layer_of(module_name(p)) < 0]
    assert missing == []


def test_no_module_imports_a_layer_above_its_own() -> None:
    upward = []
    for path in package_files():
        me = module_name(path)
        mine = layer_of(me)
        for line, target in imports(path):
            theirs = layer_of(target)
            if theirs > mine:
                upward.append(f"{path.relative_to(REPO)}:{line}: {me} (layer {mine}) imports "
                              f"{target} (layer {theirs})")
    assert upward == [], "\n".join(upward)


def system_of(module: str) -> str | None:
    """The system a module belongs to (`flashml.systems.<name>...` -> name), None for the
    kernel and for the registry (`flashml.systems` itself)."""
    prefix = SYSTEMS_PACKAGE + "."
    return module.removeprefix(prefix).split(".")[0] if module.startswith(prefix) else None


def is_under(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def crossings(path: Path, root: Path = REPO) -> list[str]:
    """Imports of `path` (a file of the package under `root`) that reach into a system it
    may not import."""
    me = module_name(path, root)
    mine = system_of(me)
    out = []
    for line, target in imports(path):
        theirs = system_of(target)
        if theirs is None or theirs == mine:
            continue
        if mine is None and is_under(me, SYSTEM_IMPORTERS):
            continue
        who = f"system {mine}" if mine else "the kernel"
        out.append(f"{path.relative_to(root)}:{line}: {me} ({who}) imports {target} "
                   f"(system {theirs})")
    return out


def test_no_system_imports_another_and_the_kernel_imports_none() -> None:
    found = [c for path in package_files() for c in crossings(path)]
    assert found == [], "\n".join(found)


def test_every_system_is_a_folder_listed_in_the_registry() -> None:
    from flashml.systems import SYSTEMS

    folders = sorted(p.name for p in (REPO / "flashml" / "systems").iterdir()
                     if (p / "__init__.py").is_file())
    assert all(system_of(m) for m in SYSTEMS), SYSTEMS
    assert sorted(system_of(m) for m in SYSTEMS) == folders


def test_the_crossing_check_catches_a_system_import(tmp_path: Path) -> None:
    pkg = tmp_path / "flashml"
    (pkg / "systems" / "mat").mkdir(parents=True)
    (pkg / "trace").mkdir()
    a = pkg / "systems" / "mat" / "job.py"
    a.write_text("def f():\n    from flashml.systems.baleen import model\n    return model\n")
    b = pkg / "trace" / "x.py"
    b.write_text("from flashml.systems.kml.job import STAGES\n")
    c = pkg / "systems" / "mat" / "model.py"
    c.write_text("from flashml.systems.mat import job\n")
    assert len(crossings(a, tmp_path)) == 2 and "system mat" in crossings(a, tmp_path)[0]
    assert len(crossings(b, tmp_path)) == 2 and "the kernel" in crossings(b, tmp_path)[0]
    assert crossings(c, tmp_path) == []


def test_the_check_catches_an_upward_import(tmp_path: Path) -> None:
    """The walk sees imports inside functions, where they used to hide."""
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from flashml.systems.baleen.job import STAGES\n"
                 "    return STAGES\n")
    assert imports(f) == [(2, "flashml.systems.baleen.job"),
                          (2, "flashml.systems.baleen.job.STAGES")]
    assert layer_of("flashml.systems.baleen.job.STAGES") > layer_of("flashml.trace.canonical")


def test_no_folder_outside_the_package_is_mapped_into_it() -> None:
    """pyproject.toml has no package-dir remapping: folders are import paths."""
    text = (REPO / "pyproject.toml").read_text()
    assert "package-dir" not in text
    for old in ("pipelines", "models", "features", "compiler"):
        assert not list((REPO / old).glob("*.py")), f"top-level {old}/ is back; it lives in " \
            "flashml/"
