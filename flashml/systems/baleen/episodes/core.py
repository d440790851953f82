"""Episodes, OPT, OPT-Range and training labels (Baleen §3.4-3.6): the shared definitions.

Two engines compute the same tables from the same text below: Spark
(`flashml.systems.baleen.episodes.spark_engine`, DataFrame operations and window functions only) and
Polars (`flashml.systems.baleen.episodes.polars_engine`, chunked by key). Everything both need --
the semantics, the prepared input, the DT and rate formulas, the output schemas, the atomic
output directory and the summary -- lives here. Units come from `flashml.config`.

Semantics (the one statement both engines implement; `seg` = segment bytes):

1. Input: the canonical access table, rows numbered `row` = 0, 1, ... in table (trace) order.
   Only GETs (op in GET_OPS) form episodes; PUTs never do (they only cost DT and count in
   the trace duration). An access covers segments `s0 = offset // seg` .. `s1 = (offset +
   size - 1) // seg` of its block. Trace duration `D` = last time - first time over all rows
   (as in the simulator).
2. Episodes: per key, GETs in (time, row) order; a new episode starts at a key's first GET
   and wherever the gap to the key's previous GET exceeds the eviction age `EA` (strictly
   greater). `time_mode="seconds"` (default, DESIGN.md) measures gaps in trace seconds;
   `time_mode="logical"` (the artifact) measures them in GETs: `gidx` = ordinal of the GET
   among all GETs of the trace, and the threshold is `EA * (number of GETs) / D`.
   `position` = 0-based index of a GET inside its episode. An episode is identified by the
   row of its first GET (`first_row`); `episode_id` = 0, 1, ... in order of `first_row`.
3. Per episode: `gets`, `first_time`, `last_time`, OPT-Range `range_start = min s0`,
   `range_end = max s1` (inclusive segment indices, the simulator's prefetch convention),
   `size_segments = range_end - range_start + 1`, `get_segments = sum of (s1 - s0 + 1)`.
   * DT of k backend IOs moving N segments in total: `dt(k, N) = k * t_seek + N *
     (seg / bandwidth)` (UNITS' model, in the simulator's float form: one seek per IO plus
     the transfer).
   * `dt_nocache_s` = DT of the episode's GETs with no cache: `dt(gets, get_segments)`.
   * Admitted at the first access with OPT-Range prefetched: one IO of `size_segments`
     segments, every later GET hits: `dt_saved_prefetch_s = dt_nocache_s -
     dt(1, size_segments)`; it writes `size_segments` segments.
   * Per-segment replay without prefetch (exact; the simulator's rule for a cache that admits
     every miss of the episode and never evicts within it): a GET misses iff one of its
     segments is not covered by an earlier GET of the episode; the miss costs one IO from
     its first to its last uncovered segment and caches its whole range [s0, s1] (every
     uncached segment of the IO span is admitted, and all segments of [s0, s1] outside the
     span were already cached). So the cache after GET i is the union of the ranges of GETs
     0..i; `replay_ios`, `replay_segments` (sum of IO spans) give `dt_replay_s =
     dt(replay_ios, replay_segments)` and `dt_saved_noprefetch_s = dt_nocache_s -
     dt_replay_s`; it writes `accessed_segments` = |union of the GETs' ranges| segments.
   * `score = dt_saved_prefetch_s / size_segments` (DT saved per segment written, as the
     simulator is run with OPT admission and OPT-Range prefetch).
   * ML-When (Baleen eq. 3c-3e, with OPT-Range as the range): `pf_benefit_s = dt_replay_s -
     dt(1, size_segments)` (prefetch benefit); `overfetch_s = (size_segments -
     accessed_segments) * seg / bandwidth` (transfer DT of OPT-Range segments that no GET of
     the episode reads); `when_benefit_s = pf_benefit_s - overfetch_s`; `when_label = 1` iff
     `when_benefit_s > when_epsilon_s` (5 ms), else 0.
4. OPT: episodes ranked by score descending, ties by `first_row` ascending (`rank` 0, 1,
   ...); `cum_segments` = running sum of `size_segments` in rank order; `cum_write_rate_mbps
   = cum_segments * (seg / D * (100 / sample_ratio) / MB)` (the simulator's write rate);
   `admitted` iff `score > 0` and `cum_write_rate_mbps <= target` (a prefix of the ranking:
   episodes that save nothing are never worth a write).
5. Labels, one row per GET in row order: `episode_id`, `position`, `opt_label` = 1/0 (the
   episode's `admitted`) for `position < K` (accesses_per_episode), else -1 (unused);
   `admitted` for every GET; ML-Range targets `range_start`, `range_end`; `when_label`.
6. Simulator arrays, one row per access of the trace in row order: `admit` (u8) = 1 on the
   GETs of admitted episodes, else 0; `prefetch_start`/`prefetch_end` (i64) = the episode's
   OPT-Range on those GETs, else -1/-1 (an empty range: no prefetch). Read them with
   `flashml sim run TRACE --arrays DIR/arrays.parquet --admission opt --prefetch range`.
7. Summary: Little's law cache size of the admitted episodes = sum over them of
   `size_segments * (last_time - first_time + EA)` / D segments (arrival rate x residency),
   in GB (2^30 bytes) at full-node scale; `dt_saved_ratio` = OPT's DT saved / DT of all GETs
   without a cache; a curve of (write rate, DT saved ratio, Little's-law cache GB) along the
   ranking.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import tempfile
import time as _time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow.parquet as pq

from flashml.config import DEFAULTS, GB, GET_OPS, MB, UNITS
from flashml.errors import TraceError, UserError
from flashml.files import replace_dir, write_json
from flashml.systems.baleen.episodes.constants import (
    DEFAULT_ACCESSES_PER_EPISODE,
    ENGINES,
    TIME_MODES,
    WHEN_EPSILON_S,
)
from flashml.trace.canonical import TraceMeta, read_meta, with_sample_ratio

log = logging.getLogger(__name__)

#: Peak memory of the Polars engine per access of the table, rounded up: 1 M accesses of the
#: region1-like preset built in 483 MB peak RSS, the interpreter and libraries included
#: (`/usr/bin/time -v flashml episodes build --engine polars`).
POLARS_BYTES_PER_ACCESS = 500
#: `auto` runs Polars while its estimated peak stays within this share of the memory
#: available now, else Spark (which spills to disk and spreads over `--master`'s machines).
LOCAL_MEMORY_SHARE = 0.5
#: Columns of the canonical table the job reads.
INPUT_COLUMNS = ("time", "key", "offset", "size", "op")
#: Points kept in the summary's write-rate curve.
CURVE_POINTS = 200

EPISODES_SCHEMA: dict[str, pl.DataType] = {
    "episode_id": pl.UInt64(),
    "key": pl.UInt64(),
    "first_row": pl.UInt64(),
    "first_time": pl.Float64(),
    "last_time": pl.Float64(),
    "gets": pl.Int64(),
    "range_start": pl.Int64(),
    "range_end": pl.Int64(),
    "size_segments": pl.Int64(),
    "get_segments": pl.Int64(),
    "accessed_segments": pl.Int64(),
    "replay_ios": pl.Int64(),
    "replay_segments": pl.Int64(),
    "dt_nocache_s": pl.Float64(),
    "dt_saved_prefetch_s": pl.Float64(),
    "dt_saved_noprefetch_s": pl.Float64(),
    "score": pl.Float64(),
    "pf_benefit_s": pl.Float64(),
    "overfetch_s": pl.Float64(),
    "when_benefit_s": pl.Float64(),
    "when_label": pl.Int8(),
    "rank": pl.Int64(),
    "cum_segments": pl.Int64(),
    "cum_write_rate_mbps": pl.Float64(),
    "admitted": pl.Boolean(),
}
LABELS_SCHEMA: dict[str, pl.DataType] = {
    "row": pl.UInt64(),
    "key": pl.UInt64(),
    "time": pl.Float64(),
    "episode_id": pl.UInt64(),
    "position": pl.Int64(),
    "opt_label": pl.Int8(),
    "admitted": pl.Boolean(),
    "range_start": pl.Int64(),
    "range_end": pl.Int64(),
    "when_label": pl.Int8(),
}
ARRAYS_SCHEMA: dict[str, pl.DataType] = {
    "row": pl.UInt64(),
    "admit": pl.UInt8(),
    "prefetch_start": pl.Int64(),
    "prefetch_end": pl.Int64(),
}
#: Sort order of each output file.
SORT_BY = {"episodes": "episode_id", "labels": "row", "arrays": "row"}
SCHEMAS = {"episodes": EPISODES_SCHEMA, "labels": LABELS_SCHEMA, "arrays": ARRAYS_SCHEMA}


@dataclass(frozen=True)
class EpisodeParams:
    """What the job needs besides the trace."""

    eviction_age_s: float
    target_write_rate_mbps: float = DEFAULTS.target_write_rate_mbps
    accesses_per_episode: int = DEFAULT_ACCESSES_PER_EPISODE
    time_mode: str = "seconds"
    when_epsilon_s: float = WHEN_EPSILON_S
    segment_bytes: int = UNITS.segment_bytes

    def validate(self) -> None:
        ea, wr = self.eviction_age_s, self.target_write_rate_mbps
        if not (isinstance(ea, (int, float)) and math.isfinite(ea) and ea > 0):
            raise UserError(f"--eviction-age must be > 0 seconds, got {ea}")
        if not (isinstance(wr, (int, float)) and math.isfinite(wr) and wr > 0):
            raise UserError(f"--target-write-rate must be > 0 MB/s, got {wr}")
        if self.accesses_per_episode < 1:
            raise UserError(f"--accesses-per-episode must be >= 1, got "
                            f"{self.accesses_per_episode}")
        if self.time_mode not in TIME_MODES:
            raise UserError(f"--time must be one of {', '.join(TIME_MODES)}, "
                            f"got {self.time_mode!r}")
        if not math.isfinite(self.when_epsilon_s):
            raise UserError(f"the ML-When epsilon must be finite, got {self.when_epsilon_s}")


@dataclass(frozen=True)
class TraceInfo:
    """Facts about the input the engines and the summary need (computed once, streamed)."""

    rows: int
    gets: int
    first_time: float
    last_time: float
    sample_ratio: float
    block_bytes: int
    segment_bytes: int

    @property
    def duration_s(self) -> float:
        return self.last_time - self.first_time

    @property
    def segments_per_block(self) -> int:
        return self.block_bytes // self.segment_bytes

    @property
    def scale(self) -> float:
        """Trace -> full node (100 / sample ratio)."""
        return 100.0 / self.sample_ratio


@dataclass(frozen=True)
class Job:
    """Everything an engine reads: params, trace facts, derived thresholds."""

    params: EpisodeParams
    info: TraceInfo

    @property
    def split_threshold(self) -> float:
        """Gap above which a new episode starts, in the unit of `gap_column`."""
        if self.params.time_mode == "logical":
            return self.params.eviction_age_s * self.info.gets / self.info.duration_s
        return self.params.eviction_age_s

    @property
    def gap_column(self) -> str:
        return "gidx" if self.params.time_mode == "logical" else "time"


# --- formulas shared by both engines (they work on Polars Exprs and Spark Columns alike) ------

def segment_time_s(segment_bytes: int) -> float:
    """Transfer time of one segment (seconds)."""
    return segment_bytes / UNITS.bandwidth_bytes_per_s


def dt_expr(ios: Any, segments: Any, segment_bytes: int) -> Any:
    """DT of `ios` backend IOs moving `segments` segments, in the simulator's float form
    `ios * t_seek + segments * (seg / bandwidth)` (UNITS' model; one IEEE operation per step
    on a Python constant, so every engine gets the same bits)."""
    return ios * UNITS.t_seek_s + segments * segment_time_s(segment_bytes)


def transfer_expr(segments: Any, segment_bytes: int) -> Any:
    """Transfer part of DT only (no seek)."""
    return segments * segment_time_s(segment_bytes)


def rate_factor(info: TraceInfo) -> float:
    """MB/s at full-node scale per segment written over the trace."""
    return info.segment_bytes / info.duration_s * info.scale / MB


def rate_expr(segments: Any, info: TraceInfo) -> Any:
    """Write rate in MB/s at full-node scale of `segments` segments over the trace."""
    return segments * rate_factor(info)


def episode_stages(c: Callable[[str], Any], job: Job) -> list[dict[str, Any]]:
    """Per-episode derived columns from the aggregated integer columns, as successive stages
    (a stage may use the columns of earlier stages); `c(name)` is the engine's column
    constructor (pl.col or pyspark F.col). Both engines evaluate exactly these expressions,
    so their floats are bit-identical."""
    seg = job.info.segment_bytes
    p = job.params
    return [
        {"size_segments": c("range_end") - c("range_start") + 1},
        {
            "dt_nocache_s": dt_expr(c("gets"), c("get_segments"), seg),
            "_dt_range_s": dt_expr(1, c("size_segments"), seg),
            "_dt_replay_s": dt_expr(c("replay_ios"), c("replay_segments"), seg),
            "overfetch_s": transfer_expr(c("size_segments") - c("accessed_segments"), seg),
        },
        {
            "dt_saved_prefetch_s": c("dt_nocache_s") - c("_dt_range_s"),
            "dt_saved_noprefetch_s": c("dt_nocache_s") - c("_dt_replay_s"),
            "pf_benefit_s": c("_dt_replay_s") - c("_dt_range_s"),
        },
        {
            "score": c("dt_saved_prefetch_s") / c("size_segments"),
            "when_benefit_s": c("pf_benefit_s") - c("overfetch_s"),
        },
        {"when_label": (c("when_benefit_s") > p.when_epsilon_s).cast("byte")
         if _is_spark(c) else (c("when_benefit_s") > p.when_epsilon_s).cast(pl.Int8)},
    ]


def ranked_stages(c: Callable[[str], Any], job: Job) -> list[dict[str, Any]]:
    """After `cum_segments` (running sum of size_segments in rank order) exists."""
    return [
        {"cum_write_rate_mbps": rate_expr(c("cum_segments"), job.info)},
        {"admitted": (c("score") > 0) & (c("cum_write_rate_mbps")
                                         <= job.params.target_write_rate_mbps)},
    ]


def _is_spark(c: Callable[[str], Any]) -> bool:
    return getattr(c, "__module__", "").startswith("pyspark")


# --- input --------------------------------------------------------------------------------

def available_memory_bytes() -> int:
    """MemAvailable of /proc/meminfo (Linux), else physical memory."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def choose_engine(table: Path, engine: str = "auto",
                  master: str | None = None) -> tuple[str, str]:
    """The engine to run and why: `engine` itself unless it is `auto`, which picks Spark
    when a Spark `master` is given (the user has a cluster), else the in-memory Rust engine
    while the table's accesses x its bytes per access fit in LOCAL_MEMORY_SHARE of the
    available memory, else Polars (chunked by key; 4.4x faster than Spark local[*] at 10 M
    accesses, docs/measurements.md) while its estimate fits, Spark beyond (which spills to
    disk: about 24 M accesses on a machine with 24 GiB free)."""
    if engine != "auto":
        return engine, f"--engine {engine}"
    if master:
        return "spark", f"auto: Spark master {master} given"
    from flashml.systems.baleen.episodes import rust_engine

    rows = pq.ParquetFile(table).metadata.num_rows
    avail = available_memory_bytes()
    limit = LOCAL_MEMORY_SHARE * avail
    for name, base, per in (("rust", rust_engine.BASE_BYTES, rust_engine.BYTES_PER_ACCESS),
                            ("polars", 0, POLARS_BYTES_PER_ACCESS)):
        need = base + rows * per
        if need <= limit:
            fixed = f" + {base / GB:.1f} GB" if base else ""
            return name, (f"auto: {rows:,} accesses x {per} B{fixed} = {need / GB:.2f} GB "
                          f"<= {LOCAL_MEMORY_SHARE:.0%} of {avail / GB:.1f} GB available")
    need = rows * POLARS_BYTES_PER_ACCESS
    return "spark", (f"auto: {rows:,} accesses x {POLARS_BYTES_PER_ACCESS} B = "
                     f"{need / GB:.2f} GB > {LOCAL_MEMORY_SHARE:.0%} of {avail / GB:.1f} GB "
                     "available")


