"""`flashml sim ...`: run the trace-driven simulator (flash-cache mode and object-cache mode)."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
from typing import Any

from flashml import knobs
from flashml.commands.argtypes import SEED, Number, hours_of_day, unit_fraction
from flashml.commands.trace import TRACE_OPTIONS
from flashml.config import DEFAULTS, UNITS
from flashml.errors import UserError
from flashml.files import atomic_path, check_outputs, dumps, jsonable
from flashml.settings import OPTIONS, Option, add_options, option_table, option_values
from flashml.systems.mat.settings import KNOBS as MAT_KNOBS
from flashml.systems.mlcache.settings import KNOBS as MLCACHE_KNOBS
from flashml.systems.mlcache.settings import PAGE_BYTES
from flashml.trace.formats import OBJECT_FORMATS

#: MAT's knobs offered as `--mat-*` options of `sim run` (unset: the policy's, else declared).
MAT_OPTIONS = tuple(MAT_KNOBS.knobs)

#: `--admission` choices: flashml.simulation.ADMISSIONS (declared in sim/src/core/config.rs),
#: restated so that `--help` needs no simulator import; tests/kernel/test_sim_flash.py checks it.
ADMISSION_CHOICES = ("admitall", "coinflip", "rejectx", "rejectx_block", "opt", "threshold")

#: `sim run`'s options besides MAT's knobs. An option named as a simulator config key
#: (flashml.simulation.SimConfig, declared in sim/src/core/config.rs) has that key's default
#: and choices, restated so that `--help` needs no simulator import
#: (tests/kernel/test_sim_cli.py checks they agree); None: the key's default applies, or the
#: policy's.
RUN_OPTIONS = option_table(
    *TRACE_OPTIONS.values(),
    Option("cache_gb", "--cache-gb", OPTIONS["cache_gb"].type, DEFAULTS.cache_gb,
           "cache size at full-node scale, GB of 2^30 bytes; scaled by the sample ratio",
           metavar="GB"),
    Option("capacity_segments", "--capacity-segments", Number(int, 1, unit="segments"), None,
           "cache capacity in segments at trace scale (overrides --cache-gb)", metavar="N"),
    Option("eviction", "--eviction", str, "lru", "eviction policy", choices=("lru", "fifo")),
    Option("mat", "--mat", str, None, "evict by MAT at the tail of the block LRU (learned "
           "eviction; needs --eviction lru and block recency): none (exactly LRU), oracle "
           "(each block's next GET) or a compiled policy folder/.so with an eviction model; "
           "with --policy DIR, the bundle's admission + prefetch beside it (Baleen + MAT); "
           "adds mat_decisions, predictions_per_eviction, ns_per_eviction",
           metavar="PREDICTOR"),
    Option("no_block_recency", "--no-block-recency", bool, False, "refresh only the accessed "
           "segments, not every cached segment of the block (block-level recency is on by "
           "default, as in the artifact)"),
    Option("admission", "--admission", str, "admitall", "admission policy: rejectx is the "
           "artifact's (history of (block, segment) keys, asked per missed segment), "
           "rejectx_block keys the history by block and asks once per miss",
           choices=ADMISSION_CHOICES),
    Option("coinflip_p", "--coinflip-p", unit_fraction, 0.5, "coinflip: admit probability",
           metavar="P"),
    Option("coinflip_seed", "--coinflip-seed", SEED, 0, "coinflip: hash seed"),
    Option("rejectx_x", "--rejectx-x", Number(int, 1, 2**32 - 1, unit="accesses"), 1,
           "rejectx: admit once a key was seen X times before", metavar="X"),
    Option("rejectx_factor", "--rejectx-factor", Number(float, 1e-6, 1e4, unit="x capacity"),
           2.0, "rejectx: history of F x capacity-in-segments keys (the artifact's 2)",
           metavar="F"),
    Option("policy", "--policy", Path, None, "a compiled policy (`flashml compile -o DIR` "
           "folder, or its policy.so): admission and prefetch come from the .so, called on "
           "each miss with the features computed online; --admission/--prefetch/"
           "--prefetch-when are ignored, --threshold/--when-threshold default to the policy's "
           "own", metavar="DIR"),
    Option("threshold", "--threshold", unit_fraction, None, "threshold: admit iff score >= "
           "this (default 0.5, or the policy's with --policy)"),
    Option("peak_hours", "--peak-hours", hours_of_day, (), "threshold: comma-separated hours "
           "of the day (UTC) in which the threshold is --peak-bonus lower (peak-aware "
           "admission)"),
    Option("peak_bonus", "--peak-bonus", unit_fraction, 0.0, "threshold: how much lower the "
           "threshold is in --peak-hours"),
    Option("prefetch", "--prefetch", str, "none", "prefetch on a miss: nothing, the whole "
           "block, or the per-access range prefetch_start..prefetch_end",
           choices=("none", "block", "range")),
    Option("prefetch_when", "--prefetch-when", str, "miss", "when to prefetch: every miss, "
           "partial hits only, or when when_score >= --when-threshold",
           choices=("miss", "partial", "score")),
    Option("when_threshold", "--when-threshold", unit_fraction, None, "prefetch-when score "
           "threshold (default 0.5, or the policy's with --policy)"),
    Option("arrays", "--arrays", Path, None, "Parquet file of per-access policy arrays (see "
           "below)", metavar="FILE"),
    Option("segment_bytes", "--segment-bytes",
           Number(int, 512, UNITS.block_bytes, unit="bytes"), UNITS.segment_bytes,
           "segment size"),
    Option("disks", "--disks", Number(int, 1, 1_000_000, unit="disks"), DEFAULTS.disks,
           "HDDs per node for DT utilisation"),
    Option("window_s", "--window-s", Number(float, 1e-3, 1e9, unit="s"), DEFAULTS.window_s,
           "DT window length in seconds"),
    Option("warmup_s", "--warmup-s", Number(float, 0.0, 1e9, unit="s"), DEFAULTS.warmup_s,
           "warm-up excluded from the DT statistics, in seconds"),
    Option("series_out", "--series-out", Path, None, "also write the per-window series (time, "
           "dt_util, write_rate_mbps, warmup) to FILE (.parquet, or .csv)", metavar="FILE"),
    Option("json", "--json", bool, False, "print the metrics as one JSON object"),
    Option("unverified", "--unverified", bool, False, "load a policy .so that no manifest "
           "vouches for (a bare .so, or a folder without manifest.json): still read once and "
           "mapped from a sealed copy, but its bytes are checked against nothing; a WARNING "
           "is logged and the output says unverified with the .so's sha256"),
)

#: `sim objects`'s options.
OBJECTS_OPTIONS = option_table(
    replace(TRACE_OPTIONS["trace"], help="request trace"),
    Option("format", "--format", str, "cloudphysics", "cloudphysics CSV (key = lbn), "
           "objects-csv (time,key,size) or Parquet with key, size columns",
           choices=OBJECT_FORMATS),
    Option("policy", "--policy", str, "lru", "eviction policy",
           choices=("lru", "fifo", "belady")),
    Option("capacity", "--capacity", str, None, "cache capacity: bytes with a unit (4MiB, "
           "16MB, 1GiB, 1048576) or an object count (5000obj)", required=True),
    Option("json", "--json", bool, False, "print miss_ratio, requests, hits, ... as one JSON "
           "object"),
)


def _print_metrics(metrics: dict[str, Any], as_json: bool) -> None:
    metrics = jsonable(metrics)  # NaN (e.g. no eviction happened) becomes null
    if as_json:
        print(dumps(metrics, indent=None))
        return
    width = max(len(k) for k in metrics)
    for k, v in metrics.items():
        if isinstance(v, float):
            v = f"{v:.6g}"
        print(f"{k:<{width}}  {v}")


#: The simulator's names in its configuration errors -> the options that set them.
_CONFIG_OPTIONS = (("segment_bytes", "--segment-bytes"), ("cache size", "--cache-gb"),
                   ("cache of", "--cache-gb"), ("cache capacity", "--cache-gb"),
                   ("window_s", "--window-s"), ("warmup_s", "--warmup-s"),
                   ("sample_ratio", "--sample-ratio"), ("disks", "--disks"),
                   ("coinflip p", "--coinflip-p"), ("rejectx history", "--rejectx-factor"),
                   ("admission threshold", "--threshold"),
                   ("prefetch-when threshold", "--when-threshold"),
                   ("peak bonus", "--peak-bonus"), ("peak hours", "--peak-hours"))


def _with_options(message: str) -> str:
    """A simulator configuration error, led by the options it is about."""
    flags = dict.fromkeys(f for name, f in _CONFIG_OPTIONS if name in message)
    return f"{'/'.join(flags)}: {message}" if flags else message


def _policy_arrays(v: dict[str, Any], df: Any, n: int) -> dict[str, Any]:
    """Per-access arrays the chosen policies need: from --arrays FILE, else the trace table."""
    import polars as pl

    need: dict[str, str] = {}
    if v["admission"] == "opt":
        need["admit"] = "--admission opt"
    if v["admission"] == "threshold":
        need["score"] = "--admission threshold"
    if v["prefetch"] == "range":
        need["prefetch_start"] = need["prefetch_end"] = "--prefetch range"
    if v["prefetch"] != "none" and v["prefetch_when"] == "score":
        need["when_score"] = "--prefetch-when score"
    if not need:
        return {}
    source, where = df, f"the trace {v['trace']}"
    if v["arrays"] is not None:
        path = Path(v["arrays"])
        if not path.exists():
            raise UserError(f"{path}: no such file")
        try:
            source = pl.read_parquet(path)
        except Exception as e:  # polars raises several error types for bad Parquet
            raise UserError(f"{path}: not a readable Parquet file ({e})") from None
        where = str(path)
        if source.height != n:
            raise UserError(f"{path}: has {source.height} rows but the trace has {n} accesses;"
                            " --arrays needs one row per access, in trace order")
    out = {}
    for name, option in need.items():
        if name not in source.columns:
            raise UserError(f"{where}: field '{name}': missing column; {option} needs a "
                            f"per-access '{name}' column (give it with --arrays FILE.parquet)")
        out[name] = source[name]
    return out


def cmd_run(args: argparse.Namespace) -> int:
    from flashml.simulation import SimConfig, capacity_segments, simulate
    from flashml.trace.ingest import load_trace

    v = {**option_values(RUN_OPTIONS, args),
         **{f"mat_{name}": getattr(args, f"mat_{name}") for name in MAT_OPTIONS}}
    check_outputs({"--series-out": v["series_out"]},
                  {"--trace": v["trace"], "--arrays": v["arrays"], "--policy": v["policy"],
                   "--mat": v["mat"] if v["mat"] not in (None, "none", "oracle") else None})
    df, meta = load_trace(v["trace"], v["format"], sample_ratio=v["sample_ratio"])
    cfg = SimConfig(
        cache_gb=v["cache_gb"],
        sample_ratio=meta.sample_ratio,
        capacity_segments=v["capacity_segments"] or 0,  # 0: from cache_gb
        eviction=v["eviction"],
        block_level_recency=not v["no_block_recency"],
        admission=v["admission"],
        coinflip_p=v["coinflip_p"],
        coinflip_seed=v["coinflip_seed"],
        rejectx_x=v["rejectx_x"],
        rejectx_factor=v["rejectx_factor"],
        threshold=v["threshold"] if v["threshold"] is not None else 0.5,
        peak_hours=v["peak_hours"],
        peak_bonus=v["peak_bonus"],
        prefetch=v["prefetch"],
        prefetch_when=v["prefetch_when"],
        when_threshold=v["when_threshold"] if v["when_threshold"] is not None else 0.5,
        segment_bytes=v["segment_bytes"],
        block_bytes=meta.block_bytes,
        disks=v["disks"],
        window_s=v["window_s"],
        warmup_s=v["warmup_s"],
    )
    try:
        capacity_segments(cfg)  # validates the whole config before anything else is read
    except ValueError as e:
        raise UserError(_with_options(str(e))) from None
    for name in MAT_OPTIONS:
        if v[f"mat_{name}"] is not None and v["mat"] is None:
            raise UserError(f"--mat-{name.replace('_', '-')} needs --mat")
    if v["policy"] is not None and v["mat"] is not None:
        try:  # Baleen + MAT: the bundle's admission + prefetch, MAT's eviction
            res = _run_mat(v, df, cfg, {})
        except ValueError as e:
            raise UserError(f"{v['trace']}: {e}") from None
    elif v["policy"] is not None:
        res = _run_policy(v, df, cfg)
    else:
        arrays = _policy_arrays(v, df, df.height)
        try:
            if v["mat"] is not None:
                res = _run_mat(v, df, cfg, arrays)
            else:
                res = simulate(df, cfg, **arrays)
        except ValueError as e:
            raise UserError(f"{v['trace']}: {e}") from None
    if v["series_out"] is not None:
        _write_series(res.series, Path(v["series_out"]))
    metrics = dict(res.metrics)
    if res.info.get("unverified"):  # loud in the output too (the loader logged a WARNING)
        metrics.update(unverified=True, policy_sha256=res.info["policy_sha256"])
    _print_metrics(metrics, v["json"])
    return 0


def _run_mat(v: dict[str, Any], df: Any, cfg: Any, arrays: dict[str, Any]) -> Any:
    """--mat PREDICTOR: MAT evicts at the tail of the block LRU (simulate_mat_flash); with
    --policy DIR the bundle's admission + prefetch beside it (Baleen + MAT)."""
    from flashml.systems.mat.simulation import simulate_mat_flash

    pred: Any = v["mat"]
    if pred not in ("none", "oracle"):
        pred = Path(pred)
        if not pred.exists():
            raise UserError(f"{pred}: no such eviction policy (a `flashml compile -o DIR` "
                            "folder of a bundle with an eviction model, or its .so)")
    knobs = {name: v[f"mat_{name}"] for name in MAT_OPTIONS
             if v[f"mat_{name}"] is not None}
    baleen: dict[str, Any] = {}
    if v["policy"] is not None:
        if not Path(v["policy"]).exists():
            raise UserError(f"{v['policy']}: no such policy (a `flashml compile -o DIR` folder "
                            "or a .so)")
        baleen = {"policy": Path(v["policy"]), "threshold": v["threshold"],
                  "when_threshold": v["when_threshold"]}
    return simulate_mat_flash(df, cfg, **arrays, predictor=pred, mat=knobs,
                              unverified=v["unverified"], **baleen)


