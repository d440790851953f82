"""The CLI: `--help` on every command, and the main job end to end."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from flashml.cli import build_parser, main

from conftest import REPO, cloudphysics_pipeline_run, run_cli, seed_mlflow_store


def all_commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()):
    yield prefix
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from all_commands(sub, prefix + (name,))


COMMANDS = list(all_commands(build_parser()))


def test_expected_commands_exist() -> None:
    for cmd in [("trace", "ingest"), ("trace", "generate"), ("trace", "stats"),
                ("trace", "validate"), ("trace", "sample"), ("pipeline", "run"),
                ("sim", "run"), ("sim", "objects")]:
        assert cmd in COMMANDS


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: " ".join(c) or "flashml")
def test_every_command_has_help(cmd: tuple[str, ...], capsys) -> None:
    with pytest.raises(SystemExit) as e:
        main([*cmd, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: flashml")
    assert len(out.splitlines()) > 3


def test_main_job_on_a_real_trace_shorter_than_a_day(tmp_path: Path, cli,
                                                    cloudphysics_path: Path,
                                                    tmp_path_factory) -> None:
    """The real CloudPhysics sample spans 2 hours: with the default training day the main
    job stops before any work with an error naming the trace and the way out, leaving no
    summary and no MLflow run; with --train-hours 0.5 it trains on the first half hour and
    every policy is judged from there on (the simulator's warm-up = the training window)."""
    env = {"FLASHML_HOME": str(tmp_path / "state"), "MLFLOW_TRACKING_URI": ""}
    common = ("--trace", cloudphysics_path, "--format", "cloudphysics", "--engine", "polars",
              "--sweep-trials", "0", "--no-register", "--no-compile")
    bad = cli("pipeline", "run", *common, "--out", tmp_path / "bad", env=env)
    assert bad.returncode != 0
    assert str(cloudphysics_path) in bad.stderr and "spans 7,200 s" in bad.stderr
    assert "--train-hours H with H <= 1.83" in bad.stderr and "Traceback" not in bad.stderr
    assert not (tmp_path / "bad" / "summary.json").exists()
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'state' / 'mlflow.db'}")
    assert mlflow.search_runs(search_all_experiments=True, output_format="list") == []
    assert cli("pipeline", "run", *common, "--out", tmp_path / "x", "--train-hours", "0",
               env=env).returncode != 0

    # `common` with --train-hours 0.5 --target-write-rate 0.1 (run once per session)
    work = cloudphysics_pipeline_run(tmp_path_factory) / "run"
    summary = json.loads((work / "summary.json").read_text())
    rx = summary["policies"]["rejectx"]
    from flashml.simulation import SimConfig, simulate
    from flashml.trace.canonical import read_table

    df, meta = read_table(work / "accesses.parquet")
    cfg = SimConfig.for_trace(meta, cache_gb=summary["cache_gb"], admission="rejectx",
                              rejectx_factor=rx["rejectx_factor"])
    judged = simulate(df, cfg.replace(warmup_s=1800.0)).metrics
    assert rx["peak_dt_util"] == pytest.approx(judged["peak_dt_util"], rel=1e-12)
    assert rx["mean_dt_util"] == pytest.approx(judged["mean_dt_util"], rel=1e-12)
    # not the default day-long warm-up, which leaves no window to judge on this trace
    assert rx["mean_dt_util"] != pytest.approx(
        simulate(df, cfg.replace(warmup_s=3600.0)).metrics["mean_dt_util"], rel=1e-6)


