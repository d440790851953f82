"""`flashml train` and `flashml sweep`: the learning stages of the main job on their own."""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
from pathlib import Path

from flashml.commands.argtypes import (
    add_peak_options,
    add_train_hours_option,
    peak_settings,
    train_seconds,
)
from flashml.commands.trace import add_trace_option
from flashml.config import DEFAULTS
from flashml.errors import UserError

log = logging.getLogger("flashml.train")


def _prepare(args: argparse.Namespace, work: Path):  # type: ignore[no-untyped-def]
    """Canonical table on disk (ingesting a raw trace), its frame, the simulator set-up
    (judged after the training window) and the features; UserError on bad options or a
    trace shorter than the training window."""
    from flashml.features.online import feature_matrix
    from flashml.models.dataset import check_span
    from flashml.simulation import SimConfig
    from flashml.trace.canonical import write_table
    from flashml.trace.ingest import load_trace

    if args.target_write_rate <= 0:
        raise UserError(f"--target-write-rate must be > 0 MB/s, got {args.target_write_rate}")
    if args.cache_gb <= 0:
        raise UserError(f"--cache-gb must be > 0, got {args.cache_gb}")
    train_s = train_seconds(args)
    df, meta = load_trace(args.trace, args.format, sample_ratio=args.sample_ratio)
    check_span(df["time"].to_numpy(), train_s, args.trace)
    table = work / "accesses.parquet"
    write_table(df, table, meta)
    base = SimConfig(sample_ratio=meta.sample_ratio, cache_gb=args.cache_gb, warmup_s=train_s)
    return df, table, base, feature_matrix(df)


