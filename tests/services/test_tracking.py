"""MLflow set-up: artifacts of the embedded store live next to it, never in ./mlruns."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import python_argv


@pytest.mark.parametrize("explicit", [False, True])
def test_artifacts_next_to_the_sqlite_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            explicit: bool) -> None:
    import mlflow

    from flashml.tracking import setup

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FLASHML_HOME", str(tmp_path / "state"))
    if explicit:  # a sqlite URI given by hand behaves like the default
        monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'other' / 'm.db'}")
        root = tmp_path / "other"
    else:
        monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
        root = tmp_path / "state"
    exp_id = setup("t")
    loc = mlflow.get_experiment(exp_id).artifact_location
    assert loc == (root / "mlartifacts").resolve().as_uri()
    with mlflow.start_run():
        mlflow.log_text("x", "a.txt")
    assert not (tmp_path / "mlruns").exists()
    assert list((root / "mlartifacts").rglob("a.txt"))


def test_concurrent_first_runs_share_one_fresh_store(tmp_path: Path) -> None:
    """Three processes set up MLflow at once on a fresh FLASHML_HOME: all succeed (the schema
    migration and the experiment's creation are serialised) and agree on the experiment."""
    import os
    import subprocess

    env = {**os.environ, "FLASHML_HOME": str(tmp_path / "state"), "MLFLOW_TRACKING_URI": ""}
    code = "from flashml.tracking import setup; print(setup('t'))"
    procs = [subprocess.Popen([*python_argv(), "-c", code], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [e[-2000:] for _, e in outs]
    assert len({o.strip() for o, _ in outs}) == 1


def test_a_run_never_stays_running(tmp_path: Path) -> None:
    """A job's MLflow run (flashml.jobs.run.open_run) ends KILLED when the process is
    stopped by SIGTERM (a benchmark's timeout, `kill`), FAILED on an error (FINISHED
    otherwise: tests/kernel/test_cli.py); a new run carries its name, description, tags and the
    git commit."""
    import os
    import subprocess

    code = """
import os, signal, sys, time
from flashml.jobs.run import RunDir, open_run
run = RunDir(sys.argv[1])
with open_run(run, "a run", {"p": 1}, tags={"trace": "t"}, description="what it is"):
    if sys.argv[2] == "sigterm":
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(60)
    if sys.argv[2] == "error":
        raise ValueError("boom")
"""
    env = {**os.environ, "FLASHML_HOME": str(tmp_path / "state"), "MLFLOW_TRACKING_URI": ""}
    cases = {"sigterm": (143, "KILLED"), "error": (1, "FAILED")}
    procs = {how: subprocess.Popen([*python_argv(), "-c", code, str(tmp_path / how), how],
                                   env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True) for how in cases}
    for how, p in procs.items():
        _, err = p.communicate(timeout=300)
        assert p.returncode == cases[how][0], (how, err[-2000:])
    import mlflow

    from flashml.tracking import git_commit

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'state' / 'mlflow.db'}")
    commit = git_commit()
    for how, (_, status) in cases.items():
        run = mlflow.MlflowClient().get_run((tmp_path / how / "mlflow_run_id").read_text()
                                            .strip())
        assert run.info.status == status, how
        assert run.info.run_name == "a run" and run.data.tags["trace"] == "t"
        assert run.data.tags["mlflow.note.content"] == "what it is"
        if commit:  # (HEAD may move on while the test runs in a busy checkout)
            assert len(run.data.tags["mlflow.source.git.commit"]) == 40


def test_nothing_leaves_the_machine_unless_the_user_says_so() -> None:
    """A flashml process turns MLflow's usage telemetry and Great Expectations' analytics
    off (outside CI too), and a user's own setting of either variable wins."""
    import os
    import subprocess
    import sys

    code = ("import flashml, os; from mlflow.telemetry.utils import is_telemetry_disabled; "
            "print(is_telemetry_disabled(), os.environ['GX_ANALYTICS_ENABLED'])")
    base = {k: v for k, v in os.environ.items()
            if k not in ("CI", "MLFLOW_DISABLE_TELEMETRY", "DO_NOT_TRACK", "GX_ANALYTICS_ENABLED",
                         "PYTEST_CURRENT_TEST", "PYTEST_VERSION")}
    for extra, want in (({}, "True False"),
                        ({"MLFLOW_DISABLE_TELEMETRY": "false", "GX_ANALYTICS_ENABLED": "True"},
                         "False True")):
        # cold: the warm server imported MLflow before any child's environment was set
        p = subprocess.run([sys.executable, "-c", code], env={**base, **extra},
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr[-2000:]
        assert p.stdout.split()[-2:] == want.split(), (extra, p.stdout)