def check_input(path: Path) -> TraceMeta:
    """A canonical Parquet table with the columns the job reads; its metadata."""
    if not path.exists():
        raise TraceError(path, "no such file")
    meta = read_meta(path)
    names = pq.read_schema(path).names
    for col in INPUT_COLUMNS:
        if col not in names:
            raise TraceError(path, f"missing column '{col}' (the episodes job needs "
                             f"{', '.join(INPUT_COLUMNS)})", field=col)
    return meta


def prepared(path: Path, segment_bytes: int, *, with_gidx: bool = True) -> pl.LazyFrame:
    """The input both engines read: `row` (table order), `gidx` (GET ordinal, -1 for PUTs;
    all -1 unless `with_gidx`: only logical time needs it), `is_get`, time, key (i64 bit
    pattern of the u64 key), s0, s1 (segment indices)."""
    lf = pl.scan_parquet(path).select(INPUT_COLUMNS)
    is_get = pl.col("op").is_in(list(GET_OPS))
    return (
        lf.with_row_index("row")
        .with_columns(is_get.alias("is_get"))
        .select(
            pl.col("row").cast(pl.Int64),
            (pl.when("is_get").then(pl.col("is_get").cast(pl.Int64).cum_sum() - 1)
             .otherwise(-1) if with_gidx else pl.lit(-1, pl.Int64)).alias("gidx"),
            pl.col("is_get"),
            pl.col("time").cast(pl.Float64),
            pl.col("key").cast(pl.UInt64).reinterpret(signed=True).alias("key"),
            (pl.col("offset").cast(pl.Int64) // segment_bytes).alias("s0"),
            ((pl.col("offset").cast(pl.Int64) + pl.col("size").cast(pl.Int64) - 1)
             // segment_bytes).alias("s1"),
        )
    )


def trace_info(path: Path, meta: TraceMeta, params: EpisodeParams) -> TraceInfo:
    """Row and GET counts and the time span (one streamed pass); errors for unusable input."""
    lf = pl.scan_parquet(path).select(INPUT_COLUMNS)
    stats = lf.select(
        pl.len().alias("rows"),
        pl.col("op").is_in(list(GET_OPS)).sum().alias("gets"),
        pl.col("time").first().alias("t0"),
        pl.col("time").last().alias("t1"),
        (pl.col("size") == 0).sum().alias("zero"),
        (pl.col("offset") + pl.col("size") > meta.block_bytes).sum().alias("over"),
        pl.col("time").is_nan().sum().alias("nan"),
        pl.col("time").null_count().alias("nulls"),
    ).collect(engine="streaming").row(0, named=True)
    if stats["rows"] == 0:
        raise TraceError(path, "the trace is empty (no accesses)")
    if stats["gets"] == 0:
        raise TraceError(path, f"the trace has no GET accesses (op in {list(GET_OPS)}); "
                         "episodes are built from GETs", field="op")
    if stats["nan"] or stats["nulls"]:
        raise TraceError(path, "time has null or NaN values", field="time")
    if stats["zero"]:
        raise TraceError(path, f"{stats['zero']} accesses have size 0", field="size")
    if stats["over"]:
        raise TraceError(path, f"{stats['over']} accesses end beyond the block size "
                         f"{meta.block_bytes}", field="size")
    seg = params.segment_bytes
    if meta.block_bytes % seg or meta.block_bytes // seg > 64:
        raise UserError(f"block size {meta.block_bytes} must be a multiple of the segment size "
                        f"{seg} with at most 64 segments per block (episodes use one 64-bit "
                        "segment mask per access)")
    info = TraceInfo(rows=int(stats["rows"]), gets=int(stats["gets"]),
                     first_time=float(stats["t0"]), last_time=float(stats["t1"]),
                     sample_ratio=float(meta.sample_ratio), block_bytes=int(meta.block_bytes),
                     segment_bytes=seg)
    if not info.duration_s > 0:
        raise TraceError(path, "the trace spans 0 seconds: write rates are undefined",
                         field="time")
    return info


def conform(lf: pl.LazyFrame, name: str) -> pl.LazyFrame:
    """Select and cast an engine's output to the published schema (keys back to u64)."""
    exprs = []
    for col, dtype in SCHEMAS[name].items():
        e = pl.col(col)
        if col == "key":
            e = e.cast(pl.Int64).reinterpret(signed=False)
        exprs.append(e.cast(dtype).alias(col))
    return lf.select(exprs)


# --- output directory ---------------------------------------------------------------------

class OutputDir:
    """Build in a temp dir next to `dest`; `commit()` renames it onto `dest` (replacing an
    old output); leaving the `with` block without commit removes it."""

    def __init__(self, dest: Path) -> None:
        self.dest = Path(dest)
        self.tmp: Path | None = None
        self.committed = False

    def __enter__(self) -> OutputDir:
        if self.dest.exists() and not self.dest.is_dir():
            raise UserError(f"{self.dest}: exists and is not a directory")
        self.dest.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = Path(tempfile.mkdtemp(prefix=f".{self.dest.name}.", suffix=".tmp",
                                         dir=self.dest.parent))
        return self

    def path(self, name: str) -> Path:
        assert self.tmp is not None
        return self.tmp / name

    def scratch(self) -> Path:
        """A work dir inside the temp output, removed before commit."""
        p = self.path(".work")
        p.mkdir(exist_ok=True)
        return p

    def commit(self) -> None:
        assert self.tmp is not None
        shutil.rmtree(self.tmp / ".work", ignore_errors=True)
        replace_dir(self.tmp, self.dest)
        self.committed = True

    def __exit__(self, *exc: Any) -> None:
        if not self.committed and self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)


# --- summary ------------------------------------------------------------------------------

#: The episodes table's columns `summarize` reads.
SUMMARY_COLUMNS = ("rank", "gets", "get_segments", "size_segments", "first_time", "last_time",
                   "score", "dt_saved_prefetch_s", "dt_saved_noprefetch_s",
                   "cum_write_rate_mbps", "admitted", "when_label")


def summarize(path: Path, job: Job) -> dict[str, Any]:
    """summary.json's content from the final episodes table (`path`): only the columns it
    reads, in rank order (at 100 M region1-like accesses, 13 M episodes: a whole table and
    its sorted copy were 5 GB)."""
    info, params = job.info, job.params
    seg = info.segment_bytes
    ranked = pl.scan_parquet(path).select(SUMMARY_COLUMNS).sort("rank").collect()
    total_gets = int(ranked["gets"].sum())
    total_segs = int(ranked["get_segments"].sum())
    dt_total = dt_expr(total_gets, total_segs, seg)
    residency = pl.col("size_segments") * (pl.col("last_time") - pl.col("first_time")
                                           + params.eviction_age_s)
    gb_per_seg_s = seg * info.scale / info.duration_s / GB
    ranked = ranked.with_columns(
        (pl.col("dt_saved_prefetch_s").cum_sum() / dt_total).alias("cum_dt_saved_ratio"),
        (residency.cum_sum() * gb_per_seg_s).alias("cum_littles_gb"),
    )
    adm = ranked.filter("admitted")
    n_adm = adm.height
    positive = ranked.filter(pl.col("score") > 0)
    if n_adm:
        last = adm.row(n_adm - 1, named=True)
        cutoff, opt_rate = last["score"], last["cum_write_rate_mbps"]
        saved_ratio, littles = last["cum_dt_saved_ratio"], last["cum_littles_gb"]
        saved_np = float(adm["dt_saved_noprefetch_s"].sum()) / dt_total
    else:
        cutoff, opt_rate, saved_ratio, littles, saved_np = None, 0.0, 0.0, 0.0, 0.0
    curve = []
    if positive.height:
        idx = sorted({round(i * (positive.height - 1) / (CURVE_POINTS - 1))
                      for i in range(CURVE_POINTS)} | ({n_adm - 1} if n_adm else set()))
        pts = positive[idx]
        curve = [{"rank": int(r["rank"]), "score": r["score"],
                  "write_rate_mbps": r["cum_write_rate_mbps"],
                  "dt_saved_ratio": r["cum_dt_saved_ratio"],
                  "littles_law_cache_gb": r["cum_littles_gb"]}
                 for r in pts.iter_rows(named=True)]
    admitted_gets = int(adm["gets"].sum()) if n_adm else 0
    return {
        "episodes": ranked.height,
        "admitted_episodes": n_adm,
        "cutoff_score": cutoff,
        "target_write_rate_mbps": params.target_write_rate_mbps,
        "opt_write_rate_mbps": opt_rate,
        "dt_saved_ratio": saved_ratio,
        "dt_saved_noprefetch_ratio": saved_np,
        "littles_law_cache_gb": littles,
        "eviction_age_s": params.eviction_age_s,
        "time_mode": params.time_mode,
        "split_threshold": job.split_threshold,
        "accesses_per_episode": params.accesses_per_episode,
        "when_epsilon_s": params.when_epsilon_s,
        "when_positive_admitted": int(adm["when_label"].sum()) if n_adm else 0,
        "accesses": info.rows,
        "gets": info.gets,
        "admitted_gets": admitted_gets,
        "duration_s": info.duration_s,
        "sample_ratio": info.sample_ratio,
        "segment_bytes": seg,
        "block_bytes": info.block_bytes,
        "dt_nocache_gets_s": dt_total,
        "positive_score_episodes": positive.height,
        "max_write_rate_mbps": positive["cum_write_rate_mbps"].max() if positive.height else 0.0,
        "curve": curve,
    }


def plot_curve(summary: dict[str, Any], out: Path) -> Path | None:
    """Write rate vs DT saved ratio and vs Little's-law cache size (PNG)."""
    curve = summary["curve"]
    if not curve:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    wr = [p["write_rate_mbps"] for p in curve]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4), dpi=100)
    a.plot(wr, [p["dt_saved_ratio"] for p in curve])
    a.set_xlabel("flash write rate (MB/s)")
    a.set_ylabel("DT saved / no-cache DT of GETs")
    b.plot(wr, [p["littles_law_cache_gb"] for p in curve])
    b.set_xlabel("flash write rate (MB/s)")
    b.set_ylabel("Little's-law cache size (GB)")
    for ax in (a, b):
        ax.axvline(summary["target_write_rate_mbps"], color="grey", ls="--", lw=1)
        ax.grid(alpha=0.3)
    fig.suptitle(f"OPT episodes at eviction age {summary['eviction_age_s']:g} s")
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
    return out


