"""`flashml episodes build`: episodes, OPT, OPT-Range and labels (Spark, or Polars)."""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

from flashml.commands.trace import TRACE_OPTIONS
from flashml.files import check_outputs, dumps
from flashml.settings import OPTIONS, Number, Option, add_options, option_table, option_values
from flashml.systems.baleen.episodes.constants import (
    DEFAULT_ACCESSES_PER_EPISODE,
    ENGINES,
    TIME_MODES,
    WHEN_EPSILON_S,
)

#: `episodes build`'s options; each default is the episode job's (EpisodeParams' defaults,
#: flashml/systems/baleen/episodes/constants.py) or the run settings' (flashml.settings).
BUILD_OPTIONS = option_table(
    *TRACE_OPTIONS.values(),
    Option("eviction_age", "--eviction-age", OPTIONS["eviction_age"].type, None,
           "assumed eviction age in seconds", metavar="SECONDS", required=True),
    Option("target_write_rate", "--target-write-rate", OPTIONS["target_write_rate_mbps"].type,
           OPTIONS["target_write_rate_mbps"].default, "flash write rate budget in MB/s (10^6 "
           "B) at full-node scale", metavar="MBPS"),
    Option("engine", "--engine", str, OPTIONS["engine"].default, "auto (spark with --master; "
           "else rust while 0.6 GB + accesses x 50 B fit in half the available memory, polars "
           "while accesses x 500 B do, else spark), spark (local[*] unless --master), polars "
           "(one process, chunked by key) or rust (one process, in key buckets, the fastest)",
           choices=ENGINES),
    Option("master", "--master", str, None, "Spark master URL (default local[*]); "
           "sc://HOST:PORT for Spark Connect", metavar="URL"),
    Option("accesses_per_episode", "--accesses-per-episode", Number(int, 1, unit="accesses"),
           DEFAULT_ACCESSES_PER_EPISODE, "OPT labels on the first N accesses of each episode "
           "(the paper's K, as the default; the artifact uses 15)", metavar="N"),
    Option("time", "--time", str, TIME_MODES[0], "split episodes on gaps in trace seconds or "
           "in logical time (GET count; eviction age x GETs / duration), as the artifact does",
           choices=TIME_MODES),
    Option("when_epsilon_ms", "--when-epsilon-ms", Number(float, 0.0, 1e9, unit="ms"),
           WHEN_EPSILON_S * 1000.0, "ML-When label: net prefetch benefit > this, in ms",
           metavar="MS"),
    Option("chunks", "--chunks", Number(int, 1, 1_000_000, unit="buckets"), None, "polars: "
           "process keys in N buckets to bound memory (default: one per 20M GETs)",
           metavar="N"),
    Option("simulate", "--simulate", bool, False, "also run the simulator with OPT admission "
           "+ OPT-Range prefetch and report measured write rate and eviction age in "
           "summary.json"),
    Option("cache_gb", "--cache-gb", OPTIONS["cache_gb"].type, OPTIONS["cache_gb"].default,
           "--simulate: cache size at full-node scale", metavar="GB"),
    Option("warmup_s", "--warmup-s", Number(float, 0.0, 1e9, unit="s"), 0.0, "--simulate: "
           "warm-up excluded from DT statistics, in seconds", metavar="S"),
    Option("no_plot", "--no-plot", bool, False, "do not write curve.png"),
    Option("json", "--json", bool, False, "print the summary as JSON"),
    Option("out", "--out", Path, None, "output directory (replaced atomically)",
           metavar="DIR", required=True, aliases=("-o",)),
)


def cmd_build(args: argparse.Namespace) -> int:
    from flashml.systems.baleen.episodes.core import EpisodeParams, build
    from flashml.trace.ingest import canonical_path

    v = option_values(BUILD_OPTIONS, args)
    out, trace = v["out"], v["trace"]
    check_outputs({"-o": out}, {"--trace": trace}, folders=("-o",))
    params = EpisodeParams(
        eviction_age_s=v["eviction_age"],
        target_write_rate_mbps=v["target_write_rate"],
        accesses_per_episode=v["accesses_per_episode"],
        time_mode=v["time"],
        when_epsilon_s=v["when_epsilon_ms"] / 1000.0,
    )
    params.validate()  # before a raw trace is ingested
    t0 = time.perf_counter()
    # A raw trace is ingested first, beside the output (its folder is removed afterwards).
    with canonical_path(trace, v["format"], sample_ratio=v["sample_ratio"],
                        workdir=out.resolve().parent, progress=False) as (table, ingested):
        res = build(table, out, params, engine=v["engine"], master=v["master"],
                    chunks=v["chunks"], simulate=v["simulate"], cache_gb=v["cache_gb"],
                    warmup_s=v["warmup_s"], plot=not v["no_plot"],
                    sample_ratio=v["sample_ratio"], source=trace,
                    timings={"ingest_s": time.perf_counter() - t0} if ingested else None)
    s = res.summary
    if v["json"]:
        print(dumps({k: v for k, v in s.items() if k != "curve"}, indent=None))
        return 0
    cutoff = "none" if s["cutoff_score"] is None else f"{s['cutoff_score']:.6g} s/segment"
    print(f"{out}: {s['episodes']} episodes from {s['gets']} GETs ({s['engine']}, "
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
    add_options(p, options=BUILD_OPTIONS)
    p.set_defaults(func=cmd_build)
