"""Models: TCO, write-rate tuning, training rows from labels, the loop's stopping rule, and
the convergence loop on a small generated trace."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest

from flashml.compiler.bundle import round_range
from flashml.config import DEFAULTS
from flashml.models.gbm import split_by_key
from flashml.policies.tco import tco
from flashml.settings import GbmParams, LoopSettings
from flashml.systems.baleen.converge import run_loop, should_stop
from flashml.systems.baleen.dataset import training_data, training_tables
from flashml.systems.baleen.tuning import tune_to_write_rate


def test_tco_formula_by_hand() -> None:
    # the baseline itself: 1 + (1/36) * (170/281)
    assert tco(0.4, 35.599, 0.4, 35.599) == pytest.approx(1 + 170 / 281 / 36)
    # half the peak DT at twice the write rate
    assert tco(0.2, 71.198, 0.4, 35.599) == pytest.approx(0.5 + 2 * 170 / 281 / 36)
    with pytest.raises(ValueError):
        tco(0.2, 1.0, 0.0, 1.0)


def fake(rate_of):  # a "simulator" whose write rate is a known function of the knob
    return lambda x: SimpleNamespace(metrics={"flash_write_rate_mbps": rate_of(x)})


def test_tuning_finds_the_largest_rate_not_above_target() -> None:
    t = tune_to_write_rate(fake(lambda p: 100 * p), 35.0, 0.0, 1.0, increasing=True)
    assert t.reached and t.write_rate == pytest.approx(35.0, rel=0.011)
    assert t.write_rate <= 35.0 * 1.01
    t = tune_to_write_rate(fake(lambda th: 100 * (1 - th)), 35.0, 0.0, 1.0, increasing=False)
    assert t.reached and t.knob == pytest.approx(0.65, abs=0.01)
    # a step function: 26 or 43, never 35 -> the best feasible (26), flagged
    t = tune_to_write_rate(fake(lambda f: 26.0 if f < 3 else 43.0), 35.0, 1e-3, 1e3,
                           increasing=True, log_scale=True)
    assert t.write_rate == 26.0 and not t.reached
    # unreachable: even the lowest setting writes too much
    t = tune_to_write_rate(fake(lambda p: 50 + p), 35.0, 0.0, 1.0, increasing=True)
    assert not t.reached and t.knob == 0.0
    # a rate linear in the knob: one interpolation after the two ends lands on it (the
    # bisection this replaced took 7 simulations to get within 1%)
    t = tune_to_write_rate(fake(lambda p: 100 * p), 35.0, 0.0, 1.0, increasing=True)
    assert t.evaluations == 3 and t.knob == pytest.approx(0.35)
    # a convex rate (most writes from the last tenth of the knob): still within 1%, and
    # the Illinois halving keeps it within a dozen simulations
    t = tune_to_write_rate(fake(lambda p: 200 * p ** 6), 35.0, 0.0, 1.0, increasing=True)
    assert t.reached and 35.0 * 0.99 <= t.write_rate <= 35.0 * 1.01 and t.evaluations <= 12
    # on a log scale (RejectX's factor) the interpolation is in log(knob): a rate linear in
    # it lands at once
    t = tune_to_write_rate(fake(lambda f: 40 + 5 * math.log(f)), 35.0, 1e-3, 1e3,
                           increasing=True, log_scale=True)
    assert t.evaluations == 3 and t.knob == pytest.approx(math.exp(-1.0))


def test_tuning_starts_from_an_earlier_searchs_points() -> None:
    f = fake(lambda p: 100 * p)
    first = tune_to_write_rate(f, 35.0, 0.0, 1.0, increasing=True)
    assert [x for x, _ in first.points] == [0.0, 1.0, pytest.approx(0.35)]
    # a new target between the measured points: no ends, one interpolation
    t = tune_to_write_rate(f, 60.0, 0.0, 1.0, increasing=True, known=first.points)
    assert t.evaluations == 1 and t.knob == pytest.approx(0.6) and t.reached
    assert len(t.points) == 4  # the known ones and its own
    # the same target again: the known point on target, simulated once more for its figures
    t = tune_to_write_rate(f, 35.0, 0.0, 1.0, increasing=True, known=first.points)
    assert t.evaluations == 1 and t.knob == first.knob
    # decreasing knobs (a threshold): "below" the target is the higher knob
    g = fake(lambda th: 100 * (1 - th))
    first = tune_to_write_rate(g, 35.0, 0.0, 1.0, increasing=False)
    t = tune_to_write_rate(g, 60.0, 0.0, 1.0, increasing=False, known=first.points)
    assert t.evaluations == 1 and t.knob == pytest.approx(0.4)
    # points that contradict a monotone rate are not trusted: a search from scratch
    t = tune_to_write_rate(f, 60.0, 0.0, 1.0, increasing=True, known=[(0.2, 90.0), (0.8, 10.0)])
    assert t.knob == pytest.approx(0.6) and t.evaluations == 3


def test_tuning_aims_with_a_similar_searchs_points() -> None:
    """`hint`: another function's points only aim the first probes; the result is this
    function's, within 1% of the target, in fewer simulations than from the ends."""
    first = tune_to_write_rate(fake(lambda p: 100 * p), 35.0, 0.0, 1.0, increasing=True)
    # a model that writes 8% more at every share: the hint's crossing (0.35) writes 37.8,
    # one step along the hint's slope lands within 1%
    t = tune_to_write_rate(fake(lambda p: 108 * p), 35.0, 0.0, 1.0, increasing=True,
                           hint=first.points)
    assert t.reached and 35.0 * 0.99 <= t.write_rate <= 35.0 * 1.01
    assert t.evaluations == 2 and t.knob == pytest.approx(0.35 - 2.8 / 100)
    # a convex rate: 9 simulations from the ends, 2-3 aimed by a similar one's points
    convex = tune_to_write_rate(fake(lambda p: 200 * p ** 6), 35.0, 0.0, 1.0, increasing=True)
    t = tune_to_write_rate(fake(lambda p: 230 * p ** 6), 35.0, 0.0, 1.0, increasing=True,
                           hint=convex.points)
    assert t.reached and t.evaluations <= 3 < convex.evaluations
    # the hint's points are not this function's: never returned as the result
    assert all(x != t.knob for x, _ in convex.points)
    # a misleading hint (crossing at 0.05): at most three probes, then the ends; still found
    t = tune_to_write_rate(fake(lambda p: 100 * p), 35.0, 0.0, 1.0, increasing=True,
                           hint=[(0.0, 0.0), (0.05, 100.0)])
    assert t.reached and 35.0 * 0.99 <= t.write_rate <= 35.0 * 1.01
    # a hint that never crosses the target is ignored
    t = tune_to_write_rate(fake(lambda p: 100 * p), 35.0, 0.0, 1.0, increasing=True,
                           hint=[(0.0, 50.0), (1.0, 90.0)])
    assert t.evaluations == 3 and t.knob == pytest.approx(0.35)
    # decreasing knobs and log scales aim the same way
    g = tune_to_write_rate(fake(lambda th: 100 * (1 - th)), 35.0, 0.0, 1.0, increasing=False)
    t = tune_to_write_rate(fake(lambda th: 104 * (1 - th)), 35.0, 0.0, 1.0, increasing=False,
                           hint=g.points)
    assert t.reached and t.evaluations <= 2
    r = tune_to_write_rate(fake(lambda f: 40 + 5 * math.log(f)), 35.0, 1e-3, 1e3,
                           increasing=True, log_scale=True)
    t = tune_to_write_rate(fake(lambda f: 41 + 5 * math.log(f)), 35.0, 1e-3, 1e3,
                           increasing=True, log_scale=True, hint=r.points)
    assert t.reached and t.evaluations <= 2 and t.knob == pytest.approx(math.exp(-1.2), rel=0.05)


