"""Table 2 statistics: hand-computed tiny tables and a slow reference on a random table."""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
import polars as pl
import pytest

from flashml.config import GET_OPS, MB, PUT_OPS, KiB, MiB
from flashml.trace.canonical import TraceMeta
from flashml.trace.stats import (
    REQUIRED_KEYS,
    compute_stats,
    distinct_get_segments,
    format_stats,
)

SEG = 128 * KiB


def table(rows: list[tuple[float, int, int, int, int]]) -> pl.DataFrame:
    """(time, key, offset, size, op) rows -> a canonical table."""
    t, k, o, s, op = zip(*rows, strict=True) if rows else ((),) * 5
    n = len(t)
    return pl.DataFrame({
        "time": pl.Series(t, dtype=pl.Float64),
        "key": pl.Series(k, dtype=pl.UInt64),
        "offset": pl.Series(o, dtype=pl.UInt64),
        "size": pl.Series(s, dtype=pl.UInt64),
        "op": pl.Series(op, dtype=pl.UInt8),
        "namespace": pl.Series([1] * n, dtype=pl.UInt32),
        "user": pl.Series([1] * n, dtype=pl.UInt32),
        "src_line": pl.Series(range(1, n + 1), dtype=pl.UInt64),
    })


TINY = [
    (0.0, 1, 0, SEG, 2),                    # GET key 1, segment 0
    (10.0, 1, 64 * KiB, SEG, 1),            # GET key 1, segments 0-1
    (20.0, 2, 0, MiB, 4),                   # PUT key 2
    (30.0, 3, 8 * MiB - 2 * SEG, 2 * SEG, 2),  # GET key 3, segments 62-63
    (40.0, 2, 0, MiB, 3),                   # PUT key 2
    (100.0, 4, MiB, 1, 4),                  # PUT key 4 (one byte)
    (100.0, 5, 0, SEG + 1, 3),              # PUT key 5
    (100.0, 5, 0, SEG + 1, 5),              # GET_NOT_INIT key 5, segments 0-1
]


def test_tiny_table_hand_computed() -> None:
    st = compute_stats(table(TINY), TraceMeta(sample_ratio=10.0))
    assert (st["requests"], st["gets"], st["puts"], st["keys"]) == (8, 4, 4, 5)
    assert st["duration_s"] == 100.0
    assert st["sample_ratio"] == 10.0
    assert st["request_rate_per_s"] == pytest.approx(8 / 100 * 10)
    assert st["one_hit_wonder_rate"] == pytest.approx(2 / 5)      # keys 3 and 4
    assert st["compulsory_miss_rate"] == pytest.approx(5 / 8)
    assert st["put_only_block_rate"] == pytest.approx(2 / 5)      # keys 2 and 4
    assert st["put_fraction"] == pytest.approx(4 / 8)
    assert st["get_keys"] == 3
    assert st["get_compulsory_miss_rate"] == pytest.approx(3 / 4)
    assert st["get_one_hit_wonder_rate"] == pytest.approx(2 / 3)  # keys 3 and 5
    assert st["get_segments"] == 6                                # 2 + 2 + 2
    assert st["admit_all_write_rate_mbps"] == pytest.approx(6 * SEG / MB / 100 * 10)
    sizes = [r[3] for r in TINY]
    assert st["access_size_mib"] == pytest.approx(sum(sizes) / 8 / MiB)
    extents = [SEG + 64 * KiB, MiB, 8 * MiB, MiB + 1, SEG + 1]
    assert st["avg_block_size_mib"] == pytest.approx(sum(extents) / 5 / MiB)
    assert st["peak_to_mean_hourly"] is None  # under two full hours


def test_json_keys_and_format() -> None:
    st = compute_stats(table(TINY), TraceMeta(sample_ratio=10.0))
    assert set(REQUIRED_KEYS) <= set(st)
    assert json.loads(json.dumps(st)) == st
    text = format_stats(st)
    for label in ("request rate", "avg block size", "access size", "compulsory miss rate",
                  "one-hit-wonder rate", "PUT-only blocks", "#PUT / #Acc",
                  "admit-all write rate"):
        assert label in text
    assert "62.5%" in text and "sample ratio 10%" in text


