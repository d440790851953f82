"""The shipped variant's held-out choice (flashml/models/validation.py) and what follows from
it: the feature set the choice shipped is the one every later retraining uses."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import polars as pl
import pytest

from flashml.settings import GbmParams, LoopSettings
from flashml.simulation import SimConfig, SimResult


def test_a_warm_started_loop_retrains_with_the_shipped_feature_set(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sweep trial is a convergence loop warm-started from the main loop (`WarmStart`):
    when CacheLib-ML's feature set shipped, a trial that has to retrain (its target moved
    the eviction age) trains without the size features too, not with all 18 (which would
    judge another model than the one shipped). The loop's stages are stubbed: only the
    feature set handed to the training is checked."""
    from flashml.episodes import core
    from flashml.models import converge
    from flashml.models.validation import zeroed_features
    from flashml.policies.tuning import Tuned

    zeroed = zeroed_features("cachelib_like")
    trained: list[tuple[str, ...]] = []

    def tuned(*_: Any, **__: Any) -> Tuned:  # measured EA far from the assumed: retrain
        m = {"avg_eviction_age_s": 50_000.0, "flash_write_rate_mbps": 10.0,
             "peak_dt_util": 0.1}
        return Tuned(0.5, SimResult(m, {}), 1, True, [(0.5, 10.0)])

    def build(_table: Path, out: Path, *_: Any, **__: Any) -> Any:
        out.mkdir(parents=True, exist_ok=True)
        pl.DataFrame({"row": [0]}).write_parquet(out / "labels.parquet")
        pl.DataFrame({"key": [0]}).write_parquet(out / "episodes.parquet")
        return SimpleNamespace(out=out, summary={"episodes": 1, "admitted_episodes": 1})

    def train_policy(*_: Any, zeroed: tuple[str, ...] = (), **__: Any) -> Any:
        trained.append(tuple(zeroed))
        return SimpleNamespace(admission=None)

    monkeypatch.setattr(converge, "tune_threshold", tuned)
    monkeypatch.setattr(core, "build", build)
    monkeypatch.setattr(converge, "training_data", lambda *a, **k: None)
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
