"""MAT as the eviction of flash-cache mode (sim/src/compose/flash_mat.rs): no predictor is flash LRU
exactly, the oracle beats LRU, training samples against a slow obvious Python replay, the .so
predictor, bad input."""

from __future__ import annotations

import math
import shutil
import subprocess
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest

from flashml.features import eviction
from flashml.simulation import METRIC_KEYS, SimConfig, simulate, trace_arrays
from flashml.systems.mat.simulation import MAT_METRIC_KEYS, MatSimResult, simulate_mat_flash

W = 1024  # the smallest memory window: labels and features reach past it on these traces
CAPACITY = 200  # segments: ~20 cached 8 MiB blocks of 64 segments on the generated trace


@pytest.fixture(scope="module")
def region1(tmp_path_factory):
    """A small generated region1-like trace (canonical table) and its metadata."""
    from flashml.trace.canonical import read_table
    from flashml.trace.generate import generate_trace
    from flashml.trace.ingest import ingest

    d = tmp_path_factory.mktemp("region1")
    generate_trace("region1-like", 5, d / "g.trace", accesses=20_000, days=1, progress=False)
    ingest(d / "g.trace", d / "g.parquet", progress=False)
    return read_table(d / "g.parquet")


def config(meta, **kw) -> SimConfig:
    return SimConfig.for_trace(meta, capacity_segments=kw.pop("capacity", CAPACITY),
                               warmup_s=0.0, **kw)


