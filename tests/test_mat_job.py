"""`flashml mat run` (flashml/jobs/mat.py) end to end on the real CloudPhysics sample: stage
records, the shipped eviction-only policy .so, figures that re-simulate exactly, LRU equal
to libCacheSim's, MAT below LRU on the held-out window; the held-out-window arithmetic
against a slow obvious LRU; and bad input."""

from __future__ import annotations

import json
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest

from flashml import cli

from conftest import REPO, run_cli

TRACE = REPO.parent / "shared" / "traces" / "cloudphysics-sample.csv"
needs_trace = pytest.mark.skipif(not TRACE.is_file(), reason="../shared/traces is missing")


@pytest.fixture
def state(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FLASHML_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


@pytest.fixture(scope="module")
def mat_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One `flashml mat run` as a user runs it (a fresh interpreter, its own state folder)."""
    if not TRACE.is_file():
        pytest.skip("../shared/traces is missing")
    tmp = tmp_path_factory.mktemp("mat")
    proc = run_cli("mat", "run", "--trace", TRACE, "--format", "cloudphysics", "--capacity",
                   "1000obj,5000obj", "--trials", "16", "--baselines", "lru", "--out",
                   tmp / "run", env={"FLASHML_HOME": str(tmp / "state"),
                                     "MLFLOW_TRACKING_URI": ""})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "capacity 5000obj" in proc.stdout
    return tmp / "run"


def test_mat_job_records_and_ships_an_eviction_policy(mat_run: Path) -> None:
    s = json.loads((mat_run / "summary.json").read_text())
    assert {p.stem for p in (mat_run / "stages").glob("*.json")} == {
        "ingest", "samples", "train", "tune", "compile", "evaluate", "plots"}
    assert s["working_set"]["requests"] == 113_872
    assert list(s["per_capacity"]) == ["1000obj", "5000obj"]
    manifest = json.loads((mat_run / "compiled" / "manifest.json").read_text())
    assert manifest["capabilities"] == ["eviction"]
    assert (mat_run / "plots" / "miss_ratio_vs_size.png").stat().st_size > 0
    for r in s["per_capacity"].values():
        pol = r["policies"]
        # our LRU is libCacheSim's, and MAT stays within the prediction budget
        assert pol["lru"]["miss_ratio"] == pytest.approx(pol["lcs_lru"]["miss_ratio"],
                                                         abs=1e-12)
        assert 1.0 <= pol["mat"]["predictions_per_eviction"] <= 2.5 + 0.25
    lru_1000 = s["per_capacity"]["1000obj"]["policies"]["lru"]["miss_ratio"]
    assert round(lru_1000, 4) == 0.8327  # ../shared/traces/README.md


def test_mat_beats_lru_on_the_held_out_window(mat_run: Path) -> None:
    s = json.loads((mat_run / "summary.json").read_text())
    pol = s["per_capacity"]["5000obj"]["policies"]
    assert pol["mat"]["held_out_miss_ratio"] < pol["lru"]["held_out_miss_ratio"]
    assert pol["mat"]["miss_ratio"] < pol["lru"]["miss_ratio"]


def test_mat_figures_re_simulate_with_the_shipped_policy(mat_run: Path) -> None:
    from flashml.simulation import simulate_objects_mat
    from flashml.trace.objects import read_objects

    s = json.loads((mat_run / "summary.json").read_text())
    df = read_objects(TRACE, "cloudphysics")
    r = simulate_objects_mat(df["key"], df["size"], 5000, "objects",
                             predictor=str(mat_run / "compiled"))
    mat = s["per_capacity"]["5000obj"]["policies"]["mat"]
    assert r["miss_ratio"] == mat["miss_ratio"]
    assert r["predictions"] == mat["predictions"]


def test_held_out_window_is_the_hits_after_the_start(tmp_path: Path) -> None:
    """`_window_hits` (run to end minus run to start) equals counting the hits of requests
    [start, end) in one slow obvious LRU run."""
    from flashml.jobs.mat import _window_hits

    rng = np.random.default_rng(3)
    keys = (rng.zipf(1.3, 20_000) % 3_000).astype(np.uint64)
    sizes = np.ones(len(keys), dtype=np.uint64)
    cap = {"capacity": 200, "unit": "objects"}
    start, end = 7_000, 20_000
    got, _ = _window_hits(keys, sizes, cap, start, end, predictor="none")
    lru: OrderedDict[int, None] = OrderedDict()
    hits = 0
    for i, k in enumerate(keys.tolist()):
        if k in lru:
            lru.move_to_end(k)
            hits += i >= start
            continue
        if len(lru) == 200:
            lru.popitem(last=False)
        lru[k] = None
    assert got == pytest.approx(1.0 - hits / (end - start), abs=1e-12)


@needs_trace
def test_mat_bad_input(state: None, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "run"
    for args, fragment in (
        (["--capacity", "0"], "--capacity"),
        (["--capacity", "150%"], "percentage"),
        (["--train-fraction", "0.9", "--val-fraction", "0.2"], "--train-fraction"),
        (["--k", "0"], "--k"),
    ):
        rc = cli.main(["mat", "run", "--trace", str(TRACE), "--format", "cloudphysics",
                       "--out", str(out), *args])
        err = capsys.readouterr().err
        assert rc == 1 and fragment in err and "Traceback" not in err, (args, err)
        assert not (out / "summary.json").exists()
    bad = tmp_path / "nosize.csv"
    bad.write_text("version,time,op,lbn\n1,1,28,5\n")
    rc = cli.main(["mat", "run", "--trace", str(bad), "--format", "cloudphysics", "--out",
                   str(out)])
    err = capsys.readouterr().err
    assert rc == 1 and "nosize.csv" in err and "size" in err and "Traceback" not in err
    assert not (out / "summary.json").exists()