def test_share_to_threshold() -> None:
    from flashml.systems.baleen.baselines import share_to_threshold

    score = np.array([0.9, 0.1, 0.5, 0.5, 0.3])
    knob = share_to_threshold(score)
    assert knob(0.0) == 1.0 and knob(1.0) == 0.0
    qs = np.linspace(0, 1, 1001)
    ts = [knob(q) for q in qs]
    assert all(a >= b for a, b in zip(ts, ts[1:], strict=False))  # more share, lower bar
    # continuous: every threshold in [0, 1] is reachable (a peak schedule lowers it)
    assert max(abs(a - b) for a, b in zip(ts, ts[1:], strict=False)) < 0.01
    # about a share q of the scores at or above it
    for q in (0.2, 0.4, 0.6, 0.8):
        assert abs(float((score >= knob(q) - 1e-12).mean()) - q) <= 1 / len(score) + 1e-9


def _clustered_scores() -> np.ndarray:
    """Scores with clusters of equal values, as a GBM gives accesses that share features
    (7% of 1 M region1-like accesses scored the same 0.00403)."""
    rng = np.random.default_rng(7)
    return np.concatenate([rng.random(20_000), np.full(3_000, 0.004029), np.full(1_500, 0.62),
                           np.full(700, 0.97)])


def _admitted_rate(score: np.ndarray, bonus: float) -> Callable[[float], float]:
    """A "simulator" of a threshold: a rate in the share admitted off peak (score >= t) and
    in the peak hours (score >= t - bonus), as the Rust admission compares them."""
    return lambda t: 50.0 * float((score >= t).mean()) + 50.0 * float((score >= t - bonus).mean())


@pytest.mark.parametrize("bonus", [0.0, 0.1])
@pytest.mark.parametrize("target", [30.0, 55.0, 95.0, 97.5, 99.0])
def test_a_threshold_search_bisects_the_pieces_between_equal_scores(bonus: float,
                                                                    target: float) -> None:
    """A rate that steps across the target at a cluster of equal scores: the float search
    narrows it down to one float (28-34 simulations in the main job); with `pieces` the
    search bisects the pieces of constant rate instead and lands in the same one, so the
    same write rate, in far fewer simulations."""
    from flashml.simulation import SimConfig
    from flashml.systems.baleen.baselines import share_to_threshold, threshold_pieces

    score = _clustered_scores()
    knob = share_to_threshold(score)
    rate = _admitted_rate(score, bonus)
    cfg = SimConfig(peak_hours=(10, 11) if bonus else (), peak_bonus=bonus)

    def run(q: float) -> SimpleNamespace:
        return SimpleNamespace(metrics={"flash_write_rate_mbps": rate(knob(q))})

    floats = tune_to_write_rate(run, target, 0.0, 1.0, increasing=True)
    fast = tune_to_write_rate(run, target, 0.0, 1.0, increasing=True,
                              pieces=threshold_pieces(score, knob, cfg))
    assert fast.write_rate == floats.write_rate and fast.reached == floats.reached
    assert fast.write_rate <= target * 1.01
    assert fast.evaluations <= floats.evaluations
    # the slow obvious answer: the largest rate at any threshold not above the target (any
    # rate within 1% of the target where one exists)
    best = max(w for w in {rate(t) for t in np.unique(np.concatenate([score, score + bonus,
                                                                       [0.0, 1.0]]))}
               if w <= target * 1.01)
    if best >= target * 0.99:
        assert target * 0.99 <= fast.write_rate <= target * 1.01
    else:
        assert fast.write_rate == best


def test_threshold_pieces_lie_between_the_breaks() -> None:
    """Each share `threshold_pieces` gives maps to a threshold strictly inside one piece of
    constant admission, one per piece strictly between the two shares' pieces."""
    from flashml.simulation import SimConfig
    from flashml.systems.baleen import baselines
    from flashml.systems.baleen.baselines import share_to_threshold, threshold_pieces

    score = np.array([0.1, 0.2, 0.2, 0.2, 0.5, 0.9] * 100)
    knob = share_to_threshold(score)
    pieces = threshold_pieces(score, knob, SimConfig())
    # thresholds 0.05 .. 0.95: breaks 0.1, 0.2, 0.5, 0.9 -> inner pieces (0.1, 0.2], (0.2, 0.5],
    # (0.5, 0.9]
    got = pieces(knob.share(0.95), knob.share(0.05))
    assert got is not None and len(got[0]) == 3 and got[1]
    ts = sorted(knob(q) for q in got[0])
    assert 0.1 < ts[0] < 0.2 < ts[1] < 0.5 < ts[2] < 0.9
    # adjacent pieces: nothing between them
    assert pieces(knob.share(0.15), knob.share(0.25)) == ([], True)
    # a peak bonus adds the breaks score + bonus
    peak = threshold_pieces(score, knob, SimConfig(peak_hours=(3,), peak_bonus=0.05))
    got = peak(knob.share(0.95), knob.share(0.05))
    assert got is not None and len(got[0]) == 6  # breaks 0.1 0.15 0.2 0.25 0.5 0.55 0.9
    # more pieces than it lists at once: evenly spaced ones, and it says so
    many = np.linspace(0.01, 0.99, 500)
    knob = share_to_threshold(many)
    got = threshold_pieces(many, knob, SimConfig())(knob.share(0.995), knob.share(0.005))
    assert got is not None and len(got[0]) == baselines.MAX_PIECES and not got[1]


