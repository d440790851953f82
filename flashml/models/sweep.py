"""Optuna sweep over target write rates (and the starting eviction age): each trial runs
Baleen's convergence loop at its target and is scored by TCO; Baleen-TCO picks the write
rate with the lowest TCO. sqlite storage under .flashml/ by default, any RDB URL for parallel
workers; hopeless trials are pruned on the TCO of their first loop iteration."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from flashml.config import optuna_storage
from flashml.models.converge import run_loop
from flashml.policies.tco import tco
from flashml.settings import GbmParams, LoopSettings
from flashml.simulation import SimConfig

log = logging.getLogger(__name__)


def default_storage() -> str:
    """$FLASHML_OPTUNA_STORAGE, else sqlite under the state dir (flashml.config)."""
    return optuna_storage()


@dataclass
class SweepResult:
    study_name: str
    storage: str
    trials: list[dict[str, Any]]
    chosen_write_rate_mbps: float
    chosen_tco: float

    def curve(self) -> list[tuple[float, float]]:
        return [(t["write_rate_mbps"], t["tco"]) for t in self.trials if t["state"] == "COMPLETE"]


def run_sweep(df: pl.DataFrame, table: Path, feats: np.ndarray, base: SimConfig,
              target_mbps: float, peak0: float, wr0_mbps: float, workdir: Path,
              gbm: GbmParams, loop: LoopSettings, *, trials: int = 6,
              storage: str | None = None, study_name: str = "flashml-sweep",
              rate_range: tuple[float, float] = (0.25, 4.0), seed: int = 0,
              parent_run: Any = None, final_base: SimConfig | None = None) -> SweepResult:
    """Optuna over target write rate and starting eviction age; each trial is a convergence
    loop scored by TCO. With `final_base` (the peak schedule, models/peak.py) each trial's
    final threshold is tuned under it, as the shipped policy's is (run_loop)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = storage or default_storage()
    study = optuna.create_study(study_name=study_name, storage=storage, direction="minimize",
                                sampler=optuna.samplers.TPESampler(seed=seed),
                                pruner=optuna.pruners.MedianPruner(n_startup_trials=3,
                                                                   n_warmup_steps=0),
                                load_if_exists=True)
    lo, hi = target_mbps * rate_range[0], target_mbps * rate_range[1]
    # The user's target first, so the default rate is always on the curve.
    study.enqueue_trial({"write_rate_mbps": target_mbps,
                         "start_eviction_age_s": loop.start_eviction_age_s})

    def objective(trial: optuna.Trial) -> float:
        import mlflow

        wr = trial.suggest_float("write_rate_mbps", lo, hi, log=True)
        ea0 = trial.suggest_float("start_eviction_age_s", 1800.0, 4 * 3600.0, log=True)
        settings = replace(loop, start_eviction_age_s=ea0, max_iter=min(loop.max_iter, 6))
        with mlflow.start_run(run_name=f"sweep-trial-{trial.number}", nested=True):
            mlflow.log_params({"write_rate_mbps": wr, "start_eviction_age_s": ea0})
            res = run_loop(df, table, feats, base, wr, workdir / f"trial-{trial.number:03d}",
                           gbm, settings, final_base=final_base)
            for step, it in enumerate(res.iterations):
                val = tco(it.peak_dt_util, it.write_rate_mbps, peak0, wr0_mbps)
                trial.report(val, step)
            m = res.tuned.result.metrics
            value = tco(m["peak_dt_util"], m["flash_write_rate_mbps"], peak0, wr0_mbps)
            mlflow.log_metrics({k: float(v) for k, v in m.items()
                                if isinstance(v, (int, float)) and math.isfinite(v)})
            mlflow.log_metric("tco", value)
            trial.set_user_attr("measured_write_rate_mbps", float(m["flash_write_rate_mbps"]))
            trial.set_user_attr("peak_dt_util", float(m["peak_dt_util"]))
            trial.set_user_attr("converged", res.converged)
            if trial.should_prune():
                raise optuna.TrialPruned()
            return value

    from tqdm import tqdm

    bar = tqdm(total=trials, desc="sweep", unit="trial", disable=None)

    def tick(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        bar.update(1)

    study.optimize(objective, n_trials=trials, callbacks=[tick])
    bar.close()
    rows = []
    for t in study.trials:
        rows.append({"number": t.number, "state": t.state.name, "tco": t.value,
                     "target_write_rate_mbps": t.params.get("write_rate_mbps"),
                     "write_rate_mbps": t.user_attrs.get("measured_write_rate_mbps"),
                     "peak_dt_util": t.user_attrs.get("peak_dt_util"),
                     "start_eviction_age_s": t.params.get("start_eviction_age_s"),
                     "converged": t.user_attrs.get("converged")})
    best = study.best_trial
    return SweepResult(study_name, storage, rows,
                       float(best.user_attrs["measured_write_rate_mbps"]), float(best.value))
