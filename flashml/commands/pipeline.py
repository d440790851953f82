"""`flashml pipeline run`: the main job, end to end, as far as the pipeline goes today.

generate (or take --trace) -> ingest -> validate (Great Expectations) -> statistics
-> simulate the baselines (admit-all, RejectX) at the default cache size.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

from flashml.config import DEFAULTS
from flashml.errors import UserError

log = logging.getLogger("flashml.pipeline")


def cmd_run(args: argparse.Namespace) -> int:
    from flashml.pipelines.ingest import ingest, is_parquet
    from flashml.pipelines.stats import compute_stats, format_stats
    from flashml.pipelines.validate import validate_table

    work: Path = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    summary: dict = {}
    if args.trace is None:
        from flashml.pipelines.generate import generate_trace

        raw = work / f"{args.preset}-seed{args.seed}.trace"
        log.info("stage generate: preset %s seed %d -> %s", args.preset, args.seed, raw)
        summary["generate"] = generate_trace(args.preset, args.seed, raw,
                                             accesses=args.accesses, days=args.days)
    else:
        raw = args.trace
    table = work / "accesses.parquet"
    if is_parquet(raw):
        if raw.resolve() != table.resolve():
            import shutil

            shutil.copyfile(raw, table)
    else:
        log.info("stage ingest: %s (%s) -> %s", raw, args.format, table)
        res = ingest(raw, table, args.format, sample_ratio=args.sample_ratio)
        summary["ingest"] = {"rows": res.rows, "lines": res.lines, "seconds": res.seconds}

    from flashml.pipelines.canonical import read_table

    df, meta = read_table(table)
    log.info("stage validate: Great Expectations suite on %d rows", len(df))
    report = validate_table(df, meta, context_dir=work / "gx")
    print(report.describe())
    if not report.success:
        raise UserError(f"validation failed on {table}; see {report.docs_index}")
    summary["validate"] = {"success": True, "data_docs": str(report.docs_index)}

    log.info("stage stats")
    stats = compute_stats(df, meta)
    print(format_stats(stats))
    summary["stats"] = stats

    log.info("stage simulate: baselines at %.3f GB (sample ratio %g%%)", args.cache_gb,
             meta.sample_ratio)
    summary["simulate"] = simulate_baselines(df, meta.sample_ratio, args.cache_gb, work)
    summary["seconds"] = time.perf_counter() - t0
    (work / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    log.info("pipeline done in %.1fs; summary in %s", summary["seconds"], work / "summary.json")
    return 0


BASELINES = ("admitall", "rejectx")
SHOWN = ("peak_dt_util", "mean_dt_util", "p99_dt_util", "flash_write_rate_mbps", "dwpd",
         "io_hit_ratio", "byte_hit_ratio", "avg_eviction_age_s", "backend_ios")


def simulate_baselines(df, sample_ratio: float, cache_gb: float, work: Path) -> dict:  # type: ignore[no-untyped-def]
    from flashml.plots import plot_dt_utilisation
    from flashml.simulation import SimConfig, simulate

    results = {name: simulate(df, SimConfig(sample_ratio=sample_ratio, cache_gb=cache_gb,
                                            admission=name)) for name in BASELINES}
    print(f"\nSimulation, LRU flash cache of {cache_gb:g} GB (full-node scale)")
    print(f"  {'metric':24}" + "".join(f"{n:>14}" for n in results))
    for key in SHOWN:
        print(f"  {key:24}" + "".join(f"{_fmt(r.metrics[key]):>14}" for r in results.values()))
    png = plot_dt_utilisation({n: r.series for n, r in results.items()}, work / "dt_util.png")
    print(f"  plot: {png}")
    return {n: r.metrics for n, r in results.items()} | {"plot": str(png)}


def _fmt(v: float | int) -> str:
    return f"{v:,}" if isinstance(v, int) else f"{v:.4g}"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("pipeline", help="run the main job end to end",
                       description="Run the flashml pipeline end to end.")
    psub = p.add_subparsers(dest="pipeline_command", metavar="SUBCOMMAND", required=True)
    r = psub.add_parser("run", help="generate/ingest -> validate -> stats -> ...",
                        description="The main job. Without --trace it generates the embedded "
                        "default trace (a synthetic preset).")
    r.add_argument("--trace", type=Path, default=None, help="use this trace instead of "
                   "generating one (raw or canonical .parquet)")
    r.add_argument("--format", default="tectonic", help="format of a raw --trace")
    r.add_argument("--sample-ratio", type=float, default=None, metavar="PERCENT")
    r.add_argument("--preset", default="region1-like", help="synthetic preset (default "
                   "region1-like)")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--accesses", type=int, default=None)
    r.add_argument("--days", type=float, default=None)
    r.add_argument("--cache-gb", type=float, default=DEFAULTS.cache_gb,
                   help=f"flash cache size, full-node scale (default {DEFAULTS.cache_gb})")
    r.add_argument("--workdir", type=Path, default=Path(".flashml/runs/latest"),
                   help="where outputs go (default .flashml/runs/latest)")
    r.set_defaults(func=cmd_run)