def _gbm(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from flashml.models.gbm import GbmParams

    return GbmParams().with_overrides(learning_rate=args.learning_rate,
                                      num_boost_round=args.max_rounds)


def cmd_train(args: argparse.Namespace) -> int:
    import mlflow

    from flashml.compiler.bundle import save_policy_models
    from flashml.models.converge import LoopSettings, run_loop
    from flashml.models.peak import with_peak
    from flashml.tracking import setup

    out: Path = args.output
    peak = peak_settings(args)
    with tempfile.TemporaryDirectory(prefix="flashml-train-") as tmp:
        df, table, base, feats = _prepare(args, Path(tmp))
        # the shipped threshold's peak schedule, from this trace's training window
        final = with_peak(base, df, peak, base.warmup_s)
        setup()
        with mlflow.start_run(run_name=f"train-{Path(args.trace).name}") as run:
            settings = LoopSettings(start_eviction_age_s=args.eviction_age,
                                    max_iter=args.max_iterations, train_seconds=base.warmup_s)
            res = run_loop(df, table, feats, base, args.target_write_rate, Path(tmp) / "loop",
                           _gbm(args), settings, with_prefetch=not args.admission_only,
                           final_base=final)
            print(res.report())
            m = res.tuned.result.metrics
            mlflow.log_params({"target_write_rate_mbps": args.target_write_rate,
                               "cache_gb": args.cache_gb, "eviction_age_s": res.eviction_age_s,
                               "threshold": res.tuned.knob})
            mlflow.log_metrics({k: float(v) for k, v in m.items() if v == v})
            if args.admission_only:
                print(json.dumps({"threshold": res.tuned.knob, **m}, indent=2))
                return 0
            bundle = save_policy_models(
                out, res.policy.boosters(), admit_threshold=res.tuned.knob,
                when_threshold=res.when_threshold, eviction_age_s=res.eviction_age_s,
                target_write_rate_mbps=args.target_write_rate,
                metrics={k: float(v) for k, v in m.items() if v == v},
                mlflow_run_id=run.info.run_id, converged=res.converged,
                peak_hours=final.peak_hours, peak_bonus=final.peak_bonus)
            mlflow.log_artifacts(str(bundle), artifact_path="policy")
    print(f"{out}: policy bundle (compile it with `flashml compile --model-dir {out} -o DIR` "
          f"or `--run-id {run.info.run_id}`)")
    return 0 if res.converged or not args.require_convergence else 1


def cmd_sweep(args: argparse.Namespace) -> int:
    import mlflow

    from flashml.jobs.report import plot_tco_curve
    from flashml.models.converge import LoopSettings
    from flashml.models.peak import with_peak
    from flashml.models.sweep import run_sweep
    from flashml.policies.baselines import tune_rejectx
    from flashml.tracking import setup

    if args.trials < 1:
        raise UserError(f"--trials must be >= 1, got {args.trials}")
    with tempfile.TemporaryDirectory(prefix="flashml-sweep-") as tmp:
        df, table, base, feats = _prepare(args, Path(tmp))
        final = with_peak(base, df, peak_settings(args), base.warmup_s)
        rejectx = tune_rejectx(df, base, DEFAULTS.target_write_rate_mbps)
        peak0 = float(rejectx.result.metrics["peak_dt_util"])
        setup()
        with mlflow.start_run(run_name=f"sweep-{Path(args.trace).name}") as run:
            res = run_sweep(df, table, feats, base, args.target_write_rate, peak0,
                            DEFAULTS.target_write_rate_mbps, Path(tmp) / "sweep", _gbm(args),
                            LoopSettings(max_iter=args.max_iterations,
                                         train_seconds=base.warmup_s), trials=args.trials,
                            storage=args.storage,
                            study_name=args.study or f"flashml-{run.info.run_id}",
                            rate_range=(args.min_factor, args.max_factor), final_base=final)
            args.output.mkdir(parents=True, exist_ok=True)
            png = plot_tco_curve(res.curve(), res.chosen_write_rate_mbps,
                                 args.output / "tco_curve.png")
            mlflow.log_artifact(str(png), artifact_path="plots")
            mlflow.log_metric("chosen_write_rate_mbps", res.chosen_write_rate_mbps)
            mlflow.log_metric("chosen_tco", res.chosen_tco)
    print(f"{'trial':>5} {'state':>9} {'target MB/s':>11} {'write MB/s':>10} {'peak DT':>8} "
          f"{'TCO':>7}")
    for t in res.trials:
        fmt = (lambda v, f: format(v, f) if isinstance(v, float) else "-")  # noqa: E731
        print(f"{t['number']:5d} {t['state']:>9} {fmt(t['target_write_rate_mbps'], '11.2f')} "
              f"{fmt(t['write_rate_mbps'], '10.2f')} {fmt(t['peak_dt_util'], '8.4f')} "
              f"{fmt(t['tco'], '7.3f')}")
    print(f"Baleen-TCO: write rate {res.chosen_write_rate_mbps:.2f} MB/s (TCO "
          f"{res.chosen_tco:.3f} relative to RejectX at {DEFAULTS.target_write_rate_mbps} MB/s)"
          f"; study {res.study_name} in {res.storage}; plot {png}")
    (args.output / "sweep.json").write_text(json.dumps(res.__dict__, indent=2, default=str))
    return 0


def _common(p: argparse.ArgumentParser) -> None:
    add_trace_option(p)
    p.add_argument("--cache-gb", type=float, default=DEFAULTS.cache_gb)
    p.add_argument("--target-write-rate", type=float, default=DEFAULTS.target_write_rate_mbps,
                   metavar="MBPS")
    p.add_argument("--learning-rate", type=float, default=0.05)
    p.add_argument("--max-rounds", type=int, default=500)
    p.add_argument("--max-iterations", type=int, default=20, help="convergence loop cap")
    add_train_hours_option(p)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="learn a policy (convergence loop) -> policy bundle",
                       description="Run Baleen's convergence loop (episodes -> LightGBM -> "
                       "simulation) at a target write rate and write the policy bundle.")
    _common(p)
    p.add_argument("--eviction-age", type=float, default=7200.0,
                   help="starting assumed eviction age, seconds (default 2 h)")
    p.add_argument("--admission-only", action="store_true", help="no ML-Range/ML-When")
    add_peak_options(p)
    p.add_argument("--require-convergence", action="store_true",
                   help="exit 1 when the loop does not converge")
    p.add_argument("-o", "--output", type=Path, required=True, help="bundle folder")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("sweep", help="Optuna sweep of write rates; Baleen-TCO picks one",
                       description="Optuna study over target write rates and starting "
                       "eviction ages; each trial runs the convergence loop and is scored by "
                       "TCO relative to RejectX at the default write rate.")
    _common(p)
    p.add_argument("--trials", type=int, default=8)
    p.add_argument("--storage", default=None,
                   help="Optuna storage URL (default sqlite under .flashml/; an RDB URL "
                   "lets several workers share the study)")
    p.add_argument("--study", default=None, help="study name (to resume or share)")
    add_peak_options(p)
    p.add_argument("--min-factor", type=float, default=0.25,
                   help="lowest write rate as a multiple of the target")
    p.add_argument("--max-factor", type=float, default=4.0)
    p.add_argument("-o", "--output", type=Path, default=Path(".flashml/sweep"))
    p.set_defaults(func=cmd_sweep)