def same(a, b) -> bool:
    """Equal, NaN equal to NaN (arrays element-wise)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True)
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


# ------------------------------------------------------------- (a) no predictor = flash LRU


@pytest.mark.parametrize("admission,prefetch", [("admitall", "none"), ("rejectx", "none"),
                                                ("rejectx_block", "none"),
                                                ("admitall", "block")])
@pytest.mark.parametrize("capacity", [70, CAPACITY, 1500])
def test_no_predictor_is_flash_lru_exactly(region1, admission, prefetch, capacity):
    df, meta = region1
    cfg = config(meta, capacity=capacity, admission=admission, prefetch=prefetch)
    lru = simulate(df, cfg)
    mat = simulate_mat_flash(df, cfg, predictor="none", collect_samples=True,
                             mat={"memory_window": W})
    assert isinstance(mat, MatSimResult)
    assert list(mat.metrics) == list(METRIC_KEYS) + list(MAT_METRIC_KEYS)
    for k in METRIC_KEYS:
        if k != "wall_s":
            assert same(mat.metrics[k], lru.metrics[k]), k
    assert set(mat.series) == set(lru.series)
    for k in lru.series:
        assert same(mat.series[k], lru.series[k]), k
    for k in lru.info:
        assert same(mat.info[k], lru.info[k]), k
    m = mat.metrics
    assert lru.info["evictions"] > 0
    assert m["mat_predictions"] == 0 and m["mat_reinsertions"] == 0
    assert 0 < m["mat_decisions"] <= m["mat_evicted_segments"] == lru.info["evictions"]
    assert m["predictions_per_eviction"] == 0.0 and math.isnan(m["final_threshold"])
    # one sample per decision (the tail block, condemned unpredicted)
    assert len(mat.samples["label"]) == m["mat_decisions"]
    assert mat.info["mat_params"]["predictor"] == "none"


def test_no_predictor_with_learned_admission_arrays_is_flash_lru(region1):
    """Admission and prefetch that read per-access arrays (a model's scores, OPT's flags)
    run under MAT's eviction as under LRU's."""
    df, meta = region1
    rng = np.random.default_rng(0)
    score = rng.random(len(df))
    when = rng.random(len(df))
    admit = (rng.random(len(df)) < 0.5).astype(np.uint8)
    for cfg, arrays in (
            (config(meta, admission="threshold", threshold=0.5), {"score": score}),
            (config(meta, admission="threshold", threshold=0.3, prefetch_when="score",
                    when_threshold=0.5), {"score": score, "when_score": when}),
            (config(meta, admission="opt"), {"admit": admit})):
        lru = simulate(df, cfg, **arrays)
        mat = simulate_mat_flash(df, cfg, **arrays, predictor="none")
        for k in METRIC_KEYS:
            if k != "wall_s":
                assert same(mat.metrics[k], lru.metrics[k]), (cfg.admission, k)


# ----------------------------------------------------------------- (b) the oracle beats LRU


@pytest.mark.parametrize("admission", ["admitall", "rejectx"])
def test_oracle_lowers_misses_and_peak_dt(region1, admission):
    df, meta = region1
    cfg = config(meta, admission=admission)
    lru = simulate(df, cfg)
    o = simulate_mat_flash(df, cfg, predictor="oracle")
    gets = lru.info["get_accesses"]
    assert gets - o.info["hits"] < gets - lru.info["hits"]
    assert o.metrics["service_time_saved_ratio"] > lru.metrics["service_time_saved_ratio"]
    if admission == "admitall":
        # by a wide margin here (0.34 -> 0.28 on this trace)
        assert o.metrics["peak_dt_util"] < 0.95 * lru.metrics["peak_dt_util"]
    else:
        assert o.metrics["peak_dt_util"] < lru.metrics["peak_dt_util"]
    m = o.metrics
    assert m["mat_predictions"] >= m["mat_decisions"] > 0
    assert m["predictions_per_eviction"] == m["mat_predictions"] / m["mat_decisions"]
    assert m["mat_evicted_segments"] == o.info["evictions"] >= m["mat_decisions"]
    assert math.isfinite(m["final_threshold"]) and m["final_threshold"] > 0
    assert m["ns_per_eviction"] > 0
    assert o.samples is None


def test_knobs_reach_the_controller(region1):
    df, meta = region1
    cfg = config(meta)
    # L = k = 1: every decision takes the tail after one prediction, so the order is LRU's,
    # and the mean controller's step 1 + delta (k - p) is 1 (p = 1 candidate): T stays T0
    r = simulate_mat_flash(df, cfg, predictor="oracle",
                           mat={"k": 1, "max_candidates": 1, "delta": 0.01,
                                "initial_threshold": 7.0, "controller": "mean",
                                "reuse_predictions": False})
    lru = simulate(df, cfg)
    assert r.info["hits"] == lru.info["hits"]
    d = r.metrics["mat_decisions"]
    assert d > 0 and r.metrics["mat_predictions"] == d
    assert r.metrics["final_threshold"] == 7.0
    p = r.info["mat_params"]
    assert (p["max_candidates"], p["delta"], p["initial_threshold"], p["k"], p["controller"]) \
        == (1, 0.01, 7.0, 1.0, "mean")


def test_k_above_max_candidates_is_refused(region1):
    df, meta = region1
    with pytest.raises(ValueError, match=r"k must be at most max_candidates, got k 3"):
        simulate_mat_flash(df, config(meta), predictor="oracle",
                           mat={"k": 3, "max_candidates": 1})


# -------------------------------------------------------- (c) samples against a slow replay


def slow_lru_tags(cols: dict, capacity: int, seg: int, put_ops) -> list[tuple[int, int]]:
    """Flash LRU, block-level recency, admit-all, no prefetch, replayed with an ordered dict
    of (block, segment) (first = next victim; a block's requested cached segments go to the
    end at lookup, the missing ones are inserted, then the whole block is refreshed), and the
    (time, last GET) of each block MAT-without-predictor condemns: the victim's block when it
    is not the condemned one (a decision); the condemned block is forgotten when it empties
    or a GET refreshes it."""
    key, off, size, op = (cols[c].tolist() for c in ("key", "offset", "size", "op"))
    puts = set(put_ops)
    order: OrderedDict = OrderedDict()
    cached: dict[int, set[int]] = {}
    last_get: dict[int, int] = {}
    tags: list[tuple[int, int]] = []
    used = 0
    condemned = None

    def evict(i: int) -> None:
        nonlocal used, condemned
        (k, s), _ = order.popitem(last=False)
        if k != condemned:
            tags.append((i, last_get[k]))
            condemned = k
        cached[k].discard(s)
        used -= 1
        if not cached[k]:
            del cached[k]
            condemned = None

    def refresh(k: int) -> None:
        nonlocal condemned
        if k in cached:
            if condemned == k:
                condemned = None
            for s in sorted(cached[k]):
                order.move_to_end((k, s))

    for i in range(len(key)):
        if op[i] in puts:
            continue
        k = key[i]
        last_get[k] = i
        s0, s1 = off[i] // seg, (off[i] + size[i] - 1) // seg
        have = cached.get(k, set())
        for s in range(s0, s1 + 1):
            if s in have:
                order.move_to_end((k, s))
        missing = [s for s in range(s0, s1 + 1) if s not in have]
        for s in missing:
            while used > 0 and used + 1 >= capacity:
                evict(i)
            cached.setdefault(k, set()).add(s)
            order[(k, s)] = True
            used += 1
        refresh(k)
    return tags


def check_labels(samples: dict, cols: dict, put_ops, window: int) -> None:
    """Every label is log1p(the block's next GET after `last` - `last`), or log1p(2 window)
    when that is >= window or never (censored iff the window passes the end); the features
    are LRB's of the block's GET history at the tag time (the slow reference)."""
    key, op, size = cols["key"].tolist(), cols["op"].tolist(), cols["size"].tolist()
    n = len(key)
    gets_of: dict[int, list[int]] = {}
    for i in range(n):
        if op[i] not in put_ops:
            gets_of.setdefault(key[i], []).append(i)
    far = math.log1p(2 * window)
    assert len(samples["label"]) > 0
    for j, (t, last) in enumerate(zip(samples["time"].tolist(), samples["last"].tolist(),
                                      strict=True)):
        k = key[last]
        assert op[last] not in put_ops and last <= t
        gets = gets_of[k]
        assert last == max(g for g in gets if g <= t)  # the block's last GET
        nxt = next((g for g in gets if g > last), None)
        if nxt is not None and nxt - last < window:
            want, censored = math.log1p(nxt - last), False
        else:
            want, censored = far, nxt is None and last + window > n
        assert samples["label"][j] == want, j
        assert bool(samples["censored"][j]) == censored, j
        f = samples["features"][j]
        if last < t:
            hist = [g for g in gets if g < t]
            ref = eviction.features(hist, [size[g] for g in hist], t, memory_window=window)
            np.testing.assert_array_equal(f, np.array(ref))
        else:  # the block being accessed (recorded at the start of its GET)
            assert f[0] == 0.0


def prefix_table(df, n: int) -> dict:
    return {c: a[:n] for c, a in trace_arrays(df).items()}


def test_samples_match_a_slow_replay(region1):
    df, meta = region1
    cols = prefix_table(df, 4000)
    cfg = config(meta)
    r = simulate_mat_flash(cols, cfg, predictor="none", collect_samples=True,
                           mat={"memory_window": W})
    s = r.samples
    assert s["features"].shape == (len(s["label"]), 44)
    assert s["features"].dtype == np.float64 and s["time"].dtype == np.uint64
    assert s["censored"].dtype == np.bool_
    want = slow_lru_tags(cols, CAPACITY, cfg.segment_bytes, cfg.put_ops)
    assert len(want) > 50
    assert list(zip(s["time"].tolist(), s["last"].tolist(), strict=True)) == want
    check_labels(s, cols, set(cfg.put_ops), W)
    # both kinds of label occur, and some are censored
    assert (s["label"] < math.log1p(2 * W)).any() and (s["label"] == math.log1p(2 * W)).any()
    assert s["censored"].any() and not s["censored"].all()


def test_oracle_samples_labels(region1):
    df, meta = region1
    cols = prefix_table(df, 4000)
    r = simulate_mat_flash(cols, config(meta), predictor="oracle", collect_samples=True,
                           mat={"memory_window": W, "reuse_predictions": False})
    # several candidates per decision: each tagged as it leaves the tail
    assert len(r.samples["label"]) == r.metrics["mat_predictions"] > r.metrics["mat_decisions"]
    check_labels(r.samples, cols, set(config(meta).put_ops), W)


# --------------------------------------------------------------------------- the .so path


def build_so(tmp_path: Path, body: str) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    src = tmp_path / "p.c"
    src.write_text("#include <math.h>\n" + body)
    so = tmp_path / "p.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(so), str(src), "-lm"], check=True)
    return so


def test_so_predictor(region1, tmp_path):
    df, meta = region1
    cfg = config(meta)
    # "never again": the tail goes at the first try, as LRU; T rises per decision
    so = build_so(tmp_path, "int flashml_evict_num_features(void) { return 44; }\n"
                  "double flashml_evict_initial_threshold(void) { return 3.0; }\n"
                  "double flashml_evict_predict(const double *f) { (void)f; return 1e300; }\n")
    r = simulate_mat_flash(df, cfg, predictor=so, unverified=True)
    lru = simulate(df, cfg)
    assert (r.info["hits"], r.metrics["peak_dt_util"]) == (lru.info["hits"],
                                                          lru.metrics["peak_dt_util"])
    d = r.metrics["mat_decisions"]
    assert d > 0 and r.metrics["mat_predictions"] == d and r.metrics["mat_reinsertions"] == 0
    assert r.metrics["final_threshold"] == pytest.approx(3.0 * (1 + 1e-4) ** d, rel=1e-9)
    assert r.info["mat_params"]["initial_threshold"] == 3.0
    # a .so reading the features (the age: TTA 0, every decision exhausts its L candidates)
    so2 = tmp_path / "age"
    so2.mkdir()
    src = build_so(so2, "double flashml_evict_predict(const double *f) { return log1p(f[0]); }\n")
    src.rename(so2 / "policy.so")
    r2 = simulate_mat_flash(df, cfg, predictor=so2, mat={"max_candidates": 3}, unverified=True)
    assert r2.metrics["mat_predictions"] == 3 * r2.metrics["mat_decisions"]
    assert r2.metrics["mat_reinsertions"] == 2 * r2.metrics["mat_decisions"]


# ------------------------------------------------------------------------ (d) bad input


@pytest.mark.parametrize("kw", [{"eviction": "fifo"}, {"block_level_recency": False},
                                {"eviction": "fifo", "block_level_recency": False}])
def test_needs_lru_with_block_level_recency(region1, kw):
    df, meta = region1
    with pytest.raises(ValueError, match="needs LRU eviction with block-level recency"):
        simulate_mat_flash(df, config(meta, **kw))
    simulate(df, config(meta, **kw))  # a valid flash config otherwise


def test_bad_input(region1, tmp_path):
    df, meta = region1
    cfg = config(meta)
    with pytest.raises(ValueError, match="unknown MAT knob"):
        simulate_mat_flash(df, cfg, mat={"L": 3})
    with pytest.raises(ValueError, match="max_candidates must be >= 1"):
        simulate_mat_flash(df, cfg, mat={"max_candidates": 0})
    with pytest.raises(ValueError, match="memory_window"):
        simulate_mat_flash(df, cfg, mat={"memory_window": 100})
    with pytest.raises(ValueError, match="no such file"):
        simulate_mat_flash(df, cfg, predictor=tmp_path / "missing.so")
    with pytest.raises(ValueError, match="needs the per-access array 'admit'"):
        simulate_mat_flash(df, config(meta, admission="opt"))
