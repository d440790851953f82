"""`flashml train` and `flashml sweep` on a small generated trace (real MLflow and Optuna in
an isolated state folder), and their bad-input errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    from flashml.trace.generate import generate_trace

    d = tmp_path_factory.mktemp("train")
    generate_trace("region1-like", 2, d / "t.trace", accesses=20_000, progress=False)
    return d, {"FLASHML_HOME": str(d / "state"), "MLFLOW_TRACKING_URI": ""}


def test_train_writes_a_bundle(small, cli) -> None:
    d, env = small
    out = d / "bundle"
    cli("train", "--trace", d / "t.trace", "--max-iterations", "2", "--max-rounds", "50",
        "--peak-hours", "4", "--peak-bonus", "0.1", "-o", out, check=True, env=env)
    for f in ("admission.txt", "range_start.txt", "range_end.txt", "when.txt", "policy.json"):
        assert (out / f).exists(), f
    params = json.loads((out / "policy.json").read_text())
    assert 0 <= params["admit_threshold"] <= 1 and params["eviction_age_s"] > 0
    # the default target: the artifact's 35.599 MiB/s
    assert params["metrics"]["flash_write_rate_mbps"] <= 35.599 * 2**20 / 1e6 * 1.01
    assert params["mlflow_run_id"]
    # the peak schedule: the block of 4 busiest hours of the first day, by no-cache
    # disk-head time, or none when the flat threshold won on held-out data of that day
    from flashml.systems.baleen.peak import busy_hours
    from flashml.trace.ingest import load_trace

    df, _ = load_trace(d / "t.trace", "tectonic")
    assert (params["peak_hours"], params["peak_bonus"]) in (
        (list(busy_hours(df, 86_400.0, 4)), 0.1), ([], 0.0))
    # its MLflow run: named by command, trace, target and time; tagged; ended
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{d / 'state' / 'mlflow.db'}")
    run = mlflow.MlflowClient().get_run(params["mlflow_run_id"])
    assert run.info.run_name.startswith("train t.trace ") and run.info.status == "FINISHED"
    assert run.data.tags["flashml.job"] == "train" and run.data.tags["trace"] == "t.trace"


def test_sweep_picks_a_write_rate(small, cli) -> None:
    d, env = small
    proc = cli("sweep", "--trace", d / "t.trace", "--trials", "2", "--max-rounds", "50",
               "--max-iterations", "2", "-o", d / "sw", check=True, env=env)
    res = json.loads((d / "sw" / "sweep.json").read_text())
    done = [t for t in res["trials"] if t["state"] == "COMPLETE"]
    assert len(res["trials"]) == 2 and done
    assert res["chosen_tco"] == min(t["tco"] for t in done)
    assert (d / "sw" / "tco_curve.png").exists()
    assert "Baleen-TCO: write rate" in proc.stdout
    assert f"optuna-dashboard {res['storage']}" in proc.stdout
    assert res["study_name"].startswith("t.trace-")  # by trace and target


@pytest.mark.parametrize("args,fragment", [
    (["--target-write-rate", "0"], "argument --target-write-rate: must be >= 1e-06 MB/s"),
    (["--cache-gb", "-1"], "argument --cache-gb: must be >= 1e-06 GB"),
    (["--cache-gb", "1e-300"], "argument --cache-gb: must be >= 1e-06 GB, got 1e-300"),
])
def test_bad_options(small, cli, args: list[str], fragment: str) -> None:
    d, env = small
    proc = cli("train", "--trace", d / "t.trace", "-o", d / "x", *args, env=env)
    assert proc.returncode == 2 and fragment in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (d / "x").exists()
    proc = cli("train", "--trace", d / "missing.trace", "-o", d / "x", env=env)
    assert proc.returncode == 1 and "missing.trace: no such file" in proc.stderr


@pytest.mark.parametrize("cmd", ["train", "sweep"])
def test_trace_shorter_than_the_training_window(small, cli, cloudphysics_path: Path,
                                                cmd: str) -> None:
    """The real 2-hour CloudPhysics sample against the default training day: a clear error
    naming the trace and the largest --train-hours that fits, no output, no traceback."""
    d, env = small
    out = d / f"short-{cmd}"
    proc = cli(cmd, "--trace", cloudphysics_path, "--format", "cloudphysics", "-o", out,
               env=env)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert str(cloudphysics_path) in proc.stderr and "spans 7,200 s" in proc.stderr
    assert "--train-hours H with H <= 1.83" in proc.stderr
    assert not out.exists()
    proc = cli(cmd, "--trace", cloudphysics_path, "--format", "cloudphysics", "-o", out,
               "--train-hours", "-1", env=env)
    assert proc.returncode == 2 and "argument --train-hours: must be >= 0.001 hours" \
        in proc.stderr
