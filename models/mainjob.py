"""The main job: trace -> validated table -> episodes -> features -> convergence/training ->
baselines -> sweep -> simulation of every policy, tracked in MLflow, the winner compiled.

Policies (all at the same target write rate, on the same simulated cache):
`rejectx` (history factor tuned), `coinflip` (p tuned), `cachelib_ml` (the admission GBM
without the size features), `baleen_admission_only`, `baleen` (ML admission + ML-Range +
ML-When) and `opt` (episodes' OPT with OPT-Range: the bound). Peak DT and all metrics are
measured on the evaluation days (the first day is the simulator's warm-up and the models'
training window).
"""

from __future__ import annotations

import json
import logging
import math
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from flashml.config import DEFAULTS
from flashml.models import report
from flashml.models.baselines import tune_coinflip, tune_rejectx, tune_threshold
from flashml.models.converge import LoopSettings, run_loop
from flashml.models.train import GbmParams
from flashml.models.tuning import Tuned
from flashml.simulation import SimConfig

log = logging.getLogger("flashml.pipeline")


@dataclass
class JobSettings:
    cache_gb: float = DEFAULTS.cache_gb
    target_write_rate_mbps: float = DEFAULTS.target_write_rate_mbps
    engine: str = "spark"
    master: str | None = None
    gbm: GbmParams = field(default_factory=GbmParams)
    loop: LoopSettings = field(default_factory=LoopSettings)
    sweep_trials: int = 6
    register: bool = True
    compile: bool = True


class Timer:
    def __init__(self) -> None:
        self.stages: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str):  # type: ignore[no-untyped-def]
        log.info("stage %s ...", name)
        t0 = time.perf_counter()
        yield
        self.stages[name] = round(time.perf_counter() - t0, 2)
        log.info("stage %s done in %.1fs", name, self.stages[name])


def _metrics(t: Tuned, knob_name: str) -> dict[str, Any]:
    m = {k: (float(v) if isinstance(v, float) else v) for k, v in t.result.metrics.items()}
    m[knob_name] = t.knob
    m["reached_target"] = t.reached
    return m


