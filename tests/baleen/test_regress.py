"""`flashml regress`: the pinned baseline passes against itself (the Python scoring of its
LightGBM models and its compiled .so give the same simulation), a degraded candidate fails,
a write rate over the target fails, an MLflow run id resolves, bad input is one clear line."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from conftest import REPO

BASELINE = REPO / "regress" / "baseline"


def _settings() -> dict[str, str]:
    out = {}
    for line in (REPO / "regress" / "settings.env").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            k, v = line.split("=", 1)
            out[k] = shlex.split(v)[0] if v.startswith('"') else v
    return out


@pytest.fixture(scope="module")
def pinned(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The pinned evaluation trace (as `make regress` generates it) and the compiled
    baseline."""
    from flashml.compiler.build import compile_policy
    from flashml.trace.generate import generate_trace

    s = _settings()
    tmp = tmp_path_factory.mktemp("regress")
    trace = tmp / "eval.trace"
    generate_trace(s["PRESET"], int(s["EVAL_SEED"]), trace, accesses=int(s["ACCESSES"]),
                   progress=False)
    compiled = tmp / "baseline-compiled"
    compile_policy(compiled, model_dir=BASELINE, log_to_mlflow=False)
    return {"trace": trace, "compiled": compiled, "tmp": tmp}


def test_baseline_is_small_text_models() -> None:
    files = sorted(p.name for p in BASELINE.iterdir())
    assert files == ["admission.txt", "policy.json", "range_end.txt", "range_start.txt",
                     "when.txt"]
    assert sum(p.stat().st_size for p in BASELINE.iterdir()) < 400_000
    for p in BASELINE.glob("*.txt"):
        assert p.read_text().startswith("tree\n"), p  # LightGBM text, not a binary
    assert "mlflow_run_id" not in json.loads((BASELINE / "policy.json").read_text())


def test_baseline_passes_against_itself_on_both_paths(pinned: dict[str, Path], cli) -> None:
    """Candidate: the LightGBM models scored in Python; baseline: the compiled .so. Same
    policy, so the same decisions and metrics, and the check passes."""
    proc = cli("regress", "--candidate", BASELINE, "--baseline", pinned["compiled"],
               "--trace", pinned["trace"], "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    res = json.loads(proc.stdout)
    assert res["passed"] is True and res["failures"] == []
    assert res["candidate"]["kind"] == "models" and res["baseline"]["kind"] == "compiled"
    c, b = res["candidate"]["metrics"], res["baseline"]["metrics"]
    for k in ("peak_dt_util", "flash_write_rate_mbps", "admitted_segments",
              "prefetched_segments", "backend_ios"):
        assert c[k] == pytest.approx(b[k], rel=1e-9), k
    # the table form
    proc = cli("regress", "--candidate", pinned["compiled"], "--baseline", pinned["compiled"],
               "--trace", pinned["trace"])
    assert proc.returncode == 0, proc.stderr
    assert "peak DT utilisation" in proc.stdout and "candidate" in proc.stdout
    assert "PASS" in proc.stdout


def test_degraded_candidate_fails(pinned: dict[str, Path], cli) -> None:
    from flashml.commands.regress import degrade_bundle

    bad = degrade_bundle(BASELINE, pinned["tmp"] / "degraded")
    proc = cli("regress", "--candidate", bad, "--baseline", pinned["compiled"],
               "--trace", pinned["trace"])
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "REGRESSION: peak DT" in proc.stdout
    # and a candidate may be a run folder / export holding compiled/ or policy/
    holder = pinned["tmp"] / "holder"
    (holder).mkdir()
    (holder / "policy").symlink_to(bad)
    proc = cli("regress", "--candidate", holder, "--baseline", BASELINE,
               "--trace", pinned["trace"], "--json")
    assert proc.returncode == 1
    assert json.loads(proc.stdout)["passed"] is False


def test_write_rate_over_target_fails(pinned: dict[str, Path], cli) -> None:
    proc = cli("regress", "--candidate", BASELINE, "--baseline", BASELINE,
               "--trace", pinned["trace"], "--target-write-rate", "10")
    assert proc.returncode == 1
    assert "REGRESSION: write rate" in proc.stdout
    assert "peak DT" not in proc.stdout.split("REGRESSION", 1)[1].splitlines()[0]


def test_mlflow_run_id_as_baseline(pinned: dict[str, Path], cli, tmp_path: Path) -> None:
    import mlflow

    store = tmp_path / "state"
    mlflow.set_tracking_uri(f"sqlite:///{store / 'mlflow.db'}")
    store.mkdir()
    exp = mlflow.create_experiment("flashml", artifact_location=(store / "art").as_uri())
    with mlflow.start_run(experiment_id=exp) as run:
        mlflow.log_artifacts(str(BASELINE), artifact_path="policy")
    env = {"FLASHML_HOME": str(store), "MLFLOW_TRACKING_URI": ""}
    proc = cli("regress", "--candidate", pinned["compiled"], "--baseline", run.info.run_id,
               "--trace", pinned["trace"], "--json", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["baseline"]["source"].startswith("runs:/")


@pytest.mark.parametrize("args, message", [
    (["--candidate", "/nonexistent/x"], "no such folder"),
    (["--candidate", str(REPO / "regress")], "neither a compiled bundle"),
    (["--tolerance=-1"], "argument --tolerance: must be >= 0, got -1"),
])
def test_bad_input_is_one_line(pinned: dict[str, Path], cli, args: list[str],
                               message: str) -> None:
    base = {"--candidate": str(BASELINE), "--baseline": str(BASELINE),
            "--trace": str(pinned["trace"])}
    extra = [a for a in args if "=" in a]
    plain = [a for a in args if "=" not in a]
    for k, v in zip(plain[::2], plain[1::2], strict=True):
        base[k] = v
    proc = cli("regress", *[x for kv in base.items() for x in kv], *extra)
    assert proc.returncode == (2 if message.startswith("argument") else 1)
    assert message in proc.stderr and "Traceback" not in proc.stderr
