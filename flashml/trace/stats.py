"""Trace statistics in the shape of Baleen's Table 2, for any canonical access table.

Definitions (one access = one row of the canonical table; "block" = cache key):

| key                           | definition                                                    |
|-------------------------------|---------------------------------------------------------------|
| `requests`                    | number of accesses (all ops)                                  |
| `gets`, `puts`                | accesses whose op is in `GET_OPS` / `PUT_OPS`                  |
| `keys`                        | distinct blocks (cache keys)                                  |
| `get_keys`                    | distinct blocks read by at least one GET                      |
| `duration_s`                  | last time - first time, seconds                               |
| `sample_ratio`                | percent of the full node the trace samples (from `TraceMeta`) |
| `request_rate_per_s`          | requests / duration, scaled by 100 / sample_ratio             |
| `avg_block_size_mib`          | mean over blocks of the largest `offset + size` seen, in MiB  |
| `access_size_mib`             | mean access size (all ops), in MiB                            |
| `compulsory_miss_rate`        | keys / requests, all ops (Baleen Table 2 footnote 1)          |
| `get_compulsory_miss_rate`    | get_keys / gets: what a read cache actually misses cold       |
| `one_hit_wonder_rate`         | fraction of blocks with exactly one access (all ops)          |
| `get_one_hit_wonder_rate`     | fraction of GET-read blocks read by exactly one GET           |
| `put_only_block_rate`         | fraction of blocks with at least one PUT and no GET           |
| `put_fraction`                | puts / requests ("#PUT / #Acc")                               |
| `admit_all_write_rate_mbps`   | see below                                                     |
| `peak_to_mean_hourly`         | busiest full hour's requests / mean requests per full hour    |

Units (`flashml.config`): sizes in MiB (2**20 bytes); the write rate in MB/s with MB = 10**6
bytes, the unit of every rate in flashml and in Baleen's artifact.

`admit_all_write_rate_mbps` is the flash write rate of admit-all *with no evictions*: every
distinct (block, segment) that any GET touches is written to flash exactly once, so it is
distinct GET segments x segment size / duration, scaled by 100 / sample_ratio. PUTs are
never admitted (DESIGN.md). Real admit-all re-admits evicted segments, so this is the lower
bound of admit-all's write rate at any cache size; Baleen's Table 2 column, measured with a
400 GB cache, is higher.

The one-hit-wonder and compulsory-miss rates count all ops because Baleen's Table 2 does
(Region1's 0.1% sample: 25,428 blocks / 147,794 accesses = 17.2%, Table 2 says 18%); the
`get_*` variants are the read-cache view.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from flashml.config import GET_OPS, HOUR_S, MB, PUT_OPS, UNITS, MiB
from flashml.trace.canonical import TraceMeta, check_times

_SHIFT = 1 << 32  # segment indices of one block stay far below this

# The JSON keys the CLI promises (`flashml trace stats --json`); more follow them.
REQUIRED_KEYS: tuple[str, ...] = (
    "requests", "gets", "puts", "keys", "duration_s", "one_hit_wonder_rate",
    "compulsory_miss_rate", "admit_all_write_rate_mbps",
)


def _ratio(num: float, den: float) -> float | None:
    return float(num) / float(den) if den else None


def _counts(df: pl.DataFrame) -> dict[str, Any]:
    is_get = pl.col("op").is_in(GET_OPS)
    row = df.select(
        requests=pl.len(),
        gets=is_get.sum(),
        puts=pl.col("op").is_in(PUT_OPS).sum(),
        keys=pl.col("key").n_unique(),
        t0=pl.col("time").min(),
        t1=pl.col("time").max(),
        size_mean=pl.col("size").cast(pl.Float64).mean(),
    ).row(0, named=True)
    return row


def _segment_masks(df: pl.DataFrame, segment_bytes: int) -> pl.Series | None:
    """Per access, the bitmask of the segments a GET touches (0 for other ops), or None when
    a segment index reaches 64 (blocks of more than 64 segments) and masks cannot hold it."""
    off = df["offset"].to_numpy().astype(np.int64, copy=False)
    size = df["size"].to_numpy().astype(np.int64, copy=False)
    a = off // segment_bytes
    b = (off + size - 1) // segment_bytes
    use = np.isin(df["op"].to_numpy(), GET_OPS) & (size > 0)
    if df.height and int(np.where(use, b, 0).max()) >= 64:
        return None
    n = np.where(use, b - a + 1, 0).astype(np.uint64)
    ones = np.where(n > 0, np.uint64(0xFFFF_FFFF_FFFF_FFFF) >> (np.uint64(64) - np.maximum(
        n, np.uint64(1))), np.uint64(0))
    return pl.Series("seg_mask", ones << np.where(use, a, 0).astype(np.uint64))


def _per_block(df: pl.DataFrame, segment_bytes: int) -> dict[str, Any]:
    is_get = pl.col("op").is_in(GET_OPS)
    is_put = pl.col("op").is_in(PUT_OPS)
    masks = _segment_masks(df, segment_bytes)
    aggs = {
        "n": pl.len(),
        "n_get": is_get.sum(),
        "n_put": is_put.sum(),
        "extent": (pl.col("offset") + pl.col("size")).max(),
    }
    src = df.select("key", "op", "offset", "size")
    if masks is not None:
        src = src.with_columns(masks)
        aggs["seg_mask"] = pl.col("seg_mask").bitwise_or()
    blocks = src.group_by("key").agg(**aggs)
    out = blocks.select(
        ohw=(pl.col("n") == 1).sum(),
        put_only=((pl.col("n_get") == 0) & (pl.col("n_put") > 0)).sum(),
        get_keys=(pl.col("n_get") > 0).sum(),
        get_ohw=(pl.col("n_get") == 1).sum(),
        extent_mean=pl.col("extent").cast(pl.Float64).mean(),
    ).row(0, named=True)
    out["get_segments"] = (int(blocks["seg_mask"].bitwise_count_ones().sum())
                           if masks is not None else distinct_get_segments(df, segment_bytes))
    return out


def distinct_get_segments(df: pl.DataFrame, segment_bytes: int = UNITS.segment_bytes) -> int:
    """Distinct (block, segment) pairs touched by GETs: the union of each block's segment
    intervals, computed without expanding accesses into segments. (compute_stats uses
    per-block segment bitmasks instead when blocks have at most 64 segments.)

    Sorted by (block, first segment), the part of an access's [a, b] already covered by the
    block's earlier intervals is exactly [a, min(b, largest earlier end)]. The running
    largest end is one global cum_max over (group number * 2^32 + end + 1), so it restarts at
    every block without a per-group window.
    """
    seg = pl.lit(segment_bytes, dtype=pl.Int64)
    off = pl.col("offset").cast(pl.Int64)
    end_ = pl.col("b") + 1
    out = (
        df.lazy()
        .filter(pl.col("op").is_in(GET_OPS) & (pl.col("size") > 0))
        .select(
            "key",
            a=off // seg,
            b=(off + pl.col("size").cast(pl.Int64) - 1) // seg,
        )
        .sort("key", "a")
        .with_columns(
            g=(pl.col("key") != pl.col("key").shift(1)).fill_null(True).cum_sum().cast(pl.Int64))
        .with_columns(run=(pl.col("g") * _SHIFT + end_).cum_max().shift(1))
        .with_columns(
            prev_end=pl.when(pl.col("run") // _SHIFT == pl.col("g"))
            .then(pl.col("run") % _SHIFT - 1)
            .otherwise(-1))
        .select(
            (pl.col("b") - pl.max_horizontal(pl.col("a") - 1, pl.col("prev_end")))
            .clip(lower_bound=0)
            .sum())
        .collect()
    )
    return int(out.item() or 0)


def _peak_to_mean_hourly(df: pl.DataFrame, t0: float, duration: float) -> float | None:
    full_hours = int(duration // HOUR_S)
    if full_hours < 2:
        return None
    per_hour = (
        df.select(h=((pl.col("time") - t0) // HOUR_S).cast(pl.Int64))
        .filter(pl.col("h") < full_hours)
        .group_by("h")
        .len()
    )
    counts = per_hour["len"]
    return float(counts.max()) / (float(counts.sum()) / full_hours)


def _empty(meta: TraceMeta) -> dict[str, Any]:
    out: dict[str, Any] = {k: 0 for k in REQUIRED_KEYS}
    out.update(duration_s=0.0, one_hit_wonder_rate=None, compulsory_miss_rate=None,
               admit_all_write_rate_mbps=None, sample_ratio=float(meta.sample_ratio))
    return out


def compute_stats(df: pl.DataFrame, meta: TraceMeta) -> dict[str, Any]:
    """Baleen Table 2 statistics of a canonical access table (definitions: module docstring).

    Rates are per second of trace time, scaled to a full node by 100 / `meta.sample_ratio`.
    A rate or ratio that is undefined (zero duration, no rows) is None.
    """
    if df.height == 0:
        return _empty(meta)
    check_times(df, meta.source_file or "the trace")
    c = _counts(df)
    b = _per_block(df, UNITS.segment_bytes)
    scale = 100.0 / float(meta.sample_ratio)
    duration = float(c["t1"] - c["t0"])
    segs = int(b["get_segments"])

    def per_s(x: float) -> float | None:
        r = _ratio(x, duration)
        return None if r is None else r * scale

    write_rate = per_s(segs * UNITS.segment_bytes / MB)
    return {
        "requests": int(c["requests"]),
        "gets": int(c["gets"]),
        "puts": int(c["puts"]),
        "keys": int(c["keys"]),
        "duration_s": duration,
        "one_hit_wonder_rate": _ratio(b["ohw"], c["keys"]),
        "compulsory_miss_rate": _ratio(c["keys"], c["requests"]),
        "admit_all_write_rate_mbps": write_rate,
        "sample_ratio": float(meta.sample_ratio),
        "request_rate_per_s": per_s(c["requests"]),
        "avg_block_size_mib": float(b["extent_mean"]) / MiB,
        "access_size_mib": float(c["size_mean"]) / MiB,
        "put_only_block_rate": _ratio(b["put_only"], c["keys"]),
        "put_fraction": _ratio(c["puts"], c["requests"]),
        "get_keys": int(b["get_keys"]),
        "get_compulsory_miss_rate": _ratio(b["get_keys"], c["gets"]),
        "get_one_hit_wonder_rate": _ratio(b["get_ohw"], b["get_keys"]),
        "get_segments": segs,
        "peak_to_mean_hourly": _peak_to_mean_hourly(df, float(c["t0"]), duration),
    }


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100.0 * x:.1f}%"


def _num(x: float | None, fmt: str) -> str:
    return "n/a" if x is None else format(x, fmt)


def format_stats(stats: dict[str, Any]) -> str:
    """A readable table of `compute_stats` output, Table 2's rows first."""
    ratio = stats.get("sample_ratio", 100.0)
    dur = stats.get("duration_s") or 0.0
    rows = [
        ("request rate", f"{_num(stats.get('request_rate_per_s'), ',.1f')} /s",
         "full node"),
        ("avg block size", f"{_num(stats.get('avg_block_size_mib'), '.2f')} MiB",
         "mean largest offset+size"),
        ("access size", f"{_num(stats.get('access_size_mib'), '.2f')} MiB", "mean, all ops"),
        ("compulsory miss rate", _pct(stats.get("compulsory_miss_rate")), "blocks / accesses"),
        ("one-hit-wonder rate", _pct(stats.get("one_hit_wonder_rate")),
         "blocks accessed once"),
        ("PUT-only blocks", _pct(stats.get("put_only_block_rate")), "blocks never read"),
        ("#PUT / #Acc", _pct(stats.get("put_fraction")), ""),
        ("admit-all write rate", f"{_num(stats.get('admit_all_write_rate_mbps'), ',.1f')} MB/s",
         "no evictions: lower bound, full node"),
        ("", "", ""),
        ("requests", f"{stats.get('requests', 0):,}",
         f"GET {stats.get('gets', 0):,}, PUT {stats.get('puts', 0):,}"),
        ("blocks", f"{stats.get('keys', 0):,}", f"read by a GET {stats.get('get_keys', 0):,}"),
        ("duration", f"{dur / 86400.0:.2f} days", f"{dur:,.0f} s"),
        ("GET compulsory miss rate", _pct(stats.get("get_compulsory_miss_rate")),
         "GET blocks / GETs"),
        ("GET one-hit-wonder rate", _pct(stats.get("get_one_hit_wonder_rate")),
         "GET blocks read once"),
        ("peak-to-mean (hourly)", _num(stats.get("peak_to_mean_hourly"), ".2f"), ""),
    ]
    head = (f"Trace statistics (Baleen Table 2); sample ratio {ratio:g}%, "
            f"rates scaled x{100.0 / ratio:g} to a full node; MB = 10^6 bytes, MiB = 2^20 bytes")
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    lines = [head]
    for name, value, note in rows:
        if not name:
            lines.append("")
            continue
        line = f"  {name:<{w0}}  {value:>{w1}}"
        lines.append(f"{line}   {note}" if note else line)
    return "\n".join(lines)