# --- the job ------------------------------------------------------------------------------

@dataclass
class BuildResult:
    out: Path
    summary: dict[str, Any]
    seconds: float
    timings: dict[str, float] = field(default_factory=dict)


def finished_build(folder: Path | None) -> tuple[EpisodeParams, dict[str, Any]] | None:
    """The parameters and summary of a finished build in `folder` (its summary.json), or
    None when there is none."""
    if folder is None:
        return None
    try:
        summary = json.loads((Path(folder) / "summary.json").read_text())
        return EpisodeParams(**summary["params"]), summary
    except (OSError, ValueError, KeyError, TypeError):
        return None


def reusable(folder: Path | None, params: EpisodeParams) -> BuildResult | None:
    """A finished build in `folder` that serves `params`: built with the same parameters
    but K (labels for the first K accesses of each episode; a larger K's labels hold a
    smaller K's, training filters by position), or None. The caller knows it was built
    from the same table (a run's own folders)."""
    found = finished_build(folder)
    if found is None:
        return None
    done, summary = found
    if replace(done, accesses_per_episode=params.accesses_per_episode) != params or \
            done.accesses_per_episode < params.accesses_per_episode:
        return None
    return BuildResult(out=Path(folder), summary=summary, seconds=0.0)


def derive(found: BuildResult, out: Path, params: EpisodeParams, *, plot: bool = True,
           source: str | os.PathLike[str] | None = None) -> BuildResult:
    """The build `build(table, out, params)` would write, from a finished build of the same
    table that serves `params` (`found`, from `reusable`: the same parameters but a K at
    least `params`'). Only the labels depend on K (`opt_label` is the episode's `admitted`
    for `position < K`, else -1) and the summary names it: the episodes and arrays are
    copied, the labels rewritten with this K (streamed: at 10 M accesses the 0.5 GB table is
    never held), the summary is `found`'s with these parameters. The same tables as a build
    (tests/baleen/test_episodes.py); `seconds` is this copy's."""
    from flashml.systems.baleen.episodes.polars_engine import COMPRESSION

    started = _time.perf_counter()
    folder = found.out
    with OutputDir(out) as od:
        for name in ("episodes.parquet", "arrays.parquet"):
            shutil.copyfile(folder / name, od.path(name))
        k = params.accesses_per_episode
        (pl.scan_parquet(folder / "labels.parquet")
         .with_columns(opt_label=pl.when(pl.col("position") < k)
                       .then(pl.col("admitted").cast(pl.Int8)).otherwise(pl.lit(-1, pl.Int8)))
         .sink_parquet(od.path("labels.parquet"), compression=COMPRESSION))
        summary = dict(found.summary)
        summary["accesses_per_episode"] = k
        # (not the build's reason, which names the memory available when it ran)
        summary["engine_choice"] = f"the tables of an earlier build ({folder.name}) with this K"
        if plot:
            plot_curve(summary, od.path("curve.png"))
        summary["params"] = asdict(params)
        if source is not None:
            summary["trace"] = str(source)
        summary["seconds"] = _time.perf_counter() - started
        summary["timings"] = {"derived_from": str(folder)}
        write_json(od.path("summary.json"), summary)
        od.commit()
    return BuildResult(out=Path(out), summary=summary, seconds=summary["seconds"])


