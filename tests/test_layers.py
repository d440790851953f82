"""The package's layering (ARCHITECTURE.md): folders are import paths, and a module never
imports a layer above its own, at the top of a file or inside a function."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import REPO

# Lowest first. A module's layer is the one of its longest matching prefix.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("flashml", "flashml.config", "flashml.errors", "flashml.files", "flashml.settings",
     "flashml.tracking"),
    ("flashml.trace",),
    ("flashml.features",),
    ("flashml.compiler",),
    ("flashml.simulation", "flashml.partitioning", "flashml.blockcache", "flashml.kml",
     "flashml.device"),
    ("flashml.episodes",),
    ("flashml.policies",),
    ("flashml.models", "flashml.flash_partition"),
    ("flashml.jobs",),
    ("flashml.commands", "flashml.cli"),
)


def layer_of(module: str) -> int:
    best, level = -1, -1
    for i, prefixes in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best:
                best, level = len(p), i
    return level


def module_name(path: Path) -> str:
    rel = path.relative_to(REPO).with_suffix("")
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
            # `from flashml.jobs import baleen` imports flashml.jobs.baleen
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


def test_the_check_catches_an_upward_import(tmp_path: Path) -> None:
    """The walk sees imports inside functions, where they used to hide."""
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from flashml.jobs.baleen import STAGES\n    return STAGES\n")
    assert imports(f) == [(2, "flashml.jobs.baleen"), (2, "flashml.jobs.baleen.STAGES")]
    assert layer_of("flashml.jobs.baleen.STAGES") > layer_of("flashml.trace.canonical")


def test_no_folder_outside_the_package_is_mapped_into_it() -> None:
    """pyproject.toml has no package-dir remapping: folders are import paths."""
    text = (REPO / "pyproject.toml").read_text()
    assert "package-dir" not in text
    for old in ("pipelines", "models", "features", "compiler"):
        assert not list((REPO / old).glob("*.py")), f"top-level {old}/ is back; it lives in " \
            "flashml/"
