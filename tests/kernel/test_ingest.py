"""Ingest: every format to the same canonical schema, checked against hand-computed rows and a
slow, obvious line-by-line reference."""

from __future__ import annotations

import gzip
import random
import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
import zstandard

from flashml.errors import TraceError
from flashml.trace.canonical import CORE_SCHEMA, read_meta, read_table
from flashml.trace.ingest import ingest

from conftest import DATA

MASK = (1 << 64) - 1
B = 8 * 1024 * 1024


# --- independent reference implementations of the key functions --------------------------------
def ref_fnv1a64(s: str) -> int:
    h = 0xCBF29CE484222325
    for ch in s.encode():
        h = ((h ^ ch) * 0x100000001B3) & MASK
    return h


def ref_splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def ref_key(scope: str, block: int) -> int:
    return ref_splitmix64(ref_fnv1a64(scope) ^ ref_splitmix64(block))


def run(tmp_path: Path, src: Path, fmt: str, **kw) -> pl.DataFrame:
    out = tmp_path / (src.name + ".parquet")
    ingest(src, out, fmt, progress=False, **kw)
    df, _ = read_table(out)
    return df


# --- per-format hand-computed rows ----------------------------------------------------------------
def test_tectonic_201910(tmp_path: Path) -> None:
    df = run(tmp_path, DATA / "tectonic_201910.trace", "tectonic")
    # the zero-size IO on line 4 is dropped
    assert df["src_line"].to_list() == [2, 3, 5, 6]
    assert df["key"].to_list() == [310, 311, 312, 310]
    assert df["offset"].to_list() == [262144, 0, 1048576, 0]
    assert df["size"].to_list() == [4325376, 131072, 1048576, 8388608]
    assert df["op"].to_list() == [1, 2, 3, 2]
    assert df["namespace"].to_list() == [3, 3, 4, 3]
    assert df["user"].to_list() == [5, 5, 6, 7]
    assert df["time"].to_list() == [1572074461.57806, 1572074461.6, 1572074463.25, 1572074470.5]
    assert df["src_pipeline"].to_list() == [24, 24, 24, 25]


def test_tectonic_202110_op_count_and_host_keys(tmp_path: Path) -> None:
    df = run(tmp_path, DATA / "tectonic_202110.trace", "tectonic")
    t0 = 1633046400.0
    # line 3 (op_count 4 at +0.5) spreads over the next second; line 4 (op_count 2 at +1.0)
    # interleaves with it; stable order by time.
    expected = [
        (t0, 2, "hostA", 310), (t0 + 0.5, 3, "hostB", 310), (t0 + 0.75, 3, "hostB", 310),
        (t0 + 1.0, 3, "hostB", 310), (t0 + 1.0, 4, "hostA", 311), (t0 + 1.25, 3, "hostB", 310),
        (t0 + 1.5, 4, "hostA", 311), (t0 + 5.0, 5, "hostA", 311),
    ]
    assert df["time"].to_list() == [e[0] for e in expected]
    assert df["src_line"].to_list() == [e[1] for e in expected]
    assert df["key"].to_list() == [ref_key(e[2], e[3]) for e in expected]
    assert df["src_host_name"].to_list() == [e[2] for e in expected]
    # same block on two hosts: two cache keys
    assert df.filter(pl.col("src_block_id") == 310)["key"].n_unique() == 2


def test_tectonic_2023_keys_by_shard(tmp_path: Path) -> None:
    df = run(tmp_path, DATA / "tectonic_2023.trace", "tectonic")
    assert len(df) == 4  # 1 + 2 (op_count) + 1
    assert df["key"].to_list()[:3] == [ref_key("shard9", 77)] * 3
    assert df["key"][3] == ref_key("shard1", 78)
    assert df["op"].to_list() == [1, 2, 2, 4]
    assert df["time"].to_list() == [1672531200.0, 1672531200.25, 1672531200.75, 1672531203.0]


