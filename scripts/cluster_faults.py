"""Faults a scaled-out deployment has, driven on the native cluster (scripts/cluster.sh) and
counted: what a job or DAG run lost through them.

* `restart_mlflow_during_sweep`: `flashml pipeline run` on the cluster; once a trial of its
  sweep runs (its Optuna study on Postgres says so), the MLflow server is stopped; once the
  job has logged that it retries a request (MLflow's client retries connection errors with
  backoff, urllib3 logs each retry), the server is started again; the job must finish.
* `kill_scheduler_mid_dag`: `flashml_retrain` triggered through Airflow's REST API; once the
  REST API shows a task running, the scheduler and every process it started (its executor,
  the task's supervisor and the task) are killed with SIGKILL, as when its container or
  machine dies; once Airflow's health endpoint declares the scheduler unhealthy (its
  heartbeat older than `scheduler_health_check_threshold`), a new scheduler is started: it
  resets the orphaned task, which runs again, and the DAG run must succeed.
* `kill_spark_worker_mid_episodes`: `flashml pipeline run` on the cluster; once its
  episodes' Spark application has an executor on a worker, that worker and its executor
  are killed with SIGKILL; the job must finish on the other worker.
* `tally`: what a run lost: its MLflow run and the nested run of every trial that trained
  (on the server, FINISHED), the study's trials (COMPLETE), and every artifact the server
  lists for the run present on the artifact store with its size.

Every wait is on an event (a file, the REST API, the storage), with a generous deadline
only against a hang. Used by tests/services/test_cluster.py and bench/bench_cluster.py.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "cluster.sh"
sys.path.insert(0, str(REPO / "scripts"))

import cluster_check  # noqa: E402


def ports(state: Path) -> list[int]:
    """The ports the cluster in `state` was given (its `ports` file)."""
    return [int(p) for line in (state / "ports").read_text().splitlines()
            for p in line.split()[1:]]


def listening(port: int) -> bool:
    """Whether something accepts connections on 127.0.0.1:`port`."""
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def cluster_pids(state: Path) -> list[int]:
    """Processes (not zombies) whose environment or command line names the cluster's folder:
    its services, tasks, executors and jobs."""
    mark = str(state).encode()
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            text = (proc / "environ").read_bytes() + (proc / "cmdline").read_bytes()
        except (OSError, IndexError):
            continue
        if mark in text:
            pids.append(int(proc.name))
    return pids


#: what urllib3 logs (WARNING) when MLflow's client retries a request
RETRY_MARK = "Retrying (Retry("


def cluster_cmd(state: Path, env: dict[str, str], *args: str, timeout: float = 600) -> str:
    """`scripts/cluster.sh ARGS` on the cluster in `state`; its stderr (raises on failure)."""
    proc = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=timeout, env=env | {"FLASHML_CLUSTER_DIR": str(state)})
    if proc.returncode != 0:
        raise RuntimeError(f"cluster.sh {' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    return proc.stderr


def until(what: str, check: Callable[[], Any], deadline_s: float = 5400,
          alive: Callable[[], None] | None = None, every: float = 0.2) -> Any:
    """Poll `check` until it returns something true (returned); `alive` raises when what is
    waited on can no longer happen (the job ended); a deadline guards against a hang."""
    end = time.monotonic() + deadline_s
    while True:
        got = check()
        if got:
            return got
        if alive is not None:
            alive()
        if time.monotonic() > end:
            raise TimeoutError(f"no {what} within {deadline_s:.0f} s")
        time.sleep(every)


def _studies(storage: str) -> set[str]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return set(optuna.get_all_study_names(storage=storage))


def _running_trial(storage: str, before: set[str]) -> str | None:
    """The name of a study created after `before` with a trial running or done."""
    import optuna

    for name in _studies(storage) - before:
        study = optuna.load_study(study_name=name, storage=storage)
        if study.get_trials(deepcopy=False):
            return name
    return None


def _start_job(out: Path, job_args: list[str], env: dict[str, str]
               ) -> tuple[subprocess.Popen[bytes], Path, float]:
    """The main job into `out`, in its own session (a fault may kill its group), its stderr
    in OUT.stderr beside it; returns the process, that file and the monotonic start."""
    out.parent.mkdir(parents=True, exist_ok=True)
    stderr = out.parent / f"{out.name}.stderr"
    t0 = time.monotonic()
    with open(stderr, "w") as err:
        job = subprocess.Popen([sys.executable, "-m", "flashml.cli", "pipeline", "run",
                                "--out", str(out), *job_args], stdout=subprocess.DEVNULL,
                               stderr=err, cwd=out.parent, env=env,
                               start_new_session=True)
    return job, stderr, t0


def _retry_lines(stderr: Path, out: Path) -> list[str]:
    """The retry warnings the job (its stderr) and its sweep workers (their logs) wrote."""
    lines: list[str] = []
    for f in [stderr, *sorted(out.glob("work/**/worker-*.log"))]:
        if f.is_file():
            lines += [ln for ln in f.read_text(errors="replace").splitlines()
                      if RETRY_MARK in ln]
    return lines


def restart_mlflow_during_sweep(state: Path, env: dict[str, str], out: Path,
                                job_args: list[str]) -> dict[str, Any]:
    """`flashml pipeline run --out OUT JOB_ARGS` with the cluster's variables `env`, the
    MLflow server restarted during its sweep (module docstring). Returns the summary, the
    job's wall seconds, the server's downtime and the retry warnings logged."""
    storage = env["FLASHML_OPTUNA_STORAGE"]
    before = _studies(storage)
    job, stderr, t0 = _start_job(out, job_args, env)
    try:
        def alive() -> None:
            if job.poll() is not None:
                raise RuntimeError(f"the job ended ({job.returncode}) before the fault: "
                                   + stderr.read_text()[-3000:])

        study = until("sweep trial", lambda: _running_trial(storage, before), alive=alive)
        down = time.monotonic()
        cluster_cmd(state, env, "stop", "mlflow")
        stopped = time.monotonic()
        first = until("retry of an MLflow request", lambda: _retry_lines(stderr, out),
                      alive=alive, every=0.5)[0]
        cluster_cmd(state, env, "start", "mlflow")
        up = time.monotonic()
        rc = job.wait(timeout=7200)
    finally:
        if job.poll() is None:  # the job and its sweep workers
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
        if not (state / "pids" / "mlflow.pid").exists():  # the fault failed: the server back
            cluster_cmd(state, env, "start", "mlflow")
    wall = time.monotonic() - t0
    if rc != 0:
        raise RuntimeError(f"the job failed ({rc}) after the MLflow restart:\n"
                           + stderr.read_text()[-4000:])
    summary = json.loads((out / "summary.json").read_text())
    return {"summary": summary, "study": study, "wall_s": wall,
            "server_down_s": up - down, "stop_s": stopped - down, "first_retry": first,
            "retries_logged": len(_retry_lines(stderr, out))}


def kill_spark_worker_mid_episodes(state: Path, env: dict[str, str], out: Path,
                                   job_args: list[str], worker: int = 2) -> dict[str, Any]:
    """`flashml pipeline run --out OUT JOB_ARGS` on the cluster; once the episodes' Spark
    application has an executor registered on worker `worker` (its stderr in the worker's
    work folder says so), that worker and its executor are killed with SIGKILL (`cluster.sh
    stop --kill`), as a lost machine; the job must finish on the other worker. Returns the
    summary, the job's wall seconds, when the worker was killed and whether the episodes
    stage had already ended then (its record written)."""
    work = state / "spark" / f"worker-{worker}"
    before = {p.name for p in work.glob("app-*")}
    job, stderr, t0 = _start_job(out, job_args, env)

    def registered() -> bool:
        apps = [p for p in work.glob("app-*") if p.name not in before]
        return any("registered with driver" in f.read_text(errors="replace")
                   for a in apps for f in a.glob("*/stderr"))

    def alive() -> None:
        if job.poll() is not None:
            raise RuntimeError(f"the job ended ({job.returncode}) before the fault: "
                               + stderr.read_text()[-3000:])

    try:
        until(f"an executor on worker {worker}", registered, alive=alive, every=0.5)
        killed_at = time.monotonic() - t0
        cluster_cmd(state, env, "stop", f"spark-worker-{worker}", "--kill")
        # the stage's record is written when it ends: none yet, the kill hit the episodes
        episodes_done = (out / "stages" / "episodes.json").exists()
        rc = job.wait(timeout=7200)
    finally:
        if job.poll() is None:  # the job and its sweep workers
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    if rc != 0:
        raise RuntimeError(f"the job failed ({rc}) after the worker was killed:\n"
                           + stderr.read_text()[-4000:])
    return {"summary": json.loads((out / "summary.json").read_text()),
            "wall_s": time.monotonic() - t0, "killed_at_s": killed_at, "worker": worker,
            "episodes_done_at_kill": episodes_done}


def _tis(dag_id: str, run_id: str) -> dict[str, dict[str, Any]]:
    tis = cluster_check.airflow_api("GET", f"dags/{dag_id}/dagRuns/{run_id}/taskInstances")
    return {t["task_id"]: t for t in tis["task_instances"]}


def _scheduler_unhealthy() -> bool:
    health = cluster_check._get(f"{os.environ['FLASHML_AIRFLOW_URL']}/api/v2/monitor/health")
    return health["scheduler"]["status"] != "healthy"


def kill_scheduler_mid_dag(state: Path, env: dict[str, str], conf: dict[str, Any],
                           task: str = "train", dag_id: str = "flashml_retrain",
                           timeout_s: float = 7200) -> dict[str, Any]:
    """Trigger `dag_id` with `conf`; kill the scheduler (with every process it started) once
    `task` runs; start a new one once Airflow declares the old one unhealthy; wait for the
    run's end (module docstring). `env`: the cluster's variables (also set in os.environ
    for the REST calls). Returns the run, its task instances, the wall seconds and the
    fault's times."""
    os.environ.update(env)
    token = cluster_check.airflow_token()
    cluster_check.wait_for_dag(dag_id, token)
    cluster_check.airflow_api("PATCH", f"dags/{dag_id}", {"is_paused": False}, token)
    run_id = f"fault-{uuid.uuid4().hex[:8]}"
    t0 = time.monotonic()
    cluster_check.airflow_api("POST", f"dags/{dag_id}/dagRuns",
                              {"dag_run_id": run_id, "logical_date": None, "conf": conf}, token)

    def run_state() -> str:
        return cluster_check.airflow_api("GET", f"dags/{dag_id}/dagRuns/{run_id}")["state"]

    def not_over() -> None:
        if run_state() in ("success", "failed"):
            raise RuntimeError(f"the run ended before {task} was seen running")

    until(f"{task} running", lambda: _tis(dag_id, run_id).get(task, {}).get("state")
          == "running", deadline_s=timeout_s, alive=not_over, every=1.0)
    killed_at = time.monotonic() - t0
    cluster_cmd(state, env, "stop", "airflow-scheduler", "--kill")
    until("scheduler declared unhealthy", _scheduler_unhealthy, deadline_s=600, every=1.0)
    unhealthy_at = time.monotonic() - t0
    cluster_cmd(state, env, "start", "airflow-scheduler")
    restarted_at = time.monotonic() - t0
    final = until("end of the DAG run", lambda: (s := run_state()) in ("success", "failed")
                  and s, deadline_s=timeout_s, every=2.0)
    wall = time.monotonic() - t0
    run = cluster_check.airflow_api("GET", f"dags/{dag_id}/dagRuns/{run_id}")
    return {"run": run, "state": final, "tasks": _tis(dag_id, run_id), "wall_s": wall,
            "killed_at_s": killed_at, "unhealthy_at_s": unhealthy_at,
            "restarted_at_s": restarted_at, "killed_task": task}