def check_a_worker_runs_the_jobs_trials(work: Path, summary: dict, state: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A sweep worker process (flashml/systems/baleen/sweep_worker.py, started as the job starts it)
    on the finished run folder gets each of the job's sweep points and gives the trial the
    job's own process gave: it rebuilds the warm start from the run folder (the policy
    bundle, the train record), not from memory."""
    import pickle

    import optuna

    from flashml.jobs.run import RunDir
    from flashml.systems.baleen import job as baleen
    from flashml.systems.baleen.sweep import Worker
    from flashml.systems.baleen.sweep_worker import SETTINGS

    run = RunDir(work)
    s = pickle.loads((run.work / SETTINGS).read_bytes())
    sw = summary["sweep"]
    peak0 = summary["policies"]["rejectx"]["peak_dt_util"]
    # the worker's MLflow and Optuna stores: the job's
    monkeypatch.setenv("FLASHML_HOME", str(state))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "")
    spawn = baleen.sweep_spawner(run, s, "again", sw["storage"], peak0,
                                 summary["mlflow_run_id"])
    worker = Worker(spawn(7))
    worker.ready()
    for t in sw["trials"]:
        if t["state"] != "COMPLETE":  # pruned on its screen, which only the job's process runs
            continue
        n = worker.run({"write_rate_mbps": t["target_write_rate_mbps"]}, list(sw["range_mbps"]))
        again = optuna.load_study(study_name="again", storage=sw["storage"]).trials[n]
        assert again.value == t["tco"]
        assert again.user_attrs["measured_write_rate_mbps"] == t["write_rate_mbps"]
    assert worker.close() is None


#: The main job's knobs in the tests below: two sweep trials, two sweep processes.
MAIN_JOB = ("pipeline", "run", "--engine", "polars", "--sweep-trials", "2", "--sweep-workers",
            "2")


@pytest.fixture(scope="module")
def main_job(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """The whole main job run once by the real CLI (isolated MLflow store under its own
    FLASHML_HOME): (the process, its run folder, its summary, its FLASHML_HOME)."""
    top = tmp_path_factory.mktemp("main_job")
    work, state = top / "run", top / "state"
    env = {"FLASHML_HOME": str(state), "MLFLOW_TRACKING_URI": ""}
    proc = run_cli(*MAIN_JOB, "--out", work, check=True, env=env, timeout=900)
    return proc, work, json.loads((work / "summary.json").read_text()), state


def test_main_job_end_to_end(main_job, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole main job on the embedded default trace, with real MLflow (isolated store),
    Optuna (two sweep processes: the job's and a worker started when `train` finished), the
    registry and the compiled policy .so."""
    proc, work, summary, state = main_job
    assert summary["validate"]["success"] is True
    assert Path(summary["validate"]["data_docs"]).exists()
    # where `flashml ui docs` looks: the shared context (an index across runs), not the run's
    assert Path(summary["validate"]["data_docs"]) == state / "gx" / \
        "uncommitted" / "data_docs" / "local_site" / "index.html"
    stats = summary["stats"]
    assert stats["requests"] == summary["ingest"]["rows"] == summary["generate"]["accesses"]
    assert 0.15 < stats["compulsory_miss_rate"] < 0.21  # region1-like's documented range
    pol = summary["policies"]
    assert set(pol) == {"rejectx", "coinflip", "cachelib_ml", "baleen",
                        "baleen_admission_only", "baleen_flat_threshold", "opt"}
    from flashml.simulation import METRIC_KEYS

    target = summary["target_write_rate_mbps"]
    for name, m in pol.items():
        assert set(METRIC_KEYS) <= set(m) and "tco" in m, name
        assert m["accesses"] == stats["requests"]
        assert 0 < m["peak_dt_util"] < 1
        assert m["flash_write_rate_mbps"] <= target * 1.1, name
    # OPT bounds the learned policy
    assert pol["opt"]["peak_dt_util"] < pol["baleen"]["peak_dt_util"]
    assert summary["chosen_write_rate_mbps"] > 0
    assert len(summary["sweep"]["trials"]) == 2
    assert summary["registry"]["promoted"] is True  # a fresh store: first champion
    compiled = Path(summary["compiled"]["dir"])
    assert (compiled / "policy.so").exists() and (compiled / "manifest.json").exists()
    # the shipped .so carries the peak schedule the held-out validation chose (flat or the
    # configured one: systems/baleen/validation.py), and the summary says which and why
    from flashml.settings import PeakSettings

    manifest = json.loads((compiled / "manifest.json").read_text())
    choice = summary["choice"]
    assert manifest["peak_hours"] == choice["peak_hours"]
    assert manifest["peak_bonus"] == choice["peak_bonus"]
    assert (len(choice["peak_hours"]), choice["peak_bonus"]) in (
        (PeakSettings().hours, PeakSettings().bonus), (0, 0.0))
    assert choice["feature_set"] in ("baleen", "cachelib_like") and choice["reason"]
    assert "shipped variant" in proc.stdout
    assert {Path(p).name for p in summary["plots"]} >= {
        "dt_utilisation.png", "write_rate_vs_peak_dt.png", "tco_curve.png",
        "feature_importance.png", "peak_schedule.png"}
    for png in summary["plots"]:
        assert Path(png).stat().st_size > 10_000
    # the MLflow run exists in the isolated store, with nested runs per policy and trial
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{state / 'mlflow.db'}")
    runs = mlflow.search_runs(search_all_experiments=True, output_format="list")
    names = {r.info.run_name for r in runs}
    assert summary["mlflow_run_id"] in {r.info.run_id for r in runs}
    assert {"baleen", "rejectx", "opt", "sweep-trial-0"} <= names
    # the worker was started when `train` finished (on this small trace the job's process
    # may run both trials before it has loaded the run)
    assert "started 1 sweep worker process" in proc.stdout + proc.stderr
    assert (work / "work" / "sweep" / "worker-01.log").exists()
    check_a_worker_runs_the_jobs_trials(work, summary, state, monkeypatch)
    assert "peak DT" in proc.stdout and "Baleen vs RejectX" in proc.stdout
    check_mlflow_as_users_see_it(summary, runs)