def test_tectonic_schema_detected_without_header(tmp_path: Path) -> None:
    with_header = run(tmp_path, DATA / "tectonic_2023.trace", "tectonic")
    no_header = run(tmp_path, DATA / "tectonic_noheader.trace", "tectonic")
    assert no_header["key"].to_list() == with_header["key"].to_list()[:3]


def test_msr_filetime_and_block_split(tmp_path: Path) -> None:
    df = run(tmp_path, DATA / "msr_fixture.csv", "msr")
    ft = [128166372003061629, 128166372013061629, 128166372023061629, 128166372023061629,
          128166372033061629]
    assert df["time"].to_list() == [(f - 116444736000000000) / 1e7 for f in ft]
    assert df["src_line"].to_list() == [1, 2, 3, 3, 4]
    assert df["key"].to_list() == [ref_key("web:0", 0), ref_key("web:0", 1), ref_key("web:1", 0),
                                   ref_key("web:1", 1), ref_key("prxy:0", 0)]
    assert df["offset"].to_list() == [4096, 0, B - 4096, 0, 0]
    assert df["size"].to_list() == [8192, 4096, 4096, 4096, 65536]
    assert df["op"].to_list() == [2, 4, 2, 2, 2]
    assert df["user"].to_list() == [0, 0, 1, 1, 0]
    assert df["namespace"][0] == ref_fnv1a64("web") & 0xFFFFFFFF


def test_msr_with_header_line(tmp_path: Path) -> None:
    src = tmp_path / "with_header.csv"
    src.write_text("Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime\n"
                   + (DATA / "msr_fixture.csv").read_text())
    df = run(tmp_path, src, "msr")
    assert df["src_line"].to_list() == [2, 3, 4, 4, 5]


def test_cloudphysics_sample(tmp_path: Path, cloudphysics_path: Path) -> None:
    df = run(tmp_path, cloudphysics_path, "cloudphysics")
    raw = pl.read_csv(cloudphysics_path, schema_overrides={"op": pl.String})
    assert df["src_line"].n_unique() == len(raw) == 113_872
    # pieces of each request add up to the request, and stay inside their block
    assert df["size"].sum() == raw["size"].sum()
    assert (df["offset"] + df["size"]).max() <= B
    first = df.unique("src_line", keep="first", maintain_order=True)
    assert (first["key"] * B + first["offset"]).to_list() == (raw["lbn"] * 512).to_list()
    assert sorted(df["op"].unique().to_list()) == [2, 4]
    assert (df.filter(pl.col("op") == 2)["src_opcode"] == "28").all()
    # the sector size is an option
    df4k = run(tmp_path, cloudphysics_path, "cloudphysics", sector_bytes=4096)
    first4k = df4k.unique("src_line", keep="first", maintain_order=True)
    assert (first4k["key"] * B + first4k["offset"]).to_list() == (raw["lbn"] * 4096).to_list()


def test_generic_csv_mapping(tmp_path: Path) -> None:
    df = run(tmp_path, DATA / "generic.csv", "csv",
             columns="time=ts,key=object,size=bytes,op=kind,namespace=tenant")
    assert df["key"].to_list() == [ref_fnv1a64("alpha"), ref_fnv1a64("beta"), 42]
    assert df["op"].to_list() == [2, 4, 2]
    assert df["namespace"].to_list() == [1, 2, 1]
    assert df["offset"].to_list() == [0, 0, 0]
    assert df["time"].to_list() == [10.0, 11.5, 12.0]
    # by index, without header, with an address column cut into blocks
    src = tmp_path / "noheader.csv"
    src.write_text(f"1.0;{B - 10};20\n2.0;5;1\n")
    df2 = run(tmp_path, src, "csv", columns="time=0,address=1,size=2", separator=";",
              header=False)
    assert df2["key"].to_list() == [0, 1, 0]
    assert df2["offset"].to_list() == [B - 10, 0, 5]
    assert df2["size"].to_list() == [10, 10, 1]


