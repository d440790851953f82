"""`flashml episodes build`: episodes, OPT, OPT-Range and labels (Spark, or Polars)."""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

from flashml.commands.argtypes import Number
from flashml.commands.trace import add_trace_option
from flashml.config import DEFAULTS
from flashml.files import check_outputs, dumps
from flashml.settings import OPTIONS
from flashml.systems.baleen.episodes.constants import (
    DEFAULT_ACCESSES_PER_EPISODE,
    ENGINES,
    WHEN_EPSILON_S,
)


def cmd_build(args: argparse.Namespace) -> int:
    from flashml.systems.baleen.episodes.core import EpisodeParams, build
    from flashml.trace.ingest import canonical_path

    check_outputs({"-o": args.out}, {"--trace": args.trace}, folders=("-o",))
    params = EpisodeParams(
        eviction_age_s=args.eviction_age,
        target_write_rate_mbps=args.target_write_rate,
        accesses_per_episode=args.accesses_per_episode,
        time_mode=args.time,
        when_epsilon_s=args.when_epsilon_ms / 1000.0,
    )
    params.validate()  # before a raw trace is ingested
    t0 = time.perf_counter()
    # A raw trace is ingested first, beside the output (its folder is removed afterwards).
    with canonical_path(args.trace, args.format, sample_ratio=args.sample_ratio,
                        workdir=args.out.resolve().parent, progress=False) as (table, ingested):
        res = build(table, args.out, params, engine=args.engine, master=args.master,
                    chunks=args.chunks, simulate=args.simulate, cache_gb=args.cache_gb,
                    warmup_s=args.warmup_s, plot=not args.no_plot,
                    sample_ratio=args.sample_ratio, source=args.trace,
                    timings={"ingest_s": time.perf_counter() - t0} if ingested else None)
    s = res.summary
    if args.json:
        print(dumps({k: v for k, v in s.items() if k != "curve"}, indent=None))
        return 0
    cutoff = "none" if s["cutoff_score"] is None else f"{s['cutoff_score']:.6g} s/segment"
    print(f"{args.out}: {s['episodes']} episodes from {s['gets']} GETs ({s['engine']}, "
          f"{res.seconds:.1f}s); OPT admits {s['admitted_episodes']} at "
          f"{s['opt_write_rate_mbps']:.4g} MB/s <= {s['target_write_rate_mbps']:g} MB/s "
          f"(cutoff score {cutoff}); DT saved ratio {s['dt_saved_ratio']:.3f}; Little's-law "
          f"cache {s['littles_law_cache_gb']:.4g} GB at eviction age {s['eviction_age_s']:g} s")
    if "simulation" in s:
        m = s["simulation"]
        ea = m["measured_eviction_age_s"]
        ea_txt = "n/a (no evictions)" if ea is None or not math.isfinite(ea) else f"{ea:.5g} s"
        print(f"simulated OPT ({m['cache_gb']:g} GB): write rate "
              f"{m['measured_write_rate_mbps']:.4g} MB/s ({m['write_rate_vs_target']:.3f} x "
              f"target), mean eviction age {ea_txt} (assumed {m['assumed_eviction_age_s']:g} s)"
              f", peak DT {m['peak_dt_util']:.4g}")
    return 0


EPILOG = """\
outputs (in -o DIR, written atomically; semantics in flashml/systems/baleen/episodes/core.py):
  episodes.parquet  one row per episode: episode_id, key, first_row, first_time, last_time,
                    gets, range_start, range_end (OPT-Range, inclusive segments),
                    size_segments, get_segments, accessed_segments, replay_ios,
                    replay_segments, dt_nocache_s, dt_saved_prefetch_s,
                    dt_saved_noprefetch_s, score, pf_benefit_s, overfetch_s, when_benefit_s,
                    when_label, rank, cum_segments, cum_write_rate_mbps, admitted
  labels.parquet    one row per GET (trace order): row, key, time, episode_id, position,
                    opt_label (1/0 for the first K accesses, -1 after), admitted,
                    range_start, range_end (ML-Range targets), when_label (ML-When)
  arrays.parquet    one row per access (trace order): row, admit, prefetch_start,
                    prefetch_end -- for `flashml sim run --trace TRACE --arrays
                    DIR/arrays.parquet --admission opt --prefetch range`
  summary.json      episodes, admitted_episodes, cutoff_score, target_write_rate_mbps,
                    dt_saved_ratio, littles_law_cache_gb, curve, (simulation)
  curve.png         write rate vs DT saved and vs Little's-law cache size

example:
  flashml episodes build --trace region1.parquet --eviction-age 7200 \\
      --target-write-rate 35.599 --engine polars --simulate -o episodes/
"""