def _finite(d: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in d.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


def run_policies(df: pl.DataFrame, table: Path, meta_ratio: float, out: Path,
                 s: JobSettings, timer: Timer) -> dict[str, Any]:
    """Everything after validation. Returns the summary (without writing it)."""
    import mlflow

    from flashml.features.contract import contract
    from flashml.features.online import feature_matrix

    base = SimConfig(sample_ratio=meta_ratio, cache_gb=s.cache_gb)
    target = s.target_write_rate_mbps
    work = out / "work"
    with timer.stage("features"):
        feats = feature_matrix(df)
    spark = None
    if s.engine == "spark":
        with timer.stage("spark session"):
            from flashml.pipelines.episodes_spark import spark_session

            spark = spark_session(s.master)
    policies: dict[str, dict[str, Any]] = {}
    tuned: dict[str, Tuned] = {}
    with timer.stage("convergence + training (baleen)"):
        loop = run_loop(df, table, feats, base, target, work / "baleen", s.gbm, s.loop)
    print(loop.report())
    ea = loop.eviction_age_s
    with timer.stage(f"episodes at the converged eviction age ({s.engine})"):
        from flashml.pipelines.episodes import EpisodeParams, build

        episodes = build(table, out / "episodes", EpisodeParams(
            eviction_age_s=ea, target_write_rate_mbps=target,
            accesses_per_episode=s.loop.accesses_per_episode),
            engine=s.engine, spark=spark, master=s.master)
    tuned["baleen"] = loop.tuned
    policies["baleen"] = _metrics(loop.tuned, "threshold")
    with timer.stage("baleen_admission_only"):
        tuned["baleen_admission_only"] = tune_threshold(
            df, base, target, {"score": loop.arrays["score"]})
        policies["baleen_admission_only"] = _metrics(tuned["baleen_admission_only"], "threshold")
    with timer.stage("cachelib_ml"):
        cl = run_loop(df, table, feats, base, target, work / "cachelib", s.gbm,
                      replace(s.loop, start_eviction_age_s=ea, max_iter=1),
                      features=list(contract().models["cachelib_like"]), with_prefetch=False)
        tuned["cachelib_ml"] = cl.tuned
        policies["cachelib_ml"] = _metrics(cl.tuned, "threshold")
    with timer.stage("baselines (rejectx, coinflip)"):
        tuned["rejectx"] = tune_rejectx(df, base, target)
        policies["rejectx"] = _metrics(tuned["rejectx"], "rejectx_factor")
        tuned["coinflip"] = tune_coinflip(df, base, target)
        policies["coinflip"] = _metrics(tuned["coinflip"], "coinflip_p")
    with timer.stage("opt"):
        from flashml.models.opt import tune_opt

        tuned["opt"] = tune_opt(df, table, base, target, ea, work / "opt")
        policies["opt"] = _metrics(tuned["opt"], "episode_target_write_rate_mbps")
    policies = {name: policies[name] for name in report.POLICIES}
    report.add_tco(policies, "rejectx", DEFAULTS.target_write_rate_mbps)
    peak0 = policies["rejectx"]["peak_dt_util"]

    sweep = None
    if s.sweep_trials > 0:
        with timer.stage(f"sweep ({s.sweep_trials} Optuna trials)"):
            from flashml.models.sweep import run_sweep

            run_id = mlflow.active_run().info.run_id
            sweep = run_sweep(df, table, feats, base, target, peak0,
                              DEFAULTS.target_write_rate_mbps, work / "sweep", s.gbm, s.loop,
                              trials=s.sweep_trials, study_name=f"flashml-{run_id}")

    for name, m in policies.items():
        with mlflow.start_run(run_name=name, nested=True):
            mlflow.log_param("policy", name)
            mlflow.log_metrics(_finite(m))
    summary: dict[str, Any] = {
        "policies": policies,
        "target_write_rate_mbps": target,
        "cache_gb": s.cache_gb,
        "eviction_age_s": ea,
        "convergence": {"converged": loop.converged, "reason": loop.reason,
                        "iterations": [asdict(i) for i in loop.iterations]},
        "episodes": {k: episodes.summary.get(k) for k in
                     ("episodes", "admitted_episodes", "cutoff_score", "dt_saved_ratio",
                      "littles_law_cache_gb", "engine")},
        "baleen_vs_rejectx_peak_reduction": 1 - policies["baleen"]["peak_dt_util"] / peak0,
        "gap_to_opt": policies["baleen"]["peak_dt_util"] / policies["opt"]["peak_dt_util"] - 1,
    }
    if sweep is not None:
        summary["sweep"] = {"study": sweep.study_name, "storage": sweep.storage,
                            "trials": sweep.trials}
        summary["chosen_write_rate_mbps"] = sweep.chosen_write_rate_mbps
        summary["chosen_tco"] = sweep.chosen_tco
    else:
        summary["chosen_write_rate_mbps"] = target

    with timer.stage("plots"):
        _plots(out, tuned, policies, loop, sweep, summary)
    with timer.stage("policy bundle, registry"):
        _ship(out, loop, policies, ea, target, df, feats, base, s, summary)
    if spark is not None:
        spark.stop()
    return summary


def _plots(out: Path, tuned: dict[str, Tuned], policies: dict[str, dict[str, Any]],
           loop: Any, sweep: Any, summary: dict[str, Any]) -> None:
    import mlflow

    from flashml.plots import plot_dt_utilisation

    figs = out / "plots"
    figs.mkdir(parents=True, exist_ok=True)
    paths = [plot_dt_utilisation({n: tuned[n].result.series for n in report.POLICIES},
                                 figs / "dt_utilisation.png",
                                 title="DT utilisation per policy (peak marked)")]
    points = {n: [(m["flash_write_rate_mbps"], m["peak_dt_util"])] for n, m in policies.items()}
    if sweep is not None:
        points["baleen (sweep)"] = [(t["write_rate_mbps"], t["peak_dt_util"])
                                    for t in sweep.trials if t["state"] == "COMPLETE"]
        paths.append(report.plot_tco_curve(sweep.curve(), sweep.chosen_write_rate_mbps,
                                           figs / "tco_curve.png"))
    paths.append(report.plot_write_rate_vs_peak(points, figs / "write_rate_vs_peak_dt.png"))
    adm = loop.policy.admission
    paths.append(report.plot_feature_importance(
        adm.feature_name(), list(adm.feature_importance("gain")),
        figs / "feature_importance.png"))
    for p in paths:
        mlflow.log_artifact(str(p), artifact_path="plots")
    summary["plots"] = [str(p) for p in paths]


def _ship(out: Path, loop: Any, policies: dict[str, dict[str, Any]], ea: float, target: float,
          df: pl.DataFrame, feats: np.ndarray, base: SimConfig, s: JobSettings,
          summary: dict[str, Any]) -> None:
    """Policy bundle (models + thresholds) to MLflow, the admission model with a signature,
    the registry's champion rule, and the compiled policy .so."""
    import mlflow
    from mlflow.models import infer_signature

    from flashml.compiler.bundle import save_policy_models

    run_id = mlflow.active_run().info.run_id
    m = policies["baleen"]
    bundle = save_policy_models(
        out / "policy", loop.policy.boosters(), admit_threshold=m["threshold"],
        when_threshold=base.when_threshold, eviction_age_s=ea, target_write_rate_mbps=target,
        metrics={k: v for k, v in _finite(m).items() if k != "threshold"},
        mlflow_run_id=run_id)
    mlflow.log_artifacts(str(bundle), artifact_path="policy")
    sample = feats[:: max(1, len(feats) // 200)][:200]
    info = mlflow.lightgbm.log_model(loop.policy.admission, name="admission",
                                     signature=infer_signature(
                                         sample, loop.policy.admission.predict(sample)))
    summary["policy_bundle"] = str(bundle)
    summary["mlflow_run_id"] = run_id
    if s.register:
        from flashml.models.registry import register_and_maybe_promote

        decision = register_and_maybe_promote(run_id, info.model_uri, m["peak_dt_util"], df,
                                              feats, base, target)
        summary["registry"] = decision.as_dict()
        log.info("registry: %s", decision.reason)
    if s.compile:
        from flashml.compiler.build import compile_policy

        manifest = compile_policy(out / "compiled", run_id=run_id)
        summary["compiled"] = {"dir": str(out / "compiled"), "sha256": manifest["sha256"],
                               "size_bytes": manifest["size_bytes"],
                               "compile_s": round(manifest["build"]["compile_s"], 2)}


def write_summary(out: Path, summary: dict[str, Any]) -> Path:
    path = out / "summary.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(summary, indent=2, default=str) + "\n")
    tmp.replace(path)
    return path
