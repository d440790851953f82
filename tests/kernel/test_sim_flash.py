"""Flash-cache mode: hand-computed tiny traces, defaults, validation, zero-copy and the GIL."""

from __future__ import annotations

import dataclasses
import math
import pickle
import threading
import time

import numpy as np
import polars as pl
import pytest

import flashml_sim
from flashml.config import DEFAULTS, PUT_OPS, UNITS
from flashml.simulation import (
    ADMISSIONS,
    METRIC_KEYS,
    SHARED_DEFAULTS,
    SimConfig,
    capacity_segments,
    default_core_config,
    simulate,
    trace_arrays,
)
from flashml.trace.canonical import TraceMeta

from conftest import access_table

SEG = 131072  # 128 KiB


def table(rows: list[tuple[float, int, int, int, int]]) -> pl.DataFrame:
    return access_table(rows)


GET, PUT = 1, 3
# t_seek 10 ms, one segment takes 100 ms (bandwidth = 10 segments/s); capacity 5 holds 4
# segments (the artifact evicts when an insertion reaches the capacity)
TINY = SimConfig(capacity_segments=5, t_seek_s=0.01, bandwidth_bytes_per_s=10.0 * SEG, disks=1,
                 window_s=10.0, warmup_s=0.0, sample_ratio=100.0)


def test_hand_computed_lru_block_level():
    df = table([
        (0.0, 1, 0, 2 * SEG, GET),        # miss, IO segs 0-1 (0.21 s), admit 2
        (1.0, 1, 0, SEG, GET),            # hit
        (2.0, 2, 3 * SEG, 3 * SEG, GET),  # miss, IO segs 3-5 (0.31 s), admit 3: evicts (1,0)
        (3.0, 1, 0, 2 * SEG, GET),        # partial hit: seg 0 missing, IO 0.11 s, evicts (2,3)
        (12.0, 1, 0, SEG, PUT),           # PUT, window 1: 0.11 s, no admission
        (15.0, 2, 4 * SEG, 2 * SEG, GET),  # hit (segs 4, 5)
    ])
    r = simulate(df, TINY)
    m = r.metrics
    assert list(m) == list(METRIC_KEYS)
    # window 0: GET DT 0.21 + 0.31 + 0.11 = 0.63 s over 10 s x 1 disk; window 1: a PUT of
    # 0.11 s, no GET disk time (peak_dt_util and its statistics count GETs only)
    assert r.series["dt_util"] == pytest.approx([0.063, 0.0])
    assert r.series["dt_util_with_puts"] == pytest.approx([0.063, 0.011])
    assert m["peak_dt_util"] == pytest.approx(0.063)
    assert m["mean_dt_util"] == pytest.approx(0.0315)
    assert m["p50_dt_util"] == pytest.approx(0.0315)
    assert m["p90_dt_util"] == pytest.approx(0.9 * 0.063)
    assert m["peak_dt_util_with_puts"] == pytest.approx(0.063)
    assert m["mean_dt_util_with_puts"] == pytest.approx(0.037)
    assert m["p50_dt_util_with_puts"] == pytest.approx(0.037)
    assert m["p90_dt_util_with_puts"] == pytest.approx(0.011 + 0.9 * 0.052)
    # GET disk time with no cache: 5 GET IOs, 10 segments = 1.05 s
    assert m["service_time_saved_ratio"] == pytest.approx(1 - 0.63 / 1.05)
    assert m["iops_saved_ratio"] == m["io_hit_ratio"]
    assert m["io_hit_ratio"] == pytest.approx(2 / 5)
    assert m["byte_hit_ratio"] == pytest.approx(3 / 10)
    assert m["segment_hit_ratio"] == pytest.approx(4 / 10)
    assert m["admitted_segments"] == 6
    assert m["prefetched_segments"] == 0
    # 6 segments over the 15 s trace
    assert m["flash_write_rate_mbps"] == pytest.approx(6 * SEG / 15 / 1e6)
    assert m["flash_write_rate_mibps"] == pytest.approx(6 * SEG / 15 / 2**20)
    assert m["dwpd"] == pytest.approx(6 * SEG / 15 * 86400 / (5 * SEG))
    assert m["avg_eviction_age_s"] == pytest.approx(1.0)  # (2 - 1) and (3 - 2)
    assert m["backend_ios"] == 4
    assert m["backend_bytes"] == 7 * SEG
    assert m["accesses"] == 6
    assert r.info["evictions"] == 2 and r.info["hits"] == 2 and r.info["put_accesses"] == 1
    assert list(r.series["time"]) == [0.0, 10.0]
    assert r.series["write_rate_mbps"] == pytest.approx([6 * SEG / 10 / 1e6, 0.0])
    assert m["wall_s"] >= 0