def test_stopping_rule() -> None:
    s = LoopSettings()
    assert should_stop(7200, 7200 + 299, 35.6, 35.599, s)         # moved < 300 s
    assert not should_stop(4000, 4000 + 301, 35.6, 35.599, s)    # 301 > max(300, 200)
    assert should_stop(10_000, 10_000 + 499, 35.6, 35.599, s)    # < 5% of 10000
    assert not should_stop(10_000, 10_000 + 501, 35.6, 35.599, s)
    assert not should_stop(7200, 7200, 40.0, 35.599, s)          # write rate off by 12%
    assert should_stop(7200, 7200, 37.0, 35.599, s)              # within 5%


def test_round_range() -> None:
    s, e = round_range(np.array([-3.0, 2.49, 2.5, 70.0]), np.array([1.0, 1.0, 80.0, 90.0]))
    assert s.tolist() == [0, 2, 3, 63] and e.tolist() == [1, 2, 63, 63]


def test_training_rows_from_labels() -> None:
    feats = np.arange(10 * 18, dtype=np.float64).reshape(10, 18)
    times = np.array([0, 10, 20, 30, 40, 50, 86_400, 86_401, 90_000, 90_001], dtype=float)
    labels = pl.DataFrame({
        "row": [0, 1, 2, 3, 6, 7, 8], "key": [1, 1, 2, 1, 2, 3, 3],
        "opt_label": [1, 1, 0, -1, 0, 1, 1]}, schema_overrides={"row": pl.UInt64,
                                                                  "key": pl.UInt64})
    episodes = pl.DataFrame({
        "key": [1, 2, 3], "first_row": [0, 2, 7], "admitted": [True, False, True],
        "range_start": [0, 4, 1], "range_end": [5, 6, 2], "when_label": [1, 0, 1]},
        schema_overrides={"first_row": pl.UInt64, "key": pl.UInt64})
    d = training_data(feats, times, labels, episodes, train_seconds=86_400)
    # rows 0, 1, 2 are labelled inside the first day; row 3 is unused (-1); 6+ are later
    assert d.adm_X[:, 0].tolist() == [0.0, 18.0, 36.0]
    assert d.adm_y.tolist() == [1, 1, 0]
    # only the admitted episode starting inside the window (key 1, row 0)
    assert d.ep_start.tolist() == [0] and d.ep_end.tolist() == [5] and d.ep_when.tolist() == [1]
    assert d.ep_X.shape == (1, 6) and d.ep_X[0].tolist() == feats[0, :6].tolist()
    # K smaller than the labelled one: only the first max_position GETs of each episode
    d1 = training_data(feats, times, labels.with_columns(
        position=pl.Series([0, 1, 0, 2, 0, 0, 1])), episodes, train_seconds=86_400,
        max_position=1)
    assert d1.adm_X[:, 0].tolist() == [0.0, 36.0] and d1.adm_y.tolist() == [1, 0]


def test_training_rows_beyond_the_cap_are_a_sample_of_the_keys() -> None:
    from flashml.systems.baleen.dataset import SAMPLE_SEED

    rng = np.random.default_rng(1)
    n_keys, per_key = 4_000, 10
    keys = np.repeat(np.arange(n_keys, dtype=np.uint64), per_key)
    rows = rng.permutation(len(keys)).astype(np.uint64)  # rows of the trace, any order
    feats = np.column_stack([np.arange(len(keys), dtype=np.float64)] * 18)
    times = np.zeros(len(keys))  # all inside the training window
    labels = pl.DataFrame({"row": rows, "key": keys,
                           "opt_label": rng.integers(0, 2, len(keys))})
    episodes = pl.DataFrame({
        "key": np.arange(n_keys, dtype=np.uint64), "first_row": rows[::per_key],
        "admitted": np.ones(n_keys, bool), "range_start": np.zeros(n_keys, np.int64),
        "range_end": np.ones(n_keys, np.int64), "when_label": np.zeros(n_keys, np.int64)})
    full = training_data(feats, times, labels, episodes, 86_400)
    assert len(full.adm_y) == len(keys)
    assert len(training_data(feats, times, labels, episodes, 86_400,
                             max_rows=len(keys)).adm_y) == len(keys)  # at the cap: all
    d = training_data(feats, times, labels, episodes, 86_400, max_rows=10_000)
    assert 9_000 < len(d.adm_y) < 11_000
    # whole keys: each kept key with all its rows, the same keys' episodes, their labels
    kept, counts = np.unique(d.adm_keys, return_counts=True)
    assert (counts == per_key).all()
    assert sorted(d.ep_keys.tolist()) == kept.tolist()
    by_row = dict(zip(rows.tolist(), labels["opt_label"].to_list(), strict=True))
    assert d.adm_y.tolist() == [by_row[int(r)] for r in d.adm_X[:, 0]]
    assert split_by_key(kept, 0.25, seed=SAMPLE_SEED).all()  # the rule, stable across calls
    assert 0.22 < split_by_key(np.arange(100_000, dtype=np.uint64), 0.25,
                               seed=SAMPLE_SEED).mean() < 0.28