def test_all_formats_share_the_canonical_schema(tmp_path: Path, cloudphysics_path: Path) -> None:
    from flashml.trace.generate import generate_trace

    generated = tmp_path / "generated.trace"
    generate_trace("region1-like", 0, generated, accesses=2000, progress=False)
    tables = [
        run(tmp_path, generated, "tectonic"),
        run(tmp_path, DATA / "tectonic_201910.trace", "tectonic"),
        run(tmp_path, DATA / "tectonic_202110.trace", "tectonic"),
        run(tmp_path, DATA / "tectonic_2023.trace", "tectonic"),
        run(tmp_path, DATA / "msr_fixture.csv", "msr"),
        run(tmp_path, cloudphysics_path, "cloudphysics"),
        run(tmp_path, DATA / "generic.csv", "csv", columns="time=ts,key=object,size=bytes"),
    ]
    for df in tables:
        assert df.columns[: len(CORE_SCHEMA)] == list(CORE_SCHEMA)
        assert [df.schema[c] for c in CORE_SCHEMA] == list(CORE_SCHEMA.values())
        assert all(c.startswith("src_") for c in df.columns[len(CORE_SCHEMA):])


# --- compression, metadata, sample ratio ----------------------------------------------------------
def test_gz_and_zst_inputs_are_transparent(tmp_path: Path) -> None:
    src = DATA / "tectonic_202110.trace"
    gz = tmp_path / "t.trace.gz"
    gz.write_bytes(gzip.compress(src.read_bytes()))
    zst = tmp_path / "t.trace.zst"
    zst.write_bytes(zstandard.ZstdCompressor().compress(src.read_bytes()))
    plain = run(tmp_path, src, "tectonic")
    assert run(tmp_path, gz, "tectonic").equals(plain)
    assert run(tmp_path, zst, "tectonic").equals(plain)


def test_metadata_and_sample_ratio_sources(tmp_path: Path) -> None:
    out = tmp_path / "a.parquet"
    ingest(DATA / "tectonic_201910.trace", out, "tectonic", progress=False)
    meta = read_meta(out)
    assert (meta.sample_ratio, meta.source_format, meta.block_bytes) == (100.0, "tectonic", B)
    named = tmp_path / "full_0_0.1.trace"
    shutil.copy(DATA / "tectonic_201910.trace", named)
    ingest(named, out, "tectonic", progress=False)
    assert read_meta(out).sample_ratio == 0.1
    ingest(named, out, "tectonic", sample_ratio=2.5, progress=False)
    assert read_meta(out).sample_ratio == 2.5
    commented = tmp_path / "c.trace"
    lines = (DATA / "tectonic_201910.trace").read_text().splitlines(keepends=True)
    commented.write_text(lines[0] + "# flashml: preset=x sample_ratio=0.5\n" + "".join(lines[1:]))
    ingest(commented, out, "tectonic", progress=False)
    assert read_meta(out).sample_ratio == 0.5
    with pytest.raises(TraceError, match="sample ratio"):
        ingest(named, tmp_path / "z.parquet", "tectonic", sample_ratio=0.0, progress=False)


# --- streaming equals a slow reference ------------------------------------------------------------
def reference_ingest(path: Path) -> list[tuple]:
    """Obvious line-by-line Tectonic 202110 ingest: expand op_count, stable-sort by time."""
    rows = []
    for lineno, line in enumerate(path.read_text().splitlines(), start=1):
        if line.startswith("#"):
            continue
        blk, off, size, t, op, ns, user, host, count = line.split(" ")
        if int(size) == 0:
            continue
        n = int(count)
        for i in range(n):
            rows.append((float(t) + i / n, ref_key(host, int(blk)), int(off), int(size), int(op),
                         int(ns), int(user), lineno))
    rows.sort(key=lambda r: r[0])  # stable
    return rows