BLOCK4 = TINY.replace(block_bytes=4 * SEG, capacity_segments=7, sample_ratio=50.0, disks=2,
                      warmup_s=10.0, prefetch="block")
PREFETCH_TRACE = [
    (0.0, 7, SEG, SEG, GET),         # miss seg 1, whole-block prefetch: IO 0-3 (0.41 s)
    (11.0, 7, 2 * SEG, SEG, GET),    # hit
    (12.0, 8, 0, 2 * SEG, GET),      # miss, IO 0-3 (0.41 s), admits 4: evicts two of block 7
    (20.0, 7, 2 * SEG, 2 * SEG, GET),  # segs 2-3 of block 7: hit
]


@pytest.mark.parametrize("block_level, age", [(False, 12.0), (True, 1.0)])
def test_hand_computed_prefetch_and_scaling(block_level, age):
    r = simulate(table(PREFETCH_TRACE), BLOCK4.replace(block_level_recency=block_level))
    m = r.metrics
    # DT utilisation = DT / 2 disks / 0.5 sample / 10 s; window 0 is warm-up
    assert r.series["dt_util"] == pytest.approx([0.041, 0.041, 0.0])
    assert list(r.series["warmup"]) == [True, False, False]
    assert m["peak_dt_util"] == pytest.approx(0.041)
    assert m["mean_dt_util"] == pytest.approx(0.0205)
    assert m["admitted_segments"] == 8
    assert m["prefetched_segments"] == 5
    # 8 segments in 20 s at a 50% sample: x2 to a full node
    assert m["flash_write_rate_mbps"] == pytest.approx(8 * SEG / 20 * 2 / 1e6)
    assert r.series["write_rate_mbps"] == pytest.approx([4 * SEG / 10 * 2 / 1e6] * 2 + [0.0])
    assert m["io_hit_ratio"] == 0.5
    # segment LRU: seg 2 of block 7 was touched at t=11, so segs 0 and 1 (inserted at t=0)
    # go; block-level LRU: block 7 was last used at t=11, its lowest segments go.
    assert m["avg_eviction_age_s"] == pytest.approx(age)


def test_fifo_ignores_hits():
    rows = [(0.0, 1, 0, SEG, GET), (1.0, 2, 0, SEG, GET), (2.0, 1, 0, SEG, GET),
            (3.0, 3, 0, SEG, GET), (4.0, 1, 0, SEG, GET), (5.0, 2, 0, SEG, GET)]
    cfg = TINY.replace(capacity_segments=3)  # holds 2
    lru = simulate(table(rows), cfg.replace(eviction="lru")).info["hits"]
    fifo = simulate(table(rows), cfg.replace(eviction="fifo")).info["hits"]
    assert lru == 2  # 1 hit at t=2; 3 evicts 2; 1 hit at t=4; 2 misses
    assert fifo == 1  # 1 hit at t=2; 3 evicts 1; 1 misses (evicts 2); 2 misses


def test_rejectx_admits_on_second_miss():
    rows = [(float(i), 5, 0, SEG, GET) for i in range(3)]
    cfg = TINY.replace(admission="rejectx", rejectx_x=1, rejectx_factor=1.0)
    r = simulate(table(rows), cfg)
    # miss (rejected, seen once), miss (admitted), hit
    assert r.metrics["admitted_segments"] == 1 and r.info["hits"] == 1
    assert r.info["rejectx_history"] == 5  # factor 1 x capacity 5
    r2 = simulate(table(rows), cfg.replace(rejectx_x=2))
    assert r2.metrics["admitted_segments"] == 1 and r2.info["hits"] == 0


