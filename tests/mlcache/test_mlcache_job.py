"""`flashml mlcache run` (flashml/systems/mlcache/job.py) end to end on generated mixes: the shipped
partition-only policy .so, the summary's figures re-simulated with it, the network above the
even split on held-out mixes, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from flashml import cli
from flashml.compiler.loader import PolicyLibrary, verify_bundle
from flashml.systems.mlcache import model
from flashml.systems.mlcache.job import _mix
from flashml.systems.mlcache.partitioning import compare
from flashml.systems.mlcache.settings import POLICIES

from conftest import REPO, run_cli

TRACE = REPO.parent / "shared" / "traces" / "cloudphysics-sample.csv"
ARGS = ("--policy", "network", "--streams", "4", "--requests", "40000", "--interval", "2000",
        "--train-mixes", "8", "--test-mixes", "2", "--max-iter", "80", "--folds", "2")


@pytest.fixture(scope="module")
def mlc_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One `flashml mlcache run` as a user runs it (a fresh interpreter, its own state)."""
    tmp = tmp_path_factory.mktemp("mlcache")
    proc = run_cli("mlcache", "run", *ARGS, "--out", tmp / "run",
                   env={"FLASHML_HOME": str(tmp / "state"), "MLFLOW_TRACKING_URI": ""})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "of the oracle's gain" in proc.stdout
    return tmp / "run"


def test_mlcache_job_ships_a_partition_policy(mlc_run: Path) -> None:
    s = json.loads((mlc_run / "summary.json").read_text())
    assert set(s["policies"]) == set(POLICIES) and len(s["per_trace"]) == 2
    m = verify_bundle(mlc_run / "compiled", need="partition")
    assert m["capabilities"] == ["partition"] and m["partition"]["capacity"] == 260
    assert s["so_vs_python_max_abs"] < 1e-5
    assert all(Path(p).is_file() for p in s["plots"])
    p = s["policies"]
    assert p["even"]["oracle_gain_fraction"] == 0.0
    assert p["discrete_optimal"]["oracle_gain_fraction"] == 1.0
    # the network, judged on mixes it never saw, beats the even split
    assert p["mlcache"]["write_hit_ratio"] > p["even"]["write_hit_ratio"]


def test_mlcache_run_in_mlflow(mlc_run: Path) -> None:
    """Headline columns, tag, description; the shipped bundle as a logged model with a
    signature and the run's final metrics, registered as flashml-mlcache, champion."""
    from mlflow_checks import check_system_in_mlflow

    s = json.loads((mlc_run / "summary.json").read_text())
    check_system_in_mlflow(mlc_run.parent / "state", "mlcache", s)
    assert set(s["headline"]) >= {"write_hit_ratio", "hit_ratio_gain"}


def test_mlcache_figures_re_simulate_with_the_shipped_policy(mlc_run: Path) -> None:
    from flashml.systems.mlcache.settings import MlcacheSettings

    s = json.loads((mlc_run / "summary.json").read_text())
    lib = PolicyLibrary(mlc_run / "compiled" / "policy.so", need="partition")
    item = s["judged"][1]
    tr = _mix(MlcacheSettings(requests=40000), 4, item["seed"])
    x, _ = model.trace_features(tr, 260, 2000)
    shares, _ = lib.partition(x, 4)
    r = compare(tr, 260, 2000, ("mlcache",), writes_only=True,
                shares=model.schedule(shares, 4))["mlcache"]
    want = s["per_trace"][item["name"]]["policies"]["mlcache"]
    assert r["write_hits"] == want["write_hits"] and r["hit_ratio"] == want["hit_ratio"]
    assert np.isclose(np.mean([t["policies"]["mlcache"]["write_hit_ratio"]
                               for t in s["per_trace"].values()]),
                      s["policies"]["mlcache"]["write_hit_ratio"])


def test_mlcache_bad_input(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                           capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setenv("FLASHML_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    out = tmp_path / "run"
    for args, fragment in (
        (["--streams", "1"], "--streams"),
        (["--streams", "17"], "--streams"),
        (["--requests", "3000", "--interval", "2000"], "--requests"),
        (["--hidden", "abc"], "--hidden"),
        (["--hidden", "0"], "--hidden"),
        (["--interval", "0"], "--interval"),
        (["--seed", "-1"], "argument --seed: must be >= 0"),  # was a traceback
    ):
        try:
            rc = cli.main(["mlcache", "run", "--out", str(out), *args])
        except SystemExit as e:  # argparse: a value out of the option's range
            rc = e.code
        err = capsys.readouterr().err
        assert rc in (1, 2) and fragment in err and "Traceback" not in err, (args, err)
        assert not (out / "summary.json").exists()
    if TRACE.is_file():
        rc = cli.main(["mlcache", "run", "--trace", str(TRACE), "--format", "cloudphysics",
                       "--out", str(out)])
        err = capsys.readouterr().err
        assert rc == 1 and "cloudphysics-sample.csv" in err and "'namespace'" in err, err
        assert "Traceback" not in err and not (out / "summary.json").exists()


def test_sim_partition_with_the_shipped_bundle(mlc_run: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture) -> None:
    """`flashml sim partition --policy mlcache --bundle` on a judged mix gives the job's
    figure for it."""
    s = json.loads((mlc_run / "summary.json").read_text())
    item = s["judged"][0]
    mix = tmp_path / "mix.parquet"
    assert cli.main(["trace", "mix", "--streams", "4", "--requests", "40000", "--seed",
                     str(item["seed"]), "-o", str(mix)]) == 0
    capsys.readouterr()
    assert cli.main(["sim", "partition", "--trace", str(mix), "--capacity", "260",
                     "--interval", "2000", "--writes-only", "--policy", "mlcache",
                     "--bundle", str(mlc_run / "compiled"), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)["policies"]["mlcache"]
    want = s["per_trace"][item["name"]]["policies"]["mlcache"]
    assert got["write_hits"] == want["write_hits"]
    assert cli.main(["sim", "partition", "--trace", str(mix), "--capacity", "260",
                     "--interval", "2000", "--policy", "mlcache", "--bundle",
                     str(tmp_path)]) == 1
    assert "manifest" in capsys.readouterr().err
