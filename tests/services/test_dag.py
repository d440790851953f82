"""dags/flashml_retrain.py: it imports without errors (DagBag), and the whole DAG runs end to
end with `dag.test()` against a sqlite Airflow metadata DB in a temporary AIRFLOW_HOME, on a
small generated trace, with an isolated FLASHML_HOME (MLflow, Optuna, exported bundles).

Run 1 trains on a fresh store: the candidate becomes champion and its bundle is exported.
Run 2 evaluates a deliberately worse candidate (the champion's admission model with its
leaf values negated) through the same DAG: evaluate fails it, promote is skipped, the
alias and the exported champion stay where they were."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, python_argv, seed_mlflow_store

DRIVER = r"""
import json, runpy, sys
from pathlib import Path

import pendulum

cfg = json.loads(sys.argv[1])
dag = runpy.run_path(cfg["dag_file"])["dag_object"]
out = []
for i, conf in enumerate(cfg["runs"]):
    if conf.pop("degrade_champion", False):
        from flashml.commands.regress import degrade_bundle

        src = Path(conf["export_dir"]) / "champion" / "policy"
        conf["candidate_bundle"] = str(degrade_bundle(src, Path(cfg["tmp"]) / "degraded"))
    dr = dag.test(run_conf=conf, logical_date=pendulum.datetime(2026, 1, 2 + i, tz="UTC"))
    out.append({"state": str(dr.state), "run_id": dr.run_id})