def _run_policy(v: dict[str, Any], df: Any, cfg: Any) -> Any:
    """--policy DIR: the compiled policy .so decides admission and prefetch on each miss."""
    from flashml.simulation import simulate_policy

    path = Path(v["policy"])
    if not path.exists():
        raise UserError(f"{path}: no such policy (a `flashml compile -o DIR` folder or a .so)")
    try:
        return simulate_policy(df, path, cfg, threshold=v["threshold"],
                               when_threshold=v["when_threshold"], unverified=v["unverified"])
    except ValueError as e:
        raise UserError(f"{v['trace']}: {e}") from None


def _write_series(series: dict[str, Any], path: Path) -> None:
    import polars as pl

    df = pl.DataFrame({k: series[k] for k in ("time", "dt_util", "write_rate_mbps", "warmup")})
    with atomic_path(path) as tmp:
        if path.suffix.lower() == ".csv":
            df.write_csv(tmp)
        else:
            df.write_parquet(tmp)


def cmd_objects(args: argparse.Namespace) -> int:
    from flashml.simulation import parse_capacity, simulate_objects
    from flashml.trace.objects import read_objects

    v = option_values(OBJECTS_OPTIONS, args)
    try:
        capacity, unit = parse_capacity(v["capacity"])
    except ValueError as e:
        raise UserError(f"--capacity: {e}") from None
    df = read_objects(v["trace"], v["format"])
    if df.height == 0:
        raise UserError(f"{v['trace']}: no requests")
    try:
        r = simulate_objects(df["key"], df["size"], capacity, v["policy"], unit)
    except ValueError as e:
        raise UserError(f"{v['trace']}: {e}") from None
    out = {"miss_ratio": r["miss_ratio"], "byte_miss_ratio": r["byte_miss_ratio"],
           "requests": r["requests"], "hits": r["hits"], "policy": v["policy"],
           "capacity": capacity, "capacity_unit": unit, "wall_s": r["wall_s"]}
    _print_metrics(out, v["json"])
    return 0