def test_opt_threshold_coinflip():
    rows = [(float(i), i % 2, 0, SEG, GET) for i in range(6)]
    flags = np.array([0, 1, 0, 0, 0, 0], dtype=bool)
    r = simulate(table(rows), TINY.replace(admission="opt"), admit=flags)
    assert r.metrics["admitted_segments"] == 1 and r.info["hits"] == 2  # key 1 at t=3, 5
    scores = np.array([0.9, 0.1, 0.2, 0.5, 0.3, 0.3])
    r = simulate(table(rows), TINY.replace(admission="threshold", threshold=0.5), score=scores)
    assert r.metrics["admitted_segments"] == 2  # t=0 (key 0) and t=3 (key 1)
    assert r.info["hits"] == 3  # key 0 at t=2, 4 and key 1 at t=5
    for p, admitted in [(0.0, 0), (1.0, 2)]:
        r = simulate(table(rows), TINY.replace(admission="coinflip", coinflip_p=p))
        assert r.metrics["admitted_segments"] == admitted


def test_range_prefetch_modes():
    # block 0 holds seg 1; access segs 1-2 is a partial hit (seg 2 missing)
    rows = [(0.0, 0, SEG, SEG, GET), (1.0, 0, SEG, 2 * SEG, GET), (2.0, 1, 0, SEG, GET)]
    start = np.array([0, 0, 3])
    end = np.array([0, 5, 5])
    cfg = TINY.replace(capacity_segments=20, prefetch="range")
    every = simulate(table(rows), cfg, prefetch_start=start, prefetch_end=end).metrics
    # acc0: IO 0-1 (seg 0 prefetched); acc1: segs 0-1 cached, 2 missing: 3-5 prefetched, IO
    # 2-5 (the artifact's: cached segments at the edge of the range are not read again);
    # acc2: seg 0 missing, 3-5 prefetched, one IO 0-5 (1-2 read on the way, not kept)
    assert every["prefetched_segments"] == 1 + 3 + 3
    assert every["backend_bytes"] == (2 + 4 + 6) * SEG
    partial = simulate(table(rows), cfg.replace(prefetch_when="partial"),
                       prefetch_start=start, prefetch_end=end).metrics
    assert partial["prefetched_segments"] == 4  # acc1 only: segs 0, 3, 4, 5
    ws = np.array([0.0, 0.0, 0.7])
    score = simulate(table(rows), cfg.replace(prefetch_when="score", when_threshold=0.7),
                     prefetch_start=start, prefetch_end=end, when_score=ws).metrics
    assert score["prefetched_segments"] == 3


def test_artifact_capacity_and_units():
    assert capacity_segments(SimConfig(sample_ratio=0.1)) == 3002
    assert capacity_segments(SimConfig(sample_ratio=100.0)) == 3002163
    # a full 8 MiB read costs about 67 ms
    r = simulate(table([(0.0, 1, 0, 8 << 20, GET), (1.0, 2, 0, SEG, PUT)]),
                 SimConfig(disks=1, window_s=1.0, warmup_s=0.0))
    assert r.series["dt_util"][0] == pytest.approx(0.0115 + 64 * SEG / (143 << 20))
    assert r.series["dt_util"][0] == pytest.approx(0.0674, abs=1e-4)


def test_sim_config_is_generated_from_the_rust_declaration():
    declared = flashml_sim.config_fields()
    fields = dataclasses.fields(SimConfig)
    assert [f.name for f in fields] == [d[0] for d in declared]
    types = {"int": int, "float": float, "bool": bool, "str": str,
             "tuple[int, ...]": tuple[int, ...]}
    for f, (name, typ, default, doc, choices) in zip(fields, declared, strict=True):
        assert f.type == types[typ], name
        assert f.default == default and type(f.default) is type(default), name
        assert doc and f.metadata["doc"] == doc, name
        assert (typ == "str") == (choices is not None), name
        if choices:
            assert default in choices
    # the dict Rust reads back is the dict Python sends, key for key
    core = default_core_config()
    assert core == SimConfig().to_dict()
    assert list(core) == [d[0] for d in declared]
    assert ADMISSIONS == ("admitall", "coinflip", "rejectx", "rejectx_block", "opt",
                          "threshold")
    from flashml.commands.sim import ADMISSION_CHOICES
    assert ADMISSION_CHOICES == ADMISSIONS


