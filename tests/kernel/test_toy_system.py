"""ARCHITECTURE.md's worked example end to end: a toy system added without touching the
core (its job module lives in tests/toy_system/, its eviction policy's Rust half in
sim/tests/toy_eviction.rs) runs as `flashml toy run` through the same job runner, run
folder, MLflow run and summary as Baleen's job; its figures are libCacheSim's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flashml import cli, systems

from conftest import REPO, seed_mlflow_store

TRACE = REPO.parent / "shared" / "traces" / "cloudphysics-sample.csv"


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(systems, "SYSTEMS", [*systems.SYSTEMS, "toy_system.job"])
    monkeypatch.setenv("FLASHML_HOME", str(seed_mlflow_store(tmp_path / "state")))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


@pytest.mark.skipif(not TRACE.is_file(), reason="../shared/traces is not beside the clone")
def test_toy_system_runs_as_a_flashml_command(toy: None, tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    rc = cli.main(["toy", "run", "--trace", str(TRACE), "--capacity", "1MiB", "--out",
                   str(out)])
    assert rc == 0
    summary = json.loads((out / "summary.json").read_text())
    # libCacheSim's figures on this trace (../shared/traces/README.md)
    assert round(summary["policies"]["lru"]["miss_ratio"], 4) == 0.8646
    assert round(summary["policies"]["fifo"]["miss_ratio"], 4) == 0.8766
    assert summary["requests"] == 113_872
    assert {p.stem for p in (out / "stages").glob("*.json")} == {"ingest", "simulate"}
    assert set(summary["timings_s"]) == {"ingest", "simulate"}
    assert "lru    miss ratio 0.8646" in capsys.readouterr().out

    import mlflow

    run = mlflow.MlflowClient().get_run(summary["mlflow_run_id"])
    assert run.data.params["capacity"] == "1MiB"
    assert round(run.data.metrics["lru_miss_ratio"], 4) == 0.8646


def test_toy_system_bad_input_is_a_clear_error(toy: None, tmp_path: Path, capsys) -> None:
    rc = cli.main(["toy", "run", "--trace", str(tmp_path / "none.csv"), "--out",
                   str(tmp_path / "run")])
    assert rc == 1
    err = capsys.readouterr().err
    assert "flashml: error:" in err and "none.csv" in err and "Traceback" not in err
    assert not (tmp_path / "run" / "summary.json").exists()
    rc = cli.main(["toy", "run", "--trace", str(TRACE), "--capacity", "lots", "--out",
                   str(tmp_path / "run")])
    assert rc == 1 and "--capacity" in capsys.readouterr().err


@pytest.mark.skipif(not TRACE.is_file(), reason="../shared/traces is not beside the clone")
def test_an_interrupted_job_resumes_from_its_last_finished_stage(
        toy: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """`flashml <system> run --resume`: a job killed in its second stage, run again with
    --resume, does not redo the first stage, reopens the same MLflow run, and ends with the
    summary an uninterrupted run gives."""
    import toy_system.job as toy_job

    args = ["toy", "run", "--trace", str(TRACE), "--capacity", "1MiB"]
    assert cli.main([*args, "--out", str(tmp_path / "whole")]) == 0
    whole = json.loads((tmp_path / "whole" / "summary.json").read_text())

    out = tmp_path / "cut"
    real = toy_job.simulate

    def killed(run, s, timer):  # the process dies half-way through the stage
        raise KeyboardInterrupt

    monkeypatch.setattr(toy_job, "STAGES", (toy_job.STAGES[0],
                                            toy_job.Stage("simulate", killed)))
    with pytest.raises(KeyboardInterrupt):
        cli.main([*args, "--out", str(out)])
    assert (out / "stages" / "ingest.json").is_file() and not (out / "summary.json").exists()
    ingest_made = (out / "objects.parquet").stat().st_mtime_ns
    first_run = (out / "mlflow_run_id").read_text().strip()

    calls = []

    def counted(run, s, timer):
        calls.append(run.done("ingest") is not None)
        return real(run, s, timer)

    monkeypatch.setattr(toy_job, "STAGES", (toy_job.STAGES[0],
                                            toy_job.Stage("simulate", counted)))
    # other options than the interrupted run's: refused, nothing changed
    assert cli.main([*args[:-1], "2MiB", "--out", str(out), "--resume"]) == 1
    err = capsys.readouterr().err
    assert "capacity='1MiB'" in err and "capacity='2MiB'" in err and "--resume" in err
    assert cli.main([*args, "--out", str(out), "--resume"]) == 0
    assert calls == [True]  # simulate ran once, on the recorded ingest
    assert (out / "objects.parquet").stat().st_mtime_ns == ingest_made  # ingest not redone
    resumed = json.loads((out / "summary.json").read_text())
    assert resumed["mlflow_run_id"] == first_run
    volatile = {"mlflow_run_id", "timings_s", "peak_rss_mb", "seconds", "wall_s"}

    def steady(d):  # the summary without wall times and run ids, at every depth
        if isinstance(d, dict):
            return {k: steady(v) for k, v in d.items() if k not in volatile}
        return d

    assert steady(resumed) == steady(whole)
    assert resumed["policies"]["lru"]["hits"] == whole["policies"]["lru"]["hits"] > 0
    assert set(resumed["timings_s"]) == {"simulate"}  # only what this process ran
    # nothing to resume in a fresh folder
    assert cli.main([*args, "--out", str(tmp_path / "empty"), "--resume"]) == 1
    assert "nothing to resume" in capsys.readouterr().err


def test_a_stage_prepares_as_soon_as_the_stage_it_needs_is_done(tmp_path: Path) -> None:
    """`Stage.prepare` (how the sweep's workers start loading once `train` is done): it runs
    right after `prepare_after`, before the stages in between, once; not when that stage is
    not among the stages run (`flashml train` runs no sweep)."""
    from flashml.jobs.run import RunDir, Stage, run_stages

    order: list[str] = []

    def stage(name: str) -> Stage:
        return Stage(name, lambda run, s, timer: order.append(name) or {name: 1})

    stages = (stage("ingest"), stage("train"), stage("episodes"),
              Stage("sweep", lambda run, s, timer: order.append("sweep") or {},
                    prepare=lambda run, s: order.append("prepare sweep"),
                    prepare_after="train"))
    run = RunDir(tmp_path / "run")
    records = run_stages(stages, run, None)
    assert order == ["ingest", "train", "prepare sweep", "episodes", "sweep"]
    assert records["train"] == {"train": 1}
    order.clear()
    run_stages(stages[:2], run, None)  # the sweep is not run: nothing prepared for it
    assert order == ["ingest", "train"]

    # what a prepare returns releases what its stage left unused, when the stages end,
    # finished or failed (the job stopped before its sweep: the workers are stopped)
    def failing(run, s, timer):
        order.append("episodes fails")
        raise KeyboardInterrupt

    prepared = (stage("ingest"), stage("train"), Stage("episodes", failing),
                Stage("sweep", lambda run, s, timer: {},
                      prepare=lambda run, s: lambda: order.append("release"),
                      prepare_after="train"))
    order.clear()
    with pytest.raises(KeyboardInterrupt):
        run_stages(prepared, run, None)
    assert order == ["ingest", "train", "episodes fails", "release"]


def test_a_stage_can_start_the_prepares_due_after_it_early(tmp_path: Path) -> None:
    """A whole job arms the prepares due after its first stage (`arm_early`): the stage
    starts them once what they need is ready (`RunDir.ready`: the ingest stage's table,
    before it validates), run_stages' own call after the stage then only collects their
    release, and a stage that fails after `ready` releases them (`RunDir.disarm`). A stage
    run without arming starts nothing early."""
    from flashml.jobs.run import RunDir, Stage, arm_early, run_stages

    order: list[str] = []
    started: list[int] = []

    def prepare(run, s):  # idempotent, as every prepare after ingest is
        if not started:
            started.append(1)
            order.append("prepare")
        return lambda: order.append("release")

    def ingest(run, s, timer):
        order.append("table")
        run.ready("ingest")
        order.append("validate")
        return {}

    stages = (Stage("ingest", ingest), Stage("train", lambda run, s, t: order.append("train")
                                              or {}),
              Stage("policies", lambda run, s, t: order.append("policies") or {},
                    prepare=prepare, prepare_after="ingest"))
    run = RunDir(tmp_path / "run")
    arm_early(run, stages, None)
    run_stages(stages, run, None)
    assert order == ["table", "prepare", "validate", "train", "policies", "release"]
    order.clear(), started.clear()
    run_stages(stages, RunDir(tmp_path / "alone"), None)  # not armed: after the stage
    assert order == ["table", "validate", "prepare", "train", "policies", "release"]

    def failing(run, s, timer):
        run.ready("ingest")
        raise KeyboardInterrupt

    order.clear(), started.clear()
    run = RunDir(tmp_path / "failed")
    arm_early(run, (Stage("ingest", failing), *stages[1:]), None)
    with pytest.raises(KeyboardInterrupt):
        failing(run, None, None)
    run.disarm("ingest", release=True)
    assert order == ["prepare", "release"]
