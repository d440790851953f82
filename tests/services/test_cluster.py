"""The scaled-out topology of docker-compose.yml, run natively (scripts/cluster.sh): Postgres,
the MLflow server with served artifacts, a Spark master with two workers, Airflow 3 with the
LocalExecutor; all on 127.0.0.1, from packages only.

`make test` runs the fast part (about 3 minutes, most of it start-up): the compose file and
the cluster set the same variables; `up` brings every service to health and writes the
client's variables; each service does its job through them (scripts/cluster_check.py: an
Optuna study on Postgres, an MLflow run whose artifact goes through the server's proxy, a
Spark job with executors on both workers, Airflow's REST API with the DAG parsed); `down`
leaves no process and no port; a service that cannot come up is named with its log and what
was started is stopped again.

`make cluster-test` (FLASHML_CLUSTER_FULL=1) adds the scaled-out jobs on a small job (a
generated trace of 20,000 accesses, at most 30 boosting rounds, 2 sweep trials on 2
processes; about 20 minutes at a load average of 15 on 2 cores): the
Airflow DAG triggered through the REST API and run by the real scheduler to success
(promoting a champion in the server's registry), and `flashml pipeline run` on the cluster
(episodes on the Spark workers, two sweep processes on one Postgres study, tracking and
registry on the MLflow server) whose summary equals the embedded run's; and the faults a
cluster has (scripts/cluster_faults.py), each waited for through an event: a Spark worker
killed mid-episodes, the MLflow server restarted during a sweep, the scheduler killed
mid-DAG and restarted; none loses a run, a trial or an artifact.

After every test of a cluster, `down` must leave no process of it behind (any process whose
environment or command line names the cluster's folder) and no port open.

Skipped, saying why, where Java or the PostgreSQL server is missing (.ci/run installs it)."""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))
import cluster_faults  # noqa: E402  (the cluster's own helpers: its processes, ports, faults)

SCRIPT = REPO / "scripts" / "cluster.sh"
FULL = os.environ.get("FLASHML_CLUSTER_FULL") == "1"
#: variables of a client's environment that would point a child at other services
CLIENT_VARS = ("MLFLOW_TRACKING_URI", "FLASHML_OPTUNA_STORAGE", "FLASHML_SPARK_MASTER",
               "FLASHML_HOME", "FLASHML_RETRAIN_DIR", "FLASHML_EXPORT_DIR", "AIRFLOW_HOME")
#: what the compose images set themselves, or a native client needs to find the services
NATIVE_ONLY = {"AIRFLOW_HOME", "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE",
               "SPARK_HOME", "SPARK_LOCAL_IP", "FLASHML_AIRFLOW_URL", "FLASHML_AIRFLOW_USER",
               "FLASHML_AIRFLOW_PASSWORD", "FLASHML_SPARK_UI_URL"}
#: a small job: a generated region1-like trace of 20,000 accesses (seed 0), at most 30
#: boosting rounds per model, 2 sweep trials on 2 worker processes
SMALL = {"accesses": 20000, "max_rounds": 30, "sweep_trials": 2, "sweep_workers": 2}
#: the job's settings for every run of the main job (embedded, scaled out, under a fault)
JOB_ARGS = [a for k, v in SMALL.items() for a in (f"--{k.replace('_', '-')}", str(v))]
#: the same settings as the DAG's params
DAG_CONF = dict(SMALL)


def _missing() -> str | None:
    if shutil.which("java") is None:
        return "no Java: the Spark master and workers need it (Debian: openjdk-17-jre-headless)"
    if not (glob.glob("/usr/lib/postgresql/*/bin/initdb") or shutil.which("initdb")):
        return "no PostgreSQL server (Debian: postgresql; .ci/run installs it)"
    if shutil.which("curl") is None:
        return "no curl (the health checks use it)"
    return None


needs_cluster = pytest.mark.skipif(_missing() is not None, reason=_missing() or "")
full_only = pytest.mark.skipif(not FULL, reason="the scaled-out jobs, the DAG and the faults "
                               "take half an hour: `make cluster-test` runs them")


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in CLIENT_VARS and not k.startswith(("AIRFLOW__", "FLASHML_CLUSTER_"))}
    return env | extra


