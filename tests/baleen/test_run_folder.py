"""Run folders are transactions (flashml/jobs/run.py, `RunFolder`): one job per folder at a
time (a second one is refused at once and changes nothing), no symlinks inside a run
folder, a failed job leaves the folder as it was (a folder it made is gone), and a job's
MLflow run left RUNNING by a killed process is marked KILLED by the next job.

Most cases run a toy two-stage job through `run_job` in a subprocess (seconds); one runs
two real `flashml pipeline run` on one folder at once, and a lone one to compare with.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from conftest import REPO, python_argv, seed_mlflow_store

# A job for run_job: `ingest` writes accesses.txt (atomically) and its record, `work` writes
# work/out.txt and its record. $TOY_FAIL=<stage> makes that stage fail halfway (after it
# wrote its file); $TOY_READY=<file> makes `work` announce itself there and wait (to be
# killed, or to hold the folder while another job tries it). argv: folder, content,
# [--resume].
TOY_JOB = """
import os, sys, time
from pathlib import Path
from types import SimpleNamespace
from flashml.files import write_json
from flashml.jobs.run import Stage, run_job

def ingest(run, s, timer):
    rec = run.done("ingest")
    if rec:
        return rec
    write_json(run.path / "accesses.txt", s)
    if os.environ.get("TOY_FAIL") == "ingest":
        raise RuntimeError("ingest failed")
    return run.record("ingest", {"content": s})

def work(run, s, timer):
    rec = run.done("work")
    if rec:
        return rec
    write_json(run.work / "out.txt", s + " worked")
    if os.environ.get("TOY_READY"):
        Path(os.environ["TOY_READY"]).write_text(str(os.getpid()))
        time.sleep(600)
    if os.environ.get("TOY_FAIL") == "work":
        raise RuntimeError("work failed")
    return run.record("work", {"content": s})

def last(run, s, timer):
    if os.environ.get("TOY_FAIL") == "last":
        (run.path / "last.txt").write_text("half")
        raise RuntimeError("last failed")
    return run.done("last") or run.record("last", {"content": s})

job = SimpleNamespace(STAGES=(Stage("ingest", ingest), Stage("work", work),
                              Stage("last", last)),
                      run_name=lambda s: "toy", mlflow_params=lambda run, s: {},
                      summary=lambda records, s: {"content": records["work"]["content"]})
run_job(job, sys.argv[2], Path(sys.argv[1]), resume="--resume" in sys.argv)
"""


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, "FLASHML_HOME": str(seed_mlflow_store(home)), "MLFLOW_TRACKING_URI": "",
           **extra}
    for k in ("TOY_FAIL", "TOY_READY"):
        if k not in extra:
            env.pop(k, None)
    return env


def _toy(out: Path, content: str, home: Path, *args: str,
         **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(python_argv("-c", TOY_JOB, str(out), content, *args),
                          cwd=REPO, env=_env(home, **extra), capture_output=True, text=True,
                          timeout=600)


def _toy_bg(out: Path, content: str, home: Path, ready: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", TOY_JOB, str(out), content], cwd=REPO,
                            env=_env(home, TOY_READY=str(ready)), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _wait_for(path: Path, proc: subprocess.Popen[str], timeout: float = 600) -> None:
    """Wait until `path` exists (the event), failing if `proc` ends first."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, f"exit {proc.returncode}: {proc.stderr.read()[-3000:]}"
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def _kill(proc: subprocess.Popen[str]) -> int:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return proc.wait()


def _tree(folder: Path) -> dict[str, Any]:
    """Every file under `folder` (not following links) and its bytes; folders as None."""
    out: dict[str, Any] = {}
    for root, dirs, files in os.walk(folder):
        for d in dirs:
            out[os.path.relpath(os.path.join(root, d), folder)] = None
        for f in files:
            p = os.path.join(root, f)
            out[os.path.relpath(p, folder)] = (os.readlink(p) if os.path.islink(p)
                                               else Path(p).read_bytes())
    return out


