"""The policy ABI's functions are declared once (flashml/features/abi.toml): the generated C
header (prototypes and FLASHML_SYM_* names), the generated Rust names (sim/src/core/abi.rs) and
the Python mapping (flashml.features.abi.SYM) say the same, and no hand-kept source looks a
function up by a name of its own."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from flashml import knobs
from flashml.compiler.toolchain import CFLAGS, WRAPPER_WARNINGS
from flashml.features import abi, codegen

from conftest import REPO

HEADER = REPO / "flashml" / "compiler" / "flashml_policy.h"
RUST_ABI = REPO / "sim" / "src" / "core" / "abi.rs"
#: The hand-kept sources the loaders, the compiler and the runtime are written in.
ROOTS = ("flashml", "sim/src", "runtime/src", "runtime/include")
SUFFIXES = (".py", ".rs", ".c", ".h")
#: C types a hand-written declaration or definition of an ABI function would start with.
_C_TYPES = r"(?:int|double|void|char|uint32_t|int32_t|int64_t)"


def _uses(name: str, suffix: str) -> re.Pattern[str]:
    """How a source would spell `name` of its own: a string literal that is the name (what
    dlsym, libloading, hasattr or getattr look up; NUL-terminated or a C string literal in
    Rust), a Python attribute (a ctypes function looked up by attribute), a C declaration or
    definition. Prose may name a function: comments, docstrings, messages, help."""
    lit = rf"""(?:\b[bc])?["']{name}(?:\\0)?["']"""
    if suffix == ".py":
        return re.compile(rf"{lit}|\.{name}\b")
    if suffix in (".c", ".h"):
        return re.compile(rf"{lit}|\b{_C_TYPES}\s*\*?\s*{name}\s*\(")
    return re.compile(lit)


def test_abi_names_are_written_only_in_the_declaration() -> None:
    """Every hand-kept source under runtime/src, sim/src and flashml/ takes an ABI function's
    name from the generated constants (C: FLASHML_SYM_*, Rust: core::abi, Python: abi.SYM or
    abi.bind). The generated files and the declaration spell them; so do the wrapper
    templates (flashml/compiler/*.c.in and the C flashml/compiler/readahead.py writes), which
    define the functions and are compiled against flashml_policy.h with -Wmissing-prototypes
    (test_a_misspelled_definition_fails_the_wrapper_build)."""
    generated = {p.resolve() for p in codegen.outputs()}
    assert RUST_ABI.resolve() in generated and HEADER.resolve() in generated
    spelled = []
    for root in ROOTS:
        for p in sorted((REPO / root).rglob("*")):
            if p.suffix not in SUFFIXES or p.resolve() in generated:
                continue
            text = p.read_text()
            for f in abi.FUNCTIONS:
                for m in _uses(f.name, p.suffix).finditer(text):
                    line = text.count("\n", 0, m.start()) + 1
                    spelled.append(f"{p.relative_to(REPO)}:{line}: {m.group(0)}")
    assert spelled == []


def test_the_checker_sees_each_way_of_spelling_a_name() -> None:
    n = "flashml_admit_score"
    assert _uses(n, ".c").search('dlsym(h, "flashml_admit_score")')
    assert _uses(n, ".c").search("double flashml_admit_score(const double *f);")
    assert _uses(n, ".rs").search('lib.get(b"flashml_admit_score\\0")')
    assert _uses(n, ".py").search("hasattr(lib, 'flashml_admit_score')")
    assert _uses(n, ".py").search("lib.flashml_admit_score.restype = c_double")
    for prose in ("/* calls flashml_admit_score */", '"no flashml_admit_score in it"',
                  "FLASHML_SYM_ADMIT_SCORE", '"flashml_admit_score_x"'):
        assert not _uses(n, ".c").search(prose) and not _uses(n, ".py").search(prose)


def test_the_generated_names_are_the_declared_ones() -> None:
    header = HEADER.read_text()
    assert dict(re.findall(r'^#define FLASHML_SYM_(\w+) "(\w+)"$', header, re.M)) \
        == {f.key.upper(): f.name for f in abi.FUNCTIONS}
    rust = RUST_ABI.read_text()
    assert dict(re.findall(r'^pub const (\w+): &str = "(\w+)";$', rust, re.M)) \
        == {f.key.upper(): f.name for f in abi.FUNCTIONS}
    assert dict(abi.SYM) == {f.name.removeprefix("flashml_"): f.name for f in abi.FUNCTIONS}
    for f in abi.FUNCTIONS:  # each prototype, as the declaration gives it, exactly once
        assert header.count(f"{f.prototype()}\n") == 1, f.name
    # MAT's knob functions are its settings.toml's, optional where a .so may lack them
    mat = [f for f in abi.FUNCTIONS if f.group == "evict_knobs"]
    assert [(f.name, f.returns, f.optional) for f in mat] \
        == [(k.abi, k.c_type, k.legacy is not None) for k in knobs.load("mat")]


def test_required_lists_are_the_required_functions() -> None:
    header = HEADER.read_text().replace("\\\n", " ")
    for cap in abi.CAPABILITIES:
        m = re.search(rf"^#define FLASHML_REQUIRED_{cap.upper()} (.*)$", header, re.M)
        assert m, cap
        keys = [k.strip().removeprefix("FLASHML_SYM_") for k in m.group(1).split(",")]
        assert [abi.SYM[k.lower()] for k in keys] == abi.required_functions(cap)


def test_bind_types_a_function_from_its_declaration() -> None:
    import ctypes

    class Lib:  # a stand-in for a CDLL: functions by attribute
        flashml_policy_decide_at = ctypes.CFUNCTYPE(ctypes.c_int)(lambda: 0)

    f = abi.bind(Lib(), "policy_decide_at")
    p_int32 = ctypes.POINTER(ctypes.c_int32)
    assert f.restype is ctypes.c_int
    assert tuple(f.argtypes) == (ctypes.POINTER(ctypes.c_double), ctypes.c_double, p_int32, p_int32)
    assert abi.exports(Lib(), "policy_decide_at") and not abi.exports(Lib(), "admit_score")


@pytest.mark.parametrize(("source", "ok"), [
    ("double flashml_admit_threshold(void) { return 0.5; }", True),
    ("double flashml_admit_treshold(void) { return 0.5; }", False),
])
def test_a_misspelled_definition_fails_the_wrapper_build(tmp_path: Path, source: str,
                                                         ok: bool) -> None:
    """The wrappers are compiled with the compiler's flags (WRAPPER_WARNINGS has
    -Wmissing-prototypes) against flashml_policy.h: an ABI function whose name the header does
    not declare is an error."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    assert "-Wmissing-prototypes" in WRAPPER_WARNINGS
    src = tmp_path / "w.c"
    src.write_text(f'#include "flashml_policy.h"\n{source}\n')
    proc = subprocess.run([cc, *CFLAGS, *WRAPPER_WARNINGS, f"-I{HEADER.parent}", "-c",
                           str(src), "-o", str(tmp_path / "w.o")], capture_output=True,
                          text=True)
    assert (proc.returncode == 0) == ok, proc.stderr
    if not ok:
        assert "flashml_admit_treshold" in proc.stderr
