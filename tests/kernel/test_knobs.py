"""MAT's knobs are declared once (flashml/systems/mat/settings.toml) and the four places that
check them agree on one corpus of values: Python (the CLI and the manifest checks,
flashml/knobs.py), the generated C checks (runtime/src/mat/mat_settings.h), the
simulator (sim/src/mat/settings.rs through `MatParams::validate`) and `flashrt mat-replay`'s
options. The defaults are written in no hand-kept source. Every declared system's generated C
checks and bounds agree with Python's, and MLCache's and KML's declarations reach the code that
reads them."""

from __future__ import annotations

import math
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from flashml import knobs
from flashml.errors import UserError
from flashml.features import codegen
from flashml.systems.mat.settings import KNOBS, MatParams
from flashml.systems.mat.simulation import simulate_objects_mat

from conftest import REPO

#: (knob, value): each bound from both sides, the bounds themselves, non-finite floats.
CORPUS: list[tuple[str, float]] = [
    ("k", 0.5), ("k", 1.0), ("k", 2.0), ("k", 1024.0), ("k", 1024.5), ("k", math.nan),
    ("k", math.inf),
    ("max_candidates", 0), ("max_candidates", 1), ("max_candidates", 1024),
    ("max_candidates", 1025),
    ("delta", 0.0), ("delta", 1e-9), ("delta", 0.5), ("delta", 1.0), ("delta", math.nan),
    ("initial_threshold", -1.0), ("initial_threshold", 0.0), ("initial_threshold", 1e15),
    ("initial_threshold", 2e15), ("initial_threshold", math.inf),
    ("memory_window", 1023), ("memory_window", 1024), ("memory_window", 2**32 - 1),
    ("memory_window", 2**32),
]

