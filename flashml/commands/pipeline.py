"""`flashml pipeline run`: the main job, end to end.

trace (or the embedded default: a generated region1-like trace) -> ingest -> validate (Great
Expectations) -> statistics -> features -> episodes + convergence + training -> baselines
-> Optuna sweep (Baleen-TCO) -> simulation of every policy -> MLflow (runs, plots, models,
registry) -> the policy bundle (and its compiled .so).

The stages are the functions of flashml.jobs.baleen, the same ones the Airflow DAG
(dags/flashml_retrain.py) runs as tasks; here they run in one process over `--out`.
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path
from typing import Any

from flashml.commands.argtypes import (
    add_peak_options,
    add_train_hours_option,
    peak_settings,
    positive_ints,
    train_seconds,
)
from flashml.commands.trace import add_trace_option
from flashml.config import DEFAULTS
from flashml.errors import UserError

log = logging.getLogger("flashml.pipeline")


def cmd_run(args: argparse.Namespace) -> int:
    from flashml.jobs import report
    from flashml.jobs.baleen import (
        JobSettings,
        RunDir,
        Timer,
        check_span,
        ingest_validate,
        open_run,
        run_all,
        write_summary,
    )
    from flashml.models.gbm import GbmParams

    if args.target_write_rate <= 0:
        raise UserError(f"--target-write-rate must be > 0 MB/s, got {args.target_write_rate}")
    if args.cache_gb <= 0:
        raise UserError(f"--cache-gb must be > 0, got {args.cache_gb}")
    train_s = train_seconds(args)  # validated before any work
    peak = peak_settings(args)
    out: Path = args.out
    run = RunDir(out)
    run.reset()  # a new run: no stage of an earlier run in this folder is reused
    timer = Timer()
    t0 = time.perf_counter()
    summary: dict = {}
    if args.trace is None:
        from flashml.trace.generate import generate_trace

        raw = out / f"{args.preset}-seed{args.seed}.trace"
        with timer.stage("generate"):
            summary["generate"] = generate_trace(args.preset, args.seed, raw,
                                                 accesses=args.accesses, days=args.days)
    else:
        raw = args.trace
    summary |= ingest_validate(run, raw, args.format, args.sample_ratio, timer)
    meta = run.frame()[1]
    gbm = GbmParams().with_overrides(learning_rate=args.learning_rate,
                                     num_boost_round=args.max_rounds)
    settings = JobSettings(cache_gb=args.cache_gb, target_write_rate_mbps=args.target_write_rate,
                           engine=args.engine, master=args.master, gbm=gbm,
                           loop=_loop_settings(args, train_s), peak=peak,
                           sweep_trials=args.sweep_trials, register=not args.no_register,
                           compile=not args.no_compile)
    check_span(run, settings, raw)  # before any MLflow run is opened
    import mlflow

    params = {"trace": str(raw), "sample_ratio": meta.sample_ratio, "cache_gb": args.cache_gb,
              "target_write_rate_mbps": args.target_write_rate, "engine": args.engine,
              "learning_rate": gbm.learning_rate, "num_leaves": gbm.num_leaves,
              "sweep_trials": args.sweep_trials, "peak_hours": args.peak_hours,
              "peak_bonus": args.peak_bonus}
    with open_run(run, f"pipeline-{raw.name}", params) as mlrun:
        summary |= run_all(run, settings, timer)
        summary["mlflow_run_id"] = mlrun.info.run_id
        summary["timings_s"] = timer.stages
        summary["seconds"] = round(time.perf_counter() - t0, 1)
        path = write_summary(out, summary)
        mlflow.log_artifact(str(path))
    print()
    print(report.table(summary["policies"]))
    tuned = {k: v for k, v in summary["policies"].items() if k != "opt"}
    short = {k: v["flash_write_rate_mbps"] for k, v in tuned.items()
             if v.get("reached_target") is False}
    if short and len(short) == len(tuned) and \
            max(short.values()) < args.target_write_rate:
        top = max(short.values())
        print(f"\nnote: no policy reaches the target write rate {args.target_write_rate:g} "
              f"MB/s on this trace (at most {top:.3g} MB/s): the write budget does not bind, "
              f"so the policies differ little; try --target-write-rate below {top:.3g} or a "
              f"smaller --cache-gb")
    elif short:
        print(f"\nnote: {', '.join(short)} cannot be tuned to within 5% of the target "
              f"write rate {args.target_write_rate:g} MB/s on this trace; they run at "
              + ", ".join(f"{v:.3g}" for v in short.values()) + " MB/s")
    print(f"\nBaleen vs RejectX peak DT: {summary['baleen_vs_rejectx_peak_reduction']:+.1%} "
          f"reduction; gap to OPT {summary['gap_to_opt']:+.1%}; TCO-chosen write rate "
          f"{summary['chosen_write_rate_mbps']:.1f} MB/s")
    print("time per stage (s): " + ", ".join(f"{k} {v}" for k, v in timer.stages.items()))
    print(f"summary: {path}; MLflow run {summary['mlflow_run_id']}")
    return 0


def _loop_settings(args: argparse.Namespace, train_s: float) -> Any:
    from flashml.models.converge import LoopSettings

    ks = args.accesses_per_episode
    train = {"max_iter": args.max_iterations, "train_seconds": train_s}
    if ks is None:
        return LoopSettings(**train)
    return LoopSettings(**train, accesses_per_episode=ks[0], k_candidates=ks)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("pipeline", help="run the main job end to end",
                       description="Run the flashml pipeline end to end.")
    psub = p.add_subparsers(dest="pipeline_command", metavar="SUBCOMMAND", required=True)
    r = psub.add_parser("run", help="trace -> validated table -> learned policy -> bundle",
                        description=__doc__)
    add_trace_option(r, required=False, trace_help="raw trace or canonical .parquet "
                     "(default: generate the embedded synthetic preset)")
    r.add_argument("--cache-gb", type=float, default=DEFAULTS.cache_gb,
                   help=f"flash cache size at full-node scale (default {DEFAULTS.cache_gb})")
    r.add_argument("--target-write-rate", type=float,
                   default=DEFAULTS.target_write_rate_mbps, metavar="MBPS",
                   help=f"flash write rate target (default {DEFAULTS.target_write_rate_mbps})")
    r.add_argument("--out", "--workdir", dest="out", type=Path,
                   default=Path(".flashml/runs/latest"), help="output folder")
    r.add_argument("--preset", default="region1-like", help="synthetic preset for the default")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--accesses", type=int, default=None)
    r.add_argument("--days", type=float, default=None)
    r.add_argument("--engine", choices=("spark", "polars"), default="spark",
                   help="episode engine for the recorded episodes (inner loops use Polars)")
    r.add_argument("--master", default=None, help="Spark master URL (default local[*])")
    r.add_argument("--learning-rate", type=float, default=0.05,
                   help="LightGBM learning rate (artifact: 0.005 with up to 2000 rounds)")
    r.add_argument("--max-rounds", type=int, default=500, help="LightGBM rounds (max)")
    r.add_argument("--max-iterations", type=int, default=20,
                   help="convergence loop iteration cap")
    add_train_hours_option(r)
    r.add_argument("--accesses-per-episode", type=positive_ints, default=None,
                   metavar="K[,K...]",
                   help="OPT-labelled GETs per episode in the admission training rows; several: "
                   "the K whose admission-only model has the lowest mean DT on the training "
                   "day (ties: the first); one value fixes K. Default: the loop's candidates "
                   "(LoopSettings.k_candidates in models/converge.py; the artifact's K=6 wins "
                   "ties)"),
    add_peak_options(r)
    r.add_argument("--sweep-trials", type=int, default=6, help="Optuna trials (0: no sweep)")
    r.add_argument("--no-register", action="store_true", help="skip the model registry")
    r.add_argument("--no-compile", action="store_true", help="skip compiling the policy .so")
    r.set_defaults(func=cmd_run)
