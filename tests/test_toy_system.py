"""ARCHITECTURE.md's worked example end to end: a toy system added without touching the
core (its job module lives in tests/toy_system/, its eviction policy's Rust half in
sim/tests/toy_eviction.rs) runs as `flashml toy run` through the same job runner, run
folder, MLflow run and summary as Baleen's job; its figures are libCacheSim's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flashml import cli, jobs

from conftest import REPO

TRACE = REPO.parent / "shared" / "traces" / "cloudphysics-sample.csv"


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(jobs, "SYSTEMS", [*jobs.SYSTEMS, "toy_system.job"])
    monkeypatch.setenv("FLASHML_HOME", str(tmp_path / "state"))
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