def test_rust_defaults_equal_python_units():
    # one fact, two declarations: flashml.simulation checks these at import
    core = default_core_config()
    assert set(SHARED_DEFAULTS) <= set(core)
    for k, v in SHARED_DEFAULTS.items():
        assert core[k] == (list(v) if isinstance(v, tuple) else v), k
    assert core["segment_bytes"] == UNITS.segment_bytes
    assert core["block_bytes"] == UNITS.block_bytes
    assert core["t_seek_s"] == UNITS.t_seek_s
    assert core["bandwidth_bytes_per_s"] == UNITS.bandwidth_bytes_per_s
    assert core["disks"] == DEFAULTS.disks
    assert core["window_s"] == DEFAULTS.window_s
    assert core["warmup_s"] == DEFAULTS.warmup_s
    assert core["cache_gb"] == DEFAULTS.cache_gb
    assert core["sample_ratio"] == DEFAULTS.sample_ratio
    assert core["put_ops"] == list(PUT_OPS)


def test_import_check_catches_a_drifted_default(monkeypatch):
    import flashml.simulation as sim

    monkeypatch.setitem(sim.SHARED_DEFAULTS, "disks", DEFAULTS.disks + 1)
    with pytest.raises(ImportError, match="disks=36"):
        sim._check_shared_defaults()


def test_sim_config_api():
    c = SimConfig(cache_gb=50, sample_ratio=0.1, peak_hours=[3, 1])
    assert c.peak_hours == (3, 1) and c.to_dict()["peak_hours"] == [3, 1]
    assert c.to_dict()["put_ops"] == list(PUT_OPS)
    assert hash(c) == hash(SimConfig(cache_gb=50, sample_ratio=0.1, peak_hours=(3, 1)))
    assert pickle.loads(pickle.dumps(c)) == c
    assert c.replace(warmup_s=0.0).warmup_s == 0.0 and c.warmup_s == DEFAULTS.warmup_s
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.cache_gb = 1.0
    with pytest.raises(TypeError):
        SimConfig(cache_size=1.0)
    with pytest.raises(TypeError):
        SimConfig(50.0)  # keyword-only: the field order is Rust's


def test_sim_config_for_trace():
    meta = TraceMeta(sample_ratio=0.5, block_bytes=16 << 20)
    c = SimConfig.for_trace(meta, cache_gb=10.0, warmup_s=3600.0, admission="rejectx")
    assert c == SimConfig(sample_ratio=0.5, block_bytes=16 << 20, cache_gb=10.0,
                          warmup_s=3600.0, admission="rejectx")
    # None (or nothing) keeps the declared default
    d = SimConfig.for_trace(meta, cache_gb=None, warmup_s=None)
    assert (d.cache_gb, d.warmup_s) == (DEFAULTS.cache_gb, DEFAULTS.warmup_s)
    assert SimConfig.for_trace(0.1) == SimConfig(sample_ratio=0.1)
    assert SimConfig.for_trace(np.float64(0.1)).sample_ratio == 0.1
    assert SimConfig.for_trace(0.1, block_bytes=SEG * 64).block_bytes == SEG * 64
    assert capacity_segments(SimConfig.for_trace(TraceMeta(sample_ratio=0.1))) == 3002
    with pytest.raises(TypeError, match="TraceMeta or a sample ratio"):
        SimConfig.for_trace("0.1")
    for key in ("sample_ratio", "block_bytes"):
        with pytest.raises(TypeError, match=f"metadata gives {key}"):
            SimConfig.for_trace(meta, **{key: 1})
    with pytest.raises(TypeError, match="metadata gives sample_ratio"):
        SimConfig.for_trace(0.1, sample_ratio=1.0)


@pytest.mark.parametrize("config, match", [
    ({"cache_size": 3}, "unknown config key 'cache_size'; known keys: cache_gb"),
    ({"disks": "many"}, "config 'disks' must be int, got 'many'"),
    ({"disks": -1}, "config 'disks' must be int, got -1"),
    ({"disks": 1.5}, "config 'disks' must be int"),
    ({"cache_gb": "big"}, "config 'cache_gb' must be float"),
    ({"block_level_recency": 1}, "config 'block_level_recency' must be bool"),
    ({"eviction": 3}, "config 'eviction' must be str"),
    ({"peak_hours": "3"}, r"config 'peak_hours' must be tuple\[int, ...\]"),
    ({"peak_hours": [-1]}, "config 'peak_hours'"),
    ({"put_ops": [3, 300]}, "put_ops: op code 300"),
    ({1: 2}, "config key 1 is not a string"),
])
def test_config_dict_errors_name_the_key(config, match):
    with pytest.raises(ValueError, match=match):
        flashml_sim.capacity_segments(config)


