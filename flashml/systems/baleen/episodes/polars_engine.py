"""Episodes and OPT, Polars engine (the semantics: `flashml.systems.baleen.episodes.core`).

Memory: the per-GET work (sorting by key and time, episode splits, the per-segment replay)
runs per key bucket (`key % chunks`), each bucket read from the Parquet input by a
streaming scan, so a trace larger than RAM works with enough chunks (default: one chunk per
`CHUNK_GETS` GETs). Per-bucket results go to Parquet parts; the episodes table (one row per
episode, far smaller than the trace) is ranked in memory; labels and the simulator arrays
are assembled by streaming sorts/joins over the parts. With one bucket of at most
`MEMORY_GETS` GETs its frames stay in memory: no parts are written and read back.

A build's first step does not depend on the eviction age: the bucket's GETs read, sorted by
key and time, with each GET's segment mask. The convergence loop and the sweep build
episodes of one table at many eviction ages, so the last table's sorted GETs are kept (up
to `MEMORY_GETS`; `sorted_gets`, keyed by the file's identity and the reading parameters)
and a later build of the same table starts from them (the same frame: the same episodes).

The replay's "segments covered by earlier GETs of the episode" is a running bitwise OR of
64-bit segment masks within each episode, computed as a Hillis-Steele prefix scan
(log2(longest episode) shifted ORs over the key-sorted frame).
"""

from __future__ import annotations

import logging
import math
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from flashml.systems.baleen.episodes.core import (
    Job,
    conform,
    episode_stages,
    prepared,
    ranked_stages,
)

log = logging.getLogger(__name__)

#: GETs per key bucket when `chunks` is not given: a build's peak grows with its bucket (at
#: 10 M region1-like accesses, 8.7 M GETs: one bucket 1.86 GB in 6.7 s, three of at most 4 M
#: 1.15 GB in 7.0 s, six 0.98 GB in 8.3 s; the loop and the sweep build at every iteration,
#: on top of the job's feature matrix and scores).
CHUNK_GETS = 4_000_000
#: A one-bucket build of at most this many GETs keeps its frames in memory (no parts) and
#: its table's sorted GETs for the next build (`sorted_gets`: ~55 MB a million GETs).
MEMORY_GETS = 4_000_000
#: Parquet compression of the parts and the outputs: LZ4 writes several times faster than
#: Polars' default zstd for slightly larger files, and every file here is read once or twice
#: by the same job (at 10 M accesses zstd writing was 6 s of each build's 8).
COMPRESSION = "lz4"

# (1 << k) - 1 as the i64 bit pattern, k = 0..64: mask of segments s0..s1 = LUT[s1+1] ^ LUT[s0].
_LUT = pl.Series("lut", [((1 << k) - 1) - (1 << 64 if k == 64 else 0) for k in range(65)],
                 dtype=pl.Int64)


def _with_stages(df: pl.DataFrame, stages: list[dict]) -> pl.DataFrame:
    for stage in stages:
        df = df.with_columns(**stage)
    return df


def sort_gets(gets: pl.DataFrame) -> pl.DataFrame:
    """One key bucket's GETs (prepared columns) sorted by key, time and row, with each GET's
    segment mask (`_mask`): the part of `episode_gets` that no eviction age changes."""
    return gets.sort(["key", "time", "row"]).with_columns(
        (pl.lit(_LUT).gather(pl.col("s1") + 1) ^ pl.lit(_LUT).gather(pl.col("s0")))
        .alias("_mask"))