def test_split_by_key_is_stable_and_near_70_30() -> None:
    keys = np.arange(20_000, dtype=np.uint64)
    m = split_by_key(keys)
    assert 0.67 < m.mean() < 0.73
    assert (split_by_key(keys[::-1])[::-1] == m).all()


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory) -> tuple[pl.DataFrame, Path]:
    from flashml.trace.canonical import read_table
    from flashml.trace.generate import generate_trace
    from flashml.trace.ingest import ingest

    d = tmp_path_factory.mktemp("loop")
    generate_trace("region1-like", 3, d / "t.trace", accesses=30_000, progress=False)
    ingest(d / "t.trace", d / "t.parquet", "tectonic", progress=False)
    return read_table(d / "t.parquet")[0], d / "t.parquet"


def test_loop_on_a_small_trace(small_trace, tmp_path: Path) -> None:
    from flashml.features.online import feature_matrix
    from flashml.simulation import SimConfig
    from flashml.trace.canonical import read_meta

    df, table = small_trace
    base = SimConfig.for_trace(read_meta(table))
    gbm = GbmParams(learning_rate=0.1, num_boost_round=60)
    target = DEFAULTS.target_write_rate_mbps
    res = run_loop(df, table, feature_matrix(df), base, target, tmp_path, gbm,
                   LoopSettings(max_iter=1))
    assert not res.converged and "stopped after 1 iterations" in res.reason
    it = res.iterations[0]
    assert it.eviction_age_s == 7200 and it.episodes > it.admitted_episodes > 0
    assert res.arrays["score"].shape == (len(df),)
    assert ((res.arrays["prefetch_start"] >= 0) & (res.arrays["prefetch_end"] <= 63)).all()
    assert it.write_rate_mbps <= target * 1.01
    res2 = run_loop(df, table, feature_matrix(df), base, target, tmp_path / "b", gbm,
                    LoopSettings(max_iter=8))
    # each new EA is the damped mean of the assumed and measured ones
    for a, b in zip(res2.iterations, res2.iterations[1:], strict=False):
        assert b.eviction_age_s == pytest.approx(0.5 * a.eviction_age_s
                                                 + 0.5 * a.measured_eviction_age_s)
    assert res2.converged == should_stop(
        res2.iterations[-1].eviction_age_s,
        0.5 * res2.iterations[-1].eviction_age_s + 0.5 * res2.iterations[-1]
        .measured_eviction_age_s, res2.iterations[-1].write_rate_mbps, target, LoopSettings())
    # a warm start from that loop (a sweep trial): at the same target its first iteration
    # is the given model's, at its eviction age, with the same threshold search (so the
    # same figures) and no episodes built; it stops where the loop itself would have
    from flashml.systems.baleen.converge import WarmStart

    warm = WarmStart.from_loop(res2, 6)
    res3 = run_loop(df, table, feature_matrix(df), base, target, tmp_path / "c", gbm,
                    LoopSettings(max_iter=2), warm=warm)
    first, last = res3.iterations[0], res2.iterations[-1]
    assert first.warm and first.episodes == 0 and not (tmp_path / "c" / "episodes-00").exists()
    assert first.eviction_age_s == res2.eviction_age_s == last.eviction_age_s
    assert (first.threshold, first.write_rate_mbps, first.peak_dt_util,
            first.measured_eviction_age_s) == (last.threshold, last.write_rate_mbps,
                                               last.peak_dt_util, last.measured_eviction_age_s)
    assert res3.converged == res2.converged
    if res2.converged:
        assert len(res3.iterations) == 1 and res3.policy is res2.policy
    # at 3x the target the model admits more, evictions come sooner: the loop goes on
    # from there, training at the new eviction age with the warm start's K kept
    res4 = run_loop(df, table, feature_matrix(df), base, 3 * target, tmp_path / "d", gbm,
                    LoopSettings(max_iter=2), warm=warm)
    assert res4.iterations[0].warm and res4.iterations[0].write_rate_mbps > 1.5 * target
    assert res4.iterations[0].measured_eviction_age_s < last.measured_eviction_age_s
    assert len(res4.iterations) == 2 and not res4.iterations[1].warm
    assert res4.iterations[1].episodes > 0
    # the warm model's measurement at the new target is taken as it is, not damped
    assert res4.iterations[1].eviction_age_s == res4.iterations[0].measured_eviction_age_s
    assert res4.extra["accesses_per_episode"] == warm.accesses_per_episode == res2.extra[
        "accesses_per_episode"]


def test_a_saturated_loop_stops_once_its_eviction_age_holds(small_trace, tmp_path: Path) -> None:
    """A target beyond what the policy can write: every iteration admits everything
    (threshold 0), so the measured eviction age does not depend on the model; the loop
    moves to it undamped and stops when it holds, instead of walking there by halves."""
    from flashml.features.online import feature_matrix
    from flashml.simulation import SimConfig
    from flashml.trace.canonical import read_meta

    df, table = small_trace
    base = SimConfig.for_trace(read_meta(table))
    gbm = GbmParams(learning_rate=0.1, num_boost_round=60)
    target = 100 * DEFAULTS.target_write_rate_mbps
    res = run_loop(df, table, feature_matrix(df), base, target, tmp_path, gbm,
                   LoopSettings(max_iter=6, accesses_per_episode_tried=(6,)))
    its = res.iterations
    assert all(it.threshold == 0.0 and it.write_rate_mbps < 0.5 * target for it in its)
    assert its[1].eviction_age_s == its[0].measured_eviction_age_s != its[0].eviction_age_s
    assert len(its) < 6 and not res.converged and res.reason.startswith("saturated")
    last = its[-1]
    assert abs(last.measured_eviction_age_s - last.eviction_age_s) < max(
        300.0, 0.05 * last.measured_eviction_age_s)


def bisect_threshold(df, base, target, arrays, known=None, hint=None, **prefetch):
    """The threshold search before its speed-ups, as the reference: bisection of the
    threshold itself in [0, 1] for the largest write rate within 1% of the target."""
    from flashml.simulation import simulate
    from flashml.systems.baleen.tuning import Tuned

    cfg = base.replace(admission="threshold", **prefetch)
    evals = 0

    def run(t):
        nonlocal evals
        evals += 1
        r = simulate(df, cfg.replace(threshold=t), **arrays)
        return r.metrics["flash_write_rate_mbps"], r

    w, r = run(1.0)
    if w > target * 1.01:
        return Tuned(1.0, r, evals, False)
    w, r0 = run(0.0)
    if w <= target * 1.01:
        return Tuned(0.0, r0, evals, w >= target * 0.99)
    best, a, b = (1.0, -1.0, r), 1.0, 0.0
    for _ in range(30):
        mid = (a + b) / 2
        w, r = run(mid)
        if w <= target * 1.01:
            best = max(best, (mid, w, r), key=lambda x: x[1])
            a = mid
            if w >= target * 0.99:
                break
        else:
            b = mid
    return Tuned(best[0], best[2], evals, abs(best[1] - target) <= 0.05 * target)