GOOD = [(0.0, 1, 0, SEG, GET), (1.0, 1, 0, SEG, GET)]


@pytest.mark.parametrize("cfg, kwargs, match", [
    (SimConfig(cache_gb=0.0), {}, "cache size"),
    (SimConfig(cache_gb=-5.0), {}, "cache size"),
    (SimConfig(cache_gb=1e-9), {}, "less than one"),
    (TINY.replace(eviction="lfu"), {}, "unknown eviction"),
    (TINY.replace(admission="magic"), {}, "unknown admission"),
    (TINY.replace(prefetch="psychic"), {}, "unknown prefetch"),
    (TINY.replace(prefetch_when="sometimes"), {}, "unknown prefetch-when"),
    (TINY.replace(admission="threshold", threshold=1.5), {"score": [0.1, 0.2]}, r"\[0, 1\]"),
    (TINY.replace(admission="coinflip", coinflip_p=-0.1), {}, r"\[0, 1\]"),
    (TINY.replace(prefetch="range", prefetch_when="score", when_threshold=2.0), {},
     r"\[0, 1\]"),
    (TINY.replace(admission="rejectx", rejectx_factor=0.0), {}, "factor"),
    (TINY.replace(admission="threshold"), {"score": [0.1, 0.2, 0.3]}, "2 accesses"),
    (TINY.replace(admission="threshold"), {}, "needs the per-access array 'score'"),
    (TINY.replace(admission="opt"), {}, "'admit'"),
    (TINY.replace(prefetch="range"), {"prefetch_start": [0, 0]}, "'prefetch_end'"),
    # segment indices are int16: a larger one is refused, not wrapped
    (TINY.replace(prefetch="range"), {"prefetch_start": [0, 40_000], "prefetch_end": [1, 1]},
     r"'prefetch_start' has values outside -32768..32767"),
    (TINY, {"admit": [1, 0, 1]}, "'admit' has 3"),
    (TINY.replace(segment_bytes=0), {}, "segment_bytes"),
    (TINY.replace(block_bytes=SEG * 3 + 1), {}, "multiple"),
    (TINY.replace(sample_ratio=0.0), {}, "sample_ratio"),
    (TINY.replace(sample_ratio=101.0), {}, "sample_ratio"),
    (TINY.replace(window_s=0.0), {}, "window_s"),
    (TINY.replace(warmup_s=100.0), {}, "warm-up"),
    (TINY.replace(disks=0), {}, "disks"),
])
def test_invalid_config_is_value_error(cfg, kwargs, match):
    with pytest.raises(ValueError, match=match):
        simulate(table(GOOD), cfg, **kwargs)


@pytest.mark.parametrize("rows, match", [
    ([(1.0, 1, 0, SEG, GET), (0.5, 1, 0, SEG, GET)], "sorted by time"),
    ([(0.0, 1, 0, 0, GET), (1.0, 1, 0, SEG, GET)], "size is 0"),
    ([(0.0, 1, 8 << 20, 1, GET), (1.0, 1, 0, SEG, GET)], "exceeds the block size"),
    ([(float("nan"), 1, 0, SEG, GET), (1.0, 1, 0, SEG, GET)], "not finite"),
    ([(1.0, 1, 0, SEG, GET), (1.0, 1, 0, SEG, GET)], "0 seconds"),
])
def test_invalid_trace_is_value_error(rows, match):
    with pytest.raises(ValueError, match=match):
        simulate(table(rows), TINY)