# --- partitioned page cache across streams (MLCache) --------------------------------

def _policy_list(text: str) -> tuple[str, ...]:
    """`all` (every policy that needs only the trace) or a comma-separated list."""
    from flashml.systems.mlcache.partitioning import POLICIES, TRACE_POLICIES

    if text.strip().lower() == "all":
        return TRACE_POLICIES
    names = tuple(p.strip().lower() for p in text.split(",") if p.strip())
    bad = [p for p in names if p not in POLICIES]
    if bad or not names or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(
            f"expected 'all' or distinct names from {', '.join(POLICIES)}, got {text!r}")
    return names


def _load_shares(path: Path, n_streams: int) -> Any:
    import numpy as np

    if not path.is_file():
        raise UserError(f"{path}: no such file (--shares: a .npy array (intervals, streams))")
    try:
        a = np.load(path, allow_pickle=False)
    except Exception as e:  # numpy raises several error types for a bad file
        raise UserError(f"{path}: not a readable .npy array ({e})") from None
    if a.ndim != 2 or a.shape[1] != n_streams or a.shape[0] == 0:
        raise UserError(f"{path}: shares of shape {a.shape}; expected (intervals, {n_streams}):"
                        " one row per interval, one column per stream")
    if not np.issubdtype(a.dtype, np.number):
        raise UserError(f"{path}: shares of dtype {a.dtype}; expected numbers")
    return a.astype(np.float64)