def test_the_faster_searches_keep_the_loops_figures(small_trace, tmp_path: Path,
                                                    monkeypatch) -> None:
    """The searches' tolerance, on a small trace: the convergence loop with today's searches
    (regula falsi over the admitted share, known points, side-by-side ML-When searches)
    against the same loop with the bisection it replaced. Each search lands within 1% of the
    target write rate either way, so the figures may differ by what 1% of write rate moves:
    the peak DT no more than 3% (relative) above the reference's at the same ML-When
    threshold, the converged eviction age within 10%, the same K. (One-sided on the peak: a
    faster search must not cost quality, and a better landing is not a failure.)"""
    from flashml.features.online import feature_matrix
    from flashml.simulation import SimConfig
    from flashml.systems.baleen import converge
    from flashml.trace.canonical import read_meta

    df, table = small_trace
    base = SimConfig.for_trace(read_meta(table))
    gbm = GbmParams(learning_rate=0.1, num_boost_round=60)
    target = DEFAULTS.target_write_rate_mbps
    feats = feature_matrix(df)
    fast = run_loop(df, table, feats, base, target, tmp_path / "fast", gbm,
                    LoopSettings(max_iter=4))
    monkeypatch.setattr(converge, "tune_threshold", bisect_threshold)
    # the reference at the ML-When threshold the fast loop chose: the least prefetch within
    # 1% of the training day's lowest peak (converge.simplest_when) is a discrete pick that
    # a landing 1% apart can flip (0.7 vs 0.9 here, 3.7% apart on the peak), which says
    # nothing of the searches
    slow = run_loop(df, table, feats, base, target, tmp_path / "slow", gbm,
                    LoopSettings(max_iter=4, when_candidates=(fast.when_threshold,)))
    mf, ms = fast.tuned.result.metrics, slow.tuned.result.metrics
    for m in (mf, ms):
        assert abs(m["flash_write_rate_mbps"] - target) <= 0.011 * target
    assert mf["peak_dt_util"] <= ms["peak_dt_util"] * 1.03
    assert fast.eviction_age_s == pytest.approx(slow.eviction_age_s, rel=0.10)
    assert fast.extra["accesses_per_episode"] == slow.extra["accesses_per_episode"]
    # and the regula falsi needed fewer simulations for it
    assert fast.tuned.evaluations <= slow.tuned.evaluations


def test_when_threshold_is_chosen_on_the_training_day(small_trace) -> None:
    from flashml.simulation import SimConfig
    from flashml.systems.baleen.converge import select_when_threshold
    from flashml.trace.canonical import read_meta

    df, table = small_trace
    n = len(df)
    rng = np.random.default_rng(0)
    arrays = {"score": rng.random(n), "prefetch_start": np.zeros(n, np.int64),
              "prefetch_end": np.full(n, 63, np.int64), "when_score": rng.random(n)}
    base = SimConfig.for_trace(read_meta(table))
    best, peaks = select_when_threshold(df, arrays, base, 35.599, 86_400.0, (0.5, 0.9, 1.0))
    assert set(peaks) == {0.5, 0.9, 1.0}
    # the least prefetch within 1% of the lowest peak (converge.simplest_when)
    assert peaks[best] <= min(peaks.values()) * 1.01
    assert all(w <= best for w, p in peaks.items() if p <= min(peaks.values()) * 1.01)
    # only the first day was simulated: the evaluation days cannot influence the choice
    later = df["time"].to_numpy() >= df["time"][0] + 86_400
    arrays2 = {k: v.copy() for k, v in arrays.items()}
    arrays2["when_score"][later] = 1.0 - arrays2["when_score"][later]
    assert select_when_threshold(df, arrays2, base, 35.599, 86_400.0, (0.5, 0.9, 1.0)) == \
        (best, peaks)


def test_loop_warns_when_the_peak_schedule_cannot_meet_the_target(small_trace, tmp_path: Path,
                                                                   caplog) -> None:
    """A schedule whose peak hours admit more than the whole budget (every hour, threshold
    1.0 lower: admit-all) cannot be tuned to the target: the loop says so instead of
    passing off a policy that writes several times the target as comparable."""
    import logging

    from flashml.features.online import feature_matrix
    from flashml.simulation import SimConfig
    from flashml.trace.canonical import read_meta

    df, table = small_trace
    base = SimConfig.for_trace(read_meta(table))
    gbm = GbmParams(learning_rate=0.1, num_boost_round=40)
    target = DEFAULTS.target_write_rate_mbps
    greedy = base.replace(peak_hours=tuple(range(24)), peak_bonus=1.0)
    with caplog.at_level(logging.WARNING, logger="flashml.systems.baleen.converge"):
        res = run_loop(df, table, feature_matrix(df), base, target, tmp_path, gbm,
                       LoopSettings(max_iter=1, accesses_per_episode_tried=(6,)),
                       with_prefetch=False,
                       final_base=greedy)
    assert not res.tuned.reached
    assert res.tuned.result.metrics["flash_write_rate_mbps"] > 1.1 * target
    assert "cannot meet the target write rate" in caplog.text


