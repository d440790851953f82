"""`flashml sim ...`: run the trace-driven simulator (flash-cache mode and object-cache mode)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from flashml import knobs
from flashml.commands.argtypes import SEED, Number, hours_of_day, unit_fraction
from flashml.commands.trace import add_trace_option
from flashml.config import DEFAULTS, UNITS
from flashml.errors import UserError
from flashml.files import atomic_path, check_outputs, dumps, jsonable
from flashml.settings import OPTIONS
from flashml.systems.mat.settings import KNOBS as MAT_KNOBS
from flashml.systems.mlcache.settings import KNOBS as MLCACHE_KNOBS
from flashml.trace.formats import OBJECT_FORMATS

#: MAT's knobs offered as `--mat-*` options of `sim run` (unset: the policy's, else declared).
MAT_OPTIONS = tuple(MAT_KNOBS.knobs)

#: `--admission` choices: flashml.simulation.ADMISSIONS (declared in sim/src/core/config.rs),
#: restated so that `--help` needs no simulator import; tests/kernel/test_sim_cli.py checks it.
ADMISSION_CHOICES = ("admitall", "coinflip", "rejectx", "rejectx_block", "opt", "threshold")


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


def _policy_arrays(args: argparse.Namespace, df: Any, n: int) -> dict[str, Any]:
    """Per-access arrays the chosen policies need: from --arrays FILE, else the trace table."""
    import polars as pl

    need: dict[str, str] = {}
    if args.admission == "opt":
        need["admit"] = "--admission opt"
    if args.admission == "threshold":
        need["score"] = "--admission threshold"
    if args.prefetch == "range":
        need["prefetch_start"] = need["prefetch_end"] = "--prefetch range"
    if args.prefetch != "none" and args.prefetch_when == "score":
        need["when_score"] = "--prefetch-when score"
    if not need:
        return {}
    source, where = df, f"the trace {args.trace}"
    if args.arrays is not None:
        path = Path(args.arrays)
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

    check_outputs({"--series-out": args.series_out},
                  {"--trace": args.trace, "--arrays": args.arrays, "--policy": args.policy,
                   "--mat": args.mat if args.mat not in (None, "none", "oracle") else None})
    df, meta = load_trace(args.trace, args.format, sample_ratio=args.sample_ratio)
    cfg = SimConfig(
        cache_gb=args.cache_gb if args.cache_gb is not None else DEFAULTS.cache_gb,
        sample_ratio=meta.sample_ratio,
        capacity_segments=args.capacity_segments or 0,  # 0: from cache_gb
        eviction=args.eviction,
        block_level_recency=not args.no_block_recency,
        admission=args.admission,
        coinflip_p=args.coinflip_p,
        coinflip_seed=args.coinflip_seed,
        rejectx_x=args.rejectx_x,
        rejectx_factor=args.rejectx_factor,
        threshold=args.threshold if args.threshold is not None else 0.5,
        peak_hours=args.peak_hours,
        peak_bonus=args.peak_bonus,
        prefetch=args.prefetch,
        prefetch_when=args.prefetch_when,
        when_threshold=args.when_threshold if args.when_threshold is not None else 0.5,
        segment_bytes=args.segment_bytes,
        block_bytes=meta.block_bytes,
        disks=args.disks,
        window_s=args.window_s,
        warmup_s=args.warmup_s,
    )
    try:
        capacity_segments(cfg)  # validates the whole config before anything else is read
    except ValueError as e:
        raise UserError(_with_options(str(e))) from None
    for name in MAT_OPTIONS:
        if getattr(args, f"mat_{name}") is not None and args.mat is None:
            raise UserError(f"--mat-{name.replace('_', '-')} needs --mat")
    if args.policy is not None and args.mat is not None:
        try:  # Baleen + MAT: the bundle's admission + prefetch, MAT's eviction
            res = _run_mat(args, df, cfg, {})
        except ValueError as e:
            raise UserError(f"{args.trace}: {e}") from None
    elif args.policy is not None:
        res = _run_policy(args, df, cfg)
    else:
        arrays = _policy_arrays(args, df, df.height)
        try:
            if args.mat is not None:
                res = _run_mat(args, df, cfg, arrays)
            else:
                res = simulate(df, cfg, **arrays)
        except ValueError as e:
            raise UserError(f"{args.trace}: {e}") from None
    if args.series_out is not None:
        _write_series(res.series, Path(args.series_out))
    metrics = dict(res.metrics)
    if res.info.get("unverified"):  # loud in the output too (the loader logged a WARNING)
        metrics.update(unverified=True, policy_sha256=res.info["policy_sha256"])
    _print_metrics(metrics, args.json)
    return 0


def _add_unverified(p: argparse.ArgumentParser) -> None:
    p.add_argument("--unverified", action="store_true",
                   help="load a policy .so that no manifest vouches for (a bare .so, or a "
                   "folder without manifest.json): still read once and mapped from a sealed "
                   "copy, but its bytes are checked against nothing; a WARNING is logged and "
                   "the output says unverified with the .so's sha256")


def _run_mat(args: argparse.Namespace, df: Any, cfg: Any, arrays: dict[str, Any]) -> Any:
    """--mat PREDICTOR: MAT evicts at the tail of the block LRU (simulate_mat_flash); with
    --policy DIR the bundle's admission + prefetch beside it (Baleen + MAT)."""
    from flashml.systems.mat.simulation import simulate_mat_flash

    pred: Any = args.mat
    if pred not in ("none", "oracle"):
        pred = Path(pred)
        if not pred.exists():
            raise UserError(f"{pred}: no such eviction policy (a `flashml compile -o DIR` "
                            "folder of a bundle with an eviction model, or its .so)")
    knobs = {name: getattr(args, f"mat_{name}") for name in MAT_OPTIONS
             if getattr(args, f"mat_{name}") is not None}
    baleen: dict[str, Any] = {}
    if args.policy is not None:
        if not Path(args.policy).exists():
            raise UserError(f"{args.policy}: no such policy (a `flashml compile -o DIR` folder "
                            "or a .so)")
        baleen = {"policy": Path(args.policy), "threshold": args.threshold,
                  "when_threshold": args.when_threshold}
    return simulate_mat_flash(df, cfg, **arrays, predictor=pred, mat=knobs,
                              unverified=args.unverified, **baleen)