def cluster(state: Path, *args: str, timeout: float = 900,
            **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=timeout,
                          env=_clean_env(FLASHML_CLUSTER_DIR=str(state), **extra))


def read_env_file(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith("#"):
            k, v = line.split("=", 1)
            out[k] = v.strip("'")
    return out


def compose_client_vars() -> set[str]:
    """What docker-compose.yml sets for flashml's clients: the shared block and the Airflow
    services' environment."""
    doc = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    env = doc["services"]["airflow-scheduler"]["environment"]
    return set(env)


def script_env_sections() -> tuple[set[str], set[str]]:
    """(compose section, native section) of the env file cluster.sh writes."""
    text = SCRIPT.read_text()
    body = text.split('cat > "$ENV_FILE" <<EOF\n', 1)[1].split("\nEOF\n", 1)[0]
    compose, native, section = set(), set(), None
    for line in body.splitlines():
        if line.startswith("# -- the variables docker-compose.yml sets"):
            section = compose
        elif line.startswith("# -- native only"):
            section = native
        elif line and not line.startswith("#") and section is not None:
            section.add(line.split("=", 1)[0])
    return compose, native


def _pids(state: Path) -> list[int]:
    return [int(f.read_text().split()[0]) for f in (state / "pids").glob("*.pid")]


def _leftovers(state: Path) -> list[str]:
    """A process of the cluster still running (cluster_faults.cluster_pids), with its command
    line."""
    left = []
    for pid in cluster_faults.cluster_pids(state):
        try:
            left.append(f"{pid}: {Path(f'/proc/{pid}/cmdline').read_bytes()[:200]!r}")
        except OSError:
            continue
    return left


def _listeners(pids: list[int]) -> list[str]:
    """`address:port` of every TCP socket the processes `pids` listen on (`ss`)."""
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout
    return [line.split()[3] for line in out.splitlines()
            if any(f"pid={p}," in line for p in pids)]


def _down_leaves_nothing(state: Path, foreign: int | None = None) -> None:
    """`cluster.sh down`, then nothing of the cluster may be left: what is, is killed (so
    that no test leaks it) and reported. `foreign`: a port the test itself holds."""
    ports = [p for p in (cluster_faults.ports(state) if (state / "ports").exists() else [])
             if p != foreign]
    down = cluster(state, "down")
    left = _leftovers(state)
    for line in left:
        try:
            os.kill(int(line.split(":")[0]), signal.SIGKILL)
        except OSError:
            pass
    open_ports = [p for p in ports if cluster_faults.listening(p)]
    assert down.returncode == 0 and not left and not open_ports, (
        f"down: {down.returncode} {down.stderr[-2000:]}\nleft: {left}\nports: {open_ports}")


def _purge(state: Path) -> None:
    pg = state / "pgdata.path"
    if pg.exists():
        data = Path(pg.read_text().strip())
        if data.parent.name.startswith("flashml-pg."):
            shutil.rmtree(data.parent, ignore_errors=True)
    shutil.rmtree(state, ignore_errors=True)


# --- no cluster needed -----------------------------------------------------------------------


def test_compose_and_cluster_set_the_same_variables() -> None:
    """The native cluster's client variables are the compose file's: one that either sets
    and the other does not fails here (the native-only ones are listed, with why)."""
    compose, native = script_env_sections()
    assert compose == compose_client_vars(), (
        f"only in docker-compose.yml: {sorted(compose_client_vars() - compose)}; "
        f"only in scripts/cluster.sh: {sorted(compose - compose_client_vars())}")
    assert native == NATIVE_ONLY
    assert not native & compose_client_vars()


def test_a_storage_url_is_shown_without_its_password() -> None:
    from flashml.config import redact_url

    assert redact_url("postgresql+psycopg2://flashml:s3cr:et@127.0.0.1:5432/optuna") == \
        "postgresql+psycopg2://flashml:***@127.0.0.1:5432/optuna"
    for url in ("sqlite:////tmp/x/optuna.db", "postgresql://flashml@db/optuna",
                "http://127.0.0.1:5000", "not a url"):
        assert redact_url(url) == url


def test_the_docs_figures_are_rendered_from_the_bench_results(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/how-to/scale-out.md's and README.md's ("Scaling out") figures are
    bench/results/cluster.json's, as `bench/bench_cluster.py --render` writes them."""
    monkeypatch.syspath_prepend(str(REPO / "bench"))
    monkeypatch.syspath_prepend(str(REPO / "scripts"))
    import bench_cluster

    res = json.loads(bench_cluster.OUT.read_text())
    assert bench_cluster.render(res) in bench_cluster.DOC.read_text()
    assert bench_cluster.render_readme(res) in bench_cluster.README.read_text()


# --- the cluster -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    state = tmp_path_factory.mktemp("cluster")
    # manual runs only: a daily schedule unpaused within 2.4 h after midnight UTC also runs
    # the tick that passed (Airflow's CronTriggerTimetable, run_immediately=False), beside
    # the runs the tests trigger
    proc = cluster(state, "up", FLASHML_RETRAIN_SCHEDULE="none")
    if proc.returncode != 0:
        _purge(state)
    assert proc.returncode == 0, proc.stderr
    try:
        yield state, read_env_file(state / "cluster.env")
    finally:
        try:
            _down_leaves_nothing(state)
        finally:
            _purge(state)


@needs_cluster
def test_up_writes_the_client_variables_and_every_service_answers(up) -> None:
    state, env = up
    compose, native = script_env_sections()
    assert set(env) == compose | native
    assert env["MLFLOW_TRACKING_URI"].startswith("http://127.0.0.1:")
    assert env["FLASHML_OPTUNA_STORAGE"].startswith("postgresql+psycopg2://flashml:")
    assert env["FLASHML_SPARK_MASTER"].startswith("spark://127.0.0.1:")
    assert "@127.0.0.1:" in env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    assert oct((state / "cluster.env").stat().st_mode & 0o777) == "0o600"  # passwords inside
    status = cluster(state, "status")
    assert status.returncode == 0, status.stdout + status.stderr
    assert "spark: 2 workers alive" in status.stdout and "mlflow health: ok" in status.stdout
    # every socket any process of the cluster listens on is bound to loopback (the JVMs'
    # show it IPv4-mapped): the services' ports and every other (the Spark workers' own,
    # Postgres', no log server of the scheduler's on every interface)
    for port in cluster_faults.ports(state):
        assert cluster_faults.listening(port), port
    if shutil.which("ss"):
        # (Postgres runs as `nobody` from a data folder outside the state folder when that
        # user cannot reach it: its recorded PID)
        listening = _listeners(sorted(set(cluster_faults.cluster_pids(state)) | set(_pids(state))))
        assert ({a.rsplit(":", 1)[1] for a in listening}
                >= {str(p) for p in cluster_faults.ports(state)})
        wide = [a for a in listening if a.rsplit(":", 1)[0] not in ("127.0.0.1",
                                                                       "[::ffff:127.0.0.1]")]
        assert not wide, f"listening beyond loopback: {wide}"
    check = subprocess.run([sys.executable, str(REPO / "scripts" / "cluster_check.py")],
                           capture_output=True, text=True, timeout=600,
                           env=_clean_env() | env)
    assert check.returncode == 0, check.stdout + check.stderr
    for svc in ("optuna", "mlflow", "spark: executors on all 2 workers", "airflow"):
        assert f"ok: {svc}" in check.stdout, check.stdout


@needs_cluster
def test_up_refuses_a_second_start(up) -> None:
    state, _ = up
    again = cluster(state, "up")
    assert again.returncode == 1 and "already running" in again.stderr


@needs_cluster
@full_only
def test_the_dag_runs_under_the_scheduler_and_promotes_a_champion(
        up, monkeypatch: pytest.MonkeyPatch) -> None:
    """flashml_retrain triggered through Airflow's REST API: every task run by the
    scheduler's LocalExecutor to success, the candidate registered on the MLflow server and,
    the registry being new, promoted to champion there."""
    state, env = up
    monkeypatch.syspath_prepend(str(REPO / "scripts"))
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    import cluster_check

    res = cluster_check.run_dag("flashml_retrain", DAG_CONF)
    assert res["run"]["state"] == "success", res
    assert {t: ti["state"] for t, ti in res["tasks"].items()} == {
        t: "success" for t in ("ingest", "train", "episodes", "policies", "sweep", "plots",
                               "compile", "evaluate", "promote")}
    import mlflow

    mlflow.set_tracking_uri(env["MLFLOW_TRACKING_URI"])
    champ = mlflow.MlflowClient().get_model_version_by_alias("flashml-policy", "champion")
    assert champ.version == "1"
    runs = list(Path(env["FLASHML_RETRAIN_DIR"]).glob("flashml_retrain/*/stages"))
    assert runs and (runs[0] / "promote.json").exists()


@needs_cluster
@full_only
def test_the_main_job_scaled_out_equals_the_embedded_run(up, tmp_path: Path,
                                                        monkeypatch) -> None:
    """`flashml pipeline run` with the cluster's variables: episodes on the Spark workers,
    two sweep processes on one Postgres study, tracking and registry on the MLflow server;
    its summary equals the embedded run's on the same trace and seed."""
    state, env = up
    flashml = [sys.executable, "-m", "flashml.cli", "pipeline", "run"]
    embedded = subprocess.run([*flashml, "--out", str(tmp_path / "embedded"), *JOB_ARGS],
                              capture_output=True, text=True, timeout=1800, cwd=tmp_path,
                              env=_clean_env(FLASHML_HOME=str(tmp_path / "state")))
    assert embedded.returncode == 0, embedded.stderr[-3000:]
    scaled = subprocess.run([*flashml, "--out", str(tmp_path / "scaled"), *JOB_ARGS],
                            capture_output=True, text=True, timeout=1800, cwd=tmp_path,
                            env=_clean_env() | env)
    assert scaled.returncode == 0, scaled.stderr[-3000:]
    a = json.loads((tmp_path / "embedded" / "summary.json").read_text())
    b = json.loads((tmp_path / "scaled" / "summary.json").read_text())
    assert a["episodes"]["engine"] == "polars" and b["episodes"]["engine"] == "spark"
    monkeypatch.syspath_prepend(str(REPO / "scripts"))
    from cluster_check import steady

    assert steady(b) == steady(a)
    # the password stays out of what the run shows
    password = env["FLASHML_OPTUNA_STORAGE"].split(":")[2].split("@")[0]
    assert password not in (tmp_path / "scaled" / "summary.json").read_text()
    assert b["sweep"]["storage"].startswith("postgresql+psycopg2://flashml:***@127.0.0.1:")
    # the episodes ran on the cluster: the app's executors on both workers
    import urllib.request

    with urllib.request.urlopen(env["FLASHML_SPARK_UI_URL"] + "/json/", timeout=30) as r:
        master = json.load(r)
    apps = [a for a in master["completedapps"] if a["name"] == "flashml-episodes"]
    assert apps
    for w in (1, 2):
        assert (state / "spark" / f"worker-{w}" / apps[-1]["id"]).is_dir(), w
    # the study's trials on Postgres, the run, its artifacts and the registry on the server
    import mlflow
    import optuna

    study = optuna.load_study(study_name=b["sweep"]["study"],
                              storage=env["FLASHML_OPTUNA_STORAGE"])
    assert len([t for t in study.trials if t.state.name in ("COMPLETE", "PRUNED")]) == 2
    mlflow.set_tracking_uri(env["MLFLOW_TRACKING_URI"])
    client = mlflow.MlflowClient()
    run = client.get_run(b["mlflow_run_id"])
    assert run.info.status == "FINISHED"
    assert run.info.artifact_uri.startswith("mlflow-artifacts:")
    assert {a.path for a in client.list_artifacts(run.info.run_id)} >= {"summary.json",
                                                                         "policy"}
    assert password not in json.dumps(run.data.tags)
    assert any((state / "mlartifacts").rglob("summary.json"))
    assert isinstance(b["registry"]["candidate_version"], int)


@needs_cluster
@full_only
@pytest.mark.parametrize("args", [
    ["pannier", "run", "--presets", "web-like", "--requests", "20000", "--cache-size", "10%"],
    ["kml", "run", "--mode", "twin", "--twin-requests", "20000", "--sizes", "8,1024",
     "--repeats", "1", "--folds", "2"],
], ids=["pannier", "kml"])
def test_the_other_systems_jobs_log_to_the_server(up, tmp_path: Path, args: list[str]) -> None:
    """Every job opens its MLflow run through the same set-up: with the cluster's variables
    the run, its metrics and its summary artifact are on the server."""
    state, env = up
    proc = subprocess.run([sys.executable, "-m", "flashml.cli", *args, "-o",
                           str(tmp_path / "run")], capture_output=True, text=True,
                          timeout=1200, cwd=tmp_path, env=_clean_env() | env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    import mlflow

    mlflow.set_tracking_uri(env["MLFLOW_TRACKING_URI"])
    client = mlflow.MlflowClient()
    run = client.get_run(summary["mlflow_run_id"])
    assert run.info.status == "FINISHED" and run.data.metrics
    assert "summary.json" in {a.path for a in client.list_artifacts(run.info.run_id)}


@needs_cluster
@full_only
def test_the_mlflow_server_restarted_during_a_sweep(up, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The main job on the cluster; once a trial of its sweep runs, the MLflow server is
    stopped, and started again once the job has logged a retry of a request to it: the job
    finishes, its run, every trial's nested run and every artifact are on the server, every
    trial complete in the study."""
    state, env = up
    faults = cluster_faults
    res = faults.restart_mlflow_during_sweep(state, _clean_env() | env, tmp_path / "run",
                                             JOB_ARGS)
    assert res["retries_logged"] >= 1 and "Connection refused" in res["first_retry"]
    summary = res["summary"]
    assert summary["sweep"]["study"] == res["study"]
    lost = faults.tally(env, state, summary["mlflow_run_id"], res["study"], trials=2,
                        want_artifacts={"summary.json"})
    assert lost["lost_runs"] == [] and lost["lost_trials"] == 0, lost
    assert lost["lost_artifacts"] == [] and lost["duplicate_trial_runs"] == 0, lost
    status = cluster(state, "status")
    assert status.returncode == 0 and "mlflow health: ok" in status.stdout, status.stdout


@needs_cluster
@full_only
def test_the_scheduler_killed_mid_dag_and_restarted(up, monkeypatch: pytest.MonkeyPatch
                                                    ) -> None:
    """flashml_retrain triggered through the REST API; once `train` runs, the scheduler and
    every process it started are killed (SIGKILL); once Airflow's health endpoint declares
    it unhealthy a new scheduler starts: it resets the orphaned task, which runs again (a
    second try), and the DAG run succeeds; its MLflow run, trials and artifacts are whole."""
    state, env = up
    faults = cluster_faults
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    res = faults.kill_scheduler_mid_dag(state, _clean_env() | env, DAG_CONF, task="train")
    assert res["state"] == "success", res
    states = {t: ti["state"] for t, ti in res["tasks"].items()}
    # promote is skipped when the candidate does not beat the champion of an earlier run
    assert states == {t: "success" for t in ("ingest", "train", "episodes", "policies",
                                             "sweep", "plots", "compile", "evaluate")} | \
        {"promote": states["promote"]} and states["promote"] in ("success", "skipped"), states
    assert res["tasks"]["train"]["try_number"] >= 2  # the killed try, then the one that ran
    folder = faults.dag_run_folder(env, res["run"]["dag_run_id"])
    run_id, study = faults.dag_run_ids(folder)
    lost = faults.tally(env, state, run_id, study, trials=2,
                        want_artifacts=faults.DAG_ARTIFACTS)
    assert lost["lost_runs"] == [] and lost["lost_trials"] == 0, lost
    assert lost["lost_artifacts"] == [] and lost["duplicate_trial_runs"] == 0, lost


@needs_cluster
@full_only
def test_a_spark_worker_killed_mid_episodes(up, tmp_path: Path) -> None:
    """Spark worker 2 (with its executor) killed with SIGKILL once the episodes job's
    executor runs on it: the job finishes on worker 1 and its tables equal Polars'."""
    import polars as pl

    state, env = up
    trace = tmp_path / "t.trace"
    subprocess.run([sys.executable, "-m", "flashml.cli", "trace", "generate", "--preset",
                    "region1-like", "--seed", "1", "--accesses", "200000", "-o", str(trace)],
                   check=True, capture_output=True, timeout=600)
    build = [sys.executable, "-m", "flashml.cli", "episodes", "build", "--trace", str(trace),
             "--eviction-age", "6000", "--no-plot"]
    polars = subprocess.run([*build, "--engine", "polars", "-o", str(tmp_path / "polars")],
                            capture_output=True, text=True, timeout=600, env=_clean_env())
    assert polars.returncode == 0, polars.stderr[-3000:]
    before = {p.name for p in (state / "spark" / "worker-2").glob("app-*")}
    job = subprocess.Popen([*build, "--engine", "spark", "--master",
                            env["FLASHML_SPARK_MASTER"], "-o", str(tmp_path / "spark")],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=_clean_env() | env)
    try:
        deadline = time.monotonic() + 600
        while True:  # the job's executor on worker 2 has registered with the driver
            apps = [p for p in (state / "spark" / "worker-2").glob("app-*")
                    if p.name not in before]
            logs = [f for a in apps for f in a.glob("*/stderr")]
            if any("registered with driver" in f.read_text(errors="replace") for f in logs):
                break
            assert job.poll() is None, job.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "no executor on worker 2"
            time.sleep(0.2)
        worker = int((state / "pids" / "spark-worker-2.pid").read_text().split()[0])
        os.killpg(worker, signal.SIGKILL)  # the worker and its executor, as a machine lost
        out, err = job.communicate(timeout=1200)
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode == 0, err[-3000:]
    for name in ("episodes.parquet", "labels.parquet"):
        a = pl.read_parquet(tmp_path / "polars" / name)
        b = pl.read_parquet(tmp_path / "spark" / name)
        assert a.equals(b), name


@needs_cluster
def test_down_leaves_no_process_and_no_port(up) -> None:
    state, _ = up
    pids, ports = _pids(state), cluster_faults.ports(state)
    assert len(pids) == 8
    down = cluster(state, "down")
    assert down.returncode == 0, down.stderr
    # every service stopped on SIGTERM: the scheduler ended its LocalExecutor's workers
    # itself (they outlive a SIGTERM of their own), nothing needed SIGKILL
    assert "killed:" not in down.stderr, down.stderr
    assert "Exited execute loop" in (state / "logs" / "airflow-scheduler.log").read_text()
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or \
            Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z", pid
    for port in ports:
        assert not cluster_faults.listening(port), port
    assert not _leftovers(state)
    assert cluster(state, "status").returncode != 0


@needs_cluster
def test_a_service_that_does_not_come_up_is_named_and_the_rest_stopped(tmp_path: Path) -> None:
    """MLflow's port taken: the error names mlflow and its log; Postgres, already started,
    is stopped again; no process of the attempt is left."""
    state = tmp_path / "c"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        try:
            proc = cluster(state, "up", timeout=300, FLASHML_CLUSTER_MLFLOW_PORT=str(port))
            assert proc.returncode == 1
            assert (f"cluster: error: mlflow did not come up: port {port} on 127.0.0.1 is "
                    "taken by another process") in proc.stderr
            assert f"its log: {state}/logs/mlflow.log" in proc.stderr
            assert "stopping postgres" in proc.stderr
            assert not list((state / "pids").glob("*.pid"))
            pg_port = int((state / "ports").read_text().split()[1])
            assert not cluster_faults.listening(pg_port)
            assert not _leftovers(state)
        finally:
            try:
                _down_leaves_nothing(state, foreign=port)
            finally:
                _purge(state)


@needs_cluster
@full_only
def test_interrupting_up_stops_what_was_started(tmp_path: Path) -> None:
    """Ctrl-C (SIGINT/SIGTERM) during `up`: what was started is stopped."""
    state = tmp_path / "c"
    proc = subprocess.Popen(["bash", str(SCRIPT), "up"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env=_clean_env(FLASHML_CLUSTER_DIR=str(state)))
    try:
        deadline = time.monotonic() + 300
        while not (state / "pids" / "mlflow.pid").exists():  # Postgres up, MLflow started
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr
            time.sleep(0.2)
        pg = int((state / "pids" / "postgres.pid").read_text().split()[0])
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 130, err
        assert "interrupted: stopping what was started" in err
        assert not Path(f"/proc/{pg}").exists()
        assert not list((state / "pids").glob("*.pid"))
        assert not _leftovers(state)
    finally:
        if proc.poll() is None:
            proc.kill()
        try:
            _down_leaves_nothing(state)
        finally:
            _purge(state)