#: `sim partition`'s options.
PARTITION_OPTIONS = option_table(
    *TRACE_OPTIONS.values(),
    Option("streams", "--streams", str, "namespace", "the column whose values are the "
           "streams: namespace, user, or a src_* column of the format such as src_hostname",
           metavar="COLUMN"),
    MLCACHE_KNOBS["capacity"].option(help="cache capacity in pages", metavar="PAGES",
                                     required=True),
    MLCACHE_KNOBS["interval"].option(help="requests (of those the cache sees) between "
                                     "re-divisions", required=True),
    Option("policy", "--policy", _policy_list, "all", "all (shared, even, static_optimal, "
           "discrete_optimal) or a comma-separated list of those and mlcache",
           metavar="NAMES"),
    Option("steps", "--steps", Number(int, 1, 1000, unit="steps"), None, "equal "
           "steps of the capacity for the optima's search (unset: the partition contract's, "
           "the paper's t)", metavar="T"),
    MLCACHE_KNOBS["page_bytes"].option(default=PAGE_BYTES, help="page size (the paper's)",
                                       metavar="BYTES"),
    Option("writes_only", "--writes-only", bool, False, "cache writes only; reads go around "
           "the cache (the paper's setting)"),
    Option("objective", "--objective", str, "hits", "what the optima maximise",
           choices=("hits", "write_hits")),
    Option("shares", "--shares", Path, None, "mlcache: a .npy array (intervals, streams) of "
           "capacity shares", metavar="FILE"),
    Option("bundle", "--bundle", Path, None, "mlcache: a compiled policy with the partition "
           "capability (flashml mlcache run's compiled/): its network divides the cache every "
           "interval", metavar="DIR"),
    Option("json", "--json", bool, False, "print the results as one JSON object"),
    RUN_OPTIONS["unverified"],
)