def episode_gets(gets: pl.DataFrame, job: Job, *, presorted: bool = False
                 ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """One key bucket's GETs (prepared columns; with `presorted`, `sort_gets`'s frame) ->
    (per-GET frame, per-episode aggregates)."""
    col = job.gap_column
    g = gets if presorted else sort_gets(gets)
    gap = pl.col(col) - pl.col(col).shift(1)
    new = ((pl.col("key") != pl.col("key").shift(1)).fill_null(True)
           | (gap > job.split_threshold).fill_null(True))
    idx = pl.int_range(pl.len(), dtype=pl.Int64)
    g = g.with_columns(new.alias("_new"), idx.alias("_idx"))
    g = g.with_columns(
        (pl.col("_idx") - pl.when("_new").then(pl.col("_idx")).forward_fill()).alias("position"),
        pl.when("_new").then(pl.col("row")).forward_fill().alias("first_row"),
    )
    longest = int(g["position"].max()) + 1 if g.height else 1
    incl = g["_mask"]
    pos = g["position"]
    k = 1
    while k < longest:  # inclusive prefix OR within each episode
        incl = pl.select(pl.when(pos >= k).then(incl | incl.shift(k)).otherwise(incl)
                         ).to_series()
        k *= 2
    g = g.with_columns(incl.alias("_incl"))
    g = g.with_columns(
        pl.when(pl.col("position") == 0).then(0).otherwise(pl.col("_incl").shift(1))
        .alias("_prev"))
    g = g.with_columns((pl.col("_mask") & ~pl.col("_prev")).alias("_newbits"))
    nb = pl.col("_newbits")
    miss = nb != 0
    g = g.with_columns(
        miss.alias("_miss"),
        pl.when(miss).then((63 - nb.bitwise_leading_zeros().cast(pl.Int64))
                           - nb.bitwise_trailing_zeros().cast(pl.Int64) + 1)
        .otherwise(0).alias("_io"),
        nb.bitwise_count_ones().cast(pl.Int64).alias("_written"),
    )
    eps = g.group_by("first_row").agg(
        pl.col("key").first(),
        pl.col("time").min().alias("first_time"),
        pl.col("time").max().alias("last_time"),
        pl.len().cast(pl.Int64).alias("gets"),
        pl.col("s0").min().alias("range_start"),
        pl.col("s1").max().alias("range_end"),
        (pl.col("s1") - pl.col("s0") + 1).sum().alias("get_segments"),
        pl.col("_miss").sum().cast(pl.Int64).alias("replay_ios"),
        pl.col("_io").sum().cast(pl.Int64).alias("replay_segments"),
        pl.col("_written").sum().cast(pl.Int64).alias("accessed_segments"),
    )
    per_get = g.select("row", "key", "time", "first_row", "position")
    return per_get, eps


def rank_episodes(eps: pl.DataFrame, job: Job) -> pl.DataFrame:
    """Derived columns, episode ids, the OPT ranking and cutoff (episodes in memory). The
    frame is reordered once, by first row (the ids), only when not in that order already;
    the ranking is an argsort of two columns whose rank and running size are scattered back
    in id order (the frame itself is not sorted twice more: at 100 M region1-like accesses
    it is 13 M episodes of 25 columns, 2.6 GB a copy)."""
    if not eps["first_row"].is_sorted():
        eps = eps.sort("first_row")
    eps = _with_stages(eps, episode_stages(pl.col, job)).with_row_index("episode_id")
    order = eps.select(pl.arg_sort_by(["score", "first_row"], descending=[True, False])
                       ).to_series().to_numpy()
    rank = np.empty(eps.height, np.int64)
    rank[order] = np.arange(eps.height, dtype=np.int64)
    cum = np.empty(eps.height, np.int64)
    cum[order] = np.cumsum(eps["size_segments"].to_numpy()[order], dtype=np.int64)
    eps = eps.with_columns(rank=rank, cum_segments=cum)
    return _with_stages(eps, ranked_stages(pl.col, job))


def label_frame(per_get: pl.LazyFrame, decisions: pl.LazyFrame, job: Job) -> pl.LazyFrame:
    k = job.params.accesses_per_episode
    return per_get.join(decisions, on="first_row", how="left").with_columns(
        pl.when(pl.col("position") < k).then(pl.col("admitted").cast(pl.Int8))
        .otherwise(-1).cast(pl.Int8).alias("opt_label"))


def run_polars(src: Path, outdir: Path, job: Job, work: Path, *,
               chunks: int | None = None) -> None:
    """Write episodes.parquet, labels.parquet, arrays.parquet into `outdir`."""
    if chunks is None:
        chunks = max(1, math.ceil(job.info.gets / CHUNK_GETS))
    if chunks < 1:
        raise ValueError(f"chunks must be >= 1, got {chunks}")
    with_gidx = job.params.time_mode == "logical"
    prep = prepared(src, job.info.segment_bytes, with_gidx=with_gidx)
    gets = prep.filter("is_get").drop("is_get")
    # one bucket of at most MEMORY_GETS: its frames stay in memory, no scratch parts
    in_memory = chunks == 1 and job.info.gets <= MEMORY_GETS
    g_parts: list[pl.LazyFrame] = []
    e_frames: list[pl.DataFrame] = []
    for c in range(chunks):  # pass 1: episodes of one key bucket at a time
        part = gets
        if chunks > 1:
            part = gets.filter(pl.col("key").reinterpret(signed=False) % chunks == c)
        if in_memory:
            g = sorted_gets(src, (job.info.segment_bytes, with_gidx, chunks, c),
                            lambda part=part: sort_gets(part.collect(engine="streaming")))
        else:
            g = sort_gets(part.collect(engine="streaming"))
        per_get, eps = episode_gets(g, job, presorted=True)
        del g
        log.debug("polars episodes: chunk %d/%d: %d GETs, %d episodes", c + 1, chunks,
                  per_get.height, eps.height)
        if in_memory:
            g_parts.append(per_get.lazy())
            e_frames.append(eps)
        else:
            gp, ep = work / f"gets-{c:05d}.parquet", work / f"eps-{c:05d}.parquet"
            per_get.write_parquet(gp, compression=COMPRESSION)
            eps.write_parquet(ep, compression=COMPRESSION)
            g_parts.append(pl.scan_parquet(gp))
            e_frames.append(pl.read_parquet(ep))
        del per_get, eps
    eps = rank_episodes(pl.concat(e_frames) if len(e_frames) > 1 else e_frames[0], job)
    del e_frames
    conform(eps.lazy(), "episodes").sink_parquet(outdir / "episodes.parquet",
                                                 compression=COMPRESSION)
    decisions = eps.select("first_row", "episode_id", "admitted", "range_start", "range_end",
                           "when_label")
    del eps
    l_parts: list[pl.LazyFrame] = []
    a_parts: list[pl.LazyFrame] = []
    for c, gp in enumerate(g_parts):  # pass 2: labels and arrays per bucket, sorted by row
        lab = label_frame(gp, decisions.lazy(), job).sort("row").collect()
        if in_memory:
            l_parts.append(lab.lazy())
            a_parts.append(arrays_frame(lab).lazy())
        else:
            lp, ap = work / f"labels-{c:05d}.parquet", work / f"arrays-{c:05d}.parquet"
            lab.write_parquet(lp, compression=COMPRESSION)
            arrays_frame(lab).write_parquet(ap, compression=COMPRESSION)
            l_parts.append(pl.scan_parquet(lp))
            a_parts.append(pl.scan_parquet(ap))
        del lab
    g_parts.clear()
    # Merge the row-sorted parts (streaming k-way merges, no global sort in memory).
    labels = _merge(l_parts)
    conform(labels, "labels").sink_parquet(outdir / "labels.parquet", compression=COMPRESSION)
    puts = prep.filter(~pl.col("is_get")).select(
        "row", pl.lit(False).alias("admitted"), pl.lit(-1, pl.Int64).alias("range_start"),
        pl.lit(-1, pl.Int64).alias("range_end"))
    arrays = _merge([arrays_lazy(puts)] + a_parts)
    conform(arrays, "arrays").sink_parquet(outdir / "arrays.parquet", compression=COMPRESSION)


#: The last table's sorted GET buckets (`sort_gets`): (the file's identity, the reading
#: parameters) -> frame. One table at a time (at 1 M accesses ~50 MB).
_SORTED: dict[tuple[Any, ...], pl.DataFrame] = {}
_SORTED_LOCK = threading.Lock()


def sorted_gets(src: Path, how: tuple[Any, ...], make: Any) -> pl.DataFrame:
    """`make()` (one bucket's `sort_gets` frame of table `src` read as `how` says: segment
    size, GET ordinals, buckets, bucket), or the frame an earlier build of the same file
    made: the same path, inode, size and modification time (a rewritten table is a new
    file: `flashml.files.atomic_path`). Frames of another table are dropped."""
    st = os.stat(src)
    ident = (str(Path(src).resolve()), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    key = (ident, *how)
    with _SORTED_LOCK:
        got = _SORTED.get(key)
    if got is not None:
        return got
    frame = make()
    with _SORTED_LOCK:
        for k in [k for k in _SORTED if k[0] != ident]:
            del _SORTED[k]
        _SORTED[key] = frame
    return frame


def _merge(frames: list[pl.LazyFrame]) -> pl.LazyFrame:
    return frames[0] if len(frames) == 1 else pl.merge_sorted(frames, key="row")


def arrays_lazy(labels: pl.LazyFrame) -> pl.LazyFrame:
    adm = pl.col("admitted")
    return labels.select(
        "row",
        adm.cast(pl.UInt8).alias("admit"),
        pl.when(adm).then(pl.col("range_start")).otherwise(-1).alias("prefetch_start"),
        pl.when(adm).then(pl.col("range_end")).otherwise(-1).alias("prefetch_end"),
    )


def arrays_frame(labels: pl.DataFrame) -> pl.DataFrame:
    return arrays_lazy(labels.lazy()).collect()