def _run_policy(args: argparse.Namespace, df: Any, cfg: Any) -> Any:
    """--policy DIR: the compiled policy .so decides admission and prefetch on each miss."""
    from flashml.simulation import simulate_policy

    path = Path(args.policy)
    if not path.exists():
        raise UserError(f"{path}: no such policy (a `flashml compile -o DIR` folder or a .so)")
    try:
        return simulate_policy(df, path, cfg, threshold=args.threshold,
                               when_threshold=args.when_threshold, unverified=args.unverified)
    except ValueError as e:
        raise UserError(f"{args.trace}: {e}") from None


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

    try:
        capacity, unit = parse_capacity(args.capacity)
    except ValueError as e:
        raise UserError(f"--capacity: {e}") from None
    df = read_objects(args.trace, args.format)
    if df.height == 0:
        raise UserError(f"{args.trace}: no requests")
    try:
        r = simulate_objects(df["key"], df["size"], capacity, args.policy, unit)
    except ValueError as e:
        raise UserError(f"{args.trace}: {e}") from None
    out = {"miss_ratio": r["miss_ratio"], "byte_miss_ratio": r["byte_miss_ratio"],
           "requests": r["requests"], "hits": r["hits"], "policy": args.policy,
           "capacity": capacity, "capacity_unit": unit, "wall_s": r["wall_s"]}
    _print_metrics(out, args.json)
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