def _bundle_shares(v: dict[str, Any], trace: Any) -> tuple[Any, dict[str, Any]]:
    """The mlcache policy's shares from a compiled network (flashml_partition), computed at
    the end of each interval for the next, as the runtime would; with what the output says
    of an unverified .so."""
    from flashml.compiler.loader import load_policy
    from flashml.features.partition import contract
    from flashml.systems.mlcache.model import schedule, trace_features

    if v["steps"] != contract().steps:
        raise UserError(f"--steps {v['steps']}: the partition network's features have "
                        f"{contract().steps} steps (features/partition.toml)")
    if trace.n_streams > contract().max_streams:
        raise UserError(f"{v['trace']}: field '{v['streams']}': {trace.n_streams} streams; the "
                        f"partition network has {contract().max_streams} slots")
    lib = load_policy(v["bundle"], need="partition", unverified=v["unverified"])
    unverified = {"unverified": True, "policy_sha256": lib.sha256} if lib.unverified else {}
    x, _ = trace_features(trace, v["capacity"], v["interval"], writes_only=v["writes_only"])
    return schedule(lib.partition(x, trace.n_streams)[0], trace.n_streams), unverified


def cmd_partition(args: argparse.Namespace) -> int:
    from flashml.features.partition import contract
    from flashml.systems.mlcache.partitioning import compare, page_requests
    from flashml.trace.ingest import load_trace

    v = option_values(PARTITION_OPTIONS, args)
    if v["steps"] is None:
        from flashml.features.partition import contract

        v["steps"] = contract().steps
    if "mlcache" in v["policy"] and (v["shares"] is None) == (v["bundle"] is None):
        raise UserError("--policy mlcache needs one of --bundle DIR (a compiled policy with "
                        "the partition capability: flashml mlcache run's compiled/) and "
                        "--shares FILE.npy")
    if (v["shares"] is not None or v["bundle"] is not None) and "mlcache" not in v["policy"]:
        raise UserError("--shares and --bundle are only for --policy mlcache")
    df, meta = load_trace(v["trace"], v["format"], sample_ratio=v["sample_ratio"])
    try:
        trace = page_requests(df, v["streams"], v["page_bytes"], meta.block_bytes)
    except ValueError as e:
        raise UserError(f"{v['trace']}: {e}") from None
    if v["writes_only"] and not trace.writes.any():
        raise UserError(f"{v['trace']}: field 'op': no writes, and --writes-only caches writes "
                        "only")
    shares = None if v["shares"] is None else _load_shares(v["shares"], trace.n_streams)
    unverified: dict[str, Any] = {}
    if v["bundle"] is not None:
        shares, unverified = _bundle_shares(v, trace)
    try:
        res = compare(trace, v["capacity"], v["interval"], v["policy"], steps=v["steps"],
                      writes_only=v["writes_only"], objective=v["objective"], shares=shares)
    except ValueError as e:
        raise UserError(f"{v['trace']}: {e}") from None
    out = {
        "trace": str(v["trace"]), "stream_column": v["streams"],
        "streams": list(trace.names), "requests": len(trace),
        "writes": int(trace.writes.sum()), "capacity_pages": v["capacity"],
        "interval": v["interval"], "steps": v["steps"], "page_bytes": v["page_bytes"],
        "writes_only": v["writes_only"], "objective": v["objective"], "policies": res,
        **unverified,
    }
    if v["json"]:
        print(dumps(jsonable(out), indent=None))
        return 0
    print(f"{v['trace']}: {len(trace)} page requests ({out['writes']} writes) in "
          f"{trace.n_streams} streams of '{v['streams']}'; {v['capacity']} pages, intervals of "
          f"{v['interval']} requests")
    print(f"{'policy':<17} {'hit_ratio':>9} {'write_hit':>9} {'read_hit':>9}  mean shares")
    for name, r in res.items():
        shares_txt = ("-" if r["mean_shares"] is None else
                      " ".join(f"{x:.2f}" for x in r["mean_shares"]))
        print(f"{name:<17} {r['hit_ratio']:>9.4f} {r['write_hit_ratio']:>9.4f} "
              f"{r['read_hit_ratio']:>9.4f}  {shares_txt}")
    return 0