def test_a_warm_loops_final_search_runs_ahead_with_the_same_figures(
        small_trace, tmp_path: Path, monkeypatch) -> None:
    """A warm loop (a sweep trial) runs its final search under the peak schedule beside each
    iteration's own search (`SearchAhead`): the loop takes the one of the iteration it ends
    with, and its figures are those of the search run after the loop, with the same
    arguments; the others are cancelled."""
    from flashml.features.online import feature_matrix
    from flashml.simulation import SimConfig
    from flashml.systems.baleen import converge
    from flashml.systems.baleen.baselines import tune_threshold
    from flashml.systems.baleen.converge import WarmStart
    from flashml.trace.canonical import read_meta

    df, table = small_trace
    base = SimConfig.for_trace(read_meta(table))
    gbm = GbmParams(learning_rate=0.1, num_boost_round=40)
    target = DEFAULTS.target_write_rate_mbps
    feats = feature_matrix(df)
    sched = base.replace(peak_hours=(10, 11, 12), peak_bonus=0.1)
    settings = LoopSettings(max_iter=2, accesses_per_episode_tried=(6,))
    main = run_loop(df, table, feats, base, target, tmp_path / "main", gbm, settings,
                    final_base=sched)
    warm = WarmStart.from_loop(main, 6)
    assert warm.final_points
    started: list[converge.SearchAhead] = []

    class Recorded(converge.SearchAhead):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            started.append(self)

    monkeypatch.setattr(converge, "SearchAhead", Recorded)
    for k, rate in enumerate((target, 2 * target)):
        started.clear()
        res = run_loop(df, table, feats, base, rate, tmp_path / f"warm{k}", gbm, settings,
                       final_base=sched, warm=warm)
        assert 1 <= len(started) <= len(res.iterations)
        taken = [a for a in started if a.serves(res.arrays, res.when_threshold)]
        assert len(taken) == 1 and not taken[0].cancel.is_set()
        assert all(a.cancel.is_set() for a in started if a is not taken[0])
        again = tune_threshold(df, sched.replace(when_threshold=res.when_threshold), rate,
                               res.arrays, prefetch="range", prefetch_when="score",
                               hint=warm.final_points)
        assert res.tuned.knob == again.knob
        def figures(t):  # (the simulation's own wall time aside)
            return {k: v for k, v in t.result.metrics.items() if k != "wall_s"}

        assert figures(res.tuned) == figures(again)


def test_size_features_held_at_0_train_the_model_without_them(small_trace,
                                                             tmp_path: Path) -> None:
    """CacheLib-ML's admission model trained with the size features held at 0 (the shipped
    variant's, `zeroed`) is the one trained without them (the cachelib_ml row's): LightGBM
    drops a constant feature, so the trees and every score are the same, and the row starts
    from the shipped variant's scores (job.py `policies`)."""
    from flashml.features.contract import contract
    from flashml.features.online import feature_matrix
    from flashml.systems.baleen.episodes.core import EpisodeParams, build
    from flashml.systems.baleen.model import score_all, train_policy
    from flashml.systems.baleen.validation import zeroed_features

    df, table = small_trace
    feats = feature_matrix(df)
    built = build(table, tmp_path / "eps", EpisodeParams(eviction_age_s=3600.0), plot=False)
    labels, eps = training_tables(built.out)
    data = training_data(feats, df["time"].to_numpy(), labels, eps, 86400.0, max_position=6)
    gbm = GbmParams(learning_rate=0.1, num_boost_round=60)
    held = train_policy(data, gbm, with_prefetch=False, zeroed=zeroed_features("cachelib_like"))
    without = train_policy(data, gbm, with_prefetch=False,
                           features=list(contract().models["cachelib_like"]))
    assert zeroed_features("cachelib_like")
    assert held.admission.num_trees() == without.admission.num_trees() > 1
    assert np.array_equal(score_all(held, feats)["score"], score_all(without, feats)["score"])


def test_accesses_per_episode_chosen_on_the_training_day(small_trace, tmp_path: Path) -> None:
    """With several K, the loop trains one admission-only model per K on the training window
    and keeps the K with the lowest training-day mean DT; its rows are the first K GETs of
    each episode."""
    from flashml.features.online import feature_matrix
    from flashml.simulation import SimConfig
    from flashml.systems.baleen.baselines import tune_threshold
    from flashml.systems.baleen.converge import select_accesses_per_episode
    from flashml.systems.baleen.model import score_all, train_policy
    from flashml.trace.canonical import read_meta

    df, table = small_trace
    base = SimConfig.for_trace(read_meta(table))
    gbm = GbmParams(learning_rate=0.1, num_boost_round=40)
    target = DEFAULTS.target_write_rate_mbps
    feats = feature_matrix(df)
    settings = LoopSettings(max_iter=1, accesses_per_episode_tried=(6, 1, 3))
    res = run_loop(df, table, feats, base, target, tmp_path, gbm, settings,
                   with_prefetch=False)
    labels = pl.read_parquet(res.episodes_dir / "labels.parquet")
    episodes = pl.read_parquet(res.episodes_dir / "episodes.parquet")
    # the episodes were labelled for the largest K, so every candidate can be cut from them
    assert labels.filter(pl.col("opt_label") >= 0)["position"].max() == 5
    best, means = select_accesses_per_episode(df, feats, labels, episodes, base, target,
                                              settings, gbm, None)
    assert set(means) == {6, 1, 3} and means[best] == min(means.values())
    assert res.extra["accesses_per_episode"] == best
    # the loop kept the chosen K's model from the selection: the same as one trained anew
    fresh = train_policy(training_data(feats, df["time"].to_numpy(), labels, episodes,
                                       86_400.0, max_position=best), gbm, with_prefetch=False)
    assert res.policy.admission.model_to_string() == fresh.admission.model_to_string()
    # the criterion, recomputed by hand for K=1: the training day's mean DT (not its peak),
    # from a cold cache, with the threshold tuned to the target
    times = df["time"].to_numpy()
    n = int((times < times[0] + 86_400.0).sum())
    one = score_all(train_policy(training_data(feats, times, labels, episodes, 86_400.0,
                                               max_position=1), gbm, with_prefetch=False),
                    feats[:n])["score"]
    m = tune_threshold(df.slice(0, n), base.replace(warmup_s=0.0), target,
                       {"score": one}).result.metrics
    assert means[1] == pytest.approx(m["mean_dt_util"], rel=1e-12)
    assert means[1] != pytest.approx(m["peak_dt_util"])
    # the rows differ by K: fewer with K=1
    n = {k: len(training_data(feats, df["time"].to_numpy(), labels, episodes, 86_400.0,
                              max_position=k).adm_y) for k in (1, 6)}
    assert 0 < n[1] < n[6]