print("RESULT " + json.dumps(out))
"""


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AIRFLOW", "FLASHML_", "MLFLOW_"))}
    env |= {
        "AIRFLOW_HOME": str(tmp / "airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "FLASHML_HOME": str(seed_mlflow_store(tmp / "state")),
        "PYTHONPATH": str(REPO / "tests"),
    }
    return env


def _py(code: str, *args: str, env: dict[str, str], timeout: float
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*python_argv(), "-c", code, *args], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=timeout)


def test_dag_params_are_the_settings_table(tmp_path: Path) -> None:
    """The DAG's run settings come from flashml/settings.py: same names, defaults and bounds
    as `flashml pipeline run`'s options, and every param maps onto BaleenSettings."""
    code = """
import json, os, runpy, sys
mod = runpy.run_path(sys.argv[1])
homes = {}
for home in (None, "rel/state"):  # unset, relative: absolute either way
    os.environ.pop("FLASHML_HOME", None)
    if home:
        os.environ["FLASHML_HOME"] = home
    homes[str(home)] = str(mod["state_home"]())
print("RESULT " + json.dumps({k: {"default": p.value, "schema": p.schema,
                                  "description": p.description}
                              for k, p in mod["PARAMS"].items()}, default=str))
print("DOC " + json.dumps(mod["dag_object"].doc_md))
print("HOMES " + json.dumps(homes))
rates = {}
for text in ("35.599 MiB/s", "37.3 MB/s", "20", " 1e1MiB/s ", "fast"):
    try:
        rates[text] = mod["rate_mbps"](text)
    except Exception as e:
        rates[text] = str(e)
print("RATES " + json.dumps(rates))
"""
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    proc = subprocess.run([*python_argv(), "-c", code, str(REPO / "dags" / "flashml_retrain.py")],
                          capture_output=True, text=True, env=_env(tmp_path), cwd=elsewhere,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    params = json.loads(proc.stdout.split("RESULT ", 1)[1].splitlines()[0])
    # the Trigger form: every param described; the DAG page's param list is a Markdown list
    assert all(p["description"] for p in params.values()), params
    doc = json.loads(proc.stdout.split("DOC ", 1)[1].splitlines()[0])
    assert "\n- `trace`:" in doc and "\n- `candidate_bundle`:" in doc
    # the state folder never depends on the worker's working directory
    homes = json.loads(proc.stdout.split("HOMES ", 1)[1].splitlines()[0])
    assert homes == {"None": str(REPO / ".flashml"), "rel/state": str(REPO / "rel" / "state")}
    from flashml.settings import OPTIONS, BaleenSettings, dag_params
    from flashml.systems.baleen.job import CLI_OPTIONS as JOB_OPTIONS

    d = BaleenSettings()
    # the target as the user says it (the artifact's 35.599 MiB/s), not 37.328257023999996
    assert params["target_write_rate"]["default"] == "35.599 MiB/s"
    assert "target_write_rate_mbps" not in params
    assert d.target_write_rate_mbps == pytest.approx(35.599 * 2**20 / 1e6)
    # the trace format is a choice list of the block-trace readers
    from flashml.trace.formats import FORMATS

    assert params["format"]["schema"]["enum"] == [None, *FORMATS]
    assert params["format"]["default"] is None  # tectonic, or a .parquet table as it is
    assert params["cache_gb"]["default"] == d.cache_gb
    assert params["train_hours"]["default"] * 3600.0 == d.train_seconds
    assert params["learning_rate"]["default"] == d.gbm.learning_rate
    assert params["max_rounds"]["default"] == d.gbm.num_boost_round
    for name in dag_params():  # every DAG run setting is an option of the pipeline command
        assert name in JOB_OPTIONS
        if name != "target_write_rate_mbps":  # given with its unit (above)
            assert params[name]["default"] == OPTIONS[name].default
    # nothing required: the Trigger form works with the defaults (all optional)
    assert all(p["default"] is not None or "null" in p["schema"].get("type", [])
               for p in params.values())
    # every param is understood by the settings (the target through the DAG's unit parser)
    rates = json.loads(proc.stdout.split("RATES ", 1)[1].splitlines()[0])
    values = {k: p["default"] for k, p in params.items() if k != "target_write_rate"}
    values["target_write_rate_mbps"] = rates["35.599 MiB/s"]
    s = BaleenSettings.from_dag_params(values)
    assert s == d.replace(gbm=s.gbm) and s.gbm.learning_rate == d.gbm.learning_rate
    assert rates["37.3 MB/s"] == 37.3 and rates["20"] == 20.0
    assert rates[" 1e1MiB/s "] == pytest.approx(10 * 2**20 / 1e6)
    assert "target_write_rate" in rates["fast"] and "35.599 MiB/s" in rates["fast"]


def test_dagbag_imports_without_errors(tmp_path: Path) -> None:
    code = """
import json, sys
import pendulum
from airflow.dag_processing.dagbag import DagBag
from airflow.serialization.serialized_objects import DagSerialization

def first_run(d):
    # what the scheduler computes for a DAG that has no scheduled run yet, as it does
    # when the DAG is unpaused (by hand or by the Trigger form), on a clock frozen half an
    # hour after a daily tick (Airflow's own default runs a tick that passed less than a
    # tenth of the interval ago)
    import airflow.timetables.trigger as trigger
    now = pendulum.datetime(2026, 1, 1, 0, 30, tz="UTC")
    trigger.utcnow = lambda: now
    ser = DagSerialization.from_dict(DagSerialization.to_dict(d))
    info = ser.next_dagrun_info(last_automated_run_info=None)
    return {"after_now": info.run_after > now, "run_after": str(info.run_after)}

bag = DagBag(dag_folder=sys.argv[1])
d = bag.dags.get("flashml_retrain")
print("RESULT " + json.dumps({
    "errors": {k: str(v) for k, v in bag.import_errors.items()},
    "dags": sorted(bag.dags),
    "tasks": {t.task_id: sorted(t.downstream_task_ids) for t in d.tasks} if d else None,
    "retries": sorted({t.retries for t in d.tasks}) if d else None,
    "params": sorted(d.params.keys()) if d else None,
    "schedule": str(getattr(d.timetable, "_expression", d.timetable)) if d else None,
    "max_active_runs": d.max_active_runs if d else None,
    "description": d.description if d else None,
    "first_run": first_run(d) if d else None,
}))
"""
    proc = _py(code, str(REPO / "dags"), env=_env(tmp_path), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout.split("RESULT ", 1)[1].splitlines()[0])
    assert res["errors"] == {}
    assert "flashml_retrain" in res["dags"]
    from flashml.systems.baleen.job import STAGES

    names = [st.name for st in STAGES]  # one task per stage of the job, in its order
    after = names[1:] + [None]
    assert res["tasks"] == {a: ([b] if b else []) for a, b in zip(names, after, strict=True)}
    assert res["retries"] == [2]
    assert {"trace", "target_write_rate", "cache_gb", "export_dir",
            "train_hours"} <= set(res["params"])
    assert "0 0 * * *" in res["schedule"] or "daily" in res["schedule"]
    assert res["max_active_runs"] == 1
    assert "Baleen" in res["description"] and "champion" in res["description"]
    # unpausing schedules no run for a tick that has passed: a Trigger click (which unpauses)
    # makes one run, not that run queued behind a scheduled one
    assert res["first_run"]["after_now"], res["first_run"]


def test_dag_end_to_end_promotes_then_keeps_champion(tmp_path: Path) -> None:
    from flashml.trace.generate import generate_trace

    env = _env(tmp_path)
    trace = tmp_path / "trace" / "region1-2026.trace"
    generate_trace("region1-like", 7, trace, accesses=20000, progress=False)
    mig = subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert mig.returncode == 0, mig.stderr[-3000:]
    export = tmp_path / "exported"
    workdir = tmp_path / "runs"
    common = {"trace": str(trace), "workdir": str(workdir), "export_dir": str(export),
              "max_rounds": 30, "max_iterations": 2, "learning_rate": 0.1}
    cfg = {"dag_file": str(REPO / "dags" / "flashml_retrain.py"), "tmp": str(tmp_path),
           "runs": [common | {"engine": "spark", "sweep_trials": 1},
                    common | {"engine": "polars", "sweep_trials": 0,
                              "degrade_champion": True}]}
    proc = _py(DRIVER, json.dumps(cfg), env=env, timeout=900)
    (tmp_path / "dag-test.log").write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-4000:])
    runs = json.loads(proc.stdout.split("RESULT ", 1)[1].splitlines()[0])
    assert [r["state"] for r in runs] == ["success", "success"], proc.stderr[-5000:]

    import re

    safe = {re.sub(r"[^A-Za-z0-9_.-]+", "_", r["run_id"]) for r in runs}
    folders = {f.name: f for f in (workdir / "flashml_retrain").iterdir()}
    assert set(folders) == safe  # one run folder per DAG run, keyed by the run id
    first, second = (folders[re.sub(r"[^A-Za-z0-9_.-]+", "_", r["run_id"])] for r in runs)

    def rec(folder: Path, stage: str) -> dict:
        return json.loads((folder / "stages" / f"{stage}.json").read_text())

    # run 1: every stage recorded, a fresh store -> the candidate is champion, exported
    for stage in ("ingest", "train", "episodes", "policies", "sweep", "plots", "evaluate",
                  "compile", "promote"):
        assert (first / "stages" / f"{stage}.json").is_file(), stage
    assert rec(first, "ingest")["validate"]["success"] is True
    assert rec(first, "episodes")["summary"]["engine"] == "spark"
    assert len(rec(first, "sweep")["sweep"]["trials"]) == 1
    p1 = rec(first, "promote")
    assert p1["promoted"] is True and str(p1["version"]) == "1"
    champion = export / "champion"
    assert champion.is_symlink() and os.readlink(champion) == "v1"
    assert (champion / "compiled" / "policy.so").is_file()
    assert (champion / "compiled" / "manifest.json").is_file()
    assert (champion / "policy" / "policy.json").is_file()

    # run 2: the degraded candidate is evaluated, found worse, and not promoted
    ev = rec(second, "evaluate")
    assert ev["promoted"] is False and str(ev["champion_version"]) == "1"
    assert ev["candidate_peak"] > ev["champion_peak"]
    assert rec(second, "promote")["promoted"] is False
    assert (second / "compiled" / "policy.so").is_file()  # compiled, but not shipped
    assert os.readlink(champion) == "v1" and not (export / "v2").exists()

    import mlflow

    from flashml.tracking import CHAMPION, REGISTERED_MODEL

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'state' / 'mlflow.db'}")
    client = mlflow.MlflowClient()
    assert str(client.get_model_version_by_alias(REGISTERED_MODEL, CHAMPION).version) == "1"
    assert {str(v.version) for v in
            client.search_model_versions(f"name='{REGISTERED_MODEL}'")} == {"1", "2"}
    # one MLflow run per DAG run, named by the DAG, trace, target and DAG run, ended
    parent = client.get_run(rec(first, "train")["mlflow_run_id"])
    from flashml.settings import BaleenSettings

    target = BaleenSettings().target_write_rate_mbps
    assert parent.info.run_name == \
        f"flashml_retrain region1-2026.trace {target:.4g}MBps {runs[0]['run_id']}"
    assert parent.data.tags["airflow.run_id"] == runs[0]["run_id"]
    assert parent.info.status == "FINISHED"
    assert "baleen_peak_dt_util" in parent.data.metrics
