"""Crash safety: `kill -9` at random points of `flashml trace ingest` and of
`flashml pipeline run`, then a rerun into the same output. Nothing half-written may look
finished: the output Parquet file is absent or complete (the earlier complete one, or the
new one), never a torn file; a killed job leaves no summary.json and no FINISHED MLflow run;
the rerun completes.

`make test` kills ingest at 6 points (half of them while the output is being written);
`make fuzz` (FLASHML_FUZZ_SLOW=1) kills ingest at 20 and the main job at 5 random points.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import fuzz_support as fs
import polars as pl
import pytest

from flashml.trace.canonical import read_table

from conftest import REPO

SLOW = os.environ.get("FLASHML_FUZZ_SLOW") == "1"
SEED = int(os.environ.get("FLASHML_FUZZ_SEED", "23" if not SLOW else str(time.time_ns())))


def _popen(*args: object, env: dict[str, str] | None = None) -> subprocess.Popen:
    """`flashml ARGS` in its own process group; its output goes to a log file (a pipe
    nobody reads would stall a chatty job)."""
    import tempfile

    log = tempfile.NamedTemporaryFile(prefix="flashml-kill-", suffix=".log", delete=False)
    proc = subprocess.Popen([sys.executable, "-m", "flashml.cli", *map(str, args)],
                            cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                            env={**os.environ, **(env or {})}, start_new_session=True)
    proc.log_path = log.name  # type: ignore[attr-defined]
    log.close()
    return proc


def _finish(proc: subprocess.Popen, timeout: float = 1800) -> None:
    """Wait for a run that must succeed; its log on failure."""
    rc = proc.wait(timeout=timeout)
    text = Path(proc.log_path).read_text()[-3000:]  # type: ignore[attr-defined]
    Path(proc.log_path).unlink()  # type: ignore[attr-defined]
    assert rc == 0, text


def _kill(proc: subprocess.Popen) -> int:
    """SIGKILL the command and every process it started (Spark's JVM too)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    rc = proc.wait()
    log = getattr(proc, "log_path", None)
    if log is not None:  # never os.devnull: as root, unlinking it deletes the device node
        Path(log).unlink(missing_ok=True)
    return rc


def _temp_files(folder: Path, name: str) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(f".{name}."))


def _log(kind: str, what: str, detail: str = "") -> None:
    fs._log(fs.Outcome(kind, what, detail), [])


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> tuple[Path, Path]:
    """A trace of several 1 MiB chunks, and a smaller one for the earlier output."""
    from flashml.trace.generate import generate_trace

    d = tmp_path_factory.mktemp("kill")
    big, small = d / "big.trace", d / "small.trace"
    generate_trace("region1-like", 3, big, accesses=80_000, progress=False)
    generate_trace("region1-like", 4, small, accesses=2_000, progress=False)
    return big, small


def test_kill_ingest_at_random_points(traces: tuple[Path, Path], tmp_path: Path) -> None:
    big, small = traces
    out = tmp_path / "out" / "t.parquet"
    from flashml.trace.ingest import ingest

    ref = pl.read_parquet(ingest(big, tmp_path / "ref.parquet", progress=False).out)
    old = ingest(small, out, progress=False)  # an earlier complete output in place
    old_df = pl.read_parquet(old.out)
    t0 = time.perf_counter()
    _finish(_popen("trace", "ingest", big, "-o", tmp_path / "timing.parquet", "--chunk-mb", "1"))
    full = time.perf_counter() - t0
    r = random.Random(SEED)
    points = 20 if SLOW else 6
    states = {"old": 0, "new": 0}
    for i in range(points):
        before = set(_temp_files(out.parent, out.name))
        proc = _popen("trace", "ingest", big, "-o", out, "--chunk-mb", "1")
        if i % 2:  # while the output is being written: after its temporary file appears
            deadline = time.perf_counter() + full * 3
            while not set(_temp_files(out.parent, out.name)) - before \
                    and proc.poll() is None and time.perf_counter() < deadline:
                time.sleep(0.005)
            time.sleep(r.uniform(0, 0.3))
        else:
            time.sleep(r.uniform(0.05, full))
        rc = _kill(proc)
        # the output is the earlier complete table or the new complete one, never torn
        df, _ = read_table(out)
        if df.equals(old_df):
            state = "old"
        else:
            assert df.equals(ref), "a torn or mixed output"
            state = "new"
            ingest(small, out, progress=False)  # put the earlier output back
        states[state] += 1
        for name in _temp_files(out.parent, out.name):
            assert name.endswith(".tmp"), name  # hidden, unfinished-looking leftovers only
        left = len(_temp_files(out.parent, out.name))
        _log("ok", "kill-ingest", f"point {i}: exit {rc}, output {state}, {left} temporary "
             "file(s) left so far")
    # a rerun into the same output completes
    _finish(_popen("trace", "ingest", big, "-o", out, "--chunk-mb", "1"))
    assert pl.read_parquet(out).equals(ref)
    assert states["old"] >= 1, states


