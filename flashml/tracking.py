"""MLflow set-up: one place for the tracking URI, the artifact store and the experiment.

Default (embedded): sqlite store `.flashml/mlflow.db` and artifacts under
`.flashml/mlartifacts` (FLASHML_HOME moves both). `MLFLOW_TRACKING_URI` points at a server
instead (e.g. the compose file's MLflow service).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import warnings
from collections.abc import Iterator
from pathlib import Path

from flashml.config import state_dir

EXPERIMENT = "flashml"
REGISTERED_MODEL = "flashml-policy"
CHAMPION = "champion"
#: MLflow 3's UI opens an experiment on its GenAI overview unless this tag says it holds model
#: training runs; then it opens on the runs table (what flashml's runs are).
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"


def tracking_uri() -> str:
    env = os.environ.get("MLFLOW_TRACKING_URI")
    if env:
        return env
    return f"sqlite:///{(state_dir() / 'mlflow.db').resolve()}"


def artifact_root(uri: str | None = None) -> str | None:
    """Where new experiments keep artifacts: next to a sqlite store (so artifacts never land
    in ./mlruns of whatever folder the command ran in); None lets a server decide."""
    uri = uri or tracking_uri()
    if uri.startswith("sqlite:///"):
        return (Path(uri.removeprefix("sqlite:///")).parent / "mlartifacts").resolve().as_uri()
    return None


@contextlib.contextmanager
def _store_lock(uri: str) -> Iterator[None]:
    """Serialise the first touch of a sqlite store between processes: MLflow creates and
    migrates the schema on first use, and two runs starting together on a fresh
    FLASHML_HOME would otherwise race in the migration (or both create the experiment)."""
    if not uri.startswith("sqlite:///"):
        yield
        return
    db = Path(uri.removeprefix("sqlite:///"))
    db.parent.mkdir(parents=True, exist_ok=True)
    with open(db.with_name(db.name + ".lock"), "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def setup(experiment: str = EXPERIMENT) -> str:
    """Point MLflow at the store and make sure the experiment exists; returns its id."""
    for name in ("mlflow", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", module="mlflow")
    import mlflow

    uri = tracking_uri()
    mlflow.set_tracking_uri(uri)
    with _store_lock(uri):
        exp = mlflow.get_experiment_by_name(experiment)
        if exp is None:
            exp_id = mlflow.create_experiment(experiment, artifact_location=artifact_root(uri),
                                              tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND})
        else:
            exp_id = exp.experiment_id
            if exp.tags.get(EXPERIMENT_KIND_TAG) != EXPERIMENT_KIND:
                mlflow.MlflowClient().set_experiment_tag(exp_id, EXPERIMENT_KIND_TAG,
                                                         EXPERIMENT_KIND)
    mlflow.set_experiment(experiment_id=exp_id)
    return exp_id


def git_commit() -> str | None:
    """The commit of the flashml checkout this code runs from (with `-dirty` when it has
    uncommitted changes), None outside a git checkout or without git."""
    import subprocess

    repo = Path(__file__).resolve().parents[1]
    if not (repo / ".git").exists():
        return None
    try:
        sha = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain",
                                "--untracked-files=no"], capture_output=True, text=True,
                               timeout=30, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{sha}-dirty" if dirty else sha or None


def source_tags() -> dict[str, str]:
    """Tags every flashml MLflow run carries: the git commit (as MLflow's own
    `mlflow.source.git.commit`, which the UI shows, and `flashml.git_commit` with a `-dirty`
    mark) and the flashml version."""
    from importlib.metadata import PackageNotFoundError, version

    tags: dict[str, str] = {}
    commit = git_commit()
    if commit:
        tags["mlflow.source.git.commit"] = commit.removesuffix("-dirty")
        tags["flashml.git_commit"] = commit
    try:
        tags["flashml.version"] = version("flashml")
    except PackageNotFoundError:
        pass
    return tags


#: Tags of a job's MLflow run naming the process that has it open (set when the run is
#: started or reopened): `end_stale_runs` marks a RUNNING run KILLED once that process is
#: gone.
PID_TAG = "flashml.pid"
HOST_TAG = "flashml.host"
PROCESS_START_TAG = "flashml.process_start"


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _process_start(pid: int) -> str | None:
    """`<boot id>:<start time in clock ticks>` of process `pid` (None if unknown): a pid
    reused by another process, or after a reboot, does not match."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            ticks = f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None
    return f"{_boot_id()}:{ticks}"


def process_tags() -> dict[str, str]:
    """The tags naming this process (PID_TAG, HOST_TAG, PROCESS_START_TAG)."""
    import socket

    tags = {PID_TAG: str(os.getpid()), HOST_TAG: socket.gethostname()}
    start = _process_start(os.getpid())
    if start:
        tags[PROCESS_START_TAG] = start
    return tags


def _alive(pid: int, start: str | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return pid > 0
    return start is None or _process_start(pid) in (None, start)


def end_stale_runs() -> list[str]:
    """Mark KILLED every run of the tracking store that is RUNNING although the process
    that has it open (its PID_TAG and PROCESS_START_TAG, on this host: HOST_TAG) is gone
    (a job killed with SIGKILL, or by a crash of the machine). Runs of another host, and
    runs without these tags (nested runs, runs of other tools), are left alone. Nothing is
    done (nor created) when the embedded store does not exist yet. Returns the run ids."""
    import socket

    uri = tracking_uri()
    if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).exists():
        return []
    for name in ("mlflow", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", module="mlflow")
    import mlflow
    from mlflow.entities import ViewType

    mlflow.set_tracking_uri(uri)
    client = mlflow.MlflowClient()
    host, ended = socket.gethostname(), []
    exps = [e.experiment_id for e in client.search_experiments(view_type=ViewType.ALL)]
    if not exps:
        return []
    token = None
    while True:
        page = client.search_runs(exps, filter_string="attributes.status = 'RUNNING'",
                                  run_view_type=ViewType.ALL, max_results=1000,
                                  page_token=token)
        for r in page:
            tags = r.data.tags
            if tags.get(HOST_TAG) != host or not tags.get(PID_TAG, "").isdigit():
                continue
            if _alive(int(tags[PID_TAG]), tags.get(PROCESS_START_TAG)):
                continue
            client.set_terminated(r.info.run_id, status="KILLED")
            ended.append(r.info.run_id)
            logging.getLogger("flashml.tracking").warning(
                "MLflow run %s was RUNNING but its process (pid %s) is gone: marked KILLED",
                r.info.run_id, tags[PID_TAG])
        token = page.token
        if not token:
            return ended