PARTITION_EPILOG = """\
A cache of --capacity pages shared by the streams (the values of --streams) is split into one
LRU partition per stream, re-divided every --interval requests; a partition that shrinks
evicts its LRU pages. Every access becomes one request per --page-bytes page it covers; a
write is a PUT op. Policies: shared (one LRU, no partitions), even, static_optimal (the best
fixed split for the whole trace), discrete_optimal (the best split of each interval, in
hindsight: the paper's ideal model), mlcache (shares per interval from a compiled network,
--bundle, or from --shares). The optima
search --steps equal steps of the capacity over exact per-stream LRU stack distances.

example:
  flashml trace mix --streams 4 --requests 200000 -o mix4.parquet
  flashml sim partition --trace mix4.parquet --streams namespace --capacity 260 \\
      --interval 5000 --json
  flashml mlcache run --streams 4 --out runs/mlc4
  flashml sim partition --trace mix4.parquet --capacity 260 --interval 5000 --writes-only \\
      --policy even,discrete_optimal,mlcache --bundle runs/mlc4/compiled
"""


RUN_EPILOG = """\
per-access arrays (from --arrays FILE.parquet, one row per access in trace order, or from
columns of the trace table itself):
  admit            --admission opt: admit flags (non-zero = admit)
  score            --admission threshold: admit iff score >= --threshold
  prefetch_start   --prefetch range: first segment to prefetch (inclusive)
  prefetch_end     --prefetch range: last segment to prefetch (inclusive)
  when_score       --prefetch-when score: prefetch iff when_score >= --when-threshold

metrics (--json prints them as one JSON object; NaN -> null; docs/reference/simulator.md maps
each to BCacheSim's name):
  peak/mean/p50/p90/p99_dt_util (GET disk time, the artifact's PeakServiceTimeUtil1 ...),
  the same _with_puts, flash_write_rate_mbps (10^6 B/s), flash_write_rate_mibps (2^20 B/s,
  the artifact's FlashWriteRate), dwpd, io_hit_ratio, byte_hit_ratio, segment_hit_ratio,
  service_time_saved_ratio, iops_saved_ratio, avg_eviction_age_s, backend_ios,
  backend_bytes, admitted_segments, prefetched_segments, accesses, wall_s

example:
  flashml sim run --trace region1.parquet --admission rejectx --cache-gb 366.475 --json
"""