def test_chunked_streaming_matches_reference(tmp_path: Path) -> None:
    rnd = random.Random(7)
    src = tmp_path / "random.trace"
    t = 1.6e9
    lines = ["#block_id io_offset io_size op_time op_name user_namespace user_name host_name "
             "op_count"]
    for _ in range(3000):
        t += rnd.choice([0.0, 0.1, 0.3, 0.9, 2.0])
        size = rnd.choice([0, 4096, 131072, 1048576])
        off = rnd.randrange(0, B - size + 1, 4096) if size else 0
        lines.append(f"{rnd.randrange(50)} {off} {size} {t:.3f} {rnd.choice([1, 2, 3, 4])} "
                     f"{rnd.randrange(4)} {rnd.randrange(9)} h{rnd.randrange(3)} "
                     f"{rnd.choice([1, 1, 1, 2, 3, 5])}")
    src.write_text("\n".join(lines) + "\n")
    ref = reference_ingest(src)
    for chunk in (512, 4096, 1 << 24):
        out = tmp_path / f"c{chunk}.parquet"
        ingest(src, out, "tectonic", chunk_bytes=chunk, progress=False)
        df, _ = read_table(out)
        got = list(df.select(list(CORE_SCHEMA)).iter_rows())
        assert got == ref, f"chunk {chunk}"
        if chunk == 512:  # streamed: one row group per chunk, memory bounded by the chunk
            assert pq.ParquetFile(out).num_row_groups > 10
        # read back as one chunk per column: the simulator borrows the columns without a copy
        assert set(df.n_chunks("all")) == {1}


def test_times_are_non_decreasing_after_expansion(tmp_path: Path) -> None:
    df = run(tmp_path, DATA / "tectonic_202110.trace", "tectonic")
    assert np.all(np.diff(df["time"].to_numpy()) >= 0)


def test_mapped_table_is_the_read_table_mapped_from_a_file(tmp_path: Path) -> None:
    """`mapped_table` gives `read_table(core_only=True)`'s frame and metadata, each column a
    read-only view of one file's pages (no copy of the process's own), written once per
    table file: a second call maps the same file, a re-written table gets a new one and the
    old one goes."""
    import os

    from flashml.trace.canonical import mapped_table

    out = tmp_path / "t.parquet"
    ingest(DATA / "tectonic_202110.trace", out, "tectonic", progress=False)
    want, meta = read_table(out, core_only=True)
    got, got_meta = mapped_table(out, tmp_path / "work")
    assert got.equals(want) and got.schema == want.schema and got_meta == meta
    (first,) = (tmp_path / "work").glob("core-columns-*.bin")
    for c in got.columns:
        a = got[c].to_numpy()
        assert not a.flags.writeable and not a.flags.owndata
    stamp = first.stat().st_mtime_ns
    again, _ = mapped_table(out, tmp_path / "work")
    assert again.equals(want) and first.stat().st_mtime_ns == stamp
    # the table written again (a new file): a new copy, the old one removed
    shutil.copyfile(out, tmp_path / "copy.parquet")
    os.replace(tmp_path / "copy.parquet", out)
    assert mapped_table(out, tmp_path / "work")[0].equals(want)
    (second,) = (tmp_path / "work").glob("core-columns-*.bin")
    assert second != first
    with pytest.raises(TraceError):
        mapped_table(tmp_path / "missing.parquet", tmp_path / "work")


def test_mapped_table_is_written_and_checked_a_batch_at_a_time(tmp_path: Path,
                                                               monkeypatch) -> None:
    """The mapped copy written in batches of a few rows is the read table; a time out of
    range in a later batch is refused naming its row in the whole table and its source line,
    and leaves no copy behind."""
    import flashml.trace.canonical as canonical
    from flashml.trace.canonical import mapped_table, write_table

    monkeypatch.setattr(canonical, "MAPPED_BATCH_ROWS", 3)
    out = tmp_path / "t.parquet"
    ingest(DATA / "tectonic_202110.trace", out, "tectonic", progress=False)
    want, meta = read_table(out, core_only=True)
    assert want.height > 6
    assert mapped_table(out, tmp_path / "work")[0].equals(want)
    bad = want.with_columns(time=pl.when(pl.int_range(pl.len()) == 4).then(2e12)
                            .otherwise(pl.col("time")))
    write_table(bad, tmp_path / "bad.parquet", meta)
    with pytest.raises(TraceError, match=r"at row 5, source line \d+") as e:
        mapped_table(tmp_path / "bad.parquet", tmp_path / "work2")
    assert e.value.field == "time"
    assert not list((tmp_path / "work2").glob("*"))
