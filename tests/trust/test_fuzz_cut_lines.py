"""A reader's crash and its neighbours, as regression tests: a trace cut in the middle of its
last line (or a short line in any chunk, at any place in it) is an error naming the file, the
line and the field, exit 1, no output; `--skip-bad-lines` leaves such lines out and counts
them. Then the other hostile inputs the fuzzer found (tests/trust/test_fuzz_traces.py)."""

from __future__ import annotations

import gzip
import logging
import re
from pathlib import Path

import fuzz_support as fs
import polars as pl
import pytest

from flashml.errors import TraceError, UserError
from flashml.trace.canonical import read_table
from flashml.trace.ingest import ingest
from flashml.trace.readers.tectonic import SCHEMAS
from flashml.trace.textio import iter_chunks

from conftest import run_cli

FIELDS_201910 = SCHEMAS["201910"]


def _assert_clean_error(rc: int, stderr: str, src: Path, out: Path, line: int, field: str,
                        fragment: str) -> None:
    assert rc == 1, stderr
    assert "Traceback" not in stderr, stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith(f"flashml: error: {src}:{line}: field '{field}': "), last
    assert fragment in last, last
    assert not out.exists()
    assert [p.name for p in out.parent.iterdir()] == [], "temporary output left behind"


def in_process_cli(capsys, *args: object) -> tuple[int, str, str]:
    """`flashml ARGS` in this process (cli.main: what the subprocess runs, without the
    interpreter start): (exit code, stdout, stderr)."""
    from flashml.cli import main

    capsys.readouterr()
    rc = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture(scope="module")
def base_trace(tmp_path_factory) -> Path:
    """The issue's trace: region1-like, seed 0, 3,000 accesses (`flashml trace generate`)."""
    from flashml.trace.generate import generate_trace

    d = tmp_path_factory.mktemp("issue23")
    generate_trace("region1-like", 0, d / "base.trace", accesses=3000, progress=False)
    return d / "base.trace"


def test_issue_23_cut_trace_is_a_clear_error(base_trace: Path, tmp_path: Path) -> None:
    """`head -c 20000 base.trace > cut.trace && flashml trace ingest cut.trace ...`: was a
    polars SchemaError traceback."""
    data = base_trace.read_bytes()[:20000]
    cut = tmp_path / "cut.trace"
    cut.write_bytes(data)
    last = data.rsplit(b"\n", 1)[1]
    n = len(last.split(b" "))
    assert 0 < n < 8, "the cut must fall inside a line"
    out = tmp_path / "out" / "x.parquet"
    out.parent.mkdir()
    proc = run_cli("trace", "ingest", cut, "-o", out, "--format", "tectonic")
    _assert_clean_error(proc.returncode, proc.stderr, cut, out, data.count(b"\n") + 1,
                        FIELDS_201910[n], f"expected 8 fields, found {n}")


def test_issue_23_skip_bad_lines_counts(base_trace: Path, tmp_path: Path) -> None:
    data = base_trace.read_bytes()[:20000]
    cut = tmp_path / "cut.trace"
    cut.write_bytes(data)
    out = tmp_path / "x.parquet"
    proc = run_cli("trace", "ingest", cut, "-o", out, "--skip-bad-lines", check=True)
    assert "1 bad lines skipped" in proc.stdout, proc.stdout
    assert "skipped 1 bad line(s)" in proc.stderr and "expected 8 fields" in proc.stderr
    complete = tmp_path / "complete.trace"
    complete.write_bytes(data.rsplit(b"\n", 1)[0] + b"\n")
    ref = ingest(complete, tmp_path / "ref.parquet", progress=False)
    assert pl.read_parquet(out).equals(pl.read_parquet(ref.out))


@pytest.fixture(scope="module")
def big_trace(tmp_path_factory) -> Path:
    """~3.5 MB: four chunks of --chunk-mb 1."""
    from flashml.trace.generate import generate_trace

    d = tmp_path_factory.mktemp("big")
    generate_trace("region1-like", 1, d / "big.trace", accesses=65000, progress=False)
    return d / "big.trace"


