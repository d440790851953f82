"""Episodes and OPT, in-process engine (the semantics: `flashml.systems.baleen.episodes.core`).

The per-GET work (the sort by key and time, the episode splits, the per-segment replay) is
one sort and one pass in the simulator crate (`flashml_sim.episode_split`,
sim/src/flash/episodes.rs), run on one key bucket (`key % buckets`) of the table's GETs at a
time, so a build holds one bucket's GETs, not the table's (`BUCKET_GETS`); the OPT ranking
and the derived columns are the shared Polars stages (`polars_engine.rank_episodes`), so
every float is the other engines'. Between the buckets and the outputs a GET keeps its
episode's index and its position (two 4-byte arrays indexed by row); labels and the
simulator arrays are then written a slice of rows at a time (`WRITE_ROWS`), their per-GET
columns gathers by episode id. At 10 M region1-like accesses a build takes 3 s here (one
bucket) and 7.6 s on Polars (three key buckets, each a scan of the table, Parquet parts
written and merged); at 100 M 42 s in six buckets, 4.7 GB at its peak.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq

from flashml.systems.baleen.episodes.core import SCHEMAS, Job, conform, prepared
from flashml.systems.baleen.episodes.polars_engine import COMPRESSION, rank_episodes

#: GETs per key bucket: a bucket's split holds ~110 B per GET (its columns read, the
#: crate's sort items, its per-GET outputs) beside the buckets' episodes so far.
BUCKET_GETS = 16_000_000
#: Rows of the table per slice of the labels and arrays written: small slices let Polars'
#: writer compress one while the next is gathered (at 10 M accesses the labels took 0.8 s in
#: slices of 1 M rows, 1.8 s in slices of 8 M).
WRITE_ROWS = 1_000_000
#: Peak memory of a build: a fixed part and a part per access of the table, rounded up
#: (`/usr/bin/time -v flashml episodes build --engine rust`, the interpreter and libraries
#: included: 10 M region1-like accesses in one bucket 1.10 GB, 100 M in six 4.7 GB, most of
#: it the 13 M episodes ranked).
BASE_BYTES = 600_000_000
BYTES_PER_ACCESS = 50

#: Per-episode integer columns `episode_split` returns, as `polars_engine.episode_gets`
#: aggregates them.
_EPISODE_COLUMNS = ("first_row", "first_time", "last_time", "gets", "range_start",
                    "range_end", "get_segments", "replay_ios", "replay_segments",
                    "accessed_segments")
#: A row that is not a GET (PUTs have no episode).
_NONE = np.uint32(np.iinfo(np.uint32).max)


def run_rust(src: Path, outdir: Path, job: Job, *, buckets: int | None = None) -> None:
    """Write episodes.parquet, labels.parquet, arrays.parquet into `outdir`, the GETs split
    in `buckets` key buckets (default: one per `BUCKET_GETS` GETs; the outputs are the same
    for every number of buckets)."""
    from flashml_sim import episode_split

    n = job.info.rows
    if buckets is None:
        buckets = max(1, math.ceil(job.info.gets / BUCKET_GETS))
    if buckets < 1:
        raise ValueError(f"buckets must be >= 1, got {buckets}")
    if job.info.gets >= int(_NONE):
        raise ValueError(f"{job.info.gets:,} GETs: at most {int(_NONE) - 1:,} in one build")
    logical = job.params.time_mode == "logical"
    # (segments as bytes: trace_info checked that a block has at most 64)
    gets = (prepared(src, job.info.segment_bytes, with_gidx=logical)
            .filter("is_get").drop("is_get")
            .with_columns(pl.col("s0").cast(pl.UInt8), pl.col("s1").cast(pl.UInt8)))
    # each GET's episode (an index into the buckets' episodes, concatenated) and position
    at = np.full(n, _NONE, np.uint32)
    position = np.zeros(n, np.uint32)
    parts: list[pl.DataFrame] = []
    offset = 0
    for c in range(buckets):
        # (a bucket of several is read by a streaming scan: not the whole table's columns
        # first and the filter after)
        g = gets.collect() if buckets == 1 else gets.filter(
            pl.col("key").reinterpret(signed=False) % buckets == c).collect(engine="streaming")
        row = g["row"].to_numpy()
        time = g["time"].to_numpy()
        gap = g["gidx"].to_numpy().astype(np.float64) if logical else time
        split = episode_split(row, g["key"].to_numpy().view(np.uint64), time, gap,
                              g["s0"].to_numpy(), g["s1"].to_numpy(),
                              float(job.split_threshold))
        del g, gap, time
        at[row] = split.pop("episode") + np.uint32(offset)
        position[row] = split.pop("position")
        del row
        parts.append(pl.DataFrame({"key": split.pop("key").view(np.int64),
                                   **{col: split[col] for col in _EPISODE_COLUMNS}}))
        offset += parts[-1].height
        del split
    eps = pl.concat(parts, rechunk=True) if len(parts) > 1 else parts[0]
    del parts
    eps = rank_episodes(eps.with_row_index("_part_index"), job)
    conform(eps.lazy(), "episodes").sink_parquet(outdir / "episodes.parquet",
                                                 compression=COMPRESSION)
    # episode id of each concatenated part's episode (the same index with one bucket)
    episode_of = np.empty(eps.height, np.uint32)
    episode_of[eps["_part_index"].to_numpy()] = np.arange(eps.height, dtype=np.uint32)
    admitted_of = eps["admitted"].to_numpy()
    start_of = eps["range_start"].to_numpy()
    end_of = eps["range_end"].to_numpy()
    when_of = eps["when_label"].to_numpy()
    del eps
    k = job.params.accesses_per_episode

    def labels() -> Iterator[pl.DataFrame]:
        lo = 0
        for batch in pq.ParquetFile(src).iter_batches(batch_size=WRITE_ROWS,
                                                       columns=["time", "key"]):
            hi = lo + batch.num_rows
            ci = at[lo:hi]
            is_get = ci != _NONE
            episode = episode_of[ci[is_get]]
            admitted = admitted_of[episode]
            pos = position[lo:hi][is_get]
            yield pl.DataFrame({
                "row": np.flatnonzero(is_get).astype(np.uint64) + np.uint64(lo),
                "key": batch.column("key").to_numpy().astype(np.uint64, copy=False)[is_get],
                "time": batch.column("time").to_numpy().astype(np.float64, copy=False)[is_get],
                "episode_id": episode.astype(np.uint64), "position": pos.astype(np.int64),
                "opt_label": np.where(pos < k, admitted.astype(np.int8), np.int8(-1)),
                "admitted": admitted, "range_start": start_of[episode],
                "range_end": end_of[episode], "when_label": when_of[episode]})
            lo = hi
        if lo != n:
            raise AssertionError(f"{src}: read {lo} rows of {n}")

    def arrays() -> Iterator[pl.DataFrame]:
        for lo in range(0, n, WRITE_ROWS):
            ci = at[lo:lo + WRITE_ROWS]
            is_get = ci != _NONE
            episode = episode_of[ci[is_get]]
            admit = np.zeros(len(ci), bool)
            admit[is_get] = admitted_of[episode]
            start = np.full(len(ci), -1, np.int64)
            end = np.full(len(ci), -1, np.int64)
            start[admit] = start_of[episode][admit[is_get]]
            end[admit] = end_of[episode][admit[is_get]]
            yield pl.DataFrame({"row": np.arange(lo, lo + len(ci), dtype=np.uint64),
                                "admit": admit.astype(np.uint8), "prefetch_start": start,
                                "prefetch_end": end})

    _sink(outdir, "labels", labels)
    _sink(outdir, "arrays", arrays)


def _sink(outdir: Path, name: str, frames: Callable[[], Iterator[pl.DataFrame]]) -> None:
    """Write `frames()` (slices of rows in the published schema `SCHEMAS[name]`) into
    `outdir/<name>.parquet` as one file, by Polars' streaming writer (3x faster than
    Arrow's ParquetWriter here: no dictionary pages)."""
    from polars.io.plugins import register_io_source

    schema = pl.Schema(SCHEMAS[name])

    def source(with_columns: list[str] | None, predicate: pl.Expr | None,
               n_rows: int | None, batch_size: int | None) -> Iterator[pl.DataFrame]:
        for frame in frames():
            if frame.schema != schema:
                raise AssertionError(f"{name}: {frame.schema} is not the published schema")
            if predicate is not None:
                frame = frame.filter(predicate)
            yield frame if with_columns is None else frame.select(with_columns)

    register_io_source(source, schema=schema).sink_parquet(outdir / f"{name}.parquet",
                                                           compression=COMPRESSION)
