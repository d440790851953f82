"""flashml_retrain: scheduled retraining of the flash-cache policy (Airflow 3).

    ingest_validate -> episodes -> train -> sweep -> evaluate -> compile -> promote

Each task calls one stage function of flashml.jobs.baleen -- the same functions
`flashml pipeline run` runs in one process -- on the run folder
`<workdir>/<dag_id>/<run_id>/`. Tasks pass only that path between them (a short XCom
string); every stage records `stages/<stage>.json` and returns the record when it is run
again, so retries and re-runs of a task are idempotent. `promote` moves the MLflow alias
`champion` and exports the bundle only if `evaluate` found the candidate better than the
champion on the held-out (evaluation) days of this run's trace; otherwise it is skipped.

Params (all optional; trigger with `airflow dags trigger flashml_retrain --conf '{...}'`):
  trace                  trace location, raw (see `format`) or canonical .parquet; `{ds}`
                         is replaced by the logical date (YYYY-MM-DD). Empty: generate the
                         synthetic `preset` (seed, accesses) -- a demo.
  target_write_rate_mbps flash write-rate target, MB/s at full-node scale
  cache_gb               flash cache size, GB at full-node scale
  train_hours            train on the trace's first H hours, judge every policy on the rest
                         (default 24: the first day)
  workdir                run folders (default $FLASHML_RETRAIN_DIR, else $FLASHML_HOME/retrain)
  export_dir             where a promoted bundle is exported (default $FLASHML_EXPORT_DIR,
                         else $FLASHML_HOME/exported): `v<version>/{policy,compiled}` and a
                         `champion` symlink to the newest promoted one
  engine                 episodes engine, spark (master: $FLASHML_SPARK_MASTER) or polars
  candidate_bundle       evaluate/promote this model bundle instead of training (drills)

Schedule: @daily, or $FLASHML_RETRAIN_SCHEDULE (a cron expression or preset).
"""

from __future__ import annotations

import os
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pendulum
from airflow.sdk import Param, dag, get_current_context, task

DAG_ID = "flashml_retrain"
# Kept literal (not imported) so parsing the DAG stays cheap; flashml.config has the same
# (tests/test_dag.py checks them).
DEFAULT_TARGET_WRITE_RATE_MBPS = 35.599
DEFAULT_CACHE_GB = 366.475
DEFAULT_TRAIN_HOURS = 24.0  # flashml.config: DEFAULTS.warmup_s / 3600 (tests/test_dag.py)

PARAMS = {
    "trace": Param("", type="string", description="trace location ({ds}: logical date); "
                   "empty: generate the synthetic preset"),
    "format": Param("", type="string", description="raw trace format (default tectonic; "
                    "ignored for .parquet)"),
    "target_write_rate_mbps": Param(DEFAULT_TARGET_WRITE_RATE_MBPS, type="number",
                                    exclusiveMinimum=0),
    "cache_gb": Param(DEFAULT_CACHE_GB, type="number", exclusiveMinimum=0),
    "train_hours": Param(DEFAULT_TRAIN_HOURS, type="number", exclusiveMinimum=0,
                         description="train on the trace's first H hours, judge on the rest"),
    "workdir": Param("", type="string"),
    "export_dir": Param("", type="string"),
    "engine": Param("spark", enum=["spark", "polars"]),
    "preset": Param("region1-like", type="string"),
    "seed": Param(0, type="integer"),
    "accesses": Param(0, type="integer", minimum=0, description="0: the preset's size"),
    "learning_rate": Param(0.05, type="number", exclusiveMinimum=0),
    "max_rounds": Param(500, type="integer", minimum=1),
    "max_iterations": Param(20, type="integer", minimum=1),
    "sweep_trials": Param(6, type="integer", minimum=0),
    "candidate_bundle": Param("", type="string"),
}

DEFAULT_ARGS = {"retries": 2, "retry_delay": timedelta(minutes=5), "owner": "flashml"}


def _params() -> dict[str, Any]:
    return dict(get_current_context()["params"])


def _state() -> Path:
    return Path(os.environ.get("FLASHML_HOME", ".flashml"))


def run_folder() -> Path:
    """`<workdir>/<dag_id>/<run_id>` (run id made file-name safe)."""
    ctx = get_current_context()
    workdir = _params()["workdir"] or os.environ.get("FLASHML_RETRAIN_DIR") or \
        str(_state() / "retrain")
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", ctx["run_id"])
    return (Path(workdir) / ctx["dag"].dag_id / safe).resolve()


