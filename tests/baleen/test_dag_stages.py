"""The stage functions the DAG tasks call (flashml.systems.baleen.job): a recorded stage is not
redone (retries are idempotent), a stage that died half way starts over, promotion exports
atomically and repoints `champion`, and a failed decision moves nothing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from flashml.errors import UserError
from flashml.jobs.run import RunDir, Timer
from flashml.settings import BaleenSettings
from flashml.systems.baleen import job as baleen
from flashml.systems.baleen.run_folder import compiled_dir, policy_dir


def test_records_reset_and_run_id(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "r")
    assert run.done("train") is None and run.mlflow_run_id() is None
    run.record("train", {"a": 1})
    assert run.done("train") == {"a": 1}
    assert not list((run.path / "stages").glob(".*"))  # no temporary files left
    (run.path / "mlflow_run_id").write_text("abc\n")
    assert run.mlflow_run_id() == "abc"
    run.reset()
    assert run.done("train") is None and run.mlflow_run_id() is None


def test_ingest_validate_is_idempotent(tmp_path: Path) -> None:
    from flashml.trace.generate import generate_trace

    raw = tmp_path / "t.trace"
    generate_trace("region1-like", 3, raw, accesses=3000, progress=False)
    run = RunDir(tmp_path / "r")
    s = BaleenSettings(trace=raw)
    rec = baleen.ingest(run, s, Timer())
    assert rec["validate"]["success"] is True and rec["stats"]["requests"] == 3000
    stamp = run.table.stat().st_mtime_ns
    again = baleen.ingest(RunDir(run.path), s, Timer())  # a retried task, new process
    assert again == rec and run.table.stat().st_mtime_ns == stamp
    with pytest.raises(UserError, match="no such file"):
        baleen.ingest(RunDir(tmp_path / "r2"), s.replace(trace=tmp_path / "missing.trace"),
                      Timer())


def _fake_bundle(run: RunDir) -> None:
    policy_dir(run).mkdir(parents=True)
    (policy_dir(run) / "policy.json").write_text("{}\n")
    compiled_dir(run).mkdir()
    (compiled_dir(run) / "policy.so").write_bytes(b"\x7fELF")


def test_export_repoints_champion_atomically(tmp_path: Path) -> None:
    export = tmp_path / "exported"
    a, b = RunDir(tmp_path / "a"), RunDir(tmp_path / "b")
    _fake_bundle(a)
    _fake_bundle(b)
    baleen.export_bundle(a, export, "v1")
    assert os.readlink(export / "champion") == "v1"
    assert (export / "champion" / "compiled" / "policy.so").is_file()
    umask = os.umask(0)
    os.umask(umask)
    assert (export / "v1").stat().st_mode & 0o777 == 0o777 & ~umask
    baleen.export_bundle(b, export, "v2")
    assert os.readlink(export / "champion") == "v2"
    assert json.loads((export / "v2" / "promotion.json").read_text())["run_dir"] == str(b.path)
    baleen.export_bundle(b, export, "v2")  # a retried promote: same result
    assert sorted(p.name for p in export.iterdir()) == ["champion", "v1", "v2"]


def test_promote_moves_nothing_when_the_candidate_failed(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "r")
    s = BaleenSettings(export_dir=tmp_path / "exported")
    with pytest.raises(UserError, match="no evaluate record"):
        baleen.promote(run, s, Timer())
    run.record("evaluate", {"promoted": False, "candidate_version": "2",
                            "candidate_peak": 0.7, "champion_version": "1",
                            "champion_peak": 0.4, "reason": "champion kept"})
    rec = baleen.promote(run, s, Timer())
    assert rec == {"promoted": False, "reason": "champion kept", "version": "2",
                   "exported": None}
    assert not (tmp_path / "exported").exists()