def test_a_trace_too_large_for_memory_is_refused_before_training(small_trace,
                                                                  tmp_path: Path) -> None:
    import shutil

    from flashml.errors import UserError
    from flashml.jobs.run import RunDir
    from flashml.systems.baleen.memory import (
        HELD_SCORES,
        JOB_BASE_BYTES,
        JOB_BYTES_PER_ACCESS,
        JOB_BYTES_PER_ACCESS_MAPPED,
        SCORE_BYTES_PER_ACCESS,
        check_memory,
        job_bytes_per_access,
    )

    df, table = small_trace
    run = RunDir(tmp_path / "run")
    shutil.copy(table, run.table)
    n = len(df)
    # a budget whose scores fit estimates the job with them held, a smaller one with them
    # kept on disk (memory.py scores_fit_in: six policies' scores in half the budget beyond
    # the fixed part)
    roomy = JOB_BASE_BYTES + n * 2 * HELD_SCORES * SCORE_BYTES_PER_ACCESS
    assert job_bytes_per_access(n, roomy) == JOB_BYTES_PER_ACCESS
    assert job_bytes_per_access(n, roomy - 2) == JOB_BYTES_PER_ACCESS_MAPPED
    need = JOB_BASE_BYTES + n * JOB_BYTES_PER_ACCESS_MAPPED
    check_memory(run, available=need)  # fits exactly, bounded: no error
    with pytest.raises(UserError) as e:
        check_memory(run, available=need - 1)
    msg = str(e.value)
    assert str(run.table) in msg and f"{n:,} accesses" in msg and "--memory" in msg
    assert "flashml trace sample" in msg and "--engine spark" in msg
    # the suggested sample fits: its size is what the available memory holds
    fit = (need - 1 - JOB_BASE_BYTES) // JOB_BYTES_PER_ACCESS_MAPPED
    assert f"about {fit:,} accesses" in msg


def test_features_are_computed_once_per_table_and_contract(small_trace, tmp_path: Path) -> None:
    import shutil

    from flashml.features.online import feature_matrix
    from flashml.jobs.run import RunDir
    from flashml.systems.baleen.run_folder import features, features_file

    df, table = small_trace
    run = RunDir(tmp_path / "run")
    shutil.copy(table, run.table)
    first = features(run)
    assert np.array_equal(np.asarray(first), feature_matrix(df))
    assert list(run.work.glob("feature-counts-*.npy")) == [features_file(run)]
    mapped = features(RunDir(run.path))  # a fresh process: a resumed job, a sweep worker
    assert isinstance(mapped.counts, np.memmap)  # the counts mapped, not computed again
    assert np.array_equal(np.asarray(mapped), np.asarray(first))
    # other bytes in the table: another key (the old file is not read for it)
    key = features_file(run)
    with open(run.table, "ab") as f:
        f.write(b"x")
    assert features_file(run) != key


def test_training_key_reads_every_input() -> None:
    from flashml.systems.baleen.converge import training_key
    from flashml.systems.baleen.model import TrainingData

    rng = np.random.default_rng(0)
    data = TrainingData(rng.random((50, 18)), rng.integers(0, 2, 50).astype(np.float64),
                        np.arange(50, dtype=np.uint64), rng.random((9, 6)),
                        rng.integers(0, 64, 9), rng.integers(0, 64, 9),
                        rng.integers(0, 2, 9), np.arange(9, dtype=np.uint64))
    gbm = GbmParams()
    key = training_key(data, gbm, None, True, ())
    copy = TrainingData(*(np.array(getattr(data, f)) for f in TrainingData.__dataclass_fields__))
    assert training_key(copy, gbm, None, True, ()) == key  # equal contents, other objects
    flipped = TrainingData(**{**data.__dict__, "adm_y": 1.0 - data.adm_y})
    assert training_key(flipped, gbm, None, True, ()) != key
    when = TrainingData(**{**data.__dict__, "ep_when": 1 - data.ep_when})
    assert training_key(when, gbm, None, True, ()) != key
    assert training_key(data, gbm.with_overrides(num_leaves=7), None, True, ()) != key
    assert training_key(data, gbm, ["op"], True, ()) != key
    assert training_key(data, gbm, None, False, ()) != key
    assert training_key(data, gbm, None, True, ("user",)) != key


def test_an_iteration_with_the_last_ones_rows_keeps_its_models(small_trace, tmp_path: Path,
                                                               monkeypatch) -> None:
    """Iterations whose episodes give the same training rows (an eviction age that moved
    less than any gap of the trace) train nothing: the last training's models and scores
    are kept, and every figure of the loop equals a loop that trains each time."""
    import os

    from flashml.features.online import feature_matrix
    from flashml.simulation import SimConfig
    from flashml.systems.baleen import converge
    from flashml.trace.canonical import read_meta

    df, table = small_trace
    base = SimConfig.for_trace(read_meta(table))
    gbm = GbmParams(learning_rate=0.1, num_boost_round=40)
    feats = feature_matrix(df)
    first: list = []

    def same_rows(*a, **kw):  # every iteration's rows are the first's (equal copies)
        if not first:
            first.append(training_data(*a, **kw))
        d = first[0]
        return type(d)(*(np.array(getattr(d, f)) for f in type(d).__dataclass_fields__))

    trainings: list[int] = []
    real_train = converge.train_and_score

    def counted(*a, **kw):
        trainings.append(1)
        return real_train(*a, **kw)

    monkeypatch.setattr(converge, "training_data", same_rows)
    monkeypatch.setattr(converge, "train_and_score", counted)
    # an eviction age that never holds: every iteration trains (or would)
    settings = LoopSettings(max_iter=3, accesses_per_episode_tried=(6,), min_move_s=0.0,
                            min_move_rel=0.0)
    kept = run_loop(df, table, feats, base, DEFAULTS.target_write_rate_mbps,
                    tmp_path / "kept", gbm, settings)
    assert len(kept.iterations) == 3 and len(trainings) == 1
    trainings.clear()
    monkeypatch.setattr(converge, "training_key", lambda *a, **kw: os.urandom(32))
    fresh = run_loop(df, table, feats, base, DEFAULTS.target_write_rate_mbps,
                     tmp_path / "fresh", gbm, settings)
    assert len(trainings) == 3
    strip = [{**it.__dict__, "seconds": 0.0} for it in kept.iterations]
    assert strip == [{**it.__dict__, "seconds": 0.0} for it in fresh.iterations]
    assert kept.when_threshold == fresh.when_threshold
    assert kept.tuned.knob == fresh.tuned.knob and kept.points == fresh.points
    for k, v in fresh.arrays.items():
        assert np.array_equal(kept.arrays[k], v)
    for name, b in fresh.policy.boosters().items():
        assert kept.policy.boosters()[name].model_to_string() == b.model_to_string()