def _bundle_shares(args: argparse.Namespace, trace: Any) -> Any:
    """The mlcache policy's shares from a compiled network (flashml_partition), computed at
    the end of each interval for the next, as the runtime would."""
    from flashml.compiler.loader import load_policy
    from flashml.features.partition import contract
    from flashml.systems.mlcache.model import schedule, trace_features

    if args.steps != contract().steps:
        raise UserError(f"--steps {args.steps}: the partition network's features have "
                        f"{contract().steps} steps (features/partition.toml)")
    if trace.n_streams > contract().max_streams:
        raise UserError(f"{args.trace}: field '{args.streams}': {trace.n_streams} streams; the "
                        f"partition network has {contract().max_streams} slots")
    lib = load_policy(args.bundle, need="partition", unverified=args.unverified)
    if lib.unverified:
        args.policy_unverified = {"unverified": True, "policy_sha256": lib.sha256}
    x, _ = trace_features(trace, args.capacity, args.interval, writes_only=args.writes_only)
    return schedule(lib.partition(x, trace.n_streams)[0], trace.n_streams)


def cmd_partition(args: argparse.Namespace) -> int:
    from flashml.features.partition import contract
    from flashml.systems.mlcache.partitioning import compare, page_requests
    from flashml.trace.ingest import load_trace

    if args.steps is None:
        args.steps = contract().steps
    if "mlcache" in args.policy and (args.shares is None) == (args.bundle is None):
        raise UserError("--policy mlcache needs one of --bundle DIR (a compiled policy with "
                        "the partition capability: flashml mlcache run's compiled/) and "
                        "--shares FILE.npy")
    if (args.shares is not None or args.bundle is not None) and "mlcache" not in args.policy:
        raise UserError("--shares and --bundle are only for --policy mlcache")
    df, meta = load_trace(args.trace, args.format, sample_ratio=args.sample_ratio)
    try:
        trace = page_requests(df, args.streams, args.page_bytes, meta.block_bytes)
    except ValueError as e:
        raise UserError(f"{args.trace}: {e}") from None
    if args.writes_only and not trace.writes.any():
        raise UserError(f"{args.trace}: field 'op': no writes, and --writes-only caches writes "
                        "only")
    shares = None if args.shares is None else _load_shares(args.shares, trace.n_streams)
    if args.bundle is not None:
        shares = _bundle_shares(args, trace)
    try:
        res = compare(trace, args.capacity, args.interval, args.policy, steps=args.steps,
                      writes_only=args.writes_only, objective=args.objective, shares=shares)
    except ValueError as e:
        raise UserError(f"{args.trace}: {e}") from None
    out = {
        "trace": str(args.trace), "stream_column": args.streams,
        "streams": list(trace.names), "requests": len(trace),
        "writes": int(trace.writes.sum()), "capacity_pages": args.capacity,
        "interval": args.interval, "steps": args.steps, "page_bytes": args.page_bytes,
        "writes_only": args.writes_only, "objective": args.objective, "policies": res,
        **getattr(args, "policy_unverified", {}),
    }
    if args.json:
        print(dumps(jsonable(out), indent=None))
        return 0
    print(f"{args.trace}: {len(trace)} page requests ({out['writes']} writes) in "
          f"{trace.n_streams} streams of '{args.streams}'; {args.capacity} pages, intervals of "
          f"{args.interval} requests")
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
    add_trace_option(p)
    p.add_argument("--cache-gb", type=OPTIONS["cache_gb"].type, default=None, metavar="GB",
                   help=f"cache size at full-node scale, GB of 2^30 bytes (default "
                   f"{DEFAULTS.cache_gb}); scaled by the sample ratio")
    p.add_argument("--capacity-segments", type=Number(int, 1, unit="segments"), default=None,
                   metavar="N",
                   help="cache capacity in segments at trace scale (overrides --cache-gb)")
    p.add_argument("--eviction", choices=("lru", "fifo"), default="lru",
                   help="eviction policy (default lru)")
    p.add_argument("--mat", default=None, metavar="PREDICTOR",
                   help="evict by MAT at the tail of the block LRU (learned eviction; needs "
                   "--eviction lru and block recency): none (exactly LRU), oracle (each "
                   "block's next GET) or a compiled policy folder/.so with an eviction model; "
                   "with --policy DIR, the bundle's admission + prefetch beside it (Baleen + "
                   "MAT); adds mat_decisions, predictions_per_eviction, ns_per_eviction")
    knobs.add_options(p, MAT_KNOBS, MAT_OPTIONS, prefix="mat-",
                      defaults=dict.fromkeys(MAT_OPTIONS),
                      shown={k.name: f"the policy's, else {knobs.show_value(k.default)}"
                             for k in MAT_KNOBS})
    p.add_argument("--no-block-recency", action="store_true",
                   help="refresh only the accessed segments, not every cached segment of the "
                   "block (block-level recency is on by default, as in the artifact)")
    p.add_argument("--admission", choices=ADMISSION_CHOICES, default="admitall",
                   help="admission policy (default admitall): rejectx is the artifact's "
                   "(history of (block, segment) keys, asked per missed segment), "
                   "rejectx_block keys the history by block and asks once per miss")
    p.add_argument("--coinflip-p", type=unit_fraction, default=0.5, metavar="P",
                   help="coinflip: admit probability in [0, 1] (default 0.5)")
    p.add_argument("--coinflip-seed", type=SEED, default=0, help="coinflip: hash seed")
    p.add_argument("--rejectx-x", type=Number(int, 1, 2**32 - 1, unit="accesses"), default=1,
                   metavar="X",
                   help="rejectx: admit once a key was seen X times before (default 1)")
    p.add_argument("--rejectx-factor", type=Number(float, 1e-6, 1e4, unit="x capacity"),
                   default=2.0, metavar="F",
                   help="rejectx: history of F x capacity-in-segments keys (default 2, "
                   "the artifact's)")
    p.add_argument("--policy", type=Path, default=None, metavar="DIR",
                   help="a compiled policy (`flashml compile -o DIR` folder, or its policy.so): "
                   "admission and prefetch come from the .so, called on each miss with the "
                   "features computed online; --admission/--prefetch/--prefetch-when are "
                   "ignored, --threshold/--when-threshold default to the policy's own")
    p.add_argument("--threshold", type=unit_fraction, default=None,
                   help="threshold: admit iff score >= this, in [0, 1] (default 0.5, or the "
                   "policy's with --policy)")
    p.add_argument("--peak-hours", type=hours_of_day, default=(),
                   help="threshold: comma-separated hours of the day (UTC) in which the "
                   "threshold is --peak-bonus lower (peak-aware admission; default none)")
    p.add_argument("--peak-bonus", type=unit_fraction, default=0.0,
                   help="threshold: how much lower the threshold is in --peak-hours, in [0, 1] "
                   "(default 0)")
    p.add_argument("--prefetch", choices=("none", "block", "range"), default="none",
                   help="prefetch on a miss: nothing, the whole block, or the per-access "
                   "range prefetch_start..prefetch_end (default none)")
    p.add_argument("--prefetch-when", choices=("miss", "partial", "score"), default="miss",
                   help="when to prefetch: every miss, partial hits only, or when when_score "
                   ">= --when-threshold (default miss)")
    p.add_argument("--when-threshold", type=unit_fraction, default=None,
                   help="prefetch-when score threshold in [0, 1] (default 0.5, or the "
                   "policy's with --policy)")
    p.add_argument("--arrays", type=Path, default=None, metavar="FILE",
                   help="Parquet file of per-access policy arrays (see below)")
    p.add_argument("--segment-bytes", type=Number(int, 512, UNITS.block_bytes, unit="bytes"),
                   default=UNITS.segment_bytes,
                   help=f"segment size in bytes (default {UNITS.segment_bytes})")
    p.add_argument("--disks", type=Number(int, 1, 1_000_000, unit="disks"),
                   default=DEFAULTS.disks,
                   help=f"HDDs per node for DT utilisation (default {DEFAULTS.disks})")
    p.add_argument("--window-s", type=Number(float, 1e-3, 1e9, unit="s"),
                   default=DEFAULTS.window_s,
                   help=f"DT window length in seconds (default {DEFAULTS.window_s:g})")
    p.add_argument("--warmup-s", type=Number(float, 0.0, 1e9, unit="s"),
                   default=DEFAULTS.warmup_s,
                   help=f"warm-up excluded from the DT statistics (default "
                   f"{DEFAULTS.warmup_s:g} s)")
    p.add_argument("--series-out", type=Path, default=None, metavar="FILE",
                   help="also write the per-window series (time, dt_util, write_rate_mbps, "
                   "warmup) to FILE (.parquet, or .csv)")
    p.add_argument("--json", action="store_true", help="print the metrics as one JSON object")
    _add_unverified(p)
    p.set_defaults(func=cmd_run)

    p = ssub.add_parser(
        "objects", help="object-cache mode (libCacheSim's model): miss ratio of LRU/FIFO",
        description="Simulate an object cache over whole-object requests (key, size) and "
        "print the miss ratio. Capacity in bytes (4MiB, 16MB, 1048576) or objects (5000obj).")
    p.add_argument("--trace", required=True, type=Path, metavar="FILE", help="request trace")
    p.add_argument("--format", choices=OBJECT_FORMATS, default="cloudphysics",
                   help="cloudphysics CSV (key = lbn), objects-csv (time,key,size) or "
                   "Parquet with key, size columns")
    p.add_argument("--policy", choices=("lru", "fifo", "belady"), default="lru",
                   help="eviction policy (default lru)")
    p.add_argument("--capacity", required=True,
                   help="cache capacity: bytes with a unit (4MiB, 16MB, 1GiB, 1048576) or an "
                   "object count (5000obj)")
    p.add_argument("--json", action="store_true",
                   help="print miss_ratio, requests, hits, ... as one JSON object")
    p.set_defaults(func=cmd_objects)

    p = ssub.add_parser(
        "partition", help="partitioned page cache across streams (MLCache): hit ratios of "
        "shared, even, static_optimal, discrete_optimal",
        description="Simulate a page cache shared by the streams of a trace, partitioned per "
        "stream (MLCache), and print the hit, write-hit and read-hit ratios of each "
        "policy.", epilog=PARTITION_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_trace_option(p)
    p.add_argument("--streams", default="namespace", metavar="COLUMN",
                   help="the column whose values are the streams: namespace, user, or a "
                   "src_* column of the format such as src_hostname (default namespace)")
    p.add_argument("--capacity", type=MLCACHE_KNOBS["capacity"].number, required=True,
                   metavar="PAGES", help="cache capacity in pages")
    p.add_argument("--interval", type=MLCACHE_KNOBS["interval"].number, required=True,
                   metavar="N", help="requests (of those the cache sees) between re-divisions")
    p.add_argument("--policy", type=_policy_list, default="all", metavar="NAMES",
                   help="all (shared, even, static_optimal, discrete_optimal; the default) or "
                   "a comma-separated list of those and mlcache")
    p.add_argument("--steps", type=Number(int, 1, 1000, unit="steps"), default=None,
                   metavar="T", help="equal steps of the capacity for the optima's search "
                   "(default: the partition contract's, the paper's t)")
    page = MLCACHE_KNOBS["page_bytes"].default
    knobs.add_options(p, MLCACHE_KNOBS, ("page_bytes",),
                      shown={"page_bytes": f"{page}, the paper's"})
    p.add_argument("--writes-only", action="store_true",
                   help="cache writes only; reads go around the cache (the paper's setting)")
    p.add_argument("--objective", choices=("hits", "write_hits"), default="hits",
                   help="what the optima maximise (default hits)")
    p.add_argument("--shares", type=Path, default=None, metavar="FILE",
                   help="mlcache: a .npy array (intervals, streams) of capacity shares")
    p.add_argument("--bundle", type=Path, default=None, metavar="DIR",
                   help="mlcache: a compiled policy with the partition capability (flashml "
                   "mlcache run's compiled/): its network divides the cache every interval")
    p.add_argument("--json", action="store_true", help="print the results as one JSON object")
    _add_unverified(p)
    p.set_defaults(func=cmd_partition)
