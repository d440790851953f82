"""flashml_retrain: scheduled retraining of the flash-cache policy (Airflow 3).

`ingest -> train -> episodes -> policies -> sweep -> plots -> compile -> evaluate -> promote`

One task per stage of `flashml.systems.baleen.job.STAGES`, the stage list `flashml pipeline run`
runs in one process, on the run folder `<workdir>/<dag_id>/<run_id>/`. Tasks pass only that
path between them (a short XCom string); every stage records `stages/<stage>.json` and
returns the record when it is run again, so retries and re-runs of a task are idempotent.
`evaluate` registers the compiled policy bundle and judges it against the MLflow alias
`champion` on the held-out (evaluation) days of this run's trace; `promote` moves the alias
and exports the bundle only if the candidate won, otherwise it is skipped.

**Params** (all optional: *Trigger* works with the defaults and generates a demo trace;
or `airflow dags trigger flashml_retrain --conf '{...}'`):

- `target_write_rate`: the flash write-rate target at full-node scale, a number and its
  unit as you would say it: `35.599 MiB/s` (the default, the artifact's 7.5 DWPD) or
  `37.3 MB/s` (MB/s = 10^6 B/s, MiB/s = 2^20 B/s; a bare number is MB/s, as
  `--target-write-rate`). `--conf '{"target_write_rate_mbps": 20}'` (MB/s) is taken too.
- the other run settings of `flashml pipeline run` (flashml/settings.py: same names,
  defaults and bounds): `cache_gb`, `train_hours`, `engine`, `learning_rate`,
  `max_rounds`, `max_iterations`, `peak_hours`, `peak_bonus`, `sweep_trials`,
  `sweep_cold`, `sweep_workers`, `sweep_screen_margin`, `memory_gib`, `skip_bad_lines`
- `trace`: trace location, raw (see `format`) or canonical .parquet; `{ds}` is replaced by
  the logical date (YYYY-MM-DD). Empty: generate the synthetic `preset` (`seed`,
  `accesses`), a demo
- `format`: raw trace format, one of the block-trace readers (empty: tectonic, or the
  canonical table for a .parquet trace)
- `sample_ratio`: percent of the full node the trace samples (empty: from the trace)
- `workdir`: run folders (empty: `$FLASHML_RETRAIN_DIR`, else `<state>/retrain`)
- `export_dir`: where a promoted bundle is exported (empty: `$FLASHML_EXPORT_DIR`, else
  `<state>/exported`): `v<version>/{policy,compiled}` and a `champion` symlink to the
  newest promoted one
- `candidate_bundle`: evaluate/promote this model bundle instead of training (drills)

**State** (MLflow and Optuna sqlite stores, run folders, exports): `$FLASHML_HOME`, else
`.flashml` beside this file's folder (`<repo>/.flashml`), always made absolute, so where a
task writes never depends on the worker's working directory.

**Schedule and Trigger**: daily at 00:00 UTC, or `$FLASHML_RETRAIN_SCHEDULE` (a cron
expression or preset such as `@hourly`; `none`: manual runs only). The DAG is paused when
Airflow first sees it; its first scheduled run is at the first tick *after* it is
unpaused, never one for a tick that has already passed. So one *Trigger* click (the form's
"Unpause flashml_retrain on trigger" ticked, as it is by default) makes exactly one run,
which starts at once with the form's params; scheduled runs (with the defaults above)
follow at the next ticks while the DAG stays unpaused. Only one run is active at a time
(`max_active_runs=1`): a second trigger queues behind the first. A DAG that has had
scheduled runs, was paused, and is unpaused again also gets the most recent missed
tick's run at once (Airflow's `catchup=False`), besides the triggered one.
"""

from __future__ import annotations

import os
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pendulum
from airflow.sdk import Param, dag, get_current_context, task
from airflow.timetables.trigger import CronTriggerTimetable

from flashml.errors import UserError
from flashml.settings import BaleenSettings, dag_params
from flashml.systems.baleen.job import STAGES
from flashml.trace.formats import FORMATS

DAG_ID = "flashml_retrain"
DESCRIPTION = ("Retrain the Baleen flash-cache policy on a trace (default: a generated "
               "demo): train, judge every policy, compile policy.so, promote it to the "
               "MLflow alias 'champion' only if it beats the current one")
