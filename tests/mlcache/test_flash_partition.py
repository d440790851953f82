"""Partitioned flash cache (MLCache in flash mode; sim/src/flash/mod.rs, "Partitioned
mode"): per-stream eviction orders and quotas through `simulate(..., partition=...)`.

Checked against two independent references: the unpartitioned simulator run on each stream's
accesses alone with its quota as the capacity (fixed shares), and a slow, obvious per-stream
segment LRU written here (shares changing per interval, shrinking quotas, quotas of 0 and 1,
invalid share rows, keys shared between streams)."""

from __future__ import annotations

import math
from collections import Counter, OrderedDict

import numpy as np
import pytest

import flashml_sim
from flashml.config import PUT_OPS
from flashml.simulation import (
    METRIC_KEYS,
    FlashPartition,
    SimConfig,
    interval_bounds_by_time,
    simulate,
)

SEG = 131072
GET, PUT = 1, 3
BASE = SimConfig(capacity_segments=60, t_seek_s=0.01, bandwidth_bytes_per_s=10.0 * SEG,
                 disks=1, window_s=10.0, warmup_s=0.0, sample_ratio=100.0,
                 block_bytes=8 * SEG)
EVICTIONS = {
    "lru_blocks": BASE,
    "lru_segments": BASE.replace(block_level_recency=False),
    "fifo": BASE.replace(eviction="fifo"),
}
PARTITION_INFO = ("streams", "stream_gets", "stream_hits", "stream_admitted_segments",
                  "stream_evictions", "quotas", "resize_evictions", "fallbacks")


def make_trace(seed: int, n: int, k: int, keys: int = 40, shared_keys: bool = False
               ) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """n accesses of k streams (one in ten a PUT), 1-3 segments from a block's first 6, skewed
    keys; stream s's keys are s * 1000 + 0..keys (or, with shared_keys, one pool for all).
    Gaps in time leave some 20 s intervals empty. Returns the columns and each stream."""
    rng = np.random.default_rng(seed)
    stream = rng.integers(0, k, n).astype(np.uint32)
    rank = np.floor(rng.random(n) ** 2 * keys).astype(np.uint64)
    key = rank if shared_keys else stream.astype(np.uint64) * 1000 + rank
    gaps = rng.exponential(0.1, n)
    gaps[rng.random(n) < 0.002] += 45.0
    gaps[0] = 0.0
    s0 = rng.integers(0, 4, n).astype(np.uint64)
    cols = {
        "time": np.cumsum(gaps),
        "key": key,
        "offset": s0 * SEG,
        "size": rng.integers(1, 4, n).astype(np.uint64) * SEG,
        "op": np.where(rng.random(n) < 0.1, PUT, GET).astype(np.uint8),
    }
    return cols, stream


def subset(cols: dict[str, np.ndarray], keep: np.ndarray) -> dict[str, np.ndarray]:
    return {name: np.ascontiguousarray(a[keep]) for name, a in cols.items()}