def _mlflow_status(home: Path, run_id: str) -> str:
    code = ("import sys, mlflow; from flashml.tracking import setup; setup(); "
            "print(mlflow.tracking.MlflowClient().get_run(sys.argv[1]).info.status)")
    proc = subprocess.run([sys.executable, "-c", code, run_id], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, "FLASHML_HOME": str(home)}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1]


PIPELINE = ("pipeline", "run", "--sweep-trials", "0", "--accesses", "20000", "--no-register")


@pytest.mark.skipif(not SLOW, reason="slow (minutes): make fuzz runs it (FLASHML_FUZZ_SLOW=1)")
def test_kill_pipeline_at_random_points(tmp_path: Path) -> None:
    """kill -9 of `flashml pipeline run` at 5 random points of a fresh run folder, each kill
    followed by a rerun into the same folder (which is the next one killed); the last rerun
    completes. A killed run leaves no summary.json and no FINISHED MLflow run."""
    home, out = tmp_path / "home", tmp_path / "run"
    env = {"FLASHML_HOME": str(home)}
    t0 = time.perf_counter()
    _finish(_popen(*PIPELINE, "--out", tmp_path / "timing", env=env))
    full = time.perf_counter() - t0
    r = random.Random(SEED)
    for i in range(5):
        proc = _popen(*PIPELINE, "--out", out, env=env)
        time.sleep(r.uniform(1.0, full * 0.8))
        rc = _kill(proc)
        rid = (out / "mlflow_run_id").read_text().strip() if (out / "mlflow_run_id").is_file() \
            else None
        if (out / "summary.json").exists():
            # the run got to its very end before the kill: then the summary is its own
            summary = json.loads((out / "summary.json").read_text())
            assert summary["mlflow_run_id"] == rid, f"kill {i}: another run's summary.json"
            _log("ok", "kill-pipeline", f"point {i}: exit {rc}, completed before the kill")
            out = tmp_path / f"run{i}"  # a finished folder: the next kills start afresh
            continue  # (a killed rerun over a finished folder: the xfail test below)
        if rid and rc != 0:
            assert _mlflow_status(home, rid) != "FINISHED", f"kill {i}: MLflow run FINISHED"
        _log("ok", "kill-pipeline", f"point {i}: exit {rc}, no summary.json")
    _finish(_popen(*PIPELINE, "--out", out, env=env))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["mlflow_run_id"] == (out / "mlflow_run_id").read_text().strip()
    assert _mlflow_status(home, summary["mlflow_run_id"]) == "FINISHED"


@pytest.mark.skipif(not SLOW, reason="slow (minutes): make fuzz runs it (FLASHML_FUZZ_SLOW=1)")
def test_killed_rerun_does_not_keep_an_old_summary(tmp_path: Path) -> None:
    """The pipeline itself (a fast check of the same: the next test)."""
    home, out = tmp_path / "home", tmp_path / "run"
    env = {"FLASHML_HOME": str(home)}
    _finish(_popen(*PIPELINE, "--out", out, env=env))
    first = json.loads((out / "summary.json").read_text())
    proc = _popen(*PIPELINE, "--seed", "1", "--out", out, env=env)
    time.sleep(20)
    _kill(proc)
    if (out / "summary.json").exists():
        summary = json.loads((out / "summary.json").read_text())
        assert summary["mlflow_run_id"] != first["mlflow_run_id"], \
            "the killed rerun's folder still holds the first run's summary.json"


