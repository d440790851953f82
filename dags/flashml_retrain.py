"""flashml_retrain: scheduled retraining of the flash-cache policy (Airflow 3).

`ingest -> train -> episodes -> policies -> sweep -> plots -> compile -> evaluate -> promote`

One task per stage of `flashml.jobs.baleen.STAGES`, the stage list `flashml pipeline run`
runs in one process, on the run folder `<workdir>/<dag_id>/<run_id>/`. Tasks pass only that
path between them (a short XCom string); every stage records `stages/<stage>.json` and
returns the record when it is run again, so retries and re-runs of a task are idempotent.
`evaluate` registers the compiled policy bundle and judges it against the MLflow alias
`champion` on the held-out (evaluation) days of this run's trace; `promote` moves the alias
and exports the bundle only if the candidate won, otherwise it is skipped.

**Params** (all optional: *Trigger* works with the defaults and generates a demo trace;
or `airflow dags trigger flashml_retrain --conf '{...}'`):

- the run settings of `flashml pipeline run` (flashml/settings.py: same names, defaults and
  bounds): `target_write_rate_mbps`, `cache_gb`, `train_hours`, `engine`, `learning_rate`,
  `max_rounds`, `max_iterations`, `peak_hours`, `peak_bonus`, `sweep_trials`,
  `sweep_cold`, `sweep_workers`, `skip_bad_lines`
- `trace`: trace location, raw (see `format`) or canonical .parquet; `{ds}` is replaced by
  the logical date (YYYY-MM-DD). Empty: generate the synthetic `preset` (`seed`,
  `accesses`), a demo
- `format`: raw trace format (empty: tectonic)
- `sample_ratio`: percent of the full node the trace samples (empty: from the trace)
- `workdir`: run folders (empty: `$FLASHML_RETRAIN_DIR`, else `<state>/retrain`)
- `export_dir`: where a promoted bundle is exported (empty: `$FLASHML_EXPORT_DIR`, else
  `<state>/exported`): `v<version>/{policy,compiled}` and a `champion` symlink to the
  newest promoted one
- `candidate_bundle`: evaluate/promote this model bundle instead of training (drills)

**State** (MLflow and Optuna sqlite stores, run folders, exports): `$FLASHML_HOME`, else
`.flashml` beside this file's folder (`<repo>/.flashml`), always made absolute, so where a
task writes never depends on the worker's working directory.

**Schedule**: `@daily`, or `$FLASHML_RETRAIN_SCHEDULE` (a cron expression or preset).
"""

from __future__ import annotations

import os
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pendulum
from airflow.sdk import Param, dag, get_current_context, task

from flashml.jobs.baleen import STAGES
from flashml.settings import BaleenSettings, dag_params

DAG_ID = "flashml_retrain"
_OPTIONAL = ["null", "string"]


def state_home() -> Path:
    """The tasks' state folder, absolute: $FLASHML_HOME (a relative one taken from the
    repository, the parent of this file's folder), else `<repo>/.flashml`."""
    repo = Path(__file__).resolve().parent.parent
    return (repo / os.environ.get("FLASHML_HOME", ".flashml")).expanduser().resolve()

PARAMS = {
    "trace": Param(None, type=_OPTIONAL, description="trace location ({ds}: logical date); "
                   "empty: generate the synthetic preset"),
    "format": Param(None, type=_OPTIONAL, description="raw trace format (default tectonic; "
                    "ignored for .parquet)"),
    "sample_ratio": Param(None, type=["null", "number"], exclusiveMinimum=0, maximum=100,
                          description="percent of the full node the trace samples (empty: "
                          "from the trace)"),
    "preset": Param(BaleenSettings.preset, type="string",
                    description="synthetic preset generated when `trace` is empty"),
    "seed": Param(BaleenSettings.seed, type="integer",
                  description="seed of the generated trace"),
    "accesses": Param(None, type=["null", "integer"], minimum=1,
                      description="size of the generated trace (empty: the preset's)"),
    **{name: Param(spec.pop("default"), **spec) for name, spec in dag_params().items()},
    "workdir": Param(None, type=_OPTIONAL, description="run folders (empty: "
                     "$FLASHML_RETRAIN_DIR, else <state>/retrain)"),
    "export_dir": Param(None, type=_OPTIONAL, description="where promoted bundles go "
                        "(empty: $FLASHML_EXPORT_DIR, else <state>/exported)"),
    "candidate_bundle": Param(None, type=_OPTIONAL,
                              description="evaluate this model bundle instead of training"),
}