def pages_of_shares(row: list[float], capacity: int) -> tuple[list[int], bool]:
    """sim/src/mlcache/partition.rs's rule, written again: shares -> segments by largest remainder
    (weights of 2^40 in all), an invalid row -> an even split."""
    total_share = 0.0
    for x in row:
        total_share += x
    valid = (all(math.isfinite(x) and x >= 0 for x in row) and total_share > 0
             and math.isfinite(total_share))
    if valid:
        scale = float(1 << 40) / total_share
        weights = [math.floor(x * scale + 0.5) for x in row]  # Rust's round(), x >= 0
    else:
        weights = [1] * len(row)
    if sum(weights) == 0:
        weights = [1] * len(row)
    total = sum(weights)
    pages = [w * capacity // total for w in weights]
    order = sorted(range(len(row)), key=lambda i: (-(weights[i] * capacity % total), i))
    for i in order[:capacity - sum(pages)]:
        pages[i] += 1
    return pages, valid


def reference(cols: dict[str, np.ndarray], stream: np.ndarray, bounds: np.ndarray,
              quotas: list[list[int]], k: int) -> dict[str, object]:
    """A per-stream segment LRU (segment units, no block-level recency, admit all, no
    prefetch), the obvious way: one OrderedDict of (key, segment) per stream, first = LRU.
    A key belongs to the stream that inserted it while it had nothing cached."""
    orders: list[OrderedDict[tuple[int, int], None]] = [OrderedDict() for _ in range(k)]
    owner: dict[int, int] = {}
    cached = Counter[int]()
    used = [0] * k
    quota = [0] * k
    out = {name: [0] * k for name in ("gets", "hits", "admitted", "evictions")}
    resize = 0

    def evict(p: int) -> None:
        (key, _), _ = orders[p].popitem(last=False)
        used[p] -= 1
        out["evictions"][p] += 1
        cached[key] -= 1
        if cached[key] == 0:
            del cached[key], owner[key]

    j = 0
    for i in range(len(cols["time"])):
        while j < len(bounds) and bounds[j] == i:
            quota = list(quotas[j])
            j += 1
            for p in range(k):
                while used[p] > 0 and used[p] >= quota[p]:
                    evict(p)
                    resize += 1
        if int(cols["op"][i]) in PUT_OPS:
            continue
        s, key = int(stream[i]), int(cols["key"][i])
        off, size = int(cols["offset"][i]), int(cols["size"][i])
        out["gets"][s] += 1
        p = owner.get(key, s)
        missing = []
        for g in range(off // SEG, (off + size - 1) // SEG + 1):
            if (key, g) in orders[p]:
                orders[p].move_to_end((key, g))
            else:
                missing.append(g)
        if not missing:
            out["hits"][s] += 1
            continue
        if quota[p] <= 1:  # caches nothing
            continue
        for g in missing:
            while used[p] > 0 and used[p] + 1 >= quota[p]:
                evict(p)
            orders[p][(key, g)] = None
            used[p] += 1
            cached[key] += 1
            owner[key] = p
            out["admitted"][p] += 1
    return {**out, "resize": resize}


def random_shares(rng: np.random.Generator, intervals: int, k: int) -> np.ndarray:
    """Random rows, with a stream at 0 now and then, one tiny share (a quota of 1) and one
    invalid row (an even split)."""
    shares = rng.dirichlet(np.ones(k), intervals)
    shares[rng.random((intervals, k)) < 0.15] = 0.0
    shares[shares.sum(axis=1) == 0, 0] = 1.0
    shares[1] = [0.01] + [1.0] * (k - 1)
    shares[2, 0] = np.nan
    return shares


@pytest.mark.parametrize("name", list(EVICTIONS))
def test_fixed_shares_match_each_stream_alone(name: str) -> None:
    cfg = EVICTIONS[name]
    cols, stream = make_trace(1, 4000, 3)
    bounds = interval_bounds_by_time(cols["time"], 20.0)
    assert len(bounds) > 5
    shares = np.tile([0.2, 0.3, 0.5], (len(bounds), 1))
    r = simulate(cols, cfg, partition=FlashPartition(stream, bounds, shares))
    info = r.info
    quotas = [12, 18, 30]
    assert pages_of_shares([0.2, 0.3, 0.5], 60) == (quotas, True)
    assert info["quotas"].shape == (len(bounds), 3)
    assert (info["quotas"] == quotas).all()
    assert (info["streams"], info["resize_evictions"], info["fallbacks"]) == (3, 0, 0)
    for s in range(3):
        alone = simulate(subset(cols, stream == s), cfg.replace(capacity_segments=quotas[s]))
        assert alone.info["evictions"] > 100, "the stream must be under pressure"
        assert info["stream_gets"][s] == alone.info["get_accesses"]
        assert info["stream_hits"][s] == alone.info["hits"]
        assert info["stream_admitted_segments"][s] == alone.metrics["admitted_segments"]
        assert info["stream_evictions"][s] == alone.info["evictions"]
    assert info["hits"] == info["stream_hits"].sum()
    assert r.metrics["admitted_segments"] == info["stream_admitted_segments"].sum()
    assert info["evictions"] == info["stream_evictions"].sum()


@pytest.mark.parametrize(("seed", "k", "shared_keys"),
                         [(0, 2, False), (1, 3, False), (2, 3, False), (3, 3, True),
                          (4, 2, True)])
def test_changing_shares_match_a_per_stream_lru(seed: int, k: int, shared_keys: bool) -> None:
    cols, stream = make_trace(10 + seed, 3000, k, shared_keys=shared_keys)
    bounds = interval_bounds_by_time(cols["time"], 20.0)
    assert len(bounds) > 5 and (np.diff(bounds) == 0).any(), "some intervals must be empty"
    shares = random_shares(np.random.default_rng(seed), len(bounds), k)
    rows = [pages_of_shares(list(row), 60) for row in shares.tolist()]
    quotas = [q for q, _ in rows]
    cfg = EVICTIONS["lru_segments"]
    r = simulate(cols, cfg, partition=FlashPartition(stream, bounds, shares))
    want = reference(cols, stream, bounds, quotas, k)
    info = r.info
    assert info["quotas"].tolist() == quotas
    assert info["fallbacks"] == sum(not valid for _, valid in rows) == 1
    assert info["stream_gets"].tolist() == want["gets"]
    assert info["stream_hits"].tolist() == want["hits"]
    assert info["stream_admitted_segments"].tolist() == want["admitted"]
    assert info["stream_evictions"].tolist() == want["evictions"]
    assert info["resize_evictions"] == want["resize"] > 0
    assert info["hits"] == sum(want["hits"])
    assert r.metrics["admitted_segments"] == sum(want["admitted"])
    assert info["evictions"] == sum(want["evictions"])


def test_one_stream_is_the_unpartitioned_cache() -> None:
    cols, _ = make_trace(7, 3000, 1)
    bounds = interval_bounds_by_time(cols["time"], 20.0)
    part = FlashPartition(np.zeros(len(cols["time"]), np.uint32), bounds,
                          np.ones((len(bounds), 1)))
    for cfg in EVICTIONS.values():
        want = simulate(cols, cfg)
        got = simulate(cols, cfg, partition=part)
        for key in METRIC_KEYS:
            if key != "wall_s":
                a, b = got.metrics[key], want.metrics[key]
                assert a == b or (math.isnan(a) and math.isnan(b)), key
        for key, values in want.series.items():
            assert np.array_equal(got.series[key], values), key
        assert set(got.info) == set(want.info) | set(PARTITION_INFO)
        assert {key: got.info[key] for key in want.info} == want.info
        assert got.info["stream_hits"].tolist() == [want.info["hits"]]
        # without a partition, info has none of the partition's keys
        assert not set(PARTITION_INFO) & set(want.info)


def test_quota_of_one_or_less_caches_nothing() -> None:
    # stream 1 reads key 9 again and again; quotas (capacity 4): [4, 0], [0, 4], [3, 1]
    cols = {
        "time": np.arange(9, dtype=np.float64),
        "key": np.array([9, 9, 1, 9, 9, 9, 9, 9, 1], np.uint64),
        "offset": np.zeros(9, np.uint64),
        "size": np.array([1, 1, 2, 1, 1, 1, 1, 1, 2], np.uint64) * SEG,
        "op": np.full(9, GET, np.uint8),
    }
    stream = np.array([1, 1, 0, 1, 1, 1, 1, 1, 0])
    part = FlashPartition(stream, [0, 4, 6], [[1.0, 0.0], [0.0, 1.0], [0.75, 0.25]])
    r = simulate(cols, BASE.replace(capacity_segments=4), partition=part)
    info = r.info
    assert info["quotas"].tolist() == [[4, 0], [0, 4], [3, 1]]
    assert info["stream_hits"].tolist() == [0, 1]  # only while stream 1's quota is 4
    assert info["stream_admitted_segments"].tolist() == [4, 1]
    assert info["stream_evictions"].tolist() == [2, 1]
    assert info["resize_evictions"] == 3
    assert r.metrics["backend_ios"] == 8


def test_interval_bounds_by_time() -> None:
    t = np.array([100.0, 101.0, 105.0, 125.0, 126.0, 130.0])
    # intervals of 10 s from 100: [0, 3) has 3 accesses, [110, 120) none, [120, 130) 2, 130: 1
    assert interval_bounds_by_time(t, 10.0).tolist() == [0, 3, 3, 5]
    assert interval_bounds_by_time(t, 100.0).tolist() == [0]
    assert interval_bounds_by_time(t[:1], 1.0).tolist() == [0]
    for bad, match in ((np.array([]), "non-empty"), (np.array([2.0, 1.0]), "sorted"),
                       (np.array([0.0, np.inf]), "non-finite")):
        with pytest.raises(ValueError, match=match):
            interval_bounds_by_time(bad, 1.0)
    for interval in (0.0, -1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="interval_s"):
            interval_bounds_by_time(t, interval)
    with pytest.raises(ValueError, match="intervals"):
        interval_bounds_by_time(np.array([0.0, 1e9]), 1e-3)


def test_errors_name_the_array() -> None:
    cols, stream = make_trace(3, 100, 2)
    n = len(cols["time"])
    two = np.array([[0.5, 0.5]])

    def fails(match: str, **kw: object) -> None:
        with pytest.raises(ValueError, match=match):
            simulate(cols, BASE, partition=FlashPartition(**kw))  # type: ignore[arg-type]

    fails("array 'stream' has 99 elements", stream=stream[:-1], bounds=[0], shares=two)
    fails(r"array 'stream': access 0 has stream 2, but there are 2 streams",
          stream=np.full(n, 2), bounds=[0], shares=two)
    fails("array 'bounds' must start at 0", stream=stream, bounds=[1], shares=two)
    fails("array 'bounds' must be ascending", stream=stream, bounds=[0, 50, 10],
          shares=np.full((3, 2), 0.5))
    fails("array 'bounds': bounds.1. = 100 is not below the trace's 100 accesses",
          stream=stream, bounds=[0, 100], shares=np.full((2, 2), 0.5))
    # checked in Python, before the core
    fails("'shares' has 1 rows .* 'bounds' starts 2", stream=stream, bounds=[0, 5], shares=two)
    fails("'shares' must be a 2-D array", stream=stream, bounds=[0], shares=[0.5, 0.5])
    fails("'shares' must be a 2-D array", stream=stream, bounds=[0], shares=np.ones((1, 0)))
    fails("'stream' has values outside", stream=-stream.astype(np.int64) - 1, bounds=[0],
          shares=two)
    fails("'stream' must hold integers", stream=stream.astype(float), bounds=[0], shares=two)
    fails("'bounds' must be one-dimensional", stream=stream, bounds=[[0]], shares=two)
    with pytest.raises(TypeError, match="FlashPartition"):
        simulate(cols, BASE, partition=(stream, [0], two))  # type: ignore[arg-type]
    # the core itself: all four or none, and at least one stream
    args = [cols[c] for c in ("time", "key", "offset", "size", "op")]
    with pytest.raises(ValueError, match="missing: bounds, shares"):
        flashml_sim.simulate(*args, BASE.to_dict(), stream=stream, streams=2)
    with pytest.raises(ValueError, match="'streams' must be"):
        flashml_sim.simulate(*args, BASE.to_dict(), stream=stream,
                             bounds=np.zeros(1, np.uint64), shares=np.ones(0), streams=0)
    with pytest.raises(ValueError, match="array 'shares' has 3 elements but intervals x "
                                         "streams = 1 x 2 = 2"):
        flashml_sim.simulate(*args, BASE.to_dict(), stream=stream,
                             bounds=np.zeros(1, np.uint64), shares=np.ones(3), streams=2)