@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_short_line_in_every_chunk(big_trace: Path, tmp_path: Path, capsys, where: str) -> None:
    """A short line in the first, a middle or the last chunk (--chunk-mb 1), through the CLI."""
    data = big_trace.read_bytes()
    assert len(data) > 3 << 20
    lines = data.split(b"\n")
    assert lines[-1] == b""
    idx = {"first": 40, "middle": len(lines) // 2, "last": len(lines) - 2}[where]
    cells = lines[idx].split(b" ")
    lines[idx] = b" ".join(cells[:3])
    if where == "last":  # cut in the middle of the last line, no newline
        src_bytes = b"\n".join(lines[: idx + 1])
    else:
        src_bytes = b"\n".join(lines)
    src = tmp_path / "short.trace"
    src.write_bytes(src_bytes)
    out = tmp_path / "out" / "x.parquet"
    out.parent.mkdir()
    rc, _, err = in_process_cli(capsys, "trace", "ingest", src, "-o", out, "--chunk-mb", "1")
    _assert_clean_error(rc, err, src, out, idx + 1, FIELDS_201910[3], "expected 8 fields, found 3")


SPECS = {k: v for k, v in fs.specs().items() if not v.objects and not v.canonical}


def _chunk_position(data: bytes, line: int, chunk_bytes: int) -> str | None:
    """Where source line `line` falls in its chunk: first, middle or last (None: not data)."""
    import io

    for chunk in iter_chunks(io.BytesIO(data), Path("x"), chunk_bytes):
        nums = chunk.line_numbers.tolist()
        if line in nums:
            i = nums.index(line)
            return "first" if i == 0 else "last" if i == len(nums) - 1 else "middle"
    return None


@pytest.mark.parametrize("name", sorted(SPECS))
def test_short_line_at_any_place_in_a_chunk(name: str, tmp_path: Path) -> None:
    """Every data line of every format in turn cut short, with chunks of 200 bytes: the line
    lands first, in the middle or last in its chunk (first was Polars' SchemaError), and is
    always named. With skip, the rest is ingested as if the line were absent."""
    spec = SPECS[name]
    text = spec.text
    lines = text.split(b"\n")
    sep = spec.separator.encode()
    seen: set[str] = set()
    ncols = None
    for i, ln in enumerate(lines):
        if not ln or ln.startswith(b"#") or (i == 0 and not spec.fmt == "tectonic"):
            continue
        cells = ln.split(sep)
        ncols = len(cells)
        mutated = list(lines)
        mutated[i] = sep.join(cells[:2])
        data = b"\n".join(mutated)
        pos = _chunk_position(data, i + 1, 200)
        assert pos is not None
        seen.add(pos)
        src = tmp_path / f"s{i}{spec.suffix}"
        src.write_bytes(fs.compress(data, spec.compress))
        out = tmp_path / f"o{i}.parquet"
        with pytest.raises(TraceError) as e:
            ingest(src, out, spec.fmt, chunk_bytes=200, progress=False, **spec.options)
        assert (e.value.path, e.value.line) == (str(src), i + 1), str(e.value)
        assert f"expected {ncols} fields, found 2" in str(e.value)
        assert e.value.field is not None
        assert not out.exists()
        if i % 7 == 0:  # skip mode on a few: the same table as without the line
            res = ingest(src, out, spec.fmt, chunk_bytes=200, progress=False,
                         skip_bad_lines=True, **spec.options)
            assert res.skipped_lines == 1
            assert res.details["skipped_examples"][0].startswith(f"{src}:{i + 1}: field ")
            ref_src = tmp_path / f"r{i}{spec.suffix}"
            ref_src.write_bytes(fs.compress(b"\n".join(lines[:i] + lines[i + 1:]),
                                            spec.compress))
            ref = ingest(ref_src, tmp_path / f"r{i}.parquet", spec.fmt, progress=False,
                         **spec.options)
            got = pl.read_parquet(out).drop("src_line")
            want = pl.read_parquet(ref.out).drop("src_line")
            assert got.equals(want)
    assert seen == {"first", "middle", "last"}, seen


def test_skip_bad_lines_counts_every_kind(tmp_path: Path, caplog) -> None:
    """Lines that do not parse, fail a row check, or go back in time, across chunks."""
    header = "#" + " ".join(FIELDS_201910) + "\n"
    good = [f"{i % 7} 0 4096 {100 + i}.0 1 24 3 5" for i in range(300)]
    bad = {10: "1 0 4096", 50: "1 0 -5 150.0 1 24 3 5", 120: "1 0 4096 1.0 1 24 3 5",
           121: "1 0 4096 nan 1 24 3 5", 200: "1 0 4096 300.0 9 24 3 5",
           201: "1 0 x 301.0 1 24 3 5", 299: "1 0 4096 40"}
    rows = [bad.get(i, g) for i, g in enumerate(good)]
    src = tmp_path / "t.trace"
    src.write_text(header + "\n".join(rows))  # no final newline: the last line is cut
    with caplog.at_level(logging.WARNING, logger="flashml.trace.ingest"):
        res = ingest(src, tmp_path / "o.parquet", chunk_bytes=512, progress=False,
                     skip_bad_lines=True)
    assert res.skipped_lines == len(bad)
    assert res.rows == 300 - len(bad)
    assert sorted(int(re.search(r":(\d+): ", m).group(1))
                  for m in res.details["skipped_examples"]) \
        == [i + 2 for i in sorted(bad)]
    assert f"skipped {len(bad)} bad line(s) of 300" in caplog.text
    df = pl.read_parquet(res.out)
    assert df["src_line"].to_list() == [i + 2 for i in range(300) if i not in bad]
    with pytest.raises(TraceError) as e:
        ingest(src, tmp_path / "o2.parquet", chunk_bytes=512, progress=False)
    assert (e.value.line, e.value.field) == (12, "op_time")
    assert not (tmp_path / "o2.parquet").exists()


def test_skip_bad_lines_everything_bad(tmp_path: Path) -> None:
    src = tmp_path / "t.trace"
    src.write_text("1 2 3\n4 5 6\n")
    with pytest.raises(TraceError, match=r"no accesses.*all 2 were bad and skipped"):
        ingest(src, tmp_path / "o.parquet", fmt="msr", progress=False, skip_bad_lines=True)


# --- the other hostile inputs the fuzzer found ------------------------------------------------
HEADER = "#" + " ".join(FIELDS_201910) + "\n"


@pytest.mark.parametrize("body,line,field,fragment", [
    ("1 0 4096 nan 1 24 3 5\n", 2, "op_time", "expected a finite number, found 'nan'"),
    ("1 0 4096 inf 1 24 3 5\n", 2, "op_time", "expected a finite number, found 'inf'"),
    ("1 0 4096 1e400 1 24 3 5\n", 2, "op_time", "expected a finite number"),
    ("9223372036854775808 0 4096 1.0 1 24 3 5\n", 2, "block_id", "fits in 64 bits"),
    ("1 9223372036854775000 9223372036854775000 1.0 1 24 3 5\n", 2, "io_size",
     "larger than 4294967296 bytes"),
    ("1 9223372036854775000 4096 1.0 1 24 3 5\n", 2, "io_size", "exceeds the block size"),
    ("1 0 4096 1.0 1 24 3 5 \n", 2, "user_name", "expected 8 fields, found 9"),
    ("1 0 4096 1.0 1 24 3 \xff\n", 2, "user_name", "expected an integer"),
    ("1 0 4096 1.0 1 24 3 5\n1 0 4096 2.0 1 24 3 5\x00\n", 3, "user_name",
     "expected an integer"),
    ("1 0 4096 1.0 1\xa024 3 5\n", 2, "user_name", "expected 8 fields, found 7"),
])
def test_hostile_tectonic_values(tmp_path: Path, body: str, line: int, field: str,
                                 fragment: str) -> None:
    src = tmp_path / "t.trace"
    src.write_bytes((HEADER + body).encode("utf-8", "surrogateescape"))
    with pytest.raises(TraceError) as e:
        ingest(src, tmp_path / "o.parquet", progress=False)
    assert (e.value.line, e.value.field) == (line, field), str(e.value)
    assert fragment in str(e.value)


def test_op_count_and_io_size_are_bounded(tmp_path: Path) -> None:
    """A corrupt op_count or IO size would explode into billions of rows (a hang, then OOM)."""
    src = tmp_path / "t.trace"
    src.write_text("1 0 4096 1.0 1 1 1 h 999999999999\n")
    with pytest.raises(TraceError, match="op_count 999999999999 >") as e:
        ingest(src, tmp_path / "o.parquet", progress=False)
    assert (e.value.line, e.value.field) == (1, "op_count")
    msr = tmp_path / "m.csv"
    msr.write_text("128166372003061629,web,0,Read,0,999999999999999,1\n")
    with pytest.raises(TraceError, match="larger than 4294967296 bytes") as e:
        ingest(msr, tmp_path / "o.parquet", "msr", progress=False)
    msr.write_text("128166372003061629,web,0,Read,9223372036854775000,4096,1\n")
    with pytest.raises(TraceError, match="beyond the largest byte address") as e:
        ingest(msr, tmp_path / "o.parquet", "msr", progress=False)
    assert e.value.field == "Offset"
    cp = tmp_path / "c.csv"
    cp.write_text("version,time,op,size,lbn\n1,5,28,512,9223372036854775000\n")
    with pytest.raises(TraceError, match="beyond the largest byte address") as e:
        ingest(cp, tmp_path / "o.parquet", "cloudphysics", progress=False)
    assert (e.value.line, e.value.field) == (2, "lbn")


def test_msr_equal_filetimes_across_chunks_stay_in_order(tmp_path: Path) -> None:
    """Polars divided a one-row chunk's filetime exactly and a longer one's by multiplying
    with 1e-7: equal timestamps in two chunks came out a few ulps apart, backwards."""
    ts = 128166372033221629
    rows = [f"{ts + (i // 3) * 7},web,{i % 3},Read,0,4096,1" for i in range(40)]
    src = tmp_path / "m.csv"
    src.write_text("\n".join(rows) + "\n")
    for chunk in (40, 100, 1 << 20):
        res = ingest(src, tmp_path / f"o{chunk}.parquet", "msr", chunk_bytes=chunk,
                     progress=False)
        t = pl.read_parquet(res.out)["time"]
        assert (t.diff().drop_nulls() >= 0).all()
        assert t[0] == (ts - 116_444_736_000_000_000) / 1e7


def test_bom_and_crlf_are_read_as_plain_text(tmp_path: Path) -> None:
    spec = fs.specs()["tectonic-202110"]
    plain = tmp_path / "p.trace"
    plain.write_bytes(spec.text)
    ref = pl.read_parquet(ingest(plain, tmp_path / "p.parquet", progress=False).out)
    for name, data in {"bom": b"\xef\xbb\xbf" + spec.text,
                       "crlf": spec.text.replace(b"\n", b"\r\n"),
                       "bom-crlf-gz": gzip.compress(b"\xef\xbb\xbf"
                                                    + spec.text.replace(b"\n", b"\r\n"))}.items():
        src = tmp_path / f"{name}.trace"
        src.write_bytes(data)
        for chunk in (7, 300, 1 << 20):
            got = ingest(src, tmp_path / f"{name}{chunk}.parquet", chunk_bytes=chunk,
                         progress=False)
            assert pl.read_parquet(got.out).equals(ref), (name, chunk)
            assert got.meta.sample_ratio == 1.5


def test_bad_compressed_inputs(tmp_path: Path) -> None:
    text = fs.specs()["tectonic-201910"].text
    zst = fs.compress(text, "zst")
    cases = {
        "truncated.trace.zst": zst[:-7],  # zstandard's reader stopped silently here
        "junk.trace.zst": b"\x28\xb5\x2f\xfd" + b"\x00" * 40,
        "header.trace.gz": b"\x1f\x8b\x08\x00" + b"\xff" * 60,  # fails in the header sniffing
        "truncated.trace.gz": gzip.compress(text)[:-30],
    }
    for name, data in cases.items():
        src = tmp_path / name
        src.write_bytes(data)
        with pytest.raises(TraceError, match="cannot decompress/read input") as e:
            ingest(src, tmp_path / "o.parquet", progress=False)
        assert e.value.path == str(src)
        assert not (tmp_path / "o.parquet").exists()


def test_a_line_without_end_is_refused_with_bounded_memory(tmp_path: Path) -> None:
    src = tmp_path / "bin.trace"
    src.write_bytes(HEADER.encode() + b"1 0 4096 1.0 1 24 3 5\n" + b"\x07" * (3 << 20))
    with pytest.raises(TraceError, match="line longer than") as e:
        ingest(src, tmp_path / "o.parquet", chunk_bytes=1 << 16, progress=False)
    assert e.value.line == 3


@pytest.mark.parametrize("kwargs,fragment", [
    ({"chunk_bytes": 0}, "chunk size must be in 1..1073741824 bytes"),
    ({"block_bytes": 0}, "--block-bytes must be a multiple of the 131072-byte segment in"),
    ({"block_bytes": 1 << 70}, "--block-bytes must be a multiple of the 131072-byte segment"),
    ({"fmt": "cloudphysics", "time_scale": float("nan")}, "--time-scale must be a finite"),
    ({"fmt": "cloudphysics", "sector_bytes": 1 << 40}, "--sector-bytes must be in"),
    ({"fmt": "csv", "columns": "time=a,key=b,size=c", "separator": ""}, "--separator"),
    ({"fmt": "csv", "columns": "time=a,key=b,size=c", "separator": "ab"}, "--separator"),
    ({"fmt": "csv", "columns": "time=a,key=b,size=c", "time_scale": float("inf")},
     "--time-scale"),
])
def test_bad_options_are_user_errors(tmp_path: Path, kwargs: dict, fragment: str) -> None:
    src = tmp_path / "t.trace"
    src.write_text(HEADER + "1 0 4096 1.0 1 24 3 5\n")
    with pytest.raises(UserError, match=re.escape(fragment)):
        ingest(src, tmp_path / "o.parquet", progress=False, **kwargs)


def test_cli_chunk_mb_zero_and_bad_separator(tmp_path: Path, capsys) -> None:
    src = tmp_path / "t.trace"
    src.write_text(HEADER + "1 0 4096 1.0 1 24 3 5\n")
    with pytest.raises(SystemExit) as e:  # a usage error, exit 2
        in_process_cli(capsys, "trace", "ingest", src, "-o", tmp_path / "o.parquet",
                       "--chunk-mb", "0")
    err = capsys.readouterr().err
    assert e.value.code == 2
    assert "argument --chunk-mb: must be >= 1 MiB, got 0" in err
    rc, _, err = in_process_cli(capsys, "trace", "ingest", src, "-o", tmp_path / "o.parquet",
                                "--format", "csv", "--columns", "time=a,key=b,size=c",
                                "--separator", "")
    assert rc == 1 and "--separator must be one" in err
    assert not (tmp_path / "o.parquet").exists()


def test_time_scale_overflow_names_the_line(tmp_path: Path) -> None:
    src = tmp_path / "c.csv"
    src.write_text("version,time,op,size,lbn\n1,5,28,512,7\n1,1e300,28,512,7\n")
    with pytest.raises(TraceError, match=r"x time scale 1e\+06 is outside") as e:
        ingest(src, tmp_path / "o.parquet", "cloudphysics", time_scale=1e6, progress=False)
    assert (e.value.line, e.value.field) == (3, "time")


def test_damaged_canonical_table_is_a_clear_error(tmp_path: Path, capsys) -> None:
    """A canonical .parquet given to any command: Arrow/Polars errors on a damaged file (and
    wrong column types, nulls) were tracebacks."""
    src = tmp_path / "t.trace"
    src.write_text(HEADER + "1 0 4096 1.0 1 24 3 5\n2 0 4096 2.0 1 24 3 5\n")
    table = ingest(src, tmp_path / "t.parquet", progress=False).out
    good = table.read_bytes()
    cases = {"cut": good[: len(good) // 2], "junk": good[:4] + b"\x00" * 64 + good[68:],
             "not parquet": b"PAR1 hello"}
    for name, data in cases.items():
        bad = tmp_path / f"{name.replace(' ', '_')}.parquet"
        bad.write_bytes(data)
        rc, _, err = in_process_cli(capsys, "trace", "stats", bad)
        assert rc == 1, (name, err)
        assert err.strip().splitlines()[-1].startswith(f"flashml: error: {bad}: "), err
    df = pl.read_parquet(table)
    typed = tmp_path / "typed.parquet"
    df.with_columns(pl.col("time").cast(pl.String) + "x").write_parquet(typed)
    with pytest.raises(TraceError, match="column time is String") as e:
        read_table(typed)
    assert e.value.field == "time"
    nulls = tmp_path / "nulls.parquet"
    df.with_columns(size=pl.lit(None, pl.UInt64)).write_parquet(nulls)
    with pytest.raises(TraceError, match="null value") as e:
        read_table(nulls)
    assert e.value.field == "size"