DEFAULT_ARGS = {"retries": 2, "retry_delay": timedelta(minutes=5), "owner": "flashml"}


def _params() -> dict[str, Any]:
    return dict(get_current_context()["params"])


def run_folder() -> Path:
    """`<workdir>/<dag_id>/<run_id>` (run id made file-name safe)."""
    ctx = get_current_context()
    workdir = _params()["workdir"] or os.environ.get("FLASHML_RETRAIN_DIR") or \
        str(state_home() / "retrain")
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", ctx["run_id"])
    return (Path(workdir) / ctx["dag"].dag_id / safe).resolve()


def settings() -> BaleenSettings:
    """The run's settings from its params: `{ds}` in the trace filled in, the export folder
    defaulted from the environment, a generated trace inside the run folder."""
    p = _params()
    if p.get("trace"):
        ctx = get_current_context()
        ds = ctx.get("ds") or pendulum.now("UTC").to_date_string()
        p["trace"] = p["trace"].replace("{ds}", ds)
    p["export_dir"] = str(Path(p.get("export_dir") or os.environ.get("FLASHML_EXPORT_DIR")
                               or state_home() / "exported").resolve())
    return BaleenSettings.from_dag_params(p)


def run_stage(run_dir: str, name: str) -> dict[str, Any]:
    """Run the job's stage `name` on the run folder inside the run's MLflow run. The task
    holds the run folder's lock while it runs (`flashml.jobs.run.RunFolder`): another task,
    DAG run or `flashml pipeline run` on the same folder meanwhile is refused; a failed
    task puts the folder back as it was before it (the first task's folder is removed)."""
    from flashml.jobs.run import RunFolder

    # MLflow and Optuna find their stores through FLASHML_HOME: absolute in this task.
    os.environ["FLASHML_HOME"] = str(state_home())
    s = settings()
    with RunFolder(run_dir, option="the run folder") as folder:
        return _run_stage(folder, s, name)


def _run_stage(folder: Any, s: BaleenSettings, name: str) -> dict[str, Any]:
    from flashml.jobs import baleen
    from flashml.jobs.run import Timer, open_run
    from flashml.tracking import end_stale_runs

    run = folder.run
    end_stale_runs()
    stage = next(st for st in STAGES if st.name == name)
    if name == "ingest":  # before the MLflow run: a bad trace opens no run
        return stage.fn(run, s, Timer())
    dag_run = get_current_context()["run_id"]
    params = s.mlflow_params() | {"dag_run": dag_run}
    tags = baleen.mlflow_tags(run, s, "dag") | {"airflow.dag_id": DAG_ID,
                                                 "airflow.run_id": dag_run}
    with open_run(run, baleen.run_name(s, DAG_ID, dag_run), params, tags=tags,
                  description=baleen.describe_run(run, s, "dag")):
        return stage.fn(run, s, Timer())


def _task(name: str, doc: str):  # type: ignore[no-untyped-def]
    @task(task_id=name, doc=doc)
    def run(run_dir: str | None = None) -> str:
        folder = run_dir or str(run_folder())
        rec = run_stage(folder, name)
        if name == "promote" and not rec.get("promoted", False):
            from airflow.sdk.exceptions import AirflowSkipException

            raise AirflowSkipException(f"not promoted: {rec.get('reason', rec)}")
        return folder

    return run


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
    folder = None
    for st in STAGES:
        folder = _task(st.name, st.doc)(folder)


dag_object = flashml_retrain()