def _settings(p: dict[str, Any]):  # type: ignore[no-untyped-def]
    from flashml.jobs.baleen import JobSettings
    from flashml.models.converge import LoopSettings
    from flashml.models.gbm import GbmParams

    gbm = GbmParams().with_overrides(learning_rate=float(p["learning_rate"]),
                                     num_boost_round=int(p["max_rounds"]))
    return JobSettings(cache_gb=float(p["cache_gb"]),
                       target_write_rate_mbps=float(p["target_write_rate_mbps"]),
                       engine=p["engine"], gbm=gbm,
                       loop=LoopSettings(max_iter=int(p["max_iterations"]),
                                         train_seconds=float(p["train_hours"]) * 3600.0),
                       sweep_trials=int(p["sweep_trials"]),
                       candidate_bundle=Path(p["candidate_bundle"])
                       if p["candidate_bundle"] else None)


def _stage(run_dir: str, fn_name: str, *args: Any) -> Any:
    """Run mainjob.<fn_name>(run, settings, ...) inside the run's MLflow run."""
    from flashml.jobs import baleen as mainjob

    p = _params()
    run = mainjob.RunDir(run_dir)
    with mainjob.open_run(run, f"{DAG_ID}-{Path(run_dir).name}",
                          {"trace": p["trace"] or f"generated:{p['preset']}:{p['seed']}",
                           "cache_gb": p["cache_gb"],
                           "target_write_rate_mbps": p["target_write_rate_mbps"],
                           "engine": p["engine"], "sweep_trials": p["sweep_trials"],
                           "dag_run": get_current_context()["run_id"]}):
        return getattr(mainjob, fn_name)(run, *args)


@dag(
    dag_id=DAG_ID,
    schedule=os.environ.get("FLASHML_RETRAIN_SCHEDULE", "@daily"),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,  # evaluate -> promote must not interleave with another run's
    default_args=DEFAULT_ARGS,
    params=PARAMS,
    tags=["flashml"],
    doc_md=__doc__,
)
def flashml_retrain() -> None:
    @task
    def ingest_validate() -> str:
        """Trace -> canonical table, validated by Great Expectations (fails the run if not)."""
        from flashml.jobs import baleen as mainjob

        p = _params()
        ctx = get_current_context()
        folder = run_folder()
        run = mainjob.RunDir(folder)
        if p["trace"]:
            ds = ctx.get("ds") or pendulum.now("UTC").to_date_string()
            raw = Path(p["trace"].replace("{ds}", ds))
        else:
            from flashml.trace.generate import generate_trace

            raw = folder / f"{p['preset']}-seed{p['seed']}.trace"
            if not raw.exists():
                generate_trace(p["preset"], int(p["seed"]), raw,
                               accesses=int(p["accesses"]) or None, progress=False)
        mainjob.ingest_validate(run, raw, p["format"] or None)
        return str(folder)

    @task
    def episodes(run_dir: str) -> str:
        """Episodes, OPT and labels at the starting eviction age (Spark by default)."""
        from flashml.jobs import baleen as mainjob

        s = _settings(_params())
        mainjob.episodes(mainjob.RunDir(run_dir), s, s.loop.start_eviction_age_s)
        return run_dir

    @task
    def train(run_dir: str) -> str:
        """Convergence loop + training -> candidate bundle, logged to MLflow."""
        _stage(run_dir, "train", _settings(_params()))
        return run_dir

    @task
    def sweep(run_dir: str) -> str:
        """Optuna sweep over write rate / eviction age scored by Baleen-TCO."""
        _stage(run_dir, "sweep", _settings(_params()))
        return run_dir

    @task
    def evaluate(run_dir: str) -> str:
        """Register the candidate; judge it against `champion` on the evaluation days."""
        _stage(run_dir, "evaluate", _settings(_params()))
        return run_dir

    @task
    def compile(run_dir: str) -> str:
        """Candidate bundle -> policy.so + header + manifest (Treelite, TL2cgen)."""
        _stage(run_dir, "compile_candidate")
        return run_dir

    @task
    def promote(run_dir: str) -> dict[str, Any]:
        """Move `champion` and export the bundle if the candidate passed; else skip."""
        from airflow.sdk.exceptions import AirflowSkipException

        p = _params()
        export = p["export_dir"] or os.environ.get("FLASHML_EXPORT_DIR") or \
            str(_state() / "exported")
        rec = _stage(run_dir, "promote", Path(export).resolve())
        if not rec["promoted"]:
            raise AirflowSkipException(f"not promoted: {rec['reason']}")
        return rec

    promote(compile(evaluate(sweep(train(episodes(ingest_validate()))))))


dag_object = flashml_retrain()
