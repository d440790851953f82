"""MLflow set-up: artifacts of the embedded store live next to it, never in ./mlruns."""

from __future__ import annotations

from pathlib import Path

import pytest


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
    import sys

    env = {**os.environ, "FLASHML_HOME": str(tmp_path / "state"), "MLFLOW_TRACKING_URI": ""}
    code = "from flashml.tracking import setup; print(setup('t'))"
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [e[-2000:] for _, e in outs]
    assert len({o.strip() for o, _ in outs}) == 1