def test_empty_and_zero_duration() -> None:
    st = compute_stats(table([]), TraceMeta())
    assert set(REQUIRED_KEYS) <= set(st) and st["requests"] == 0
    format_stats(st)
    st = compute_stats(table([(5.0, 9, 0, 4096, 2)]), TraceMeta())
    assert st["duration_s"] == 0.0 and st["admit_all_write_rate_mbps"] is None
    assert st["one_hit_wonder_rate"] == 1.0 and st["compulsory_miss_rate"] == 1.0
    assert "n/a" in format_stats(st)


def test_peak_to_mean_hourly() -> None:
    # hour 0: 3 accesses, hour 1: 1, hour 2: 2; the partial last hour is ignored
    rows = [(t, 1, 0, 4096, 2) for t in (0, 10, 20, 3700, 7300, 7400, 10_900)]
    st = compute_stats(table(rows), TraceMeta())
    assert st["peak_to_mean_hourly"] == pytest.approx(3 / (6 / 3))


def slow_stats(df: pl.DataFrame, ratio: float) -> dict:
    """The obvious per-row loop."""
    n = gets = puts = 0
    per_key: dict[int, list[int]] = defaultdict(lambda: [0, 0, 0, 0])  # n, gets, puts, extent
    segs: set[tuple[int, int]] = set()
    size_sum = 0
    for k, o, s, op in df.select("key", "offset", "size", "op").iter_rows():
        n += 1
        size_sum += s
        rec = per_key[k]
        rec[0] += 1
        rec[3] = max(rec[3], o + s)
        if op in GET_OPS:
            gets += 1
            rec[1] += 1
            if s > 0:
                for g in range(o // SEG, (o + s - 1) // SEG + 1):
                    segs.add((k, g))
        elif op in PUT_OPS:
            puts += 1
            rec[2] += 1
    times = df["time"].to_list()
    dur = max(times) - min(times)
    keys = len(per_key)
    get_keys = sum(1 for r in per_key.values() if r[1] > 0)
    return {
        "requests": n, "gets": gets, "puts": puts, "keys": keys, "duration_s": dur,
        "one_hit_wonder_rate": sum(1 for r in per_key.values() if r[0] == 1) / keys,
        "compulsory_miss_rate": keys / n,
        "admit_all_write_rate_mbps": len(segs) * SEG / MB / dur * 100 / ratio,
        "request_rate_per_s": n / dur * 100 / ratio,
        "avg_block_size_mib": sum(r[3] for r in per_key.values()) / keys / MiB,
        "access_size_mib": size_sum / n / MiB,
        "put_only_block_rate": sum(1 for r in per_key.values() if r[1] == 0 and r[2] > 0) / keys,
        "put_fraction": puts / n,
        "get_keys": get_keys,
        "get_compulsory_miss_rate": get_keys / gets,
        "get_one_hit_wonder_rate": sum(1 for r in per_key.values() if r[1] == 1) / get_keys,
        "get_segments": len(segs),
    }


def random_table(seed: int, n: int = 20_000) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    size = rng.integers(0, 3 * MiB, n)
    size[rng.random(n) < 0.01] = 0
    offset = (rng.random(n) * (8 * MiB - size)).astype(np.int64)
    ops = np.array([1, 2, 3, 4, 5, 6, 100])
    df = table(list(zip(
        np.sort(rng.uniform(0, 5 * 3600, n)).tolist(),
        rng.zipf(1.3, n).clip(max=10**6).tolist(),
        offset.tolist(), size.tolist(),
        rng.choice(ops, n, p=[0.3, 0.3, 0.1, 0.1, 0.1, 0.05, 0.05]).tolist(), strict=True)))
    return df


@pytest.mark.parametrize("seed", [0, 1])
def test_matches_slow_reference_on_random_table(seed: int) -> None:
    df = random_table(seed)
    st = compute_stats(df, TraceMeta(sample_ratio=0.5))
    ref = slow_stats(df, 0.5)
    for k, v in ref.items():
        assert st[k] == pytest.approx(v, rel=1e-12), k


@pytest.mark.parametrize("seg", [SEG, 4096, 3 * MiB])
def test_interval_union_matches_set_of_segments(seg: int) -> None:
    df = random_table(2, 5_000)
    segs = set()
    for k, o, s, op in df.select("key", "offset", "size", "op").iter_rows():
        if op in GET_OPS and s > 0:
            segs.update((k, g) for g in range(o // seg, (o + s - 1) // seg + 1))
    assert distinct_get_segments(df, seg) == len(segs)
