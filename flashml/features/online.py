"""The admission features of the contract, computed exactly and vectorised (Polars).

Counts depend only on the trace, never on cache state, so the features of every access are
computed in one pass here and handed to the models and the simulator as arrays. The
conventions (GETs only, strictly earlier accesses, fixed hour buckets) are in
features/contract.toml.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from flashml.config import GET_OPS, UNITS
from flashml.features.contract import Contract, contract


def base_columns(df: pl.DataFrame, segment_bytes: int = UNITS.segment_bytes) -> pl.DataFrame:
    """Per access: GET flag, segment start/end (inclusive) and segments covered."""
    start = (pl.col("offset") // segment_bytes).cast(pl.Int64)
    end = ((pl.col("offset") + pl.col("size") - 1) // segment_bytes).cast(pl.Int64)
    return df.select(
        pl.col("key"), pl.col("time"), pl.col("op"), pl.col("namespace"), pl.col("user"),
        pl.col("size"),
        segment_start=start, segment_end=end,
        is_get=pl.col("op").is_in(list(GET_OPS)),
    ).with_columns(nseg=pl.col("segment_end") - pl.col("segment_start") + 1)


def hourly_counts(df: pl.DataFrame, c: Contract | None = None,
                  segment_bytes: int = UNITS.segment_bytes) -> pl.DataFrame:
    """`block_count_h1..hN` and `segment_count_h1..hN` (Int64) for every row of `df`."""
    c = c or contract()
    b = base_columns(df, segment_bytes).with_columns(
        _row=pl.int_range(pl.len(), dtype=pl.Int64),
        _hour=(pl.col("time") // c.hour_seconds).cast(pl.Int64),
        _g=pl.col("is_get").cast(pl.Int64),
    ).with_columns(_gs=pl.col("_g") * pl.col("nseg"))
    # hour 1: earlier GETs of the same block in the same hour bucket
    out = b.select(
        "_row", "key", "_hour",
        block_count_h1=pl.col("_g").cum_sum().over(["key", "_hour"]) - pl.col("_g"),
        segment_count_h1=pl.col("_gs").cum_sum().over(["key", "_hour"]) - pl.col("_gs"),
    )
    totals = b.filter(pl.col("is_get")).group_by("key", "_hour").agg(
        _n=pl.len().cast(pl.Int64), _s=pl.col("nseg").sum())
    for h in range(2, c.hours + 1):
        shifted = totals.with_columns(_hour=pl.col("_hour") + (h - 1)).rename(
            {"_n": f"block_count_h{h}", "_s": f"segment_count_h{h}"})
        out = out.join(shifted, on=["key", "_hour"], how="left")
    names = [f"block_count_h{h}" for h in range(1, c.hours + 1)] + \
            [f"segment_count_h{h}" for h in range(1, c.hours + 1)]
    return out.sort("_row").select([pl.col(n).fill_null(0).cast(pl.Int64) for n in names])


def _feature_columns(df: pl.DataFrame, c: Contract,
                     segment_bytes: int) -> list[tuple[str, pl.Series]]:
    """(name, column) of every admission feature in contract order, before the cast."""
    base = base_columns(df, segment_bytes)
    counts = hourly_counts(df, c, segment_bytes)
    cols = []
    for f in c.admission:
        if f.source in ("block_count", "segment_count"):
            cols.append((f.name, counts[f"{f.source}_h{f.hour}"]))
        else:
            cols.append((f.name, base[f.source]))
    return cols


def admission_features(df: pl.DataFrame, c: Contract | None = None,
                       segment_bytes: int = UNITS.segment_bytes) -> pl.DataFrame:
    """All admission features, Float64, in contract order, one row per row of `df`."""
    c = c or contract()
    return pl.DataFrame([s.cast(pl.Float64).alias(name)
                         for name, s in _feature_columns(df, c, segment_bytes)])


def feature_matrix(df: pl.DataFrame, c: Contract | None = None,
                   segment_bytes: int = UNITS.segment_bytes) -> np.ndarray:
    """Row-major float64 matrix (rows x num_features), the layout the C ABI takes, filled a
    column at a time (no Float64 frame and no transposed copy: at 10 M accesses each would
    be another 1.4 GB at the job's peak)."""
    c = c or contract()
    cols = _feature_columns(df, c, segment_bytes)
    out = np.empty((df.height, len(cols)), dtype=np.float64)
    for j, (_, s) in enumerate(cols):
        out[:, j] = s.to_numpy()
    return out