def check_mlflow_as_users_see_it(summary: dict, runs: list) -> None:
    """What the MLflow UI shows of one `flashml pipeline run`: a parent run named
    by trace, target and time, described, tagged with the git commit and trace, FINISHED,
    with the headline metrics to compare runs on, the trace as its input dataset, loop
    curves as stepped metrics, the admission model's named signature and input example, and
    the registered version being the policy bundle with its compiled .so."""
    import mlflow

    from flashml.features.contract import contract
    from flashml.tracking import REGISTERED_MODEL, git_commit

    client = mlflow.MlflowClient()
    parent = client.get_run(summary["mlflow_run_id"])
    assert parent.info.status == "FINISHED"
    target = summary["target_write_rate_mbps"]
    assert parent.info.run_name.startswith(f"pipeline region1-like-seed0 {target:.4g}MBps 20")
    assert parent.data.tags["trace"] == "region1-like-seed0"
    assert "target write rate" in parent.data.tags["mlflow.note.content"]
    if git_commit():  # the checkout's commit (HEAD may have moved on since the run)
        import re

        sha = parent.data.tags["mlflow.source.git.commit"]
        assert re.fullmatch("[0-9a-f]{40}", sha)
        assert parent.data.tags["flashml.git_commit"].startswith(sha)
    m = parent.data.metrics
    pol = summary["policies"]
    for name in pol:
        assert m[f"{name}_peak_dt_util"] == pytest.approx(pol[name]["peak_dt_util"])
        assert m[f"{name}_tco"] == pytest.approx(pol[name]["tco"])
        assert f"{name}_flash_write_rate_mbps" in m
    assert m["baleen_vs_rejectx_peak_reduction"] == pytest.approx(
        summary["baleen_vs_rejectx_peak_reduction"])
    assert m["chosen_write_rate_mbps"] == pytest.approx(summary["chosen_write_rate_mbps"])
    # the trace as the run's dataset
    (ds,) = parent.inputs.dataset_inputs
    assert ds.dataset.name == "region1-like-seed0"
    assert json.loads(ds.dataset.profile)["num_rows"] == summary["stats"]["requests"]
    assert "key" in {c["name"] for c in json.loads(ds.dataset.schema)["mlflow_colspec"]}
    assert "region1-like-seed0.trace" in ds.dataset.source
    # the convergence loop's curve, one step per iteration
    hist = client.get_metric_history(parent.info.run_id, "loop_peak_dt_util")
    assert [h.step for h in hist] == list(range(len(summary["convergence"]["iterations"])))
    # each shipped model's held-out loss per boosting round; early stopping kept the best
    curve = client.get_metric_history(parent.info.run_id, "gbm_admission_valid_binary_logloss")
    assert len(curve) > 1 and [h.step for h in curve] == list(range(len(curve)))
    assert min(h.value for h in curve) < curve[0].value
    assert client.get_metric_history(parent.info.run_id, "gbm_range_start_valid_l2")
    # sweep trials: FINISHED, never FAILED
    trials = [r for r in runs if r.info.run_name.startswith("sweep-trial-")]
    assert trials and all(r.info.status == "FINISHED" for r in trials)
    # the admission model: named columns and an input example
    names = list(contract().names)
    (adm,) = [lm for lm in mlflow.search_logged_models(
        experiment_ids=[parent.info.experiment_id], output_format="list")
        if lm.name == "admission" and lm.source_run_id == parent.info.run_id]
    info = mlflow.models.get_model_info(adm.model_uri)
    assert info.signature.inputs.input_names() == names
    assert info.saved_input_example_info is not None
    # the runs table's headline columns; the policy model's page shows the run's final
    # metrics (the last point of each curve, not the first step's)
    assert {"headline.peak_dt_cut", "headline.gap_to_opt"} <= set(m)
    assert m["headline.peak_dt_cut"] == pytest.approx(summary["baleen_vs_rejectx_peak_reduction"])
    (pm,) = [lm for lm in mlflow.search_logged_models(
        experiment_ids=[parent.info.experiment_id], output_format="list")
        if lm.name == "policy_bundle" and lm.source_run_id == parent.info.run_id]
    linked: dict = {}
    for x in client.get_logged_model(pm.model_id).metrics:
        if x.key not in linked or (x.step, x.timestamp) > (linked[x.key].step,
                                                           linked[x.key].timestamp):
            linked[x.key] = x
    assert linked["loop_peak_dt_util"].value == hist[-1].value
    assert linked["gbm_admission_valid_binary_logloss"].value == curve[-1].value
    assert linked["headline.peak_dt_cut"].value == m["headline.peak_dt_cut"]
    # the registered version is the shipped policy: the bundle and its compiled .so
    (version,) = client.search_model_versions(f"name='{REGISTERED_MODEL}'")
    assert version.tags["policy_so_sha256"] == summary["compiled"]["sha256"]
    assert version.tags["trace"] == "region1-like-seed0" and version.description
    pyfunc = mlflow.pyfunc.load_model(f"models:/{REGISTERED_MODEL}/{version.version}")
    assert pyfunc.metadata.get_input_schema().input_names() == names
    local = Path(mlflow.artifacts.download_artifacts(f"models:/{REGISTERED_MODEL}/"
                                                     f"{version.version}"))
    assert (local / "artifacts" / "compiled" / "policy.so").is_file()
    assert (local / "artifacts" / "compiled" / "manifest.json").is_file()
    # `flashml compile --model-uri models:/flashml-policy/<v>` finds the bundle in it
    from flashml.compiler.bundle import fetch_bundle

    folder, _, _ = fetch_bundle(model_uri=f"models:/{REGISTERED_MODEL}/{version.version}",
                                dest=Path(summary["compiled"]["dir"]).parent / "fetched")
    assert (folder / "policy.json").is_file()
    import pandas as pd

    from flashml.compiler.loader import load_policy
    from flashml.features.online import feature_matrix
    from flashml.trace.canonical import read_table

    feats = feature_matrix(read_table(Path(summary["compiled"]["dir"]).parent
                                      / "accesses.parquet")[0])[:100]
    got = pyfunc.predict(pd.DataFrame(feats, columns=names))
    want = load_policy(summary["compiled"]["dir"]).admit_scores(feats)
    assert got["score"].to_numpy() == pytest.approx(want)


