"""One definition of units: the trace statistics and the simulator agree on MB/s.

Admit-all with a cache larger than the trace writes every distinct GET segment exactly once,
which is exactly how `trace stats` defines its admit-all write rate."""

from __future__ import annotations

from pathlib import Path

import pytest

from flashml.config import MB, UNITS
from flashml.simulation import SimConfig, simulate
from flashml.trace.canonical import read_table
from flashml.trace.generate import generate_trace
from flashml.trace.ingest import ingest
from flashml.trace.stats import compute_stats, distinct_get_segments


def test_admit_all_without_evictions_matches_stats(tmp_path: Path) -> None:
    raw = tmp_path / "t.trace"
    generate_trace("region3-like", 5, raw, accesses=20_000, progress=False)
    ingest(raw, tmp_path / "t.parquet", "tectonic", progress=False)
    df, meta = read_table(tmp_path / "t.parquet")
    stats = compute_stats(df, meta)
    segs = distinct_get_segments(df)
    res = simulate(df, SimConfig.for_trace(meta, admission="admitall",
                                           capacity_segments=segs + 1, warmup_s=0.0))
    assert res.metrics["admitted_segments"] == segs
    assert res.metrics["flash_write_rate_mbps"] == pytest.approx(
        stats["admit_all_write_rate_mbps"], rel=1e-9)
    by_hand = segs * UNITS.segment_bytes / MB / stats["duration_s"] * 100 / meta.sample_ratio
    assert stats["admit_all_write_rate_mbps"] == pytest.approx(by_hand, rel=1e-12)
