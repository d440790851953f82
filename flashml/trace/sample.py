"""Sampling by key, as Baleen's artifact does: shuffle the keys, keep those whose cumulative
share of accesses (before them) falls in [start, start + size) percent. The sample ratio is
recorded so that every rate scales back to the full trace."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import polars as pl

from flashml.errors import UserError
from flashml.trace.canonical import TraceMeta
from flashml.trace.limits import MIN_SAMPLE_RATIO, check_seed


def sample_by_key(df: pl.DataFrame, meta: TraceMeta, *, start: float, size: float,
                  seed: int = 0) -> tuple[pl.DataFrame, TraceMeta]:
    """Keep the keys whose shuffled cumulative access share starts in [start, start+size) %."""
    check_seed(seed)
    if not (0.0 <= start < 100.0):
        raise UserError(f"--start must be in [0, 100) percent, got {start}")
    if not (0.0 < size <= 100.0) or start + size > 100.0 + 1e-9:
        raise UserError(f"--size must be in (0, 100 - start] percent, got {size}")
    ratio = meta.sample_ratio * size / 100.0
    if ratio < MIN_SAMPLE_RATIO:
        raise UserError(f"--size {size:g}% of a {meta.sample_ratio:g}% sample is a sample "
                        f"ratio of {ratio:g}%, below the smallest, {MIN_SAMPLE_RATIO:g}% "
                        "(rates are scaled by 100 / ratio)")
    counts = df.group_by("key").len().sort("key")
    order = np.random.default_rng(seed).permutation(len(counts))
    shuffled = counts[order]
    total = float(shuffled["len"].sum())
    before = (shuffled["len"].cum_sum() - shuffled["len"]).cast(pl.Float64) / total * 100.0
    keep = shuffled.filter((before >= start) & (before < start + size))["key"]
    out = df.filter(pl.col("key").is_in(keep.implode()))
    return out, replace(meta, sample_ratio=ratio)
