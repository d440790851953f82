"""`flashml trace ...`: ingest, sample, generate, stats and validate traces."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flashml.commands.argtypes import finite_float, integer
from flashml.config import UNITS
from flashml.errors import UserError
from flashml.files import refuse_overwriting_inputs

log = logging.getLogger("flashml.trace")
OBJECTS_CSV = "objects-csv"  # whole-object traces (flashml/trace/objects.py)


def _checked(check: Callable[[Any], Any], parse: Callable[[str], Any] = finite_float
             ) -> Callable[[str], Any]:
    """An argparse type: `parse` the text, then `check` the value (its UserError, which
    names the option, its range and unit, becomes the usage error)."""
    def convert(text: str) -> Any:
        value = parse(text)
        try:
            check(value)
        except UserError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        return value
    convert.__name__ = getattr(parse, "__name__", "value")
    return convert


def _num(x: float) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"


def _in_range(option: str, low: float, high: float, unit: str,
              parse: Callable[[str], Any] = finite_float) -> Callable[[str], Any]:
    """An argparse type: a number (`parse`) in [low, high] `unit`."""
    def check(v: Any) -> None:
        if not low <= v <= high:
            raise UserError(f"{option} must be {unit} in [{_num(low)}, {_num(high)}], "
                            f"got {v!r}")
    return _checked(check, parse)


def _seed(text: str) -> int:
    from flashml.trace.limits import check_seed

    return int(_checked(check_seed, integer)(text))


def _sample_ratio(text: str) -> float:
    from flashml.trace.limits import check_sample_ratio

    return float(_checked(check_sample_ratio)(text))


def _time_scale(text: str) -> float:
    from flashml.trace.readers.base import check_time_scale

    return float(_checked(check_time_scale)(text))


def _block_bytes(text: str) -> int:
    from flashml.trace.readers.base import check_block_bytes

    return int(_checked(check_block_bytes, integer)(text))


def _accesses(text: str) -> int:
    from flashml.trace.limits import check_accesses

    return int(_checked(check_accesses, integer)(text))


def _days(text: str) -> float:
    from flashml.trace.limits import check_days

    return float(_checked(check_days)(text))


def add_trace_option(p: argparse.ArgumentParser, *, required: bool = True,
                     trace_help: str = "canonical .parquet access table, or a raw trace "
                     "(see --format)", formats: tuple[str, ...] | None = None,
                     default_format: str = "tectonic") -> None:
    """`--trace FILE`, `--format`, `--sample-ratio`: the trace input of the commands that
    take other arguments too (episodes, sim, train, sweep, regress, <system> run). `formats`:
    the choices of --format (default: the block-trace readers')."""
    from flashml.trace.formats import FORMATS

    p.add_argument("--trace", required=required, default=None, type=Path, metavar="FILE",
                   help=trace_help)
    p.add_argument("--format", default=None, choices=formats or FORMATS,
                   help=f"format of a raw trace (default {default_format}; ignored for "
                   ".parquet)")
    p.add_argument("--sample-ratio", type=_sample_ratio, default=None, metavar="PERCENT",
                   help="sample ratio in percent, in [1e-6, 100]: rates are scaled by "
                   "100 / ratio (default: the table's metadata, else the file name "
                   "full_<start>_<ratio>.trace, else 100)")


def add_trace_input(p: argparse.ArgumentParser, *, with_format: bool = True,
                    extra_formats: tuple[str, ...] = (), format_help: str = "") -> None:
    """Options every command that reads a trace takes."""
    from flashml.trace.formats import FORMATS

    p.add_argument("trace", type=Path, nargs="?", default=None,
                   help="trace file: canonical .parquet, or raw text (.gz/.zst read "
                   "transparently); or --trace FILE, as in every other command")
    p.add_argument("--trace", dest="trace_opt", type=Path, default=None, metavar="FILE",
                   help="the trace (the same as the positional FILE)")
    if with_format:
        p.add_argument("--format", choices=(*FORMATS, *extra_formats), default=None,
                       help="format of a raw trace (default: tectonic; ignored for .parquet)"
                       + format_help)
    p.add_argument("--sample-ratio", type=_sample_ratio, default=None, metavar="PERCENT",
                   help="sample ratio of the trace in percent, in [1e-6, 100] (rates are "
                   "scaled by 100 / ratio); default: the table's metadata, else the artifact "
                   "file name full_<start>_<ratio>.trace, else 100")
    p.add_argument("--block-bytes", type=_block_bytes, default=UNITS.block_bytes,
                   help="block size in bytes: a multiple of the 128 KiB segment, from 128 KiB "
                   "(one segment) to 4 GiB (the largest IO), so an IO is split into at most "
                   "32769 blocks (default 8 MiB)")
    p.add_argument("--sector-bytes", type=_in_range("--sector-bytes", 1, 1 << 32,
                                                    "a number of bytes", integer), default=512,
                   help="cloudphysics: bytes per lbn sector, 1 to 2^32 (default 512)")
    p.add_argument("--time-scale", type=_time_scale, default=1.0, metavar="SECONDS",
                   help="cloudphysics/csv: seconds per source time unit (source times are "
                   "multiplied by it), in [1e-12, 1e6]: picoseconds to 11.6 days; a scaled "
                   "time must lie within 1e12 s of the epoch (default 1)")
    p.add_argument("--columns", default="",
                   help="csv: FIELD=COLUMN,... mapping (fields: time,key,offset,address,size,"
                   "op,namespace,user; by header name, or 0-based index with --no-header)")
    p.add_argument("--separator", default=",", help="csv: field separator (default ',')")
    p.add_argument("--no-header", action="store_true", help="csv: the file has no header line")
    p.add_argument("--skip-bad-lines", action="store_true",
                   help="leave out lines that do not parse or fail a check (counted in the log "
                   "and the result) instead of stopping at the first with an error")


def reader_options(args: argparse.Namespace) -> dict:
    fmt = getattr(args, "format", None) or "tectonic"
    opts: dict = {"block_bytes": args.block_bytes}
    if getattr(args, "skip_bad_lines", False):
        opts["skip_bad_lines"] = True
    if fmt == "cloudphysics":
        opts.update(sector_bytes=args.sector_bytes, time_scale=args.time_scale)
    elif fmt == "csv":
        opts.update(columns=args.columns, separator=args.separator, header=not args.no_header,
                    time_scale=args.time_scale)
    return opts


def load(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from flashml.trace.ingest import load_trace

    return load_trace(args.trace, getattr(args, "format", None),
                      sample_ratio=args.sample_ratio, **reader_options(args))


# --- handlers ---------------------------------------------------------------------------------
def cmd_ingest(args: argparse.Namespace) -> int:
    from flashml.trace.ingest import ingest

    refuse_overwriting_inputs({"-o": args.output}, {"TRACE": args.trace})
    if args.format == OBJECTS_CSV:
        return _ingest_objects(args)
    res = ingest(args.trace, args.output, args.format or "tectonic",
                 sample_ratio=args.sample_ratio, chunk_bytes=args.chunk_mb * 1024 * 1024,
                 max_expansion=args.max_expansion, **reader_options(args))
    print(f"{res.out}: {res.rows} accesses from {res.lines} lines "
          f"({res.meta.source_format}, sample ratio {res.meta.sample_ratio:g}%), "
          f"{res.dropped_zero_size} zero-size IOs dropped, "
          + (f"{res.skipped_lines} bad lines skipped, " if res.skipped_lines else "")
          + f"{res.seconds:.2f}s ({res.lines_per_s / 1e6:.2f} M lines/s)")
    return 0


def _ingest_objects(args: argparse.Namespace) -> int:
    """objects-csv -> an object table (Parquet: key, size, time), written atomically: what
    object-mode readers take as `--format parquet`. Not the canonical block table."""
    from flashml.files import atomic_path
    from flashml.trace.objects import read_objects_csv

    df = read_objects_csv(args.trace)
    out = Path(args.output)
    with atomic_path(out) as tmp:
        df.write_parquet(tmp)
    objects = df["key"].n_unique()
    print(f"{out}: {df.height} requests, {objects} objects (objects-csv -> object table "
          "key, size, time; object-mode commands read it with --format parquet)")
    return 0


def cmd_sample(args: argparse.Namespace) -> int:
    from flashml.trace.canonical import write_table
    from flashml.trace.sample import sample_by_key

    refuse_overwriting_inputs({"-o": args.output}, {"TRACE": args.trace})
    df, meta = load(args)
    out, meta2 = sample_by_key(df, meta, start=args.start, size=args.size, seed=args.seed)
    write_table(out, args.output, meta2)
    print(f"{args.output}: kept {out['key'].n_unique()} of {df['key'].n_unique()} keys, "
          f"{len(out)} of {len(df)} accesses ({100 * len(out) / max(len(df), 1):.2f}%); "
          f"sample ratio {meta.sample_ratio:g}% -> {meta2.sample_ratio:g}%")
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    from flashml.systems.pannier.blockgen import BLOCK_PRESETS

    refuse_overwriting_inputs({"-o": args.output}, {})
    if args.preset in BLOCK_PRESETS:
        from flashml.systems.pannier.blockgen import get_block_preset, write_block_msr

        if args.days is not None:
            raise UserError(f"--days: the block preset {args.preset} has a fixed span "
                            f"({BLOCK_PRESETS[args.preset].hours:g} h); set --accesses")
        p = get_block_preset(args.preset, zipf=args.zipf, overwrites=args.overwrites)
        info = write_block_msr(p, args.seed, args.output, requests=args.accesses)
        print(f"{args.output}: " + ", ".join(f"{k}={v}" for k, v in info.items()))
        return 0
    if args.zipf is not None or args.overwrites is not None:
        raise UserError("--zipf and --overwrites apply to the block presets only: "
                        + ", ".join(BLOCK_PRESETS))
    from flashml.trace.generate import generate_trace

    info = generate_trace(args.preset, args.seed, args.output, accesses=args.accesses,
                          days=args.days, progress=not args.quiet)
    print(f"{args.output}: " + ", ".join(f"{k}={v}" for k, v in info.items()))
    return 0


def cmd_mix(args: argparse.Namespace) -> int:
    from flashml.systems.mlcache.multistream import generate_mix, write_mix

    refuse_overwriting_inputs({"-o": args.output}, {})
    kinds = None
    if args.kinds:
        from flashml.systems.mlcache.multistream import STREAM_KINDS

        kinds = tuple(k.strip() for k in args.kinds.split(","))
        bad = [k for k in kinds if k not in STREAM_KINDS]
        if bad or len(kinds) != args.streams:
            raise UserError(f"--kinds: expected {args.streams} names from "
                            f"{', '.join(STREAM_KINDS)}, got {args.kinds!r}")
    df, kinds = generate_mix(args.streams, args.requests, args.seed, kinds=kinds,
                             phases=args.phases, scale=args.scale)
    write_mix(df, args.output)
    print(f"{args.output}: {df.height} page requests, streams (namespace) "
          + ", ".join(f"{i}={k}" for i, k in enumerate(kinds)))
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    from flashml.trace.stats import compute_stats, format_stats

    df, meta = load(args)
    stats = compute_stats(df, meta)
    if args.json:
        print(json.dumps(stats, indent=2, sort_keys=True))
    else:
        print(format_stats(stats))
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from flashml.trace.validate import validate_table

    refuse_overwriting_inputs({"--context-dir": args.context_dir}, {"TRACE": args.trace})
    df, meta = load(args)
    report = validate_table(df, meta, context_dir=args.context_dir, name=Path(args.trace).name)
    print(report.describe())
    if report.docs_index is not None:
        print(f"Data Docs: {report.docs_index}")
    if not report.success:
        failed = report.failures()
        print(f"validation FAILED: {len(failed)} expectation(s) failed on {args.trace}",
              file=sys.stderr)
        return 1
    print(f"validation passed: {len(report.outcomes)} expectations on {report.rows} rows")
    return 0


# --- parser -----------------------------------------------------------------------------------
def register(sub: argparse._SubParsersAction) -> None:
    from flashml.trace.limits import (
        DEFAULT_MAX_EXPANSION,
        FREE_ACCESSES,
        MAX_CHUNK_BYTES,
        MAX_MAX_EXPANSION,
    )

    trace = sub.add_parser("trace", help="ingest, sample, generate, describe and validate traces",
                           description="Ingest, sample, generate, describe and validate traces.")
    tsub = trace.add_subparsers(dest="trace_command", metavar="SUBCOMMAND", required=True)

    p = tsub.add_parser("ingest", help="raw trace -> canonical Parquet access table",
                        description="Read a raw trace (tectonic, msr, cloudphysics or csv; plain, "
                        ".gz or .zst) into the canonical access table (Parquet). An "
                        "objects-csv trace (time,key,size: the cdn-like/kv-like presets) "
                        "becomes an object table (key, size, time) for object caches instead.")
    add_trace_input(p, extra_formats=(OBJECTS_CSV,),
                    format_help="; objects-csv: whole-object requests time,key,size -> an "
                    "object table (key, size, time), not the canonical block table")
    p.add_argument("-o", "--out", "--output", dest="output", type=Path, required=True,
                   help="output .parquet")
    p.add_argument("--chunk-mb", type=_in_range("--chunk-mb", 1, MAX_CHUNK_BYTES >> 20,
                                                "a number of MiB", integer),
                   default=16, metavar="MIB",
                   help="input chunk size in MiB, 1 to 1024 (default 16); peak memory is "
                   "about ten times it, whatever the trace")
    p.add_argument("--max-expansion", type=_in_range("--max-expansion", 1, MAX_MAX_EXPANSION,
                                                     "a number of accesses per line", integer),
                   default=DEFAULT_MAX_EXPANSION, metavar="N",
                   help="refuse a trace that makes more than N accesses per input line on "
                   "average (op_count repeats; IOs split into blocks) beyond its first "
                   f"{FREE_ACCESSES:,} accesses (default {DEFAULT_MAX_EXPANSION}, at most "
                   f"{MAX_MAX_EXPANSION}). Caps checked before anything is built: op_count "
                   "<= 2^20 per line, an IO <= 4 GiB, so <= 32769 blocks; rows are built and "
                   "written 2^20 accesses at a time")
    p.set_defaults(func=cmd_ingest)

    p = tsub.add_parser("sample", help="sample a trace by key, recording the sample ratio",
                        description="Sample by key as Baleen's artifact does: shuffle keys, keep "
                        "those whose cumulative share of accesses falls in [start, start+size).")
    add_trace_input(p)
    p.add_argument("-o", "--out", "--output", dest="output", type=Path, required=True,
                   help="output .parquet")
    p.add_argument("--start", type=_in_range("--start", 0, 100, "a percentage"), default=0.0,
                   help="start percent, in [0, 100) (default 0)")
    p.add_argument("--size", type=_in_range("--size", 0, 100, "a percentage"), required=True,
                   help="sample size in percent, in (0, 100 - start]; the sample ratio "
                   "it leaves must stay >= 1e-6%%")
    p.add_argument("--seed", type=_seed, default=0,
                   help="shuffle seed, an integer in 0..2^32-1 (default 0)")
    p.set_defaults(func=cmd_sample)

    from flashml.systems.pannier.blockgen import BLOCK_PRESETS
    from flashml.trace.limits import MAX_PHASES, MAX_SCALE, MAX_STREAMS
    from flashml.trace.presets import OBJECT_PRESETS, PRESETS

    p = tsub.add_parser("generate", help="write a synthetic trace from a preset",
                        description="Write a synthetic trace from a preset: a block trace "
                        "(Tectonic text, 201910 schema) modelled on Baleen's Table 2 "
                        f"({', '.join(PRESETS)}), a whole-object trace as objects-csv "
                        f"(time,key,size; {', '.join(OBJECT_PRESETS)}) for object caches "
                        "(`flashml sim objects --format objects-csv`), or a 4 KiB block "
                        f"trace with reads and overwrites as MSR CSV ({', '.join(BLOCK_PRESETS)}"
                        "; Pannier, `flashml pannier run --format msr`). The same preset, seed "
                        "and size always give the same bytes.")
    p.add_argument("--preset", default="region1-like", metavar="NAME",
                   help="block-trace preset: " + ", ".join(PRESETS) + "; object-trace preset: "
                   + ", ".join(OBJECT_PRESETS) + "; MSR-CSV block preset: "
                   + ", ".join(BLOCK_PRESETS) + " (default region1-like)")
    p.add_argument("--zipf", type=_in_range("--zipf", 0, 2, "a Zipf exponent"), default=None,
                   help="MSR-CSV block presets: the Zipf exponent of popularity (web-like: "
                   "0.5-1, the paper's Fig. 13; 0-2)")
    p.add_argument("--overwrites", type=_in_range("--overwrites", 0, 1,
                                                      "a number of overwrites per read"),
                   default=None, metavar="R",
                   help="MSR-CSV block presets: overwrites per read, 0-1 (the paper's "
                   "Fig. 13b: 0-100%% overwrites at Zipf 0.8)")
    p.add_argument("--seed", type=_seed, default=0,
                   help="random seed, an integer in 0..2^32-1 (default 0)")
    p.add_argument("--accesses", type=_accesses, default=None,
                   help="number of accesses (requests, for an object-trace preset), 1 to "
                   "10^8: the generator holds the trace in memory (override)")
    p.add_argument("--days", type=_days, default=None,
                   help="trace length in days, up to 3650 (override)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("-o", "--out", "--output", dest="output", type=Path, required=True,
                   help="output trace file")
    p.set_defaults(func=cmd_generate)

    p = tsub.add_parser("mix", help="write a synthetic multi-stream page trace (MLCache)",
                        description="Write a canonical table of page requests from several "
                        "streams with distinct reuse profiles (loop, zipf, scan, shift, "
                        "hotset) and shifting intensities, interleaved by time; the stream is "
                        "the namespace column (`flashml sim partition --streams namespace`).")
    p.add_argument("--streams", type=_in_range("--streams", 1, MAX_STREAMS,
                                                   "a number of streams", integer),
                   default=4, help=f"number of streams, 1 to {MAX_STREAMS} (default 4)")
    p.add_argument("--requests", type=_accesses, default=200_000,
                   help="page requests in all, 1 to 10^8 (default 200000)")
    p.add_argument("--kinds", default=None,
                   help="comma-separated kind of each stream (default: drawn by the seed)")
    p.add_argument("--phases", type=_in_range("--phases", 1, MAX_PHASES,
                                                  "a number of phases", integer),
                   default=8, help=f"intensity phases, 1 to {MAX_PHASES} (default 8)")
    p.add_argument("--scale", type=_in_range("--scale", 5, MAX_SCALE,
                                                 "a number of pages", integer),
                   default=200, help=f"typical working set in pages, 5 to {MAX_SCALE} "
                   "(default 200)")
    p.add_argument("--seed", type=_seed, default=0,
                   help="random seed, an integer in 0..2^32-1 (default 0)")
    p.add_argument("-o", "--out", "--output", dest="output", type=Path, required=True,
                   help="output .parquet")
    p.set_defaults(func=cmd_mix)

    p = tsub.add_parser("stats", help="Baleen Table 2 statistics of a trace",
                        description="Print the Table 2 statistics of a trace (rates scaled to a "
                        "full node by the sample ratio).")
    add_trace_input(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_stats)

    p = tsub.add_parser("validate", help="run the Great Expectations suite; write Data Docs",
                        description="Validate a trace's canonical table with the Great "
                        "Expectations suite and write its Data Docs; exit 1 on failure. The "
                        "Data Docs go to $FLASHML_HOME/gx (default .flashml/gx), the context "
                        "`flashml pipeline run` and the retraining DAG's ingest task validate "
                        "into too: one index across runs, each validation named by its "
                        "trace, static and complete offline. `flashml ui docs` serves it.")
    add_trace_input(p)
    p.add_argument("--context-dir", type=Path, default=None,
                   help="Great Expectations file context; its Data Docs go to "
                   "CONTEXT_DIR/uncommitted/data_docs/local_site/index.html (default "
                   "$FLASHML_HOME/gx, else .flashml/gx: where the pipeline and the DAG "
                   "write theirs; give the same to `flashml ui docs --context-dir`)")
    p.set_defaults(func=cmd_validate)