C_PROGRAM = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mat/mat_settings.h"
int main(int argc, char **argv) {
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *n = argv[i], *why = NULL;
        double v = strtod(argv[i + 1], NULL);
        if (!strcmp(n, "k")) why = frt_mat_k_problem(v);
        else if (!strcmp(n, "max_candidates")) why = frt_mat_max_candidates_problem((int64_t)v);
        else if (!strcmp(n, "delta")) why = frt_mat_delta_problem(v);
        else if (!strcmp(n, "initial_threshold")) why = frt_mat_initial_threshold_problem(v);
        else if (!strcmp(n, "memory_window")) why = frt_mat_memory_window_problem((int64_t)v);
        else return 2;
        printf("%s\n", why ? why : "ok");
    }
    return 0;
}
"""


def _python(name: str, v: float) -> str:
    return KNOBS[name].problem(v) or "ok"


def test_the_declaration_is_what_python_uses() -> None:
    d = MatParams()
    assert {n: getattr(d, n) for n in ("k", "max_candidates", "delta", "initial_threshold",
                                       "controller", "reuse_predictions")} \
        == {n: v for n, v in KNOBS.defaults().items() if n != "memory_window"}
    assert (d.controller, d.reuse_predictions) == ("mean", True)
    assert (KNOBS["controller"].legacy, KNOBS["reuse_predictions"].legacy) == ("sign", False)


def test_generated_c_checks_say_what_python_says(tmp_path: Path) -> None:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    src, exe = tmp_path / "k.c", tmp_path / "k"
    src.write_text(C_PROGRAM)
    subprocess.run([cc, "-std=c11", "-Wall", "-Wextra", "-Werror", f"-I{REPO / 'runtime/src'}",
                    str(src), "-o", str(exe), "-lm"], check=True)
    args = [x for name, v in CORPUS for x in (name, repr(float(v)))]
    got = subprocess.run([str(exe), *args], check=True, capture_output=True,
                         text=True).stdout.splitlines()
    assert got == [_python(name, v) for name, v in CORPUS]


@pytest.mark.parametrize("name, value", CORPUS)
def test_the_simulator_refuses_what_python_refuses(name: str, value: float) -> None:
    want = _python(name, value)
    kind = KNOBS[name].kind
    given = {name: int(value) if kind == "int" else float(value)}
    if name == "k":
        given["max_candidates"] = 1024  # k's own bounds, not the k <= max_candidates rule
    if name == "max_candidates" and want == "ok":
        given["k"] = 1.0
    if name == "delta":
        given["controller"] = "sign"  # delta's own bounds, not the mean controller's rule
    run = lambda: simulate_objects_mat([1, 2, 3, 1, 2, 3], [1] * 6, 2, "objects",  # noqa: E731
                                       predictor="oracle", **given)
    if want == "ok":
        run()
    else:
        with pytest.raises(ValueError, match=re.escape(f"{name} must be {want}")):
            run()


def test_the_rules_hold_in_python_and_the_simulator() -> None:
    d = KNOBS.defaults()
    for values, message in (
            ({"k": 11.0, "max_candidates": 10}, "k must be at most max_candidates"),
            ({"controller": "mean", "delta": 0.2, "max_candidates": 10, "k": 2.0},
             "the mean controller needs delta * (max_candidates - k) < 1")):
        with pytest.raises(UserError, match=re.escape(message)):
            KNOBS.check_rules("test", d | values)
        with pytest.raises(ValueError, match=re.escape(message)):
            simulate_objects_mat([1, 2, 3, 1], [1] * 4, 2, "objects", predictor="oracle",
                                 **values)
    KNOBS.check_rules("test", d | {"controller": "sign", "delta": 0.2})  # sign: no such rule


def test_abi_names_are_written_only_in_the_declaration() -> None:
    """No hand-kept source looks up, declares, defines or calls a knob's ABI function by a
    name of its own: a string literal ("flashml_evict_k"), a C declaration or definition, a
    ctypes attribute; the generated files and the declaration have them (comments may name
    them)."""
    gen = {p.resolve() for p in codegen.outputs()}  # knobs.generated_files() among them
    spelled = []
    for root in ("flashml", "sim/src", "runtime/src", "runtime/include"):
        for p in (REPO / root).rglob("*"):
            if p.suffix not in (".py", ".rs", ".c", ".h", ".in") or p.resolve() in gen:
                continue
            text = p.read_text()
            for k in KNOBS:
                use = rf'"{k.abi}"|\b(?:double|int|int64_t)\s+{k.abi}\s*\(|\.{k.abi}\b'
                if re.search(use, text):
                    spelled.append(f"{p.relative_to(REPO)}: {k.abi}")
    assert spelled == []


def test_the_defaults_reach_every_generated_file() -> None:
    rust = (REPO / KNOBS.generate["rust"]).read_text()
    c = (REPO / KNOBS.generate["c"]).read_text()
    assert "pub const K: f64 = 2.0;" in rust and "#define FRT_MAT_K_DEFAULT 2.0" in c
    assert 'pub const CONTROLLER: &str = "mean";' in rust
    assert "#define FRT_MAT_CONTROLLER_DEFAULT 1 /* mean */" in c
    assert "#define FRT_MAT_REUSE_PREDICTIONS_LEGACY 0 /* False */" in c


def test_a_wrong_declaration_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = (REPO / "flashml/systems/mat/settings.toml").read_text()
    bad = tmp_path / "systems" / "bad"
    bad.mkdir(parents=True)
    (bad / "settings.toml").write_text(src.replace("default = 2.0", "default = 0.5", 1))
    monkeypatch.setattr(knobs, "SYSTEMS", tmp_path / "systems")
    with pytest.raises(ValueError, match=r"knobs.k.default 0.5 must be >= 1"):
        knobs.load.__wrapped__("bad")


def test_flashrt_options_refuse_what_python_refuses(tmp_path: Path) -> None:
    """`flashrt mat-replay --k X` etc. check the declared bounds before reading anything: the
    same words as Python's, exit 2; an accepted value gets past the options (to the missing
    bundle)."""
    flashrt = REPO / "runtime" / "build" / "flashrt"
    if not flashrt.exists():
        pytest.skip("the C runtime is not built (make -C runtime)")
    for name, value in CORPUS:
        if not math.isfinite(value):
            continue  # its number reader refuses nan and inf itself ("expected a number")
        text = repr(float(value)) if KNOBS[name].kind == "float" else str(int(value))
        flag = "--" + name.replace("_", "-")
        p = subprocess.run([str(flashrt), "mat-replay", flag, text, "--bundle",
                            str(tmp_path / "missing"), "--trace", str(tmp_path / "t.csv"),
                            "--capacity", "10"], capture_output=True, text=True, timeout=60)
        want = _python(name, value)
        if want == "ok":
            assert "invalid value" not in p.stderr, (name, value, p.stderr)
        else:
            assert p.returncode == 2 and f"{flag}: invalid value '{text}' (must be {want})" \
                in p.stderr, (name, value, p.stderr)


def _edges(k: knobs.Knob) -> list[float]:
    """Values at and beside each of a numeric knob's bounds, its default, and for a float the
    non-finite ones."""
    out: list[float] = [] if k.default is None else [k.default]
    for b in (k.min, k.max):
        if b is None:
            continue
        if k.kind == "int":
            out += [int(b) - 1, int(b), int(b) + 1]
        else:
            out += [math.nextafter(b, -math.inf), float(b), math.nextafter(b, math.inf)]
    if k.kind == "float":
        out += [math.nan, math.inf, -math.inf]
    return out


@pytest.mark.parametrize("system", knobs.declared_systems())
def test_every_systems_generated_c_checks_say_what_python_says(system: str,
                                                               tmp_path: Path) -> None:
    """Each declared system's numeric knobs: the generated C checks (`<prefix>_<knob>_problem`)
    and its inclusive bounds (`_MIN`, `_MAX`) agree with Python's at and beside every bound."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    ks = knobs.load(system)
    pre = ks.generate["c_prefix"]
    header = Path(ks.generate["c"]).relative_to("runtime/src")
    numeric = [k for k in ks if k.kind in ("float", "int")]
    calls = "\n".join(
        f'        {"else " if i else ""}if (!strcmp(n, "{k.name}")) why = '
        f'{pre.lower()}_{k.name}_problem('
        f'{"v" if k.kind == "float" else "(int64_t)v"});' for i, k in enumerate(numeric))
    bounds = "\n".join(
        f'    printf("%.17g\\n", (double){pre}_{k.name.upper()}_{label});'
        for k in numeric for label, b in (("MIN", k.min), ("MAX", k.max))
        if b is not None and not (k.min_open if label == "MIN" else k.max_open))
    src, exe = tmp_path / "k.c", tmp_path / "k"
    src.write_text(f"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "{header}"
int main(int argc, char **argv) {{
{bounds}
    for (int i = 1; i + 1 < argc; i += 2) {{
        const char *n = argv[i], *why = NULL;
        double v = strtod(argv[i + 1], NULL);
{calls}
        else return 2;
        printf("%s\\n", why ? why : "ok");
    }}
    return 0;
}}
""")
    subprocess.run([cc, "-std=c11", "-Wall", "-Wextra", "-Werror", f"-I{REPO / 'runtime/src'}",
                    str(src), "-o", str(exe), "-lm"], check=True)
    corpus = [(k, v) for k in numeric for v in _edges(k)]
    got = subprocess.run([str(exe), *(x for k, v in corpus for x in (k.name, repr(float(v))))],
                         check=True, capture_output=True, text=True).stdout.splitlines()
    want_bounds = [float(b) for k in numeric for b, is_open in ((k.min, k.min_open),
                                                                (k.max, k.max_open))
                   if b is not None and not is_open]
    assert [float(x) for x in got[:len(want_bounds)]] == want_bounds
    assert got[len(want_bounds):] == [k.problem(v) or "ok" for k, v in corpus]


def test_mlcache_and_kml_read_their_declarations() -> None:
    """MLCache's and KML's settings.toml reach the Python that uses them and the simulator's
    defaults: a twin run with the declared device given explicitly is the default run, and
    the partitioned cache refuses what the declaration refuses, in its words."""
    import numpy as np

    import flashml_sim
    from flashml.compiler import readahead as compiled
    from flashml.systems.kml import experiment, twin
    from flashml.systems.kml.settings import KNOBS as KML
    from flashml.systems.kml.settings import LINUX_KIB, KmlSettings
    from flashml.systems.mlcache import flash_partition, multistream
    from flashml.systems.mlcache.settings import KNOBS as MLC

    ra = KML["readahead_kib"]
    assert (compiled.MIN_KIB, compiled.MAX_KIB, LINUX_KIB) == (ra.min, ra.max, ra.default)
    s, d = KmlSettings(), experiment.TwinDevice()
    assert (s.read_iops, s.read_mbps, s.twin_cache_pages) == (
        KML["read_iops"].default, KML["read_mbps"].default, KML["twin_cache_pages"].default)
    assert (d.riops, d.rbps, d.cache_pages, d.default_kib) == (
        s.read_iops, s.read_mbps * (1 << 20), s.twin_cache_pages, ra.default)
    assert twin.CACHE_PAGES == s.twin_cache_pages
    trace = twin.workload_trace("readseq", requests=3000, seed=1)
    assert twin.evaluate(trace, 64)["clock_s"] == twin.evaluate(
        trace, 64, riops=d.riops, rbps=d.rbps)["clock_s"]

    assert multistream.PAGE_BYTES == MLC["page_bytes"].default
    assert flash_partition.PARTITION_INTERVAL.default == MLC["partition_interval"].default
    keys, streams = np.arange(4, dtype=np.uint64), np.zeros(4, np.uint32)
    for name, args in (("capacity", (0, 2)), ("interval", (2, 0))):
        want = f"{name} must be {MLC[name].problem(0)}, got 0"
        with pytest.raises(ValueError, match=re.escape(want)):
            flashml_sim.partition_curves(keys, streams, np.ones(4, bool), 1, *args)