def register(sub: argparse._SubParsersAction) -> None:
    ep = sub.add_parser("episodes", help="episodes, OPT admission, OPT-Range and training labels",
                        description="Baleen's episode model (§3.4-3.6): group GETs into "
                        "episodes at an assumed eviction age, score them, derive OPT at a "
                        "target flash write rate, OPT-Range, and the ML labels.")
    esub = ep.add_subparsers(dest="episodes_command", metavar="SUBCOMMAND")
    ep.set_defaults(func=lambda a: (ep.print_help(), 2)[1])
    p = esub.add_parser("build", help="build episodes.parquet, labels.parquet, arrays and "
                        "summary.json", description="Build the episode tables from a trace "
                        "with Polars or Spark (by default chosen by the table's size: "
                        "Polars while it fits in half the free memory); both give identical "
                        "tables.",
                        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_trace_option(p)
    p.add_argument("--eviction-age", required=True, type=OPTIONS["eviction_age"].type,
                   metavar="SECONDS",
                   help="assumed eviction age in seconds (> 0)")
    p.add_argument("--target-write-rate", type=OPTIONS["target_write_rate_mbps"].type,
                   default=DEFAULTS.target_write_rate_mbps,
                   metavar="MBPS", help="flash write rate budget in MB/s (10^6 B) at full-node "
                   f"scale (default {DEFAULTS.target_write_rate_mbps})")
    p.add_argument("--engine", choices=ENGINES, default="auto",
                   help="auto (default: polars while accesses x 500 B fit in half the "
                   "available memory, else spark), spark (local[*] unless --master) or "
                   "polars (one process, fast on one machine)")
    p.add_argument("--master", default=None, metavar="URL",
                   help="Spark master URL (default local[*]); sc://HOST:PORT for Spark Connect")
    p.add_argument("--accesses-per-episode", type=Number(int, 1, unit="accesses"),
                   default=DEFAULT_ACCESSES_PER_EPISODE, metavar="N",
                   help="OPT labels on the first N accesses of each episode (the paper's K; "
                   f"default {DEFAULT_ACCESSES_PER_EPISODE} as in the paper; the artifact uses "
                   "15)")
    p.add_argument("--time", choices=("seconds", "logical"), default="seconds",
                   help="split episodes on gaps in trace seconds (default) or in logical time "
                   "(GET count; eviction age x GETs / duration), as the artifact does")
    p.add_argument("--when-epsilon-ms", type=Number(float, 0.0, 1e9, unit="ms"),
                   default=WHEN_EPSILON_S * 1000.0,
                   metavar="MS", help=f"ML-When label: net prefetch benefit > this (default "
                   f"{WHEN_EPSILON_S * 1000.0:g} ms)")
    p.add_argument("--chunks", type=Number(int, 1, 1_000_000, unit="buckets"), default=None,
                   metavar="N",
                   help="polars: process keys in N buckets to bound memory (default: one per "
                   "20M GETs)")
    p.add_argument("--simulate", action="store_true",
                   help="also run the simulator with OPT admission + OPT-Range prefetch and "
                   "report measured write rate and eviction age in summary.json")
    p.add_argument("--cache-gb", type=OPTIONS["cache_gb"].type, default=None, metavar="GB",
                   help=f"--simulate: cache size at full-node scale (default "
                   f"{DEFAULTS.cache_gb})")
    p.add_argument("--warmup-s", type=Number(float, 0.0, 1e9, unit="s"), default=0.0,
                   metavar="S",
                   help="--simulate: warm-up excluded from DT statistics (default 0)")
    p.add_argument("--no-plot", action="store_true", help="do not write curve.png")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("-o", "--out", required=True, type=Path, metavar="DIR",
                   help="output directory (replaced atomically)")
    p.set_defaults(func=cmd_build)
