"""The trace readers and `flashml trace ...` commands under hostile numbers: memory bounded
by construction (every expansion capped before it is built, rows built and written in
bounded slices), every value validated with its unit, inputs never overwritten."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from flashml.cli import main
from flashml.errors import TraceError, UserError
from flashml.trace.canonical import read_table
from flashml.trace.ingest import FREE_ACCESSES, _slices, ingest
from flashml.trace.readers.tectonic import MAX_OP_COUNT
from flashml.trace.spread import Spreader

from conftest import DATA, REPO

HEADER_202110 = ("#block_id io_offset io_size op_time op_name user_namespace user_name "
                 "host_name op_count\n")
HEADER_201910 = "#block_id io_offset io_size op_time op_name pipeline user_namespace user_name\n"


def hostile_tectonic(path: Path, lines: int, op_count: int = MAX_OP_COUNT,
                     same_time: bool = False) -> Path:
    """`lines` Tectonic 202110 lines, each repeated op_count times (a few KB at most)."""
    body = "".join(f"{i} 0 4096 {1633046400 + (0 if same_time else i)}.0 1 3 5 h {op_count}\n"
                   for i in range(lines))
    path.write_text(HEADER_202110 + body)
    return path


def run_measured(*args: str | Path) -> tuple[int, str, int]:
    """(exit code, stderr, peak RSS in bytes) of `flashml ARGS` run in a child of a fresh
    interpreter: RUSAGE_CHILDREN of that interpreter covers the ingest alone."""
    probe = ("import resource, subprocess, sys\n"
             "p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
             "sys.stderr.write(p.stderr)\n"
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
             "sys.exit(p.returncode)\n")
    proc = subprocess.run([sys.executable, "-c", probe, sys.executable, "-m", "flashml.cli",
                           *map(str, args)], capture_output=True, text=True, cwd=REPO,
                          timeout=1200)
    return proc.returncode, proc.stderr, int(proc.stdout.split()[-1]) * 1024


def run_main(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str]:
    """`flashml ARGS` in this process: (exit code, stderr). A usage error is exit 2."""
    try:
        rc = main([str(a) for a in args])
    except SystemExit as e:
        rc = int(e.code or 0)
    return rc, capsys.readouterr().err


# --- bounded memory ---------------------------------------------------------------------------
def test_a_3kb_trace_of_op_count_2_20_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    """A ~3 KB Tectonic file of 70 lines with op_count 2^20 (73 M accesses): before, it was
    expanded in memory at once (20 such lines took 3.7 GB; 60 aborted, rc 134). Now the
    expansion is counted before anything is built and refused at the line that crosses
    --max-expansion, naming file, line, field and the option; peak RSS stays far below."""
    src = hostile_tectonic(tmp_path / "hostile.trace", 70)
    assert 2_500 < src.stat().st_size < 3_500
    out = tmp_path / "out.parquet"
    rc, err, rss = run_measured("trace", "ingest", src, "-o", out)
    assert rc == 1, err
    assert "Traceback" not in err
    first_over = FREE_ACCESSES // MAX_OP_COUNT + 1  # data lines start at line 2
    assert f"flashml: error: {src}:{first_over + 1}: field 'op_count'" in err, err
    assert "--max-expansion 256" in err
    assert rss < 1_000_000_000, f"peak RSS {rss / 1e6:.0f} MB"
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["hostile.trace"]


def test_op_count_repeats_are_written_in_bounded_slices(tmp_path: Path) -> None:
    """12 lines of op_count 2^20 (12.6 M accesses, within the first 2^24 allowed): before,
    all were built at once (about 1.7 GB); now at most 2^20 accesses are built at a time,
    and the table is complete and in time order."""
    src = hostile_tectonic(tmp_path / "t.trace", 12)
    out = tmp_path / "t.parquet"
    rc, err, rss = run_measured("trace", "ingest", src, "-o", out)
    assert rc == 0, err
    assert rss < 900_000_000, f"peak RSS {rss / 1e6:.0f} MB"
    times = pl.scan_parquet(out).select(
        n=pl.len(), sorted=(pl.col("time").diff().fill_null(0) >= 0).all(),
        lines=pl.col("src_line").n_unique()).collect().row(0, named=True)
    assert times == {"n": 12 * MAX_OP_COUNT, "sorted": True, "lines": 12}


@pytest.mark.skipif(not os.environ.get("FLASHML_FUZZ_SLOW"), reason="make fuzz only: 63 M "
                    "accesses take minutes")
def test_raised_max_expansion_ingests_the_hostile_file_in_bounded_memory(tmp_path: Path) -> None:
    src = hostile_tectonic(tmp_path / "hostile.trace", 60)
    out = tmp_path / "out.parquet"
    rc, err, rss = run_measured("trace", "ingest", src, "-o", out, "--max-expansion",
                                str(MAX_OP_COUNT))
    assert rc == 0, err
    assert rss < 1_000_000_000, f"peak RSS {rss / 1e6:.0f} MB"
    assert pl.scan_parquet(out).select(pl.len()).collect().item() == 60 * MAX_OP_COUNT


@pytest.mark.parametrize("src,fmt,options", [
    (DATA / "tectonic_202110.trace", "tectonic", {}),
    (DATA / "tectonic_2023.trace", "tectonic", {}),
    (DATA / "msr_fixture.csv", "msr", {"block_bytes": 128 * 1024}),
    (None, "csv", {"columns": "time=ts,key=vol,address=addr,size=bytes",
                   "block_bytes": 128 * 1024}),
])
@pytest.mark.parametrize("budget", [1, 3, 7])
def test_slices_give_the_same_table_as_one_piece(tmp_path: Path, src: Path | None, fmt: str,
                                                 options: dict, budget: int) -> None:
    """Built in slices of a few accesses (op_count repeats interleaving over the next
    second, IOs split into many blocks), the table is the one built in one piece."""
    if src is None:  # IOs over several blocks, by volume
        rng = np.random.default_rng(1)
        src = tmp_path / "address.csv"
        src.write_text("ts,vol,addr,bytes\n" + "".join(
            f"{i / 4},v{rng.integers(3)},{rng.integers(1 << 24)},{rng.integers(1, 1 << 20)}\n"
            for i in range(60)))
    whole = ingest(src, tmp_path / "whole.parquet", fmt, progress=False, **options)
    sliced = ingest(src, tmp_path / "sliced.parquet", fmt, progress=False, row_budget=budget,
                    **options)
    a, b = read_table(whole.out)[0], read_table(sliced.out)[0]
    assert len(a) > len(a["src_line"].unique())  # some lines make several accesses
    assert a.equals(b)


def test_spreader_interleaves_lines_at_one_time_exactly() -> None:
    """Many lines at the same second with different op_counts: each batch is every repeat
    up to a cutoff, so the concatenation is the stable sort of all repeats by time."""
    rng = np.random.default_rng(5)
    n = rng.integers(1, 40, 50)
    t = np.sort(rng.choice([10.0, 10.25, 11.0, 1e11 + 0.5], 50))
    rows = pl.DataFrame({"time": t, "src_line": np.arange(50, dtype=np.uint64),
                         "_repeats": n})
    expect = pl.DataFrame({
        "time": np.concatenate([ti + np.arange(ni) / ni for ti, ni in zip(t, n, strict=True)]),
        "src_line": np.repeat(np.arange(50, dtype=np.uint64), n)}).sort(
            "time", maintain_order=True)
    s = Spreader(Path("x"), budget=9)
    s.add(rows)
    batches = list(s.until(10.5)) + list(s.until(None))
    assert all(len(b) <= 9 or b["time"].n_unique() == 1 for b in batches)  # ties stay whole
    assert pl.concat(batches).equals(expect)


def test_too_many_pending_lines_are_refused() -> None:
    rows = pl.DataFrame({"time": [1.0] * 5, "src_line": np.arange(2, 7, dtype=np.uint64),
                         "_repeats": [3] * 5})
    with pytest.raises(TraceError, match=r"x:5: field 'op_count': more than 3 lines"):
        Spreader(Path("x"), max_pending=3).add(rows)


def test_slices_cut_at_the_budget() -> None:
    counts = np.array([3, 3, 5, 1, 1, 1, 0, 9])
    cuts = list(_slices(counts, 6))
    assert cuts == [(0, 2), (2, 4), (4, 7), (7, 8)]
    assert all(counts[lo:hi].sum() <= 6 or hi - lo == 1 for lo, hi in cuts)


def test_an_io_split_into_blocks_counts_against_max_expansion(tmp_path: Path) -> None:
    """2,000 MSR lines of 4 GiB IOs cut into 128 KiB blocks would be 65 M rows: refused
    at the line that crosses the cap, before building any, naming the Size field."""
    src = tmp_path / "big.csv"
    t0 = 128166372003061629
    src.write_text("".join(f"{t0 + i},web,0,Read,0,{1 << 32},100\n" for i in range(2000)))
    with pytest.raises(TraceError, match=r"big.csv:513: field 'Size': this line brings the "
                       r"trace to 16,809,984 accesses") as e:
        ingest(src, tmp_path / "o.parquet", "msr", block_bytes=128 * 1024, progress=False)
    assert "--max-expansion 256" in str(e.value)
    assert not (tmp_path / "o.parquet").exists()


@pytest.mark.parametrize("value", ["1", "3", "4096", str(128 * 1024 + 1), str(1 << 40), "-1",
                                   "0", "1e15", "nan"])
def test_block_bytes_out_of_range_is_a_usage_error(tmp_path: Path, capsys, value: str) -> None:
    """--block-bytes 1 tried to allocate 34.5 GB (abort), 3 raised ArrayMemoryError."""
    rc, err = run_main(capsys, "trace", "ingest", "--format", "msr", DATA / "msr_fixture.csv",
                       "-o", tmp_path / "o.parquet", "--block-bytes", value)
    assert rc == 2
    assert "argument --block-bytes" in err
    if value.lstrip("-").isdigit():
        assert any(why in err for why in ("must be >= 131072 bytes",
                                          "must be at most 4294967296 bytes",
                                          "must be a multiple of 131072 bytes")), err
    assert not (tmp_path / "o.parquet").exists()


@pytest.mark.parametrize("value", ["0", "-1", "1025", "6000", "1e15", "nan", "2.5"])
def test_chunk_mb_out_of_range_is_a_usage_error(tmp_path: Path, capsys, value: str) -> None:
    """--chunk-mb 6000 was a MemoryError, 1e15 an OverflowError."""
    rc, err = run_main(capsys, "trace", "ingest", DATA / "tectonic_201910.trace", "-o",
                       tmp_path / "o.parquet", "--chunk-mb", value)
    assert rc == 2
    assert "argument --chunk-mb" in err
    if value.lstrip("-").isdigit():
        assert "must be >= 1 MiB" in err or "must be at most 1024 MiB" in err, err


def test_ingest_api_refuses_a_chunk_beyond_the_cap(tmp_path: Path) -> None:
    for bad in (0, -1, (1 << 30) + 1, 10**15):
        with pytest.raises(UserError, match="chunk size must be in 1..1073741824 bytes"):
            ingest(DATA / "tectonic_201910.trace", tmp_path / "o.parquet", chunk_bytes=bad)
    for bad in (0, (1 << 20) + 1):
        with pytest.raises(UserError, match="--max-expansion must be"):
            ingest(DATA / "tectonic_201910.trace", tmp_path / "o.parquet", max_expansion=bad)


# --- times ------------------------------------------------------------------------------------
@pytest.mark.parametrize("first,last,line", [("-1e300", "5", 2), ("1", "1e300", 3),
                                             ("1e12", "1000000000001", 3),
                                             ("-1000000000001", "0", 2)])
def test_times_beyond_1e12_seconds_are_refused(tmp_path: Path, first: str, last: str,
                                               line: int) -> None:
    """Times of -1e300 (first line) and 1e300 (last line) were accepted."""
    src = tmp_path / "t.trace"
    src.write_text(HEADER_201910 + f"1 0 4096 {first} 1 0 1 1\n2 0 4096 {last} 1 0 1 1\n")
    with pytest.raises(TraceError, match=rf"t.trace:{line}: field 'op_time': time .* is "
                       r"outside \[-1e\+12, 1e\+12\] seconds"):
        ingest(src, tmp_path / "o.parquet", progress=False)
    assert not (tmp_path / "o.parquet").exists()


def test_scaled_times_beyond_1e12_seconds_are_refused(tmp_path: Path) -> None:
    src = tmp_path / "t.csv"
    src.write_text("ts,obj,bytes\n1,a,10\n2000000,b,10\n")
    with pytest.raises(TraceError, match=r"t.csv:3: field 'ts': time 2000000.0 x time scale "
                       r"1e\+06 is outside"):
        ingest(src, tmp_path / "o.parquet", "csv", columns="time=ts,key=obj,size=bytes",
               time_scale=1e6, progress=False)
    ok = ingest(src, tmp_path / "o.parquet", "csv", columns="time=ts,key=obj,size=bytes",
                time_scale=1e-6, progress=False)
    assert read_table(ok.out)[0]["time"].to_list() == [1e-6, 2.0]


@pytest.mark.parametrize("option,value,why", [
    ("--time-scale", "1e-320", "must be >= 1e-12 seconds per source time unit"),
    ("--time-scale", "0", "must be >= 1e-12 seconds"),
    ("--time-scale", "-1", "must be >= 1e-12 seconds"),
    ("--time-scale", "1e300", "must be at most 1000000 seconds per source time unit"),
    ("--time-scale", "nan", "finite"), ("--time-scale", "inf", "finite"),
    ("--sample-ratio", "1e-300", "must be >= 1e-06 percent"),
    ("--sample-ratio", "0", "must be >= 1e-06 percent"),
    ("--sample-ratio", "100.5", "must be at most 100 percent"),
    ("--sample-ratio", "nan", "finite"), ("--sector-bytes", "0", "must be >= 1 bytes"),
    ("--sector-bytes", str(1 << 40), "must be at most 4294967296 bytes"),
    ("--max-expansion", "0", "must be >= 1 accesses per line"),
])
def test_ingest_numbers_are_refused_with_their_unit(tmp_path: Path, capsys, option: str,
                                                    value: str, why: str) -> None:
    """--sample-ratio 1e-300 and --time-scale 1e-320 were accepted."""
    rc, err = run_main(capsys, "trace", "ingest", "--format", "cloudphysics",
                       DATA / "msr_fixture.csv", "-o", tmp_path / "o.parquet", option, value)
    assert rc == 2, err
    assert f"argument {option}" in err and why in err, err
    assert not (tmp_path / "o.parquet").exists()


def test_a_sample_ratio_below_the_smallest_is_refused_everywhere(tmp_path: Path) -> None:
    from flashml.trace.canonical import TraceMeta, resolve_sample_ratio
    from flashml.trace.sample import sample_by_key

    with pytest.raises(TraceError, match=r"sample ratio must be a percentage in \[1e-06, 100\]"):
        resolve_sample_ratio(1e-300, "t.parquet")
    df = pl.DataFrame({"key": [1, 2]})
    with pytest.raises(UserError, match="below the smallest, 1e-06%"):
        sample_by_key(df, TraceMeta(sample_ratio=1e-5), start=0, size=1)


# --- seeds and generator sizes ----------------------------------------------------------------
@pytest.mark.parametrize("value", ["-1", str(1 << 32), "1.5", "nan"])
@pytest.mark.parametrize("command", ["generate", "sample", "mix"])
def test_seed_must_be_a_32_bit_non_negative_integer(tmp_path: Path, capsys, command: str,
                                                    value: str) -> None:
    """--seed -1 in trace generate and trace sample was a traceback."""
    extra: list[str | Path] = {"sample": [DATA / "tectonic_201910.trace", "--size", "50"],
                               "generate": ["--accesses", "100"], "mix": []}[command]
    rc, err = run_main(capsys, "trace", command, *extra, "--seed", value, "-o",
                       tmp_path / "o.out")
    assert rc == 2, err
    assert "argument --seed" in err
    if value != "1.5" and value != "nan":
        assert "must be >= 0" in err or "must be at most 4294967295" in err, err
    assert not (tmp_path / "o.out").exists()


def test_seed_check_in_the_functions(tmp_path: Path) -> None:
    from flashml.systems.mlcache.multistream import generate_mix
    from flashml.trace.canonical import TraceMeta
    from flashml.trace.generate import generate_trace
    from flashml.trace.sample import sample_by_key

    for seed in (-1, 1 << 32, True):
        with pytest.raises(UserError, match="--seed must be an integer in 0..4294967295"):
            generate_trace("region1-like", seed, tmp_path / "x", accesses=10, progress=False)
        with pytest.raises(UserError, match="--seed must be"):
            sample_by_key(pl.DataFrame({"key": [1]}), TraceMeta(), start=0, size=5, seed=seed)
        with pytest.raises(UserError, match="--seed must be"):
            generate_mix(2, 10, seed)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("args,why", [
    (["--accesses", "0"], "argument --accesses"),
    (["--accesses", str(10**9)], "must be at most 100000000 accesses"),
    (["--days", "0"], "must be > 0 days"), (["--days", "1e300"], "must be at most 3650 days"),
    (["--days", "nan"], "argument --days"),
    (["--preset", "web-like", "--zipf", "nan"], "argument --zipf"),
    (["--preset", "web-like", "--overwrites", "2"], "must be at most 1 overwrites per read"),
])
def test_generate_sizes_are_capped(tmp_path: Path, capsys, args: list[str], why: str) -> None:
    rc, err = run_main(capsys, "trace", "generate", *args, "-o", tmp_path / "g.trace")
    assert rc == 2, err
    assert why in err, err
    assert not (tmp_path / "g.trace").exists()


def test_block_preset_zero_requests_is_refused_not_the_default() -> None:
    from flashml.systems.pannier.blockgen import (
        BLOCK_PRESETS,
        generate_block_requests,
        get_block_preset,
    )

    p = get_block_preset(next(iter(BLOCK_PRESETS)))
    with pytest.raises(UserError, match="--accesses must be an integer number of accesses"):
        generate_block_requests(p, 0, requests=0)


@pytest.mark.parametrize("option,value", [("--streams", "0"), ("--streams", "100000"),
                                          ("--requests", "0"), ("--requests", "1e300"),
                                          ("--phases", "0"), ("--scale", "4"),
                                          ("--scale", str(10**12))])
def test_mix_sizes_are_capped(tmp_path: Path, capsys, option: str, value: str) -> None:
    rc, err = run_main(capsys, "trace", "mix", option, value, "-o", tmp_path / "m.parquet")
    assert rc == 2, err
    assert f"argument {option}" in err
    assert not (tmp_path / "m.parquet").exists()


# --- outputs are never inputs ------------------------------------------------------------------
def _trace_copy(tmp_path: Path) -> tuple[Path, bytes]:
    src = tmp_path / "same.trace"
    data = (DATA / "tectonic_201910.trace").read_bytes()
    src.write_bytes(data)
    return src, data


@pytest.mark.parametrize("how", ["same name", "symlink input", "symlink output", "hard link"])
@pytest.mark.parametrize("command", ["ingest", "sample"])
def test_an_output_that_is_the_input_is_refused(tmp_path: Path, capsys, command: str,
                                                how: str) -> None:
    """`trace ingest same.trace -o same.trace` replaced the input with Parquet (also
    through a symlinked or hard-linked input), and so did `trace sample X -o X`."""
    src, data = _trace_copy(tmp_path)
    given_in, given_out = src, src
    if how == "symlink input":
        given_in = tmp_path / "link.trace"
        given_in.symlink_to(src)
    elif how == "symlink output":
        given_out = tmp_path / "link.out"
        given_out.symlink_to(src)
    elif how == "hard link":
        given_out = tmp_path / "hard.trace"
        os.link(src, given_out)
    extra = ["--size", "50"] if command == "sample" else []
    rc, err = run_main(capsys, "trace", command, given_in, "-o", given_out, *extra)
    assert rc == 1, err
    assert f"flashml: error: {given_out}: option -o names the same file as TRACE ({given_in})" \
        in err, err
    assert src.read_bytes() == data
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == \
        sorted({src.name, given_in.name, given_out.name})
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize("command", [["ingest", DATA / "tectonic_201910.trace"],
                                     ["generate", "--accesses", "100"], ["mix"]])
def test_a_fifo_output_is_refused_not_a_hang(tmp_path: Path, capsys, command: list) -> None:
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    rc, err = run_main(capsys, "trace", *command, "-o", fifo)
    assert rc == 1
    assert f"{fifo}: option -o: the output is a FIFO" in err


@pytest.mark.parametrize("time", ["1e300", "-1e13", "inf"])
def test_object_traces_refuse_times_beyond_1e12_seconds(tmp_path: Path, time: str) -> None:
    from flashml.trace.objects import read_objects_csv

    src = tmp_path / "o.csv"
    src.write_text(f"time,key,size\n1,1,10\n{time},2,10\n")
    with pytest.raises(TraceError, match=r"o.csv:3: field 'time': time must be a finite "
                       r"number within 1e\+12 s of the epoch"):
        read_objects_csv(src)


@pytest.mark.parametrize("command", [["ingest", "-o", "out.parquet"], ["sample", "--size", "50",
                                     "-o", "out.parquet"], ["stats"], ["validate"],
                                     ["ingest", "--format", "objects-csv", "-o", "o.parquet"]])
def test_a_fifo_input_is_refused_not_a_hang(tmp_path: Path, capsys, monkeypatch,
                                            command: list[str]) -> None:
    """Opening a FIFO given as the trace waited for a writer for ever."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FLASHML_HOME", str(tmp_path / "state"))
    fifo = tmp_path / "in.trace"
    os.mkfifo(fifo)
    rc, err = run_main(capsys, "trace", command[0], fifo, *command[1:])
    assert rc == 1, err
    assert f"flashml: error: {fifo}: is a FIFO, not a regular file" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.trace"]


def test_the_largest_max_expansion_is_the_largest_op_count() -> None:
    from flashml.trace.limits import MAX_MAX_EXPANSION
    from flashml.trace.readers.tectonic import MAX_OP_COUNT

    assert MAX_MAX_EXPANSION == MAX_OP_COUNT
