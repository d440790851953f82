"""The registry rule on a small trace, with real MLflow (sqlite store in a temp folder):
the first candidate becomes champion, a worse one is not promoted, a better one is."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conftest import seed_mlflow_store


@pytest.fixture
def isolated_mlflow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("FLASHML_HOME", str(seed_mlflow_store(tmp_path / "state")))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    from flashml.tracking import setup

    setup("registry-test")
    yield tmp_path


def test_champion_moves_only_for_a_better_candidate(isolated_mlflow: Path) -> None:
    import mlflow

    from flashml.compiler.bundle import save_policy_models
    from flashml.features.online import feature_matrix
    from flashml.settings import GbmParams, LoopSettings
    from flashml.simulation import SimConfig
    from flashml.systems.baleen.converge import run_loop
    from flashml.systems.baleen.registry import evaluate, register_and_maybe_promote
    from flashml.trace.canonical import read_table
    from flashml.trace.generate import generate_trace
    from flashml.trace.ingest import ingest
    from flashml.tracking import CHAMPION, REGISTERED_MODEL

    d = isolated_mlflow
    generate_trace("region1-like", 4, d / "t.trace", accesses=20_000, progress=False)
    ingest(d / "t.trace", d / "t.parquet", "tectonic", progress=False)
    df, meta = read_table(d / "t.parquet")
    feats = feature_matrix(df)
    base = SimConfig.for_trace(meta)
    target = 35.599
    loop = run_loop(df, d / "t.parquet", feats, base, target, d / "w",
                    GbmParams(learning_rate=0.1, num_boost_round=40), LoopSettings(max_iter=1))
    peak = evaluate(loop.policy, df, feats, base, target, loop.when_threshold)
    assert peak == pytest.approx(loop.tuned.result.metrics["peak_dt_util"])

    def candidate(claimed_peak: float):
        with mlflow.start_run() as run:
            bundle = save_policy_models(d / f"p-{run.info.run_id}", loop.policy.boosters(),
                                        admit_threshold=loop.tuned.knob,
                                        when_threshold=loop.when_threshold,
                                        eviction_age_s=7200, target_write_rate_mbps=target)
            mlflow.log_artifacts(str(bundle), artifact_path="policy")
            info = mlflow.lightgbm.log_model(loop.policy.admission, name="admission")
            return register_and_maybe_promote(run.info.run_id, info.model_uri, claimed_peak,
                                              df, feats, base, target)

    first = candidate(peak)
    assert first.promoted and first.champion_version is None
    worse = candidate(peak + 0.05)
    assert not worse.promoted
    assert worse.champion_peak == pytest.approx(peak)  # the champion re-evaluated on this trace
    better = candidate(peak - 0.05)
    assert better.promoted
    client = mlflow.MlflowClient()
    champ = client.get_model_version_by_alias(REGISTERED_MODEL, CHAMPION)
    assert champ.version == better.candidate_version != first.candidate_version
    assert np.isfinite(better.champion_peak)
