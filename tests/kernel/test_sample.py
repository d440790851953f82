"""Sampling by key against a slow, obvious implementation of the artifact's rule."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from flashml.errors import UserError
from flashml.trace.canonical import TraceMeta, read_meta
from flashml.trace.sample import sample_by_key


def random_table(n: int = 5000, keys: int = 400, seed: int = 3) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    key = (rng.zipf(1.5, n) % keys).astype(np.uint64)
    return pl.DataFrame({"time": np.sort(rng.uniform(0, 1000, n)), "key": key,
                         "offset": np.zeros(n, np.uint64), "size": np.full(n, 4096, np.uint64),
                         "op": np.ones(n, np.uint8), "namespace": np.zeros(n, np.uint32),
                         "user": np.zeros(n, np.uint32), "src_line": np.arange(n, dtype=np.uint64)})


def slow_sample(df: pl.DataFrame, start: float, size: float, seed: int) -> set[int]:
    counts: dict[int, int] = {}
    for k in df["key"].to_list():
        counts[k] = counts.get(k, 0) + 1
    keys = sorted(counts)
    order = np.random.default_rng(seed).permutation(len(keys))
    total, cum, kept = len(df), 0, set()
    for i in order:
        share = 100.0 * cum / total
        if start <= share < start + size:
            kept.add(keys[i])
        cum += counts[keys[i]]
    return kept


@pytest.mark.parametrize("start,size,seed", [(0, 10, 0), (25, 50, 1), (90, 10, 2), (0, 100, 0)])
def test_matches_slow_reference(start: float, size: float, seed: int) -> None:
    df = random_table()
    out, meta = sample_by_key(df, TraceMeta(sample_ratio=50.0), start=start, size=size, seed=seed)
    assert set(out["key"].to_list()) == slow_sample(df, start, size, seed)
    assert meta.sample_ratio == pytest.approx(50.0 * size / 100)
    # whole keys only: every access of a kept key is kept, in order
    kept = df.filter(pl.col("key").is_in(out["key"].unique().implode()))
    assert out.equals(kept)


def test_disjoint_ranges_partition_the_keys() -> None:
    df = random_table()
    parts = [set(sample_by_key(df, TraceMeta(), start=s, size=25, seed=9)[0]["key"].to_list())
             for s in (0, 25, 50, 75)]
    assert set().union(*parts) == set(df["key"].to_list())
    assert sum(len(p) for p in parts) == df["key"].n_unique()


def test_bad_ranges() -> None:
    df = random_table()
    for start, size in [(-1, 10), (0, 0), (95, 10), (100, 1)]:
        with pytest.raises(UserError):
            sample_by_key(df, TraceMeta(), start=start, size=size)


def test_sample_cli_records_ratio(tmp_path: Path, cli) -> None:
    from flashml.trace.canonical import write_table

    src = tmp_path / "t.parquet"
    write_table(random_table(), src, TraceMeta(sample_ratio=10.0, source_format="tectonic"))
    out = tmp_path / "s.parquet"
    proc = cli("trace", "sample", src, "--size", "20", "--seed", "4", "-o", out, check=True)
    assert "sample ratio 10% -> 2%" in proc.stdout
    assert read_meta(out).sample_ratio == pytest.approx(2.0)
