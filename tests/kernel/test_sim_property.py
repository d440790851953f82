"""Property tests: the Rust core and the pure-Python reference agree exactly (every metric,
every series value, float for float) on random traces, for every policy combination."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flashml.simulation import (
    ADMISSIONS,
    EVICTIONS,
    METRIC_KEYS,
    PREFETCHES,
    SimConfig,
    simulate,
)
from flashml.simulation import PREFETCH_WHENS as WHENS

import reference_sim as ref

# Every policy the Rust declaration accepts (sim_params! choices) must be in the reference.


def same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def has_measured_window(times, window, warmup) -> bool:
    span = times[-1] - times[0]
    n_windows = math.floor(span / window) + 1
    return any(k * window >= warmup for k in range(n_windows))


def check(cols: dict, cfg: SimConfig, arrays: dict) -> None:
    n = len(cols["time"])
    span = cols["time"][-1] - cols["time"][0]
    if span <= 0 or not has_measured_window(cols["time"], cfg.window_s, cfg.warmup_s):
        with pytest.raises(ValueError):
            simulate(cols, cfg, **arrays)
        return
    got = simulate(cols, cfg, **arrays)
    want = ref.simulate(cols["time"], cols["key"], cols["offset"], cols["size"], cols["op"],
                        cfg.to_dict(), **arrays)
    for k in METRIC_KEYS:
        if k == "wall_s":
            continue
        assert same(got.metrics[k], want["metrics"][k]), (k, got.metrics[k], want["metrics"][k])
    for k in ("time", "dt_util", "write_rate_mbps", "warmup"):
        assert list(got.series[k]) == want["series"][k], k
    for k, v in want["info"].items():
        assert got.info[k] == v, k
    assert got.metrics["accesses"] == n


@st.composite
def scenario(draw, eviction: str, block_level: bool, admission: str, prefetch: str):
    seg = draw(st.sampled_from([1, 3, 16]))
    spb = draw(st.sampled_from([1, 2, 5, 8, 64, 70]))  # 70: two mask words per block
    block = seg * spb
    n = draw(st.integers(1, 60))
    keys = draw(st.lists(st.integers(0, 7), min_size=n, max_size=n))
    offsets, sizes = [], []
    for _ in range(n):
        off = draw(st.integers(0, block - 1))
        offsets.append(off)
        sizes.append(draw(st.integers(1, block - off)))
    gaps = draw(st.lists(st.sampled_from([0.0, 0.25, 1.0, 3.0, 7.5]), min_size=n, max_size=n))
    times = list(np.cumsum(gaps) + 1000.0)
    if n > 1 and times[-1] == times[0]:
        times[-1] += 1.0
    ops = draw(st.lists(st.sampled_from([1, 2, 5, 100, 3, 4, 6]), min_size=n, max_size=n))
    cfg = SimConfig(
        segment_bytes=seg, block_bytes=block,
        # LRU with block-level recency and a cache of at most one block: flashml evicts the
        # accessed block's lowest segment first, the artifact (and the reference) its
        # requested hits before the segments just inserted (sim/src/flash/mod.rs, "Capacity").
        capacity_segments=draw(st.integers(1, 40)) + (
            spb if eviction == "lru" and block_level else 0),
        eviction=eviction, block_level_recency=block_level, admission=admission,
        coinflip_p=draw(st.sampled_from([0.0, 0.3, 0.7, 1.0])),
        coinflip_seed=draw(st.integers(0, 3)),
        rejectx_x=draw(st.integers(0, 3)),
        rejectx_factor=draw(st.sampled_from([0.013, 0.05, 0.37, 0.5, 1.0, 3.0])),
        threshold=draw(st.sampled_from([0.0, 0.5, 1.0])),
        prefetch=prefetch, prefetch_when=draw(st.sampled_from(WHENS)),
        when_threshold=draw(st.sampled_from([0.0, 0.5, 1.0])),
        t_seek_s=draw(st.sampled_from([0.0, 0.0115, 0.3])),
        bandwidth_bytes_per_s=draw(st.sampled_from([143.0 * 1048576, 7.0, 1000.0])),
        disks=draw(st.integers(1, 40)),
        window_s=draw(st.sampled_from([0.5, 2.0, 10.0, 600.0])),
        warmup_s=draw(st.sampled_from([0.0, 0.0, 1.0, 5.0])),
        sample_ratio=draw(st.sampled_from([100.0, 0.1, 12.5])),
    )
    rnd = st.floats(0.0, 1.0, allow_nan=False)
    lo = st.integers(-3, spb + 2)
    starts = draw(st.lists(lo, min_size=n, max_size=n))
    arrays = {
        "admit": np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool),
        "score": np.array(draw(st.lists(rnd, min_size=n, max_size=n))),
        "prefetch_start": np.array(starts, dtype=np.int64),
        "prefetch_end": np.array([s + draw(st.integers(-2, spb)) for s in starts],
                                 dtype=np.int64),
        "when_score": np.array(draw(st.lists(rnd, min_size=n, max_size=n))),
    }
    cols = {"time": np.array(times, dtype=np.float64), "key": np.array(keys, dtype=np.uint64),
            "offset": np.array(offsets, dtype=np.uint64),
            "size": np.array(sizes, dtype=np.uint64), "op": np.array(ops, dtype=np.uint8)}
    return cols, cfg, arrays


COMBOS = [(e, b, a, p) for e in EVICTIONS for b in (True, False) for a in ADMISSIONS
          for p in PREFETCHES]


@pytest.mark.parametrize("eviction, block_level, admission, prefetch", COMBOS)
def test_rust_matches_reference(eviction, block_level, admission, prefetch):
    @settings(max_examples=30, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(scenario(eviction, block_level, admission, prefetch))
    def prop(s):
        check(*s)

    prop()


@pytest.mark.parametrize("seed", range(6))
def test_rust_matches_reference_on_longer_traces(seed):
    """Thousands of accesses, many evictions: every combination on one numpy trace."""
    rng = np.random.default_rng(seed)
    n, seg, spb = 2000, 4, 8
    cols = {
        "time": np.cumsum(rng.exponential(1.0, n)),
        "key": (rng.zipf(1.4, n) % 40).astype(np.uint64),
        "offset": rng.integers(0, seg * spb, n).astype(np.uint64),
        "op": rng.choice([1, 2, 5, 3], n).astype(np.uint8),
    }
    cols["size"] = np.array([rng.integers(1, seg * spb - o + 1) for o in cols["offset"]],
                            dtype=np.uint64)
    arrays = {"admit": rng.random(n) < 0.6, "score": rng.random(n),
              "prefetch_start": rng.integers(-1, spb, n),
              "when_score": rng.random(n)}
    arrays["prefetch_end"] = arrays["prefetch_start"] + rng.integers(-1, 4, n)
    cap = int(rng.integers(5, 60)) + spb  # (see `scenario`)
    for e, b, a, p in COMBOS:
        for w in WHENS:
            cfg = SimConfig(segment_bytes=seg, block_bytes=seg * spb, capacity_segments=cap,
                            eviction=e, block_level_recency=b, admission=a, prefetch=p,
                            prefetch_when=w, warmup_s=100.0, window_s=30.0, sample_ratio=1.0,
                            rejectx_factor=0.7)
            check(cols, cfg, arrays)
