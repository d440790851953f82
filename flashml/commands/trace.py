"""`flashml trace ...`: ingest, sample, generate, stats and validate traces."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from flashml.commands.argtypes import finite_float
from flashml.config import UNITS
from flashml.errors import UserError

log = logging.getLogger("flashml.trace")
OBJECTS_CSV = "objects-csv"  # whole-object traces (flashml/trace/objects.py)


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
    p.add_argument("--sample-ratio", type=finite_float, default=None, metavar="PERCENT",
                   help="sample ratio in percent (default: the table's metadata, else the "
                   "file name full_<start>_<ratio>.trace, else 100)")


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
    p.add_argument("--sample-ratio", type=finite_float, default=None, metavar="PERCENT",
                   help="sample ratio of the trace in percent; default: the table's metadata, "
                   "else the artifact file name full_<start>_<ratio>.trace, else 100")
    p.add_argument("--block-bytes", type=int, default=UNITS.block_bytes,
                   help="block size in bytes (default 8 MiB)")
    p.add_argument("--sector-bytes", type=int, default=512,
                   help="cloudphysics: bytes per lbn sector (default 512)")
    p.add_argument("--time-scale", type=float, default=1.0,
                   help="cloudphysics/csv: multiply source times by this to get seconds")
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

    if args.format == OBJECTS_CSV:
        return _ingest_objects(args)
    res = ingest(args.trace, args.output, args.format or "tectonic",
                 sample_ratio=args.sample_ratio, chunk_bytes=args.chunk_mb * 1024 * 1024,
                 **reader_options(args))
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

    df, meta = load(args)
    out, meta2 = sample_by_key(df, meta, start=args.start, size=args.size, seed=args.seed)
    write_table(out, args.output, meta2)
    print(f"{args.output}: kept {out['key'].n_unique()} of {df['key'].n_unique()} keys, "
          f"{len(out)} of {len(df)} accesses ({100 * len(out) / max(len(df), 1):.2f}%); "
          f"sample ratio {meta.sample_ratio:g}% -> {meta2.sample_ratio:g}%")
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    from flashml.trace.blockgen import BLOCK_PRESETS

    if args.preset in BLOCK_PRESETS:
        from flashml.trace.blockgen import get_block_preset, write_block_msr

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
    from flashml.trace.multistream import generate_mix, write_mix

    if min(args.streams, args.requests, args.phases) < 1 or args.scale < 5:
        raise UserError("--streams, --requests and --phases must be >= 1, --scale >= 5")
    kinds = None
    if args.kinds:
        from flashml.trace.multistream import STREAM_KINDS

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
    p.add_argument("--chunk-mb", type=int, default=16, help="input chunk size (bounds memory)")
    p.set_defaults(func=cmd_ingest)

    p = tsub.add_parser("sample", help="sample a trace by key, recording the sample ratio",
                        description="Sample by key as Baleen's artifact does: shuffle keys, keep "
                        "those whose cumulative share of accesses falls in [start, start+size).")
    add_trace_input(p)
    p.add_argument("-o", "--out", "--output", dest="output", type=Path, required=True,
                   help="output .parquet")
    p.add_argument("--start", type=float, default=0.0, help="start percent (default 0)")
    p.add_argument("--size", type=float, required=True, help="sample size in percent")
    p.add_argument("--seed", type=int, default=0, help="shuffle seed (default 0)")
    p.set_defaults(func=cmd_sample)

    from flashml.trace.blockgen import BLOCK_PRESETS
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
    p.add_argument("--zipf", type=float, default=None,
                   help="MSR-CSV block presets: the Zipf exponent of popularity (web-like: "
                   "0.5-1, the paper's Fig. 13)")
    p.add_argument("--overwrites", type=float, default=None, metavar="R",
                   help="MSR-CSV block presets: overwrites per read, 0-1 (the paper's "
                   "Fig. 13b: 0-100%% overwrites at Zipf 0.8)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--accesses", type=int, default=None,
                   help="number of accesses (requests, for an object-trace preset) (override)")
    p.add_argument("--days", type=float, default=None, help="trace length in days (override)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("-o", "--out", "--output", dest="output", type=Path, required=True,
                   help="output trace file")
    p.set_defaults(func=cmd_generate)

    p = tsub.add_parser("mix", help="write a synthetic multi-stream page trace (MLCache)",
                        description="Write a canonical table of page requests from several "
                        "streams with distinct reuse profiles (loop, zipf, scan, shift, "
                        "hotset) and shifting intensities, interleaved by time; the stream is "
                        "the namespace column (`flashml sim partition --streams namespace`).")
    p.add_argument("--streams", type=int, default=4, help="number of streams (default 4)")
    p.add_argument("--requests", type=int, default=200_000,
                   help="page requests in all (default 200000)")
    p.add_argument("--kinds", default=None,
                   help="comma-separated kind of each stream (default: drawn by the seed)")
    p.add_argument("--phases", type=int, default=8,
                   help="intensity phases (default 8)")
    p.add_argument("--scale", type=int, default=200,
                   help="typical working set in pages (default 200)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
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
                        "Expectations suite and write its Data Docs; exit 1 on failure.")
    add_trace_input(p)
    p.add_argument("--context-dir", type=Path, default=None,
                   help="Great Expectations file context; its Data Docs go to "
                   "CONTEXT_DIR/uncommitted/data_docs/local_site/index.html (default "
                   "$FLASHML_HOME/gx, .flashml/gx)")
    p.set_defaults(func=cmd_validate)
