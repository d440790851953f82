"""The shipped variant's held-out choice (flashml/systems/baleen/validation.py) and what follows
from it: the simpler candidate wins a tie, the window is judged once the cache has filled, and
the feature set the choice shipped is the one every later retraining uses."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import polars as pl
import pytest

from flashml.settings import GbmParams, LoopSettings
from flashml.simulation import SimConfig, SimResult, simulate

from conftest import access_table

DAY = 86_400.0 * 19_000  # a midnight, UTC


def test_fewer_features_win_a_tie_as_the_flat_threshold_does() -> None:
    """The held-out window's peak differs by 0.4% between Baleen's features and
    CacheLib-ML's (no size features), both flat: within the 1% noise of a one-window peak,
    so the reader ships the smaller model, as a schedule within 1% of the flat threshold is
    not shipped. A 1.5% gap is a signal: Baleen's size features earn their place."""
    from flashml.systems.baleen.validation import Candidate, feature_count, pick

    def c(fs: str, bonus: float, peak: float) -> Candidate:
        return Candidate(fs, (10, 11, 12) if bonus else (), bonus, peak_dt_util=peak)

    assert (feature_count("cachelib_like"), feature_count("baleen")) == (15, 18)
    baleen, sched = c("baleen", 0.0, 0.2000), c("baleen", 0.1, 0.1990)
    close, far = c("cachelib_like", 0.0, 0.2008), c("cachelib_like", 0.0, 0.2030)
    assert pick([baleen, sched, close]) is close  # the simplest within 1% of 0.1990
    assert pick([baleen, sched, far]) is baleen  # 2% above the best: out
    assert pick([sched, c("cachelib_like", 0.1, 0.1992)]).feature_set == "cachelib_like"


def test_ml_when_prefetches_only_when_it_beats_less_prefetch_by_more_than_noise() -> None:
    """ML-When's training-day peaks by threshold (1.0: never prefetch): 0.7 is lowest, 0.9
    is 0.3% above it (noise): the reader keeps the lesser prefetch, 0.9; with 0.9 at 1.5%
    above, 0.7 has earned it. NaN (no measured window) never wins."""
    from flashml.systems.baleen.converge import simplest_when

    assert simplest_when({0.5: 0.0723, 0.7: 0.0716, 0.9: 0.0718, 1.0: 0.0744}) == 0.9
    assert simplest_when({0.5: 0.0723, 0.7: 0.0716, 0.9: 0.0727, 1.0: 0.0744}) == 0.7
    assert simplest_when({0.5: 0.0700, 1.0: float("nan")}) == 0.5


def test_the_window_is_judged_once_the_cache_has_filled() -> None:
    """A cold cache misses on every access of the day's first windows, whatever a policy
    admits, so they set the training day's peak and every variant ties there (the evaluation
    days are measured after a day of warm-up). The held-out choice and ML-When's leave out
    the time the target write rate takes to fill the cache (1 GiB at 1 MB/s: 1,074 s, two
    10-minute windows), at most half the day's span."""
    from flashml.systems.baleen.converge import fill_seconds, warm_training_day

    base = SimConfig(sample_ratio=100.0, cache_gb=1.0, admission="rejectx", warmup_s=86_400.0)
    assert fill_seconds(base, 1.0, 86_400.0) == 1200.0
    assert fill_seconds(base, 1.0, 1900.0) == 600.0  # half of 1,900 s, in whole windows
    assert fill_seconds(base, 1.0, 900.0) == 0.0
    # the first 10 minutes: 200 distinct 1 MiB blocks read once (cold misses); then one
    # block re-read every minute until 03:00, and a second day to judge on
    rows = [(DAY + 3.0 * i, 1000 + i, 0, 2**20, 2) for i in range(200)]
    rows += [(DAY + 600.0 + 60.0 * i, 7, 0, 2**20, 2) for i in range(170)]
    rows += [(DAY + 86_400.0 + 60.0 * i, 7, 0, 2**20, 2) for i in range(20)]
    df = access_table(rows)
    n, day, cfg = warm_training_day(df, base, 86_400.0, 1.0)
    assert n == 370 and cfg.warmup_s == 1200.0
    cold = simulate(day, cfg.replace(warmup_s=0.0)).series
    warm = simulate(day, cfg).series
    d = np.asarray(cold["dt_util"])
    assert int(np.argmax(d)) == 0  # the cold start sets the day's peak
    measured = ~np.asarray(warm["warmup"], dtype=bool)
    assert not measured[:2].any() and measured[2:].all()
    assert np.max(np.asarray(warm["dt_util"])[measured]) < d[0] / 10


