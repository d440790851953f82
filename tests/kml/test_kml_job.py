"""`flashml kml run` (flashml/systems/kml/job.py), the offline part end to end on the twin: the
sweep names the best fixed size per workload, both networks (KML's and mlp16) and the tree are
trained, compiled and called every window, and the summary holds every workload's fixed
baselines and tuners with their ratios. The real
experiment (db_bench on a throttled loop device) runs in `make bench` (bench/bench_kml.py);
its parts have their own tests (test_kml_testbed.py, test_runtime_readahead.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def _run(tmp_path: Path, *args: object) -> None:
    """`flashml ARGS` as a user runs it: a fresh interpreter with its own state."""
    from conftest import run_cli

    # a guard against a hang only: three models with cross-validation on a busy machine
    proc = run_cli(*args, env={"FLASHML_HOME": str(tmp_path / "state"),
                               "MLFLOW_TRACKING_URI": ""}, timeout=3600)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_kml_run_twin_end_to_end(tmp_path: Path) -> None:
    from flashml.compiler.loader import PolicyLibrary
    from flashml.systems.pannier.blockgen import get_block_preset, write_block_msr

    write_block_msr(get_block_preset("prn0-like"), 1, tmp_path / "prn0.csv", requests=20_000)
    out = tmp_path / "run"
    # --trace: the user's block trace judged on the twin as one more held-out workload
    _run(tmp_path, "kml", "run", "--twin-requests", "60000", "--sizes", "8,64,1024",
         "--repeats", "1", "--folds", "3", "--max-windows", "100", "--trace",
         tmp_path / "prn0.csv", "--format", "msr", "-o", out)
    s = json.loads((out / "summary.json").read_text())
    assert s["mode"] == "twin" and s["default_kib"] == 128
    names = ("readrandom", "readseq", "readreverse", "readrandomwriterandom", "updaterandom",
             "mixgraph", "trace:prn0.csv")
    assert tuple(s["workloads"]) == names
    from flashml.systems.kml.settings import FIXED, TUNERS

    assert s["shipped"] == "kml_mlp16" and s["network"] == "mlp16"
    assert s["linux_kib"] == 128 and s["repeats"] == 1  # the twin is deterministic
    for w, r in s["workloads"].items():
        # the fixed baselines are the sweep's runs: the device's default, Linux's 128 KiB
        # and the best fixed size, the sweep's highest mean (not the smallest within 3%)
        sweep = {int(k): v for k, v in s["sweep"][w].items()}
        assert set(sweep) == {8, 64, 128, 1024}
        assert r["best_fixed_kib"] == max(sweep, key=lambda k: (sweep[k], -k))
        assert r["fixed_kib"] == {"default": 128, "linux_128": 128,
                                  "best_fixed": r["best_fixed_kib"]}
        assert r["best_fixed"] == pytest.approx(sweep[r["best_fixed_kib"]])
        assert r["linux_128"] == pytest.approx(sweep[128]) == pytest.approx(r["default"])
        assert set(r["policies"]) == set(FIXED + TUNERS)
        for t in TUNERS:
            for b in FIXED:
                q = r["ratios"][t][b]
                assert q["ratio"] == pytest.approx(r["policies"][t]["mean"]
                                                   / r["policies"][b]["mean"])
                assert q["lo"] == q["hi"] == pytest.approx(q["ratio"])  # one run: exact
        assert r["kml"] == r["policies"]["kml_mlp16"]["mean"]
        assert r["kml_vs_best_fixed"] == pytest.approx(r["kml"] / r["best_fixed"])
        # the twin is deterministic: nothing beats the best fixed size by much, and the
        # tuners chose only the classes' sizes
        assert r["kml"] <= 1.2 * r["best_fixed"]
        for name in TUNERS:
            assert set(map(int, r["decisions"][name])) <= set(
                s["models"][name]["classes_kib"].values())
        assert r["trained_on"] == (w in names[:4])
    # random reads want small readahead, sequential ones large (the labels)
    assert s["classes_kib"]["readrandom"] < s["classes_kib"]["readseq"]
    assert s["workloads"]["readrandom"]["kml_vs_linux_128"] > 1.5
    assert set(s["models"]) == {"kml_paper", "kml_mlp16", "kml_tree"}
    for name, m in s["models"].items():
        # the twin's pairs (readrandom / readrandomwriterandom, readseq / readreverse) look
        # alike window by window; what the tuner needs is the size, and that it gets right
        assert m["cv_accuracy"] > 0.3 and m["cv_size_accuracy"] > 0.7, name
        assert m["cv_size_accuracy"] >= m["cv_accuracy"] and m["so_vs_model_agreement"] == 1.0
        assert m["model_bytes"] < 64 << 10
        lib = PolicyLibrary(Path(m["dir"]) / "policy.so", need="readahead")
        assert lib.readahead_kib([[100, 5000, 3000, 2.0, 128]])[0] in set(
            m["classes_kib"].values())
        # the sizes for the model's confusions do at least as well on held-out windows
        assert m["cv_relative_throughput"] >= m["cv_relative_throughput_own"] - 1e-12
    for p in s["plots"]:
        assert Path(p).stat().st_size > 10_000
    # the tuner's windows of every kml run are kept: features and the size chosen
    log = json.loads((out / "tuner_logs" / "readseq-kml_paper-1.jsonl").read_text()
                     .splitlines()[0])
    assert {"kib", "tracepoints", "offset_absdiff_mean"} <= set(log)
    assert log["kib"] in set(s["models"]["kml_paper"]["classes_kib"].values()) | {128}
    # the shipped bundle is the --network's
    assert (out / "compiled" / "kml" / "policy.so").read_bytes() == (
        out / "compiled" / "kml_mlp16" / "policy.so").read_bytes()
    # MLflow: headline columns, tag, description; the network's bundle as a logged model
    # with a signature and the run's final metrics, registered as flashml-kml, champion
    from mlflow_checks import check_system_in_mlflow

    check_system_in_mlflow(tmp_path / "state", "kml", s)
    assert set(s["headline"]) >= {"ops_gain", "vs_best_fixed"}


def test_kml_run_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from flashml.cli import main

    for args, msg in ((["--device-size", "1MiB"], "at least 256MiB"),
                      (["--device-size", "2 parsecs"], "--device-size"),
                      (["--sizes", "8"], "at least two sizes"),
                      (["--sizes", "8,x"], "comma-separated KiB"),
                      (["--repeats", "0"], "--repeats: must be >= 1 runs"),
                      (["--read-iops", "0"], "both 0 (no throttle) or both above 0"),
                      (["--read-iops", "0", "--read-mbps", "0"], "the twin models a device"),
                      (["--network", "big"], "invalid choice"),
                      (["--trace", "x.csv", "--mode", "real"], "judged on the offline twin")):
        try:
            rc = main(["kml", "run", "--mode", "twin", *args, "-o", str(tmp_path / "r")])
        except SystemExit as e:  # argparse: a value out of the option's range
            rc = e.code
        assert rc != 0
        assert msg in capsys.readouterr().err
        assert not (tmp_path / "r" / "summary.json").exists()


def test_kml_mode_real_says_why_it_cannot_run(monkeypatch: pytest.MonkeyPatch) -> None:
    from flashml.errors import UserError
    from flashml.systems.kml import job as kml
    from flashml.systems.kml import testbed

    monkeypatch.setattr(testbed, "unavailable", lambda backend="loop": "needs root (test)")
    with pytest.raises(UserError, match="cannot run here: needs root"):
        kml._mode(kml.KmlSettings(mode="real"))
    assert kml._mode(kml.KmlSettings(mode="auto")) == ("twin", "needs root (test)")


def test_pipeline_system_kml_runs_the_twin(monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: Path) -> None:
    """`flashml pipeline run --system kml` is the offline part: the twin, on its defaults."""
    from flashml import cli
    from flashml.jobs import run as run_mod

    seen = {}

    def fake_run_job(job, s, out, resume=False):  # type: ignore[no-untyped-def]
        seen["job"], seen["settings"] = job.__name__, s
        raise SystemExit(0)

    monkeypatch.setattr(run_mod, "run_job", fake_run_job)
    with pytest.raises(SystemExit):
        cli.main(["pipeline", "run", "--system", "kml", "-o", str(tmp_path / "r")])
    assert seen["job"] == "flashml.systems.kml.job" and seen["settings"].mode == "twin"


def test_run_order_cancels_a_drift_over_each_pair_of_repeats() -> None:
    """A drift (the machine's load) over the runs: over two repeats every policy sits at
    the same mean position, so a throughput falling linearly with each run costs them all
    the same; the order is as given first, and repeats 3, 4 are 1, 2 again."""
    from flashml.systems.kml.job import run_order
    from flashml.systems.kml.settings import TUNERS as POLICIES

    assert run_order(POLICIES, 0) == POLICIES and run_order(POLICIES, 2) == POLICIES
    assert run_order(POLICIES, 1) == run_order(POLICIES, 3) == POLICIES[::-1]
    runs = [p for rep in range(2) for p in run_order(POLICIES, rep)]
    assert sorted(runs) == sorted(POLICIES * 2)
    mean_at = {p: sum(i for i, q in enumerate(runs) if q == p) / 2 for p in POLICIES}
    assert len(set(mean_at.values())) == 1
    # a drift of -10% per run: every policy measures the same mean relative throughput
    seen = {p: sum(1 - 0.1 * i for i, q in enumerate(runs) if q == p) / 2 for p in POLICIES}
    assert max(seen.values()) - min(seen.values()) < 1e-12
