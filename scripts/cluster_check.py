"""Smoke check of the native cluster (`scripts/cluster.sh test`), through the client's
variables only (cluster.env): each service does its job.

* Optuna: a study on $FLASHML_OPTUNA_STORAGE (Postgres), a trial written and read back;
* MLflow: a run on $MLFLOW_TRACKING_URI with a metric and an artifact uploaded through the
  server's artifact proxy (`mlflow-artifacts:`) and downloaded again;
* Spark: a job on $FLASHML_SPARK_MASTER whose executors run on every worker;
* Airflow: a token from the api-server, the scheduler and dag-processor healthy, and
  `flashml_retrain` parsed by the dag-processor.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any


def _get(url: str, token: str | None = None) -> Any:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"}
                                 if token else {})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.load(r)


def airflow_token() -> str:
    """A JWT from the api-server's simple auth manager (the generated admin password)."""
    base = os.environ["FLASHML_AIRFLOW_URL"]
    body = json.dumps({"username": os.environ["FLASHML_AIRFLOW_USER"],
                       "password": os.environ["FLASHML_AIRFLOW_PASSWORD"]}).encode()
    req = urllib.request.Request(f"{base}/auth/token", data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.load(r)["access_token"]


def airflow_api(method: str, path: str, body: Any = None, token: str | None = None) -> Any:
    """One call of Airflow's REST API (/api/v2/...) with a fresh or given token."""
    base = os.environ["FLASHML_AIRFLOW_URL"]
    token = token or airflow_token()
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"{base}/api/v2/{path}", data=data, method=method,
                                 headers={"Authorization": f"Bearer {token}",
                                          "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.load(r)


def wait_for_dag(dag_id: str, token: str, timeout_s: float = 180.0) -> dict[str, Any]:
    """The DAG once the dag-processor has parsed it (404 until then)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return airflow_api("GET", f"dags/{dag_id}", token=token)
        except urllib.error.HTTPError as e:
            if e.code != 404 or time.monotonic() > deadline:
                raise
            time.sleep(1)


def run_dag(dag_id: str, conf: dict[str, Any], timeout_s: float = 1800.0,
            run_id: str | None = None) -> dict[str, Any]:
    """Trigger `dag_id` through the REST API (unpausing it first) with `conf`, wait for the
    scheduler to finish the run; returns the run, its task instances and wall seconds."""
    token = airflow_token()
    wait_for_dag(dag_id, token)
    airflow_api("PATCH", f"dags/{dag_id}", {"is_paused": False}, token)
    run_id = run_id or f"cluster-{uuid.uuid4().hex[:8]}"
    t0 = time.monotonic()
    airflow_api("POST", f"dags/{dag_id}/dagRuns",
                {"dag_run_id": run_id, "logical_date": None, "conf": conf}, token)
    deadline = t0 + timeout_s
    while True:
        token = airflow_token()  # tokens expire; a run may take longer than one lives
        run = airflow_api("GET", f"dags/{dag_id}/dagRuns/{run_id}", token=token)
        if run["state"] in ("success", "failed"):
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"{dag_id} run {run_id} still {run['state']} after "
                               f"{timeout_s:.0f} s")
        time.sleep(2)
    wall = time.monotonic() - t0
    tis = airflow_api("GET", f"dags/{dag_id}/dagRuns/{run_id}/taskInstances",
                      token=token)["task_instances"]
    return {"run": run, "tasks": {t["task_id"]: t for t in tis}, "wall_s": wall}


def steady(summary: dict[str, Any]) -> dict[str, Any]:
    """What must be equal between two runs of the main job on one trace and seed, embedded
    or scaled out: every policy's metrics, the convergence, the episodes, the sweep's trials
    and the chosen write rate (not wall times, run ids, paths or the episodes' engine)."""
    volatile = {"wall_s", "seconds", "engine", "engine_choice", "datetime_start",
                "datetime_complete", "duration_s"}

    def strip(d: Any) -> Any:
        if isinstance(d, dict):
            return {k: strip(v) for k, v in d.items() if k not in volatile}
        if isinstance(d, list):
            return [strip(v) for v in d]
        return d

    return strip({k: summary[k] for k in ("policies", "convergence", "episodes",
                                          "chosen_write_rate_mbps", "chosen_tco")}
                 | {"trials": summary["sweep"]["trials"]})


def check_optuna() -> str:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = os.environ["FLASHML_OPTUNA_STORAGE"]
    assert storage.startswith("postgresql"), storage
    name = f"cluster-check-{uuid.uuid4().hex[:8]}"
    study = optuna.create_study(study_name=name, storage=storage)
    study.optimize(lambda t: t.suggest_float("x", 0, 1) ** 2, n_trials=2)
    again = optuna.load_study(study_name=name, storage=storage)
    assert len(again.trials) == 2
    optuna.delete_study(study_name=name, storage=storage)
    return "optuna: 2 trials on Postgres"


def check_mlflow() -> str:
    import mlflow

    mlflow.set_tracking_uri(os.environ["MLFLOW_TRACKING_URI"])
    mlflow.set_experiment("cluster-check")
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "hello.txt"
        f.write_text("flashml\n")
        with mlflow.start_run() as run:
            mlflow.log_metric("x", 1.0)
            mlflow.log_artifact(str(f))
        uri = mlflow.get_run(run.info.run_id).info.artifact_uri
        assert uri.startswith("mlflow-artifacts:"), f"artifacts not served by the server: {uri}"
        got = mlflow.artifacts.download_artifacts(f"runs:/{run.info.run_id}/hello.txt",
                                                  dst_path=str(Path(d) / "back"))
        assert Path(got).read_text() == "flashml\n"
    return f"mlflow: run {run.info.run_id}, artifact through the server's proxy"


def check_spark() -> str:
    from flashml.systems.baleen.episodes.spark_engine import spark_session

    master = os.environ["FLASHML_SPARK_MASTER"]
    ui = os.environ["FLASHML_SPARK_UI_URL"]
    spark = spark_session(master)
    try:
        n = spark.range(0, 100_000, numPartitions=4).selectExpr("sum(id) AS s").first()["s"]
        assert n == 100_000 * 99_999 // 2
        workers = [w for w in _get(f"{ui}/json/")["workers"] if w["state"] == "ALIVE"]
        busy = [w for w in workers if w["coresused"] > 0]
        assert workers and len(busy) == len(workers), \
            f"executors on {len(busy)} of {len(workers)} workers"
    finally:
        spark.stop()
    return f"spark: executors on all {len(workers)} workers"


def check_airflow(timeout_s: float = 180.0) -> str:
    base = os.environ["FLASHML_AIRFLOW_URL"]
    health = _get(f"{base}/api/v2/monitor/health")
    for part in ("metadatabase", "scheduler", "dag_processor"):
        assert health[part]["status"] == "healthy", health
    token = airflow_token()
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            dag = _get(f"{base}/api/v2/dags/flashml_retrain", token)
            break
        except urllib.error.HTTPError as e:
            if e.code != 404 or time.monotonic() > deadline:
                raise
            time.sleep(1)
    return f"airflow: healthy, {dag['dag_id']} parsed (paused: {dag['is_paused']})"


def main() -> int:
    failed = 0
    for check in (check_optuna, check_mlflow, check_spark, check_airflow):
        try:
            print("ok:", check(), flush=True)
        except Exception as e:  # report every service, then fail
            failed += 1
            print(f"FAILED: {check.__name__}: {type(e).__name__}: {e}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