@pytest.mark.parametrize("same", ["rows", "models"])
def test_a_loop_at_a_fixed_point_stops(small_trace, tmp_path: Path, monkeypatch,
                                       same: str) -> None:
    """An iteration that would repeat the last one, with the eviction age settled, ends the
    loop there with that iteration's figures instead of running to max_iter (a write rate
    that steps over the target never gets within tolerance), and says so: seen before
    training when its rows are the last iteration's ("rows": nothing trained again), or
    after it when rows that differ (here: told apart by their key alone) trained models that
    score every access as the last ones did ("models")."""
    import os

    from flashml.features.online import feature_matrix
    from flashml.simulation import SimConfig
    from flashml.systems.baleen import converge
    from flashml.trace.canonical import read_meta

    df, table = small_trace
    base = SimConfig.for_trace(read_meta(table))
    gbm = GbmParams(learning_rate=0.1, num_boost_round=40)
    feats = feature_matrix(df)
    first: list = []

    def same_rows(*a, **kw):
        if not first:
            first.append(training_data(*a, **kw))
        return first[0]

    trainings: list[int] = []
    real_train = converge.train_and_score

    def counted(*a, **kw):
        trainings.append(1)
        return real_train(*a, **kw)

    monkeypatch.setattr(converge, "training_data", same_rows)
    monkeypatch.setattr(converge, "train_and_score", counted)
    if same == "models":
        monkeypatch.setattr(converge, "training_key", lambda *a, **kw: os.urandom(32))
    # a write rate never within tolerance and an eviction age that always counts as settled
    settings = LoopSettings(max_iter=4, accesses_per_episode_tried=(6,), min_move_s=1e12,
                            write_rate_tolerance=0.0)
    res = run_loop(df, table, feats, base, DEFAULTS.target_write_rate_mbps,
                   tmp_path / "fixed", gbm, settings)
    assert len(res.iterations) == 1 and not res.converged
    assert len(trainings) == (1 if same == "rows" else 2)
    prefix = {"rows": "fixed point: iteration 1's training rows",
              "models": "fixed point: iteration 1's models"}[same]
    assert res.reason.startswith(prefix), res.reason
    assert res.tuned.knob == res.iterations[0].threshold


def test_a_target_out_of_the_models_reach_stops_the_loop(small_trace, tmp_path: Path,
                                                         monkeypatch) -> None:
    """An iteration whose search finds no threshold within tolerance below the target (the
    rate steps over it) with the eviction age settled ends the loop, unconverged, without
    training again; the same loop with a reachable target does not stop so."""
    from dataclasses import replace

    from flashml.features.online import feature_matrix
    from flashml.simulation import SimConfig
    from flashml.systems.baleen import converge
    from flashml.trace.canonical import read_meta

    df, table = small_trace
    base = SimConfig.for_trace(read_meta(table))
    gbm = GbmParams(learning_rate=0.1, num_boost_round=40)
    feats = feature_matrix(df)
    trainings: list[int] = []
    real_train, real_tune = converge.train_and_score, converge.tune_threshold

    def counted(*a, **kw):
        trainings.append(1)
        return real_train(*a, **kw)

    def short(df, cfg, target, *a, **kw):  # every search ends 10% below the target
        return replace(real_tune(df, cfg, 0.9 * target, *a, **kw), reached=False)

    monkeypatch.setattr(converge, "train_and_score", counted)
    settings = LoopSettings(max_iter=4, accesses_per_episode_tried=(6,), min_move_s=1e12)
    target = DEFAULTS.target_write_rate_mbps
    within = run_loop(df, table, feats, base, target, tmp_path / "within", gbm, settings)
    assert not within.reason.startswith("out of reach")
    trainings.clear()
    monkeypatch.setattr(converge, "tune_threshold", short)
    res = run_loop(df, table, feats, base, target, tmp_path / "reach", gbm, settings)
    assert res.iterations[0].write_rate_mbps < 0.95 * target
    assert len(res.iterations) == 1 and len(trainings) == 1 and not res.converged
    assert res.reason.startswith("out of reach"), res.reason


def test_train_and_score_equals_train_then_score(small_trace, tmp_path: Path) -> None:
    """The prefetch models scored on their own thread beside the admission model's training:
    the same models and the same doubles as training, then `score_all`."""
    from flashml.features.online import feature_matrix
    from flashml.systems.baleen.episodes.core import EpisodeParams, build
    from flashml.systems.baleen.model import score_all, train_and_score, train_policy

    df, table = small_trace
    feats = feature_matrix(df)
    built = build(table, tmp_path / "eps", EpisodeParams(
        eviction_age_s=7200.0, target_write_rate_mbps=DEFAULTS.target_write_rate_mbps,
        accesses_per_episode=6), engine="polars", plot=False)
    data = training_data(feats, df["time"].to_numpy(),
                         pl.read_parquet(built.out / "labels.parquet"),
                         pl.read_parquet(built.out / "episodes.parquet"), DEFAULTS.warmup_s)
    gbm = GbmParams(learning_rate=0.1, num_boost_round=40)
    plain = train_policy(data, gbm)
    want = score_all(plain, feats)
    policy, got = train_and_score(data, gbm, feats)
    assert list(got) == list(want)
    for k, v in want.items():
        assert np.array_equal(got[k], v), k
    for name, b in plain.boosters().items():
        assert policy.boosters()[name].model_to_string() == b.model_to_string()
    # with the admission model given (the K choice's), only the prefetch models train
    kept, got2 = train_and_score(data, gbm, feats, admission=plain.admission)
    assert kept.admission is plain.admission
    for k, v in want.items():
        assert np.array_equal(got2[k], v), k