def test_core_rejects_bad_input_without_panicking():
    a = trace_arrays(table(GOOD))
    args = (a["time"], a["key"], a["offset"], a["size"], a["op"])
    with pytest.raises(ValueError, match="unknown config key 'cache_size'"):
        flashml_sim.simulate(*args, {"cache_size": 3})
    with pytest.raises(ValueError, match="config 'disks'"):
        flashml_sim.simulate(*args, {"disks": "many"})
    with pytest.raises(ValueError, match="'key' has 1"):
        flashml_sim.simulate(a["time"], a["key"][:1], a["offset"], a["size"], a["op"],
                             {"warmup_s": 0.0})
    with pytest.raises(ValueError, match="no accesses"):
        flashml_sim.simulate(*(x[:0] for x in args), {"warmup_s": 0.0})
    with pytest.raises(ValueError, match="contiguous"):
        t2 = np.repeat(a["time"], 2)[::2]
        flashml_sim.simulate(t2, *args[1:], {"warmup_s": 0.0})
    with pytest.raises(TypeError):
        flashml_sim.simulate(a["time"].astype(np.float32), *args[1:], {"warmup_s": 0.0})
    with pytest.raises(ValueError, match="null"):
        df = table(GOOD).with_columns(pl.Series("size", [SEG, None], dtype=pl.UInt64))
        simulate(df, TINY)
    with pytest.raises(ValueError, match="no column 'op'"):
        simulate(table(GOOD).drop("op"), TINY)


def test_columns_are_borrowed_not_copied():
    df = table([(float(i), i % 2, 0, SEG, GET) for i in range(6)])
    arrays = trace_arrays(df)
    for name in ("time", "key", "offset", "size", "op"):
        assert np.shares_memory(arrays[name], df[name].to_numpy()), name
    arrow = df.to_arrow()
    borrowed = trace_arrays(arrow)
    for name in ("time", "key", "offset", "size", "op"):
        assert np.shares_memory(borrowed[name], arrow.column(name).chunk(0).to_numpy()), name
    # pyarrow tables and plain NumPy columns work too and give the same result
    r1 = simulate(df, TINY.replace(warmup_s=0.0)).metrics
    r2 = simulate(df.to_arrow(), TINY).metrics
    r3 = simulate({c: df[c].to_numpy() for c in df.columns}, TINY).metrics
    for k in METRIC_KEYS:
        if k != "wall_s":
            assert np.array_equal([r1[k], r2[k]], [r2[k], r3[k]], equal_nan=True), k


def test_gil_is_released():
    n = 4_000_000
    rng = np.random.default_rng(3)
    cols = {"time": np.arange(n, dtype=np.float64), "key": rng.integers(0, 50_000, n,
                                                                      dtype=np.uint64),
            "offset": np.zeros(n, np.uint64), "size": np.full(n, SEG, np.uint64),
            "op": np.ones(n, np.uint8)}
    cfg = SimConfig(capacity_segments=10_000, warmup_s=0.0, admission="rejectx")
    done: dict = {}

    def work():
        done["r"] = simulate(cols, cfg)

    th = threading.Thread(target=work)
    gaps = []
    last = time.perf_counter()
    th.start()
    while th.is_alive():
        now = time.perf_counter()
        gaps.append(now - last)
        last = now
        time.sleep(0.001)
    th.join()
    wall = done["r"].metrics["wall_s"]
    # While Rust runs, this thread keeps running: no gap anywhere near the whole run (with
    # the GIL held, one gap would span the whole simulation).
    assert len(gaps) >= 5 and max(gaps) < wall / 2, (len(gaps), max(gaps), wall)


def test_nan_when_nothing_evicted():
    r = simulate(table(GOOD), TINY)
    assert math.isnan(r.metrics["avg_eviction_age_s"])


def test_rejected_miss_never_prefetches():
    # two misses on one block with whole-block prefetch: the first is rejected by the
    # threshold, so its IO covers only the request (1 segment, 10 + 100 ms); the second is
    # admitted and reads the whole 64-segment block (10 ms + 6.4 s).
    rows = [(0.0, 7, 0, SEG, GET), (1.0, 7, 0, SEG, GET), (2.0, 7, 3 * SEG, SEG, GET)]
    cfg = TINY.replace(capacity_segments=100, admission="threshold", threshold=0.5,
                       prefetch="block")
    r = simulate(table(rows), cfg, score=np.array([0.1, 0.9, 0.0]))
    m = r.metrics
    assert m["backend_ios"] == 2 and r.info["hits"] == 1
    assert m["backend_bytes"] == (1 + 64) * SEG
    assert m["admitted_segments"] == 64 and m["prefetched_segments"] == 63
    assert m["mean_dt_util"] == pytest.approx((0.01 + 0.1 + 0.01 + 6.4) / 10.0)