def build(table: Path, out: Path, params: EpisodeParams, *, engine: str = "auto",
          master: str | None = None, spark: Any = None, chunks: int | None = None,
          simulate: bool = False, cache_gb: float | None = None, warmup_s: float = 0.0,
          plot: bool = True, sample_ratio: float | None = None,
          source: str | os.PathLike[str] | None = None,
          timings: dict[str, float] | None = None) -> BuildResult:
    """Build episodes.parquet, labels.parquet, arrays.parquet and summary.json in `out`,
    atomically, from the canonical access table `table` (a raw trace is the caller's to
    ingest first: `flashml.trace.ingest.canonical_path`). `sample_ratio` overrides the
    table's (`resolve_sample_ratio`); `simulate` also runs `simulate_opt`. summary.json names
    `source` (default `table`) as the trace; `timings` are stages the caller ran before
    (e.g. ingest_s), kept in the summary's timings and counted in its seconds. `engine`
    `auto` picks Polars or Spark by the table's size (`choose_engine`); a given `spark`
    session means Spark."""
    started = _time.perf_counter()
    params.validate()
    if engine not in ENGINES:
        raise UserError(f"--engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    table = Path(table)
    meta = with_sample_ratio(check_input(table), sample_ratio, table)
    if engine == "auto" and spark is not None:
        engine = "spark"
    engine, why = choose_engine(table, engine, master)
    log.debug("episodes engine %s (%s)", engine, why)
    before_s = sum((timings or {}).values())
    timings = dict(timings or {})
    with OutputDir(out) as od:
        work = od.scratch()
        info = trace_info(table, meta, params)
        job = Job(params, info)
        t = _time.perf_counter()
        if engine == "rust":
            from flashml.systems.baleen.episodes.rust_engine import run_rust

            run_rust(table, od.tmp, job, buckets=chunks)
        elif engine == "polars":
            from flashml.systems.baleen.episodes.polars_engine import run_polars

            run_polars(table, od.tmp, job, work, chunks=chunks)
        else:
            from flashml.systems.baleen.episodes.spark_engine import run_spark

            run_spark(table, od.tmp, job, work, master=master, spark=spark)
        timings["engine_s"] = _time.perf_counter() - t
        summary = summarize(od.path("episodes.parquet"), job)
        summary["engine"] = engine
        summary["engine_choice"] = why
        if simulate:
            t = _time.perf_counter()
            summary["simulation"] = simulate_opt(table, meta, od.path("arrays.parquet"),
                                                 summary, cache_gb=cache_gb, warmup_s=warmup_s)
            timings["simulate_s"] = _time.perf_counter() - t
        if plot:
            plot_curve(summary, od.path("curve.png"))
        summary["params"] = asdict(params)
        summary["trace"] = str(table if source is None else source)
        summary["seconds"] = before_s + _time.perf_counter() - started
        summary["timings"] = timings
        write_json(od.path("summary.json"), summary)
        od.commit()
    return BuildResult(out=Path(out), summary=summary, seconds=summary["seconds"],
                       timings=timings)


def simulate_opt(src: Path, meta: TraceMeta, arrays_path: Path, summary: dict[str, Any], *,
                 cache_gb: float | None = None, warmup_s: float = 0.0) -> dict[str, Any]:
    """Run the Rust simulator with OPT admission + OPT-Range prefetch from the arrays."""
    from flashml.simulation import SimConfig, simulate
    from flashml.trace.canonical import read_table

    df, _ = read_table(src)
    arr = pl.read_parquet(arrays_path)
    if cache_gb is None:
        cache_gb = DEFAULTS.cache_gb
    if cache_gb <= 0:
        raise UserError(f"--cache-gb must be > 0, got {cache_gb}")
    cfg = SimConfig.for_trace(meta, cache_gb=cache_gb, warmup_s=warmup_s, admission="opt",
                              prefetch="range")
    try:
        res = simulate(df, cfg, admit=arr["admit"], prefetch_start=arr["prefetch_start"],
                       prefetch_end=arr["prefetch_end"])
    except ValueError as e:
        raise UserError(f"{src}: simulation failed: {e}") from None
    m = res.metrics
    target = summary["target_write_rate_mbps"]
    wr = m["flash_write_rate_mbps"]
    return {
        "cache_gb": cache_gb,
        "warmup_s": warmup_s,
        "measured_write_rate_mbps": wr,
        "write_rate_vs_target": wr / target,
        "within_10pct": abs(wr / target - 1.0) <= 0.10,
        "episode_model_write_rate_mbps": summary["opt_write_rate_mbps"],
        "measured_eviction_age_s": m["avg_eviction_age_s"],
        "assumed_eviction_age_s": summary["eviction_age_s"],
        "peak_dt_util": m["peak_dt_util"],
        "mean_dt_util": m["mean_dt_util"],
        "io_hit_ratio": m["io_hit_ratio"],
        "admitted_segments": m["admitted_segments"],
        "prefetched_segments": m["prefetched_segments"],
        "sim_wall_s": m["wall_s"],
    }