def register(sub: argparse._SubParsersAction) -> None:
    sim = sub.add_parser("sim", help="simulate a flash cache (or an object cache) over a trace",
                         description="Trace-driven simulation: flash-cache mode (Baleen's model:"
                         " segments, disk-head time, admission and prefetch policies) and "
                         "object-cache mode (libCacheSim's model).")
    ssub = sim.add_subparsers(dest="sim_command", metavar="SUBCOMMAND")
    sim.set_defaults(func=lambda a: (sim.print_help(), 2)[1])

    p = ssub.add_parser(
        "run", help="flash-cache mode: peak DT, write rate, hit ratios of one policy",
        description="Simulate a flash cache in front of HDDs (Baleen's model) over a canonical "
        "access table (or a raw trace, ingested on the fly) and print the metrics.",
        epilog=RUN_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    names = tuple(RUN_OPTIONS)
    mat = names.index("mat") + 1  # MAT's knobs follow --mat
    add_options(p, *names[:mat], options=RUN_OPTIONS)
    knobs.add_options(p, MAT_KNOBS, MAT_OPTIONS, prefix="mat-",
                      defaults=dict.fromkeys(MAT_OPTIONS),
                      shown={k.name: f"the policy's, else {knobs.show_value(k.default)}"
                             for k in MAT_KNOBS})
    add_options(p, *names[mat:], options=RUN_OPTIONS)
    p.set_defaults(func=cmd_run)

    p = ssub.add_parser(
        "objects", help="object-cache mode (libCacheSim's model): miss ratio of LRU/FIFO",
        description="Simulate an object cache over whole-object requests (key, size) and "
        "print the miss ratio. Capacity in bytes (4MiB, 16MB, 1048576) or objects (5000obj).")
    add_options(p, options=OBJECTS_OPTIONS)
    p.set_defaults(func=cmd_objects)

    p = ssub.add_parser(
        "partition", help="partitioned page cache across streams (MLCache): hit ratios of "
        "shared, even, static_optimal, discrete_optimal",
        description="Simulate a page cache shared by the streams of a trace, partitioned per "
        "stream (MLCache), and print the hit, write-hit and read-hit ratios of each "
        "policy.", epilog=PARTITION_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_options(p, options=PARTITION_OPTIONS)
    p.set_defaults(func=cmd_partition)