def _leaves(parser, path=()):
    import argparse

    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sub in a.choices.items():
                yield from _leaves(sub, (*path, name))
            return
    yield path, parser


def test_every_command_has_a_valid_example() -> None:
    """Every command's help ends with examples, and each example parses as that command
    (the options exist, required ones are given, choices are valid)."""
    import shlex

    from flashml.cli import build_parser

    parser = build_parser()
    leaves = dict(_leaves(parser))
    assert len(leaves) >= 15
    for path, p in leaves.items():
        epilog = p.epilog or ""
        assert "example" in epilog.lower(), f"flashml {' '.join(path)}: no example"
        joined = epilog.replace("\\\n", " ")  # shell line continuations
        lines = [ln.strip().split("  #")[0] for ln in joined.splitlines()
                 if ln.strip().startswith("flashml ")]
        assert lines, f"flashml {' '.join(path)}: no example command"
        for line in lines:
            argv = shlex.split(line.rstrip("\\ "))[1:]
            if tuple(argv[:len(path)]) != path:
                continue  # an example of a follow-up command (e.g. compile after train)
            try:
                parser.parse_args(argv)
            except SystemExit as e:
                raise AssertionError(f"example does not parse: {line}") from e


def test_one_trace_and_output_convention(tmp_path) -> None:
    """--trace FILE and -o/--out are accepted by every command that reads a trace or writes
    an output; the trace commands also take the trace positionally (once)."""
    from flashml.cli import build_parser

    for path, p in _leaves(build_parser()):
        opts = {s for a in p._actions for s in a.option_strings}
        if path[0] in ("trace", "sim", "episodes", "train", "sweep", "pipeline", "mat",
                       "mlcache", "regress") and path != ("trace", "generate") \
                and path != ("trace", "mix"):
            assert "--trace" in opts, path
        if any(o in opts for o in ("--output", "--workdir", "--out", "-o")):
            assert {"-o", "--out"} <= opts, (path, opts)
    import pytest as _pytest

    for argv in (["trace", "stats"], ["trace", "stats", "a.parquet", "--trace", "b.parquet"]):
        with _pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2