def _mlflow_runs(home: Path) -> dict[str, str]:
    """{run id: status} of the store's top-level runs (not the nested ones)."""
    code = ("import json, mlflow; from flashml.tracking import tracking_uri; "
            "mlflow.set_tracking_uri(tracking_uri()); c = mlflow.MlflowClient(); "
            "print(json.dumps({r.info.run_id: r.info.status for e in c.search_experiments() "
            "for r in c.search_runs([e.experiment_id]) "
            "if 'mlflow.parentRunId' not in r.data.tags}))")
    p = subprocess.run(python_argv("-c", code), cwd=REPO, env=_env(home),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_a_second_job_on_a_folder_is_refused_at_once(tmp_path: Path) -> None:
    """While a job holds its run folder, another job on it exits 1 at once naming the
    holder's pid, and changes nothing in the folder; the first then completes."""
    out, home, ready = tmp_path / "run", tmp_path / "home", tmp_path / "ready"
    first = _toy_bg(out, "first", home, ready)
    try:
        _wait_for(ready, first)
        lock = json.loads((out / ".flashml.lock").read_text())
        assert lock["pid"] == first.pid
        before = _tree(out)
        t0 = time.monotonic()
        second = _toy(out, "second", home)
        assert second.returncode == 1, second.stderr[-3000:]
        assert f"{out}: in use by flashml run (pid {first.pid}, started " in second.stderr
        assert time.monotonic() - t0 < 120  # at once: no waiting for the lock
        assert _tree(out) == before
    finally:
        _kill(first)


def test_a_failed_job_on_a_new_folder_leaves_no_folder(tmp_path: Path) -> None:
    """A job failing after it wrote files (settings.json, accesses, a stage record, work/,
    mlflow_run_id) into a folder it made leaves no folder, nor the parents it made."""
    home = tmp_path / "home"
    for stage in ("ingest", "work", "last"):
        out = tmp_path / stage / "new" / "run"
        p = _toy(out, "x", home, TOY_FAIL=stage)
        assert p.returncode == 1 and f"{stage} failed" in p.stderr, p.stderr[-3000:]
        assert not (tmp_path / stage).exists(), (stage, _tree(tmp_path / stage))


def test_a_failed_rerun_leaves_the_earlier_run_as_it_was(tmp_path: Path) -> None:
    """A fresh run over a finished folder that fails leaves it exactly as it was (its
    summary, records, outputs and MLflow run id); an empty folder given by the user stays,
    empty."""
    out, home = tmp_path / "run", tmp_path / "home"
    assert _toy(out, "first", home).returncode == 0
    before = _tree(out)
    assert json.loads(before["summary.json"])["content"] == "first"
    for stage in ("ingest", "work", "last"):
        p = _toy(out, "second", home, TOY_FAIL=stage)
        assert p.returncode == 1, p.stderr[-3000:]
        assert _tree(out) == before, stage
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _toy(empty, "x", home, TOY_FAIL="work").returncode == 1
    assert empty.is_dir() and not any(empty.iterdir())


def test_a_failed_resume_keeps_the_stages_it_completed(tmp_path: Path) -> None:
    """A resumed run that fails keeps the stages it completed (and their outputs) for the
    next resume and undoes only the failed stage; that resume then completes."""
    out, home, ready = tmp_path / "run", tmp_path / "home", tmp_path / "ready"
    killed = _toy_bg(out, "r", home, ready)  # killed in `work`: a resumable folder
    _wait_for(ready, killed)
    assert _kill(killed) == -signal.SIGKILL
    assert (out / "stages" / "ingest.json").is_file()
    assert not (out / "stages" / "work.json").exists()
    p = _toy(out, "r", home, "--resume", TOY_FAIL="last")
    assert p.returncode == 1 and "last failed" in p.stderr, p.stderr[-3000:]
    assert json.loads((out / "stages" / "work.json").read_text()) == {"content": "r"}
    assert json.loads((out / "work" / "out.txt").read_text()) == "r worked"
    assert not (out / "last.txt").exists() and not (out / "summary.json").exists()
    assert not (out / ".flashml.undo").exists() and not (out / ".flashml.lock").exists()
    p = _toy(out, "r", home, "--resume")
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads((out / "summary.json").read_text())["content"] == "r"


def test_symlinks_in_a_run_folder_are_refused(tmp_path: Path) -> None:
    """A symlink inside a run folder (a folder the job writes into, or a file it replaces)
    is refused before anything is written, inside the folder or outside it."""
    import shutil

    out, home, elsewhere = tmp_path / "run", tmp_path / "home", tmp_path / "elsewhere"
    assert _toy(out, "first", home).returncode == 0
    elsewhere.mkdir()
    for link in ("work", "stages", "accesses.txt", "work/sub"):
        target = out / link
        saved = tmp_path / "saved"
        if target.exists():
            os.rename(target, saved)
        target.symlink_to(elsewhere, target_is_directory=True)
        before = _tree(out)
        p = _toy(out, "second", home)
        assert p.returncode == 1, (link, p.stderr[-3000:])
        assert f"{target}: is a symlink; a run folder must hold its own files" in p.stderr, \
            p.stderr[-3000:]
        assert not any(elsewhere.iterdir()), link
        assert _tree(out) == before, link
        target.unlink()
        if saved.exists():
            os.rename(saved, target)
    shutil.rmtree(out / "work")  # the folder is usable again once the links are gone
    assert _toy(out, "third", home).returncode == 0


def test_a_killed_jobs_mlflow_run_is_marked_killed(tmp_path: Path) -> None:
    """kill -9 of a job leaves its MLflow run RUNNING; the next job on the same tracking
    store marks it KILLED (its process is gone). A RUNNING run of a live process, and one
    recorded by another host, are left alone."""
    out, home, ready = tmp_path / "run", tmp_path / "home", tmp_path / "ready"
    live_ready = tmp_path / "live-ready"
    live = _toy_bg(tmp_path / "live", "l", home, live_ready)
    try:
        _wait_for(live_ready, live)
        live_rid = (tmp_path / "live" / "mlflow_run_id").read_text().strip()
        killed = _toy_bg(out, "k", home, ready)
        _wait_for(ready, killed)
        rid = (out / "mlflow_run_id").read_text().strip()
        assert _kill(killed) == -signal.SIGKILL
        other_host = ("import mlflow; from flashml.tracking import setup; setup(); "
                      "r = mlflow.MlflowClient().create_run(mlflow.get_experiment_by_name("
                      "'flashml').experiment_id, tags={'flashml.pid': '1', 'flashml.host': "
                      "'another-host'}); print(r.info.run_id)")
        p = subprocess.run(python_argv("-c", other_host), cwd=REPO, env=_env(home),
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr[-3000:]
        other = p.stdout.strip().splitlines()[-1]
        assert _mlflow_runs(home)[rid] == "RUNNING"
        p = _toy(tmp_path / "next", "n", home)
        assert p.returncode == 0, p.stderr[-3000:]
        runs = _mlflow_runs(home)
        assert runs[rid] == "KILLED"
        assert runs[live_rid] == "RUNNING" and runs[other] == "RUNNING"
    finally:
        _kill(live)


DAG_TASK = """
import json, runpy, sys
from pathlib import Path
from flashml.errors import UserError
from flashml.settings import BaleenSettings

run_stage = runpy.run_path(sys.argv[1])["run_stage"]
missing = Path(sys.argv[4])
run_stage.__globals__["settings"] = lambda: BaleenSettings().replace(trace=missing)
out = {}
for name, folder in (("locked", sys.argv[2]), ("new", sys.argv[3])):
    try:
        run_stage(folder, "ingest")
        out[name] = "ok"
    except Exception as e:
        out[name] = f"{type(e).__name__}: {e}"
print("RESULT " + json.dumps(out))
"""


def test_a_dag_task_holds_the_run_folder_while_it_runs(tmp_path: Path) -> None:
    """A DAG task (dags/flashml_retrain.run_stage) takes the run folder's lock: on a folder
    another job holds it is refused and changes nothing; a first task that fails leaves
    no folder."""
    held, home, ready = tmp_path / "held", tmp_path / "home", tmp_path / "ready"
    new = tmp_path / "runs" / "flashml_retrain" / "manual_1"
    first = _toy_bg(held, "first", home, ready)
    try:
        _wait_for(ready, first)
        before = _tree(held)
        env = _env(home, AIRFLOW_HOME=str(tmp_path / "airflow"),
                   AIRFLOW__CORE__LOAD_EXAMPLES="False")
        p = subprocess.run([*python_argv(), "-c", DAG_TASK, str(REPO / "dags" /
                            "flashml_retrain.py"), str(held), str(new),
                            str(tmp_path / "missing.trace")], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stderr[-3000:]
        res = json.loads(p.stdout.split("RESULT ", 1)[1].splitlines()[0])
        assert res["locked"].startswith(f"UserError: {held}: in use by flashml run (pid "
                                        f"{first.pid}, "), res
        assert "missing.trace" in res["new"], res
        assert _tree(held) == before
        assert not new.exists() and (tmp_path / "runs" / "flashml_retrain").is_dir() is False
    finally:
        _kill(first)


PIPELINE = ("pipeline", "run", "--sweep-trials", "0", "--accesses", "20000", "--no-register",
            "--no-compile", "--engine", "polars", "--max-iterations", "2")
#: Summary entries that differ between two identical runs: timings, memory, the run's id.
_VOLATILE = ("seconds", "wall_s", "accesses_per_s", "timings_s", "peak_rss_mb",
             "mlflow_run_id")


def _flashml(*args: object, home: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "flashml.cli", *map(str, args)], cwd=REPO,
                            env=_env(home), start_new_session=True, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _normal(x: Any, folder: Path) -> Any:
    """A summary without its volatile entries, the run folder's path as <D>."""
    if isinstance(x, dict):
        return {k: _normal(v, folder) for k, v in x.items()
                if not any(k == v_ or k.endswith("_" + v_) for v_ in _VOLATILE)}
    if isinstance(x, list):
        return [_normal(v, folder) for v in x]
    if isinstance(x, str):
        return x.replace(str(folder), "<D>")
    return x


def test_two_pipeline_runs_on_one_folder(tmp_path: Path) -> None:
    """Two `flashml pipeline run -o D` at once: the second (started once the first holds
    the folder) is refused at once naming the first and opens no MLflow run; the first's
    summary is the one a run alone gives (it used to end with the other's accesses and
    MLflow run)."""
    home, shared, alone = tmp_path / "home", tmp_path / "shared", tmp_path / "alone"
    first = _flashml(*PIPELINE, "-o", shared, home=home)
    try:
        deadline = time.monotonic() + 600
        while True:  # the event: the first has the lock and wrote its pid into it
            try:
                if json.loads((shared / ".flashml.lock").read_text())["pid"] == first.pid:
                    break
            except (OSError, ValueError, KeyError):
                pass
            assert first.poll() is None, first.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the first run never locked its folder"
            time.sleep(0.05)
        second = _flashml(*PIPELINE, "-o", shared, home=home)
        _, err = second.communicate(timeout=600)
        assert second.returncode == 1, err[-3000:]
        assert f"flashml: error: {shared}: in use by flashml run (pid {first.pid}, " \
            "started " in err, err[-3000:]
        lone = _flashml(*PIPELINE, "-o", alone, home=home)  # the same job alone, meanwhile
        for p in (first, lone):
            _, err = p.communicate(timeout=1800)
            assert p.returncode == 0, err[-3000:]
    finally:
        _kill(first)
    got = json.loads((shared / "summary.json").read_text())
    want = json.loads((alone / "summary.json").read_text())
    assert _normal(got, shared) == _normal(want, alone)
    assert got["mlflow_run_id"] == (shared / "mlflow_run_id").read_text().strip()
    runs = _mlflow_runs(home)
    assert sorted(runs) == sorted([got["mlflow_run_id"], want["mlflow_run_id"]]), runs
    assert not (shared / ".flashml.lock").exists() and not (shared / ".flashml.undo").exists()


def test_a_failed_pipeline_run_on_a_new_folder_leaves_nothing(tmp_path: Path) -> None:
    """`flashml pipeline run` on a trace too short for its training window fails after
    ingest wrote the generated trace, settings.json, accesses.parquet and gx/ into the
    folder: the folder and the parents the run made are gone, only the error remains."""
    home, out = tmp_path / "home", tmp_path / "new" / "run"
    p = _flashml("pipeline", "run", "--accesses", "2000", "--days", "0.5", "-o", out,
                 home=home)
    _, err = p.communicate(timeout=900)
    assert p.returncode == 1, err[-3000:]
    assert "flashml: error: " in err and "the trace spans" in err, err[-3000:]
    assert not (tmp_path / "new").exists(), _tree(tmp_path / "new")
