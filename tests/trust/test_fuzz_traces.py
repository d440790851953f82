"""Property-based fuzzing of every trace reader: valid traces of every format,
mutated as a careless user, a cut download or a disk error would (tests/fuzz_support.py:
cut, duplicate, swap, non-numeric, huge, negative, NaN/inf, empty lines, wrong field counts,
binary junk, CRLF, BOM, compressed-stream damage), give either a valid canonical table or
one clear `flashml: error:` naming the file (and the line where a line is at fault): no
traceback, no output file, no hang.

`make test` runs a small fixed-seed set; `make fuzz` runs FLASHML_FUZZ_CASES (1,000) random
cases per format (FLASHML_FUZZ_PROFILE=fuzz).
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import fuzz_support as fs
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flashml.trace.ingest import ingest
from flashml.trace.objects import OBJECT_FORMATS

from conftest import REPO, python_argv

SPECS = fs.specs()
INGEST = sorted(n for n, s in SPECS.items() if not s.objects and not s.canonical)
CANONICAL = sorted(n for n, s in SPECS.items() if s.canonical)
OBJECTS = sorted(n for n, s in SPECS.items() if s.objects)

mutations = st.lists(st.sampled_from(fs.MUTATIONS), min_size=1, max_size=3)
seeds = st.integers(0, 2**32 - 1)
chunks = st.sampled_from([64, 200, 4096, 16 << 20])


@pytest.mark.parametrize("name", INGEST)
@settings(**fs.fuzz_settings(20))
@given(kinds=mutations, seed=seeds, chunk_bytes=chunks, skip=st.booleans())
def test_mutated_trace_ingests_or_fails_clearly(name: str, kinds: list[str], seed: int,
                                                chunk_bytes: int, skip: bool) -> None:
    spec = SPECS[name]
    o = fs.run_case(spec, kinds, seed, chunk_bytes=chunk_bytes, skip_bad_lines=skip)
    fs.expect(o.fine, fs.describe(o, spec, kinds, seed))


# Bugs in flashml/trace/objects.py (not the ingest path) found here: fixed in 798b45b, and
# Polars' PanicException on a damaged Parquet (the regression test below).
@pytest.mark.parametrize("name", OBJECTS)
@settings(**fs.fuzz_settings(20))
@given(kinds=mutations, seed=seeds)
def test_mutated_object_trace_reads_or_fails_clearly(name: str, kinds: list[str],
                                                     seed: int) -> None:
    spec = SPECS[name]
    o = fs.run_case(spec, kinds, seed)
    fs.expect(o.fine, fs.describe(o, spec, kinds, seed))


# A damaged object Parquet on which Polars' reader panics (the case the fuzzer found).
PANIC_CASE = ("objects-parquet", ["flip_byte", "flip_byte"], 242913403)


def test_object_parquet_that_panics_polars_is_a_clear_error(tmp_path: Path) -> None:
    """read_objects let Polars' PanicException (a BaseException: a Rust panic in its Parquet
    reader) through: now a TraceError naming the file, exit 1 from the CLI."""
    from flashml.errors import TraceError
    from flashml.trace.objects import read_objects

    name, kinds, seed = PANIC_CASE
    src = tmp_path / "objects.parquet"
    src.write_bytes(fs.build_case(SPECS[name], kinds, seed))
    with pytest.raises(pl.exceptions.PanicException):  # the case still panics Polars
        pl.read_parquet(src)
    with pytest.raises(TraceError, match="cannot read Parquet") as e:
        read_objects(src, "parquet")
    assert e.value.path == str(src) and str(e.value).startswith(f"{src}: "), str(e.value)
    proc = subprocess.run([*python_argv(), "-m", "flashml.cli", "sim", "objects", "--trace",
                           str(src), "--format", "parquet", "--capacity", "1MiB"],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"flashml: error: {src}: cannot read Parquet"), proc.stderr


@pytest.mark.parametrize("name", CANONICAL)
@settings(**fs.fuzz_settings(20))
@given(kinds=mutations, seed=seeds)
def test_damaged_canonical_table_reads_or_fails_clearly(name: str, kinds: list[str],
                                                       seed: int) -> None:
    """A canonical Parquet table (what every command takes besides raw traces), damaged."""
    spec = SPECS[name]
    o = fs.run_case(spec, kinds, seed)
    fs.expect(o.fine, fs.describe(o, spec, kinds, seed))


def test_every_format_is_fuzzed() -> None:
    from flashml.trace.readers import FORMATS
    from flashml.trace.readers.tectonic import SCHEMAS

    fed = {SPECS[n].fmt for n in INGEST}
    assert fed == set(FORMATS)
    assert {SPECS[n].compress for n in INGEST} == {"", "gz", "zst"}
    assert {n.split("-")[1] for n in INGEST if n.startswith("tectonic-2")} == set(SCHEMAS)
    # `csv` is read_objects' other name for objects-csv
    assert {SPECS[n].fmt for n in OBJECTS} == set(OBJECT_FORMATS) - {"csv"}


@pytest.mark.parametrize("name", INGEST)
def test_seeds_are_valid(name: str) -> None:
    """Each seed ingests whole (so a failure is the mutation's doing)."""
    spec = SPECS[name]
    o = fs.run_case(spec, [], 0)
    assert o.kind == "ok" and o.rows > 0, o


BENIGN = ["crlf", "bom", "empty_lines"]


@pytest.mark.parametrize("name", INGEST)
@settings(**fs.fuzz_settings(5, max_examples=max(5, fs.fuzz_cases(5) // 10)))
@given(kinds=st.lists(st.sampled_from(BENIGN), min_size=1, max_size=3, unique=True), seed=seeds,
       chunk_bytes=chunks)
def test_benign_changes_change_nothing(name: str, kinds: list[str], seed: int,
                                       chunk_bytes: int) -> None:
    """CRLF line ends, a byte-order mark and blank lines leave the table as it was (but for
    the source line numbers)."""
    spec = SPECS[name]
    kinds = sorted(kinds, key=lambda k: k == "bom")  # a byte-order mark comes first in a file
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        ref_src = d / f"ref{spec.suffix}"
        ref_src.write_bytes(fs.build_case(spec, [], 0))
        ref = ingest(ref_src, d / "ref.parquet", spec.fmt, progress=False, **spec.options)
        src = d / f"m{spec.suffix}"
        src.write_bytes(fs.build_case(spec, kinds, seed))
        got = ingest(src, d / "m.parquet", spec.fmt, chunk_bytes=chunk_bytes, progress=False,
                     **spec.options)
        a = pl.read_parquet(got.out).drop("src_line")
        b = pl.read_parquet(ref.out).drop("src_line")
        assert a.equals(b), (kinds, seed)


# The in-process runner mirrors cli.main; these cases check it against the real CLI.
CLI_CASES = [
    ("tectonic-201910", ["cut_file"], 5),
    ("msr-zst", ["cut_compressed"], 3),
    ("csv", ["binary_junk", "crlf"], 8),
]


@pytest.mark.parametrize("name,kinds,seed", CLI_CASES)
def test_the_real_cli_agrees(tmp_path: Path, name: str, kinds: list[str], seed: int) -> None:
    spec = SPECS[name]
    data = fs.build_case(spec, kinds, seed)
    (tmp_path / "inproc").mkdir()
    o = fs.run_ingest(spec, data, tmp_path / "inproc")
    src = tmp_path / f"in{spec.suffix}"
    src.write_bytes(data)
    out = tmp_path / "out" / "t.parquet"
    args = ["trace", "ingest", str(src), "-o", str(out), "--format", spec.fmt]
    for k, v in spec.options.items():
        args += [f"--{k.replace('_', '-')}", str(v)]
    proc = subprocess.run([*python_argv(), "-m", "flashml.cli", *args], capture_output=True,
                          text=True, cwd=REPO, timeout=120)
    assert "Traceback" not in proc.stderr, proc.stderr
    if o.kind == "ok":
        assert proc.returncode == 0, proc.stderr
        assert out.exists()
    else:
        assert o.kind == "error", o
        assert proc.returncode == 1, proc.stderr
        last = proc.stderr.strip().splitlines()[-1]
        assert last == o.message.replace(str(tmp_path / "inproc" / src.name), str(src))
        assert not out.exists()