def test_a_warm_started_loop_retrains_with_the_shipped_feature_set(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sweep trial is a convergence loop warm-started from the main loop (`WarmStart`):
    when CacheLib-ML's feature set shipped, a trial that has to retrain (its target moved
    the eviction age) trains without the size features too, not with all 18 (which would
    judge another model than the one shipped). The loop's stages are stubbed: only the
    feature set handed to the training is checked."""
    from flashml.systems.baleen import converge
    from flashml.systems.baleen.episodes import core
    from flashml.systems.baleen.tuning import Tuned
    from flashml.systems.baleen.validation import zeroed_features

    zeroed = zeroed_features("cachelib_like")
    trained: list[tuple[str, ...]] = []

    def tuned(*_: Any, **__: Any) -> Tuned:  # measured EA far from the assumed: retrain
        m = {"avg_eviction_age_s": 50_000.0, "flash_write_rate_mbps": 10.0,
             "peak_dt_util": 0.1}
        return Tuned(0.5, SimResult(m, {}), 1, True, [(0.5, 10.0)])

    def build(_table: Path, out: Path, *_: Any, **__: Any) -> Any:
        out.mkdir(parents=True, exist_ok=True)
        pl.DataFrame({"row": [0], "key": [0], "opt_label": [1], "position": [0]}) \
            .write_parquet(out / "labels.parquet")
        pl.DataFrame({"first_row": [0], "key": [0], "range_start": [0], "range_end": [0],
                      "when_label": [0], "admitted": [True]}).write_parquet(
            out / "episodes.parquet")
        return SimpleNamespace(out=out, summary={"episodes": 1, "admitted_episodes": 1})

    def train_policy(*_: Any, zeroed: tuple[str, ...] = (), **__: Any) -> Any:
        trained.append(tuple(zeroed))
        return SimpleNamespace(admission=None)

    monkeypatch.setattr(converge, "tune_threshold", tuned)
    monkeypatch.setattr(core, "build", build)
    monkeypatch.setattr(converge, "training_data", lambda *a, **k: None)
    monkeypatch.setattr(converge, "training_key", lambda *a, **k: object())  # never equal
    monkeypatch.setattr(converge, "train_policy", train_policy)
    monkeypatch.setattr(converge, "score_all", lambda _p, f: {"score": np.zeros(len(f))})
    df = pl.DataFrame({"time": [0.0, 1.0]})
    warm = converge.WarmStart(7200.0, 6, SimpleNamespace(), {"score": np.zeros(2)}, 1.0,
                              zeroed=zeroed)
    converge.run_loop(df, tmp_path / "t.parquet", np.zeros((2, 18)), SimConfig(), 10.0,
                      tmp_path, GbmParams(), LoopSettings(max_iter=2), with_prefetch=False,
                      warm=warm)
    assert trained == [zeroed]  # iteration 0 is the warm model; iteration 1 retrains
    # the main loop's record of the shipped set reaches the sweep's warm start
    loop = SimpleNamespace(eviction_age_s=1.0, extra={"accesses_per_episode": 6,
                                                      "zeroed": zeroed},
                           policy=None, arrays={}, when_threshold=1.0, points=[],
                           when_points={}, final_points=[])
    assert converge.WarmStart.from_loop(loop, 6).zeroed == zeroed  # type: ignore[arg-type]