def _artifact_files(client: Any, run_id: str, path: str | None = None) -> list[Any]:
    out = []
    for a in client.list_artifacts(run_id, path):
        out += _artifact_files(client, run_id, a.path) if a.is_dir else [a]
    return out


#: what a DAG run logs at least (it writes no summary.json): the policy and its compiled form
DAG_ARTIFACTS = frozenset({"policy/policy.json", "policy_so/policy.so",
                           "policy_so/manifest.json"})


def artifact_paths(env: dict[str, str], run_id: str) -> set[str]:
    """Every artifact file the server lists for run `run_id` (a reference run's, for
    `tally`'s `want_artifacts`)."""
    import mlflow

    mlflow.set_tracking_uri(env["MLFLOW_TRACKING_URI"])
    return {f.path for f in _artifact_files(mlflow.MlflowClient(), run_id)}


def tally(env: dict[str, str], state: Path, run_id: str, study: str, trials: int,
          want_artifacts: set[str] = frozenset({"summary.json"})) -> dict[str, Any]:
    """What the run `run_id` (its sweep `study` of `trials` trials) lost (module docstring):
    counts of lost runs, trials and artifacts (`want_artifacts` missing from the run's
    listing, or listed but absent from the store), and the duplicates of a trial's run."""
    import mlflow
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    mlflow.set_tracking_uri(env["MLFLOW_TRACKING_URI"])
    client = mlflow.MlflowClient()
    run = client.get_run(run_id)
    lost_runs = [] if run.info.status == "FINISHED" else [f"{run_id} ({run.info.status})"]
    st = optuna.load_study(study_name=study, storage=env["FLASHML_OPTUNA_STORAGE"])
    complete = [t for t in st.trials if t.state == optuna.trial.TrialState.COMPLETE]
    nested = client.search_runs([run.info.experiment_id],
                                filter_string=f"tags.`optuna.study` = '{study}'",
                                max_results=1000)
    by_trial: dict[str, list[Any]] = {}
    for r in nested:
        by_trial.setdefault(r.data.tags.get("optuna.trial", "?"), []).append(r)
    for t in complete:
        if "same_as_trial" in t.user_attrs:  # a copy of a saturated trial: no run of its own
            continue
        runs = by_trial.get(str(t.number), [])
        if not any(r.info.status == "FINISHED" for r in runs):
            lost_runs.append(f"trial {t.number}: " + (", ".join(r.info.status for r in runs)
                                                      or "no run"))
    files = _artifact_files(client, run_id)
    root = run.info.artifact_uri
    lost_artifacts = sorted(want_artifacts - {f.path for f in files})
    if root.startswith("mlflow-artifacts:"):
        base = state / "mlartifacts" / root.removeprefix("mlflow-artifacts:").lstrip("/")
        for f in files:
            p = base / f.path
            if not p.is_file() or (f.file_size is not None and p.stat().st_size != f.file_size):
                lost_artifacts.append(f.path)
    else:
        lost_artifacts.append(f"artifacts not on the server's store: {root}")
    return {"runs": 1 + sum(1 for t in complete if "same_as_trial" not in t.user_attrs),
            "trials": trials, "artifacts": len(files),
            "lost_runs": lost_runs, "lost_trials": max(0, trials - len(complete)),
            "lost_artifacts": lost_artifacts,
            "duplicate_trial_runs": sum(len(v) - 1 for v in by_trial.values() if len(v) > 1)}


def dag_run_folder(env: dict[str, str], run_id: str, dag_id: str = "flashml_retrain") -> Path:
    """The run folder of DAG run `run_id` (dags/flashml_retrain.py: run_folder)."""
    import re

    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", run_id)
    return Path(env["FLASHML_RETRAIN_DIR"]) / dag_id / safe


def dag_run_ids(folder: Path) -> tuple[str, str]:
    """(MLflow run id, Optuna study) of a DAG run's folder."""
    run_id = (folder / "mlflow_run_id").read_text().strip()
    sweep = json.loads((folder / "stages" / "sweep.json").read_text())
    return run_id, sweep["sweep"]["study"]