_OPTIONAL = ["null", "string"]
#: A write rate as the user says it: a number and MB/s (10^6 B/s) or MiB/s (2^20 B/s).
RATE_PATTERN = r"^\s*[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?\s*(MB/s|MiB/s)?\s*$"
RATE_UNITS = {"MB/s": 1.0, "MiB/s": 2**20 / 1e6, "": 1.0}
DEFAULT_RATE = "35.599 MiB/s"


def rate_mbps(text: str) -> float:
    """`35.599 MiB/s`, `37.3 MB/s` or `37.3` (MB/s) -> MB/s."""
    m = re.match(RATE_PATTERN, str(text))
    if m is None:
        raise UserError(f"param target_write_rate: {text!r} is not a write rate; give a "
                        "number and its unit, e.g. 35.599 MiB/s or 37.3 MB/s")
    unit = m.group(2) or ""
    return float(str(text).strip().removesuffix(unit)) * RATE_UNITS[unit]


def schedule() -> CronTriggerTimetable | str | None:
    """Daily at 00:00 UTC (or $FLASHML_RETRAIN_SCHEDULE; `none`: manual only), first run at
    the first tick after the DAG is unpaused: no start date and `run_immediately` a zero
    window (Airflow's `False` still runs a tick that passed less than a tenth of the interval
    ago, 2.4 h for a daily schedule, beside the run a Trigger click starts)."""
    cron = os.environ.get("FLASHML_RETRAIN_SCHEDULE", "@daily").strip()
    if cron.lower() in ("none", ""):
        return None
    if cron in ("@once", "@continuous"):
        return cron
    return CronTriggerTimetable(cron, timezone="UTC", run_immediately=timedelta(0))


def state_home() -> Path:
    """The tasks' state folder, absolute: $FLASHML_HOME (a relative one taken from the
    repository, the parent of this file's folder), else `<repo>/.flashml`."""
    repo = Path(__file__).resolve().parent.parent
    return (repo / os.environ.get("FLASHML_HOME", ".flashml")).expanduser().resolve()

PARAMS = {
    "trace": Param(None, type=_OPTIONAL, description="trace location ({ds}: logical date); "
                   "empty: generate the synthetic preset"),
    "format": Param(None, type=_OPTIONAL, enum=[None, *FORMATS],
                    values_display={"null": "auto: tectonic, or a .parquet table as it is",
                                    **{f: f for f in FORMATS}},
                    description="raw trace format (empty: tectonic; a .parquet trace is read "
                    "as the canonical table)"),
    "sample_ratio": Param(None, type=["null", "number"], exclusiveMinimum=0, maximum=100,
                          description="percent of the full node the trace samples (empty: "
                          "from the trace)"),
    "preset": Param(BaleenSettings.preset, type="string",
                    description="synthetic preset generated when `trace` is empty"),
    "seed": Param(BaleenSettings.seed, type="integer",
                  description="seed of the generated trace"),
    "accesses": Param(None, type=["null", "integer"], minimum=1,
                      description="size of the generated trace (empty: the preset's)"),
    "target_write_rate": Param(
        DEFAULT_RATE, type="string", pattern=RATE_PATTERN,
        description="flash write-rate target at full-node scale: a number and its unit, MiB/s "
        "(2^20 B/s) or MB/s (10^6 B/s; a bare number is MB/s). Default: the artifact's "
        "35.599 MiB/s (7.5 DWPD)"),
    **{name: Param(spec.pop("default"), **spec) for name, spec in dag_params().items()
       if name != "target_write_rate_mbps"},
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
    if p.get("target_write_rate_mbps") is None:  # `--conf` may give MB/s as the CLI does
        p["target_write_rate_mbps"] = rate_mbps(p.get("target_write_rate") or DEFAULT_RATE)
    p.pop("target_write_rate", None)
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
    from flashml.jobs.run import Timer, open_run
    from flashml.systems.baleen import job as baleen
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
    description=DESCRIPTION,
    # no start date: the first scheduled run is the first tick after unpausing (a start
    # date in the past with catchup=False schedules the tick that just passed, at once)
    schedule=schedule(),
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