def test_every_option_has_help() -> None:
    from flashml.cli import build_parser

    missing = [(" ".join(path), a.option_strings) for path, p in _leaves(build_parser())
               for a in p._actions if a.option_strings and a.dest != "help" and not a.help]
    assert not missing, missing


def test_the_main_job_resumes_to_the_summary_of_an_uninterrupted_run(
        main_job, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`flashml pipeline run --resume`: the main job interrupted in its sweep (its
    worker already started at the end of `train`), run again with --resume, redoes none of
    the recorded stages (the trained models, episodes and policies come from the run
    folder, the warm start from the policy bundle) and ends with the summary an
    uninterrupted run (the `main_job` fixture's, same knobs) gives, figures and chosen write
    rate included; this one does not register (so its summary has no `registry`)."""
    from flashml import cli as flashml_cli
    from flashml.systems.baleen import job as baleen

    _, whole_dir, whole, whole_state = main_job
    state = tmp_path / "state"
    monkeypatch.setenv("FLASHML_HOME", str(seed_mlflow_store(state)))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    args = [*MAIN_JOB, "--no-register"]

    real = baleen.STAGES

    def interrupted(run, s, timer):  # the process dies in the sweep
        raise KeyboardInterrupt

    cut = tuple(baleen.Stage(st.name, interrupted, st.prepare, st.prepare_after)
                if st.name == "sweep" else st for st in real)
    out = tmp_path / "cut"
    monkeypatch.setattr(baleen, "STAGES", cut)
    with pytest.raises(KeyboardInterrupt):
        flashml_cli.main([*args, "--out", str(out)])
    assert (out / "stages" / "policies.json").is_file() and not (out / "summary.json").exists()
    trained = (out / "stages" / "train.json").stat().st_mtime_ns

    monkeypatch.setattr(baleen, "STAGES", real)
    assert flashml_cli.main([*args, "--out", str(out), "--resume"]) == 0
    assert (out / "stages" / "train.json").stat().st_mtime_ns == trained  # not trained again
    # the summaries with each run's folder and FLASHML_HOME named alike
    resumed = json.loads((out / "summary.json").read_text().replace(str(out), "RUN")
                         .replace(str(state), "STATE"))
    whole = json.loads(json.dumps(whole).replace(str(whole_dir), "RUN")
                       .replace(str(whole_state), "STATE"))
    assert "registry" not in resumed and whole.pop("registry")["promoted"] is True
    volatile = {"mlflow_run_id", "timings_s", "peak_rss_mb", "seconds", "wall_s", "study",
                "data_docs", "sha256", "created", "accesses_per_s", "compile_s"}

    def steady(d):  # the summary without wall times, run ids and dates, at every depth
        if isinstance(d, dict):
            return {k: steady(v) for k, v in d.items() if k not in volatile}
        if isinstance(d, list):
            return [steady(v) for v in d]
        return d

    assert steady(resumed)["policies"] == steady(whole)["policies"]
    assert resumed["chosen_write_rate_mbps"] == whole["chosen_write_rate_mbps"]
    assert steady(resumed) == steady(whole)


def test_ctrl_c_is_one_line_and_exit_130(monkeypatch, capsys):
    """The `flashml` command (pyproject's entry point) reports Ctrl-C as one line and exits
    130; `main` itself lets KeyboardInterrupt through (the test above relies on it)."""
    import tomllib

    from flashml import cli as flashml_cli

    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert scripts["project"]["scripts"]["flashml"] == "flashml.cli:console"

    def interrupted(argv=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(flashml_cli, "main", interrupted)
    assert flashml_cli.console() == 130
    err = capsys.readouterr().err
    assert err.strip() == "flashml: interrupted" and "Traceback" not in err
