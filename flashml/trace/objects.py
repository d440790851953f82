"""Whole-object request streams (key, size) for the simulator's object-cache mode.

libCacheSim's model: every request is one object; CloudPhysics requests are keyed by `lbn`
with their `size` in bytes, one row per request (no splitting into blocks).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from flashml.errors import TraceError

OBJECT_FORMATS = ("cloudphysics", "parquet")


def read_objects(path: str | Path, fmt: str = "cloudphysics") -> pl.DataFrame:
    """Return a DataFrame with columns `key` (u64) and `size` (u64), one row per request."""
    path = Path(path)
    if not path.exists():
        raise TraceError(path, "no such file")
    if fmt == "cloudphysics":
        try:
            df = pl.read_csv(path, schema_overrides={"lbn": pl.UInt64, "size": pl.UInt64})
        except Exception as e:  # polars raises several error types for bad CSV
            raise TraceError(path, f"cannot read CloudPhysics CSV: {e}") from None
        for col in ("lbn", "size"):
            if col not in df.columns:
                raise TraceError(path, "missing column", line=1, field=col)
        return df.select(pl.col("lbn").alias("key"), pl.col("size"))
    if fmt == "parquet":
        df = pl.read_parquet(path)
        for col in ("key", "size"):
            if col not in df.columns:
                raise TraceError(path, "missing column", field=col)
        return df.select(pl.col("key").cast(pl.UInt64), pl.col("size").cast(pl.UInt64))
    raise TraceError(path, f"unknown object format {fmt!r}; expected one of {OBJECT_FORMATS}",
                     field="format")