# A two-stage job for run_job (`ingest` then `work`): `work` announces itself in the file
# $TOY_READY and then waits to be killed when $TOY_READY is set.
TOY_JOB = """
import os, sys, time
from pathlib import Path
from types import SimpleNamespace
from flashml.jobs.run import Stage, run_job

def ingest(run, s, timer):
    (run.path / "accesses.txt").write_text(s)
    return run.done("ingest") or run.record("ingest", {"content": s})

def work(run, s, timer):
    if os.environ.get("TOY_READY"):
        ready = Path(os.environ["TOY_READY"])  # renamed into place: never seen empty
        ready.with_suffix(".part").write_text("summary.json" if run.summary.exists()
                                              else "none")
        ready.with_suffix(".part").rename(ready)
        time.sleep(600)
    return run.record("work", {"content": (run.path / "accesses.txt").read_text()})

job = SimpleNamespace(STAGES=(Stage("ingest", ingest), Stage("work", work)),
                      run_name=lambda s: "toy", mlflow_params=lambda run, s: {},
                      summary=lambda records, s: {"content": records["work"]["content"]})
run_job(job, sys.argv[2], Path(sys.argv[1]))
"""


def test_killed_rerun_leaves_no_summary_of_another_run(tmp_path: Path) -> None:
    """kill -9 of a rerun of a job over a finished run folder: the previous run's
    summary.json is gone before the rerun changes the folder (it used to survive until the
    new one was written, describing content the folder no longer had)."""
    out, home, ready = tmp_path / "run", tmp_path / "home", tmp_path / "ready"
    env = {**os.environ, "FLASHML_HOME": str(home)}
    env.pop("TOY_READY", None)
    subprocess.run([sys.executable, "-c", TOY_JOB, str(out), "first"], cwd=REPO, env=env,
                   check=True, timeout=300, capture_output=True)
    assert json.loads((out / "summary.json").read_text())["content"] == "first"
    proc = subprocess.Popen([sys.executable, "-c", TOY_JOB, str(out), "second"], cwd=REPO,
                            env={**env, "TOY_READY": str(ready)}, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    proc.log_path = None  # type: ignore[attr-defined]  # (no log file to remove)
    deadline = time.monotonic() + 300
    while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ready.exists(), f"the rerun never reached its second stage (exit {proc.poll()})"
    assert ready.read_text() == "none", "summary.json of the first run during the rerun"
    assert _kill(proc) == -signal.SIGKILL
    assert (out / "accesses.txt").read_text() == "second"  # the folder holds the rerun's
    assert not (out / "summary.json").exists(), "the killed rerun kept the first summary.json"
    # and a rerun that completes writes its own
    subprocess.run([sys.executable, "-c", TOY_JOB, str(out), "third"], cwd=REPO, env=env,
                   check=True, timeout=300, capture_output=True)
    assert json.loads((out / "summary.json").read_text())["content"] == "third"


def test_ingest_removes_what_killed_ingests_left(traces: tuple[Path, Path],
                                                 tmp_path: Path) -> None:
    """Temporary outputs of dead ingests (untouched for 10 minutes) go at the next ingest
    into the same output; a fresh one (maybe a live ingest's) stays."""
    from flashml.trace.ingest import STALE_TEMPORARY_S, ingest

    out = tmp_path / "t.parquet"
    stale, fresh = tmp_path / ".t.parquet.dead1234.tmp", tmp_path / ".t.parquet.live5678.tmp"
    other = tmp_path / ".u.parquet.dead0000.tmp"
    for p in (stale, fresh, other):
        p.write_bytes(b"PAR1 half written")
    old = time.time() - STALE_TEMPORARY_S - 60
    os.utime(stale, (old, old))
    os.utime(other, (old, old))
    ingest(traces[1], out, progress=False)
    assert not stale.exists() and fresh.exists() and other.exists() and out.exists()


# A writer of `dest` (argv[1]) through files.atomic_path that half-writes its temporary file,
# announces it in argv[2] (renamed into place, so it is never seen empty) and waits (to be
# killed, or to stay alive while another writes).
HALF_WRITER = """
import sys, time
from pathlib import Path
from flashml.files import atomic_path
with atomic_path(sys.argv[1]) as tmp:
    tmp.write_text("half written")
    ready = Path(sys.argv[2])
    ready.with_suffix(".part").write_text(tmp.name)
    ready.with_suffix(".part").rename(ready)  # whole when it appears
    time.sleep(600)
"""


def _half_writer(dest: Path, ready: Path) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-c", HALF_WRITER, str(dest), str(ready)],
                            cwd=REPO, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    proc.log_path = None  # type: ignore[attr-defined]  # (no log file to remove)
    deadline = time.monotonic() + 120
    while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert ready.exists(), f"the writer did not start (exit {proc.poll()})"
    return proc, ready.read_text()


def test_atomic_writes_remove_what_killed_writers_left(tmp_path: Path) -> None:
    """files.atomic_path / atomic_dir: the temporary of a writer killed with kill -9 (its pid
    in the name, that process gone) is removed by the next write of the same target; a live
    writer's stays, and so does anything not a temporary of exactly that target."""
    from flashml.files import _HOST, STALE_TEMPORARY_S, atomic_dir, write_json

    out = tmp_path / "out"
    out.mkdir()
    dest = out / "t.json"
    killed, killed_tmp = _half_writer(dest, tmp_path / "ready1")
    live, live_tmp = _half_writer(dest, tmp_path / "ready2")
    assert killed_tmp.startswith(f".t.json.p{killed.pid}-{_HOST}.") and killed_tmp != live_tmp
    assert _kill(killed) == -signal.SIGKILL
    assert (out / killed_tmp).read_text() == "half written"  # what kill -9 leaves
    dead = killed.pid
    old = time.time() - STALE_TEMPORARY_S - 60
    made = {
        # removed: a dead writer's of this host (a file, a folder), an old one of another
        # host, an old one from before the pid was in the names
        f".t.json.p{dead}-{_HOST}.abcd_123.tmp": ("dir", None),
        f".t.json.p{dead}-0badc0de.zzzzzzzz.tmp": ("file", old),
        ".t.json.dead1234.tmp": ("file", old),
        # kept: another host's or an old-style one still fresh, other targets' (a longer
        # name, a shorter one), a dead writer's temporary of another file, hidden files that
        # are not temporaries
        f".t.json.p{dead}-0badc0de.yyyyyyyy.tmp": ("file", None),
        ".t.json.live5678.tmp": ("file", None),
        f".t.json.x.p{dead}-{_HOST}.abcdefgh.tmp": ("file", old),
        f".t.jso.p{dead}-{_HOST}.abcdefgh.tmp": ("file", old),
        f".u.json.p{dead}-{_HOST}.abcdefgh.tmp": ("file", old),
        ".t.json.notes.tmp": ("file", old),
        ".t.json.dead1234.old": ("file", old),
    }
    for name, (kind, mtime) in made.items():
        p = out / name
        if kind == "dir":
            p.mkdir()
            (p / "half").write_text("x")
        else:
            p.write_text("x")
        if mtime is not None:
            os.utime(p, (mtime, mtime))
    before = set(os.listdir(out))
    write_json(dest, {"a": 1})
    gone = before - set(os.listdir(out))
    assert gone == {killed_tmp, f".t.json.p{dead}-{_HOST}.abcd_123.tmp",
                    f".t.json.p{dead}-0badc0de.zzzzzzzz.tmp", ".t.json.dead1234.tmp"}, gone
    assert (out / live_tmp).read_text() == "half written"  # a live writer's is untouched
    assert json.loads(dest.read_text()) == {"a": 1}
    # once that writer is killed too, the next write (here a folder's) removes its leftover
    assert _kill(live) == -signal.SIGKILL
    dest.unlink()
    with atomic_dir(dest) as tmp:  # the same target name, now as a folder
        assert tmp.name.startswith(f".t.json.p{os.getpid()}-{_HOST}.")
        (tmp / "x").write_text("y")
    assert not (out / live_tmp).exists()
    assert (dest / "x").read_text() == "y"
    left = {n for n in os.listdir(out) if n.startswith(".t.json.")}
    assert left == {f".t.json.p{dead}-0badc0de.yyyyyyyy.tmp", ".t.json.live5678.tmp",
                    f".t.json.x.p{dead}-{_HOST}.abcdefgh.tmp", ".t.json.notes.tmp",
                    ".t.json.dead1234.old"}, left
