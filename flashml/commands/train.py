"""`flashml train` and `flashml sweep`: the learning stages of Baleen's main job on their own.

Both run stages of `flashml.systems.baleen.job.STAGES` (the list `flashml pipeline run` and the DAG
run) over a run folder: `train` runs `ingest` + `train` and copies the candidate bundle to
`-o`; `sweep` runs `ingest` + `sweep`.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import tempfile
from pathlib import Path

from flashml.commands.trace import TRACE_OPTIONS
from flashml.config import DEFAULTS
from flashml.files import check_outputs
from flashml.settings import (
    OPTIONS,
    BaleenSettings,
    Number,
    Option,
    add_options,
    option_table,
    option_values,
)

log = logging.getLogger("flashml.train")

#: The run settings (flashml.settings.OPTIONS) both commands take.
COMMON_OPTIONS = ("cache_gb", "target_write_rate_mbps", "learning_rate", "max_rounds",
                  "max_iterations", "max_training_rows", "train_hours", "peak_hours",
                  "peak_bonus")

#: `flashml train`'s options: the trace, run settings and its own.
TRAIN_OPTIONS = option_table(
    *TRACE_OPTIONS.values(),
    *(OPTIONS[name] for name in (*COMMON_OPTIONS, "eviction_age", "accesses_per_episode")),
    Option("admission_only", "--admission-only", bool, not BaleenSettings().with_prefetch,
           "no ML-Range/ML-When: print the admission model's metrics, no bundle"),
    Option("require_convergence", "--require-convergence", bool, False,
           "exit 1 when the loop does not converge"),
    Option("output", "--out", Path, None, "bundle folder (new)", required=True,
           aliases=("-o", "--output")),
)

#: `flashml sweep`'s options: the trace, run settings and its own.
SWEEP_OPTIONS = option_table(
    *TRACE_OPTIONS.values(),
    *(OPTIONS[name] for name in (*COMMON_OPTIONS, "sweep_cold", "sweep_workers",
                                 "sweep_screen_margin")),
    Option("trials", "--trials", Number(int, 1, 10_000, unit="trials"), 8,
           "write rates tried (a grid around the target)"),
    Option("storage", "--storage", str, None, "Optuna storage URL (default sqlite under "
           ".flashml/; an RDB URL lets several workers share the study)"),
    Option("study", "--study", str, None, "study name (to resume or share)"),
    OPTIONS["min_factor"],
    OPTIONS["max_factor"],
    Option("output", "--out", Path, Path(".flashml/sweep"), "sweep folder",
           aliases=("-o", "--output")),
)


def _run(stage_names: tuple[str, ...], s: BaleenSettings, kind: str, workdir: Path):  # type: ignore[no-untyped-def]
    """Run the job's stages `stage_names` over the run folder `workdir` in a new MLflow run
    (named, tagged and described as a `kind` run: train or sweep); returns the run folder
    and the records."""
    from flashml.jobs.run import RunDir, Timer, open_run, run_stages, select
    from flashml.systems.baleen import job as baleen

    run = RunDir(workdir)
    timer = Timer()
    baleen.ingest(run, s, timer)  # a short or bad trace fails before any MLflow run
    with open_run(run, baleen.run_name(s, kind), s.mlflow_params(),
                  tags=baleen.mlflow_tags(run, s, kind),
                  description=baleen.describe_run(run, s, kind)):
        records = run_stages(select(baleen.STAGES, *stage_names), run, s, timer)
    return run, records


def cmd_train(args: argparse.Namespace) -> int:
    from flashml.files import atomic_dir
    from flashml.systems.baleen.run_folder import policy_dir

    v = option_values(TRAIN_OPTIONS, args)
    s = BaleenSettings.from_values(v).replace(sweep_trials=0, register=False, compile=False)
    out: Path = v["output"]
    check_outputs({"-o": out}, {"--trace": v["trace"]}, folders=("-o",))
    with tempfile.TemporaryDirectory(prefix="flashml-train-") as tmp:
        run, rec = _run(("ingest", "train"), s, "train", Path(tmp))
        trained = rec["train"]
        conv = trained["convergence"]
        print(f"converged: {conv['converged']} ({conv['reason']}); eviction age "
              f"{trained['eviction_age_s']:.0f} s; threshold {trained['metrics']['threshold']:.4f}")
        if not s.with_prefetch:
            print(json.dumps(trained["metrics"], indent=2))
            return 0
        with atomic_dir(out, marker="policy.json", what="policy bundle") as dest:
            shutil.copytree(policy_dir(run), dest, dirs_exist_ok=True)
    print(f"{out}: policy bundle (compile it with `flashml compile --model-dir {out} -o DIR` "
          f"or `--run-id {trained['mlflow_run_id']}`)")
    return 0 if conv["converged"] or not v["require_convergence"] else 1


def cmd_sweep(args: argparse.Namespace) -> int:
    from flashml.jobs.report import plot_tco_curve

    v = option_values(SWEEP_OPTIONS, args)
    s = BaleenSettings.from_values({**v, "sweep_trials": v["trials"]})
    out: Path = v["output"]
    check_outputs({"-o": out}, {"--trace": v["trace"]}, folders=("-o",))
    with tempfile.TemporaryDirectory(prefix="flashml-sweep-") as tmp:
        _, rec = _run(("ingest", "sweep"), s, "sweep", Path(tmp))
    res = rec["sweep"]
    trials = res["sweep"]["trials"]
    out.mkdir(parents=True, exist_ok=True)
    png = plot_tco_curve([(t["write_rate_mbps"], t["tco"]) for t in trials
                          if t["state"] == "COMPLETE"], res["chosen_write_rate_mbps"],
                         out / "tco_curve.png",
                         bounds=tuple(res["sweep"]["range_mbps"])
                         if res["sweep"].get("range_mbps") else None)
    print(f"{'trial':>5} {'state':>9} {'target MB/s':>11} {'write MB/s':>10} {'peak DT':>8} "
          f"{'TCO':>7} {'screened':>8}")
    for t in trials:
        fmt = (lambda v, f: format(v, f) if isinstance(v, float) else "-")  # noqa: E731
        print(f"{t['number']:5d} {t['state']:>9} {fmt(t['target_write_rate_mbps'], '11.2f')} "
              f"{fmt(t['write_rate_mbps'], '10.2f')} {fmt(t['peak_dt_util'], '8.4f')} "
              f"{fmt(t['tco'], '7.3f')} {fmt(t.get('screen_tco'), '8.3f')}")
    print(f"Baleen-TCO: write rate {res['chosen_write_rate_mbps']:.2f} MB/s (TCO "
          f"{res['chosen_tco']:.3f} relative to RejectX at {DEFAULTS.target_write_rate_mbps} "
          f"MB/s); study {res['sweep']['study']} in {res['sweep']['storage']}; plot {png}")
    lo, hi = res["sweep"].get("range_mbps", (None, None))
    if lo is not None:
        print(f"write rates searched: {lo:.3g}-{hi:.3g} MB/s"
              + (f" (widened {res['sweep']['widened']}x: the best point sat at the top)"
                 if res["sweep"].get("widened") else ""))
    print(f"browse the study: optuna-dashboard {res['sweep']['storage']}  "
          "(pip install optuna-dashboard; then http://127.0.0.1:8080)")
    from flashml.files import write_json

    write_json(out / "sweep.json", {
        "study_name": res["sweep"]["study"], "storage": res["sweep"]["storage"],
        "trials": trials, "range_mbps": res["sweep"].get("range_mbps"),
        "widened": res["sweep"].get("widened"),
        "chosen_write_rate_mbps": res["chosen_write_rate_mbps"],
        "chosen_tco": res["chosen_tco"]})
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="learn a policy (convergence loop) -> policy bundle",
                       description="Run Baleen's convergence loop (episodes -> LightGBM -> "
                       "simulation) at a target write rate and write the policy bundle.")
    add_options(p, options=TRAIN_OPTIONS)
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("sweep", help="Optuna sweep of write rates; Baleen-TCO picks one",
                       description="Optuna study over target write rates; each trial runs "
                       "the convergence loop from the main loop's converged state (--sweep-"
                       "cold: from scratch, sweeping the starting eviction age too) and is "
                       "scored by TCO relative to RejectX at the default write rate.")
    add_options(p, options=SWEEP_OPTIONS)
    p.set_defaults(func=cmd_sweep)
