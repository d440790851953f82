"""`flashml trace ...`: ingest, sample, generate, stats and validate traces."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from flashml.commands.argtypes import SEED
from flashml.config import UNITS
from flashml.errors import UserError
from flashml.files import refuse_overwriting_inputs
from flashml.settings import Number, Option, add_options, option_table, option_values
from flashml.systems.pannier.blockgen import BLOCK_PRESETS, MAX_OVERWRITES, MAX_ZIPF
from flashml.trace.formats import FORMATS
from flashml.trace.limits import (
    CHUNK_BYTES,
    DEFAULT_MAX_EXPANSION,
    FREE_ACCESSES,
    MAX_BLOCK_BYTES,
    MAX_CHUNK_BYTES,
    MAX_DAYS,
    MAX_GENERATED_ACCESSES,
    MAX_MAX_EXPANSION,
    MAX_PHASES,
    MAX_SCALE,
    MAX_SECTOR_BYTES,
    MAX_STREAMS,
    MAX_TIME_SCALE,
    MIN_BLOCK_BYTES,
    MIN_SAMPLE_RATIO,
    MIN_TIME_SCALE,
    PHASES,
    SCALE,
    SECTOR_BYTES,
)
from flashml.trace.presets import OBJECT_PRESETS, PRESETS

log = logging.getLogger("flashml.trace")
OBJECTS_CSV = "objects-csv"  # whole-object traces (flashml/trace/objects.py)


# --- options ----------------------------------------------------------------------------------
# Every option of the trace commands, declared once (flag, unit, default, bounds); `TABLES`
# gives each command its options, the trace input's shared by the commands that read one.

#: `--sample-ratio`, of every command that reads a trace (`add_trace_option` too).
SAMPLE_RATIO = Option(
    "sample_ratio", "--sample-ratio", Number(float, MIN_SAMPLE_RATIO, 100.0, unit="percent"),
    None, "sample ratio of the trace in percent: rates are scaled by 100 / ratio (default: "
    "the table's metadata, else the artifact file name full_<start>_<ratio>.trace, else 100)",
    metavar="PERCENT")
#: `--format`'s help, by the format a raw trace is read as by default.
FORMAT_HELP = "format of a raw trace (default {}; ignored for .parquet)"
#: The trace input of the commands that read one besides the positional FILE
#: (`add_trace_input`).
INPUT_OPTIONS = option_table(
    Option("trace_opt", "--trace", Path, None, "the trace (the same as the positional FILE)",
           metavar="FILE"),
    Option("format", "--format", str, None, FORMAT_HELP.format("tectonic"), choices=FORMATS),
    SAMPLE_RATIO,
    Option("block_bytes", "--block-bytes",
           Number(int, MIN_BLOCK_BYTES, MAX_BLOCK_BYTES, unit="bytes",
                  multiple=UNITS.segment_bytes), UNITS.block_bytes,
           "block size: a whole number of 128 KiB segments, up to the largest IO, so an IO "
           "is split into at most 32769 blocks"),
    Option("sector_bytes", "--sector-bytes", Number(int, 1, MAX_SECTOR_BYTES, unit="bytes"),
           SECTOR_BYTES, "cloudphysics: bytes per lbn sector"),
    Option("time_scale", "--time-scale",
           Number(float, MIN_TIME_SCALE, MAX_TIME_SCALE, unit="seconds per source time unit"),
           1.0, "cloudphysics/csv: seconds per source time unit (source times are multiplied "
           "by it; 1e-6: microseconds); a scaled time must lie within 1e12 s of the epoch",
           metavar="SECONDS"),
    Option("columns", "--columns", str, "", "csv: FIELD=COLUMN,... mapping (fields: time,key,"
           "offset,address,size,op,namespace,user; by header name, or 0-based index with "
           "--no-header)"),
    Option("separator", "--separator", str, ",", "csv: field separator"),
    Option("no_header", "--no-header", bool, False, "csv: the file has no header line"),
    Option("skip_bad_lines", "--skip-bad-lines", bool, False, "leave out lines that do not "
           "parse or fail a check (counted in the log and the result) instead of stopping at "
           "the first with an error"),
)
#: `-o FILE`: what a trace command writes.
OUTPUT = Option("output", "--out", Path, None, "output .parquet", required=True,
                aliases=("-o", "--output"))


def _seed(help_: str) -> Option:
    return Option("seed", "--seed", SEED, 0, help_)


def _with(table: dict[str, Option], *changed: Option) -> tuple[Option, ...]:
    """The options of `table`, those of the names of `changed` replaced by them."""
    by_name = {o.name: o for o in changed}
    return tuple(by_name.get(name, o) for name, o in table.items())


#: Each trace command's options, by subcommand (its positional FILE aside).
TABLES: dict[str, dict[str, Option]] = {
    "ingest": option_table(
        *_with(INPUT_OPTIONS, replace(
            INPUT_OPTIONS["format"], choices=(*FORMATS, OBJECTS_CSV),
            help=INPUT_OPTIONS["format"].help + "; objects-csv: whole-object requests "
            "time,key,size -> an object table (key, size, time), not the canonical block "
            "table")),
        OUTPUT,
        Option("chunk_mb", "--chunk-mb", Number(int, 1, MAX_CHUNK_BYTES >> 20, unit="MiB"),
               CHUNK_BYTES >> 20, "input chunk size; peak memory is about ten times it, "
               "whatever the trace", metavar="MIB"),
        Option("max_expansion", "--max-expansion",
               Number(int, 1, MAX_MAX_EXPANSION, unit="accesses per line"),
               DEFAULT_MAX_EXPANSION, "refuse a trace that makes more than N accesses per "
               "input line on average (op_count repeats; IOs split into blocks) beyond its "
               f"first {FREE_ACCESSES:,} accesses. Caps checked before anything is built: "
               "op_count <= 2^20 per line, an IO <= 4 GiB, so <= 32769 blocks; rows are built "
               "and written 2^20 accesses at a time", metavar="N"),
    ),
    "sample": option_table(
        *INPUT_OPTIONS.values(), OUTPUT,
        Option("start", "--start", Number(float, 0.0, 100.0, unit="percent", high_open=True),
               0.0, "start of the kept keys' cumulative share of accesses, in percent"),
        Option("size", "--size", Number(float, 0.0, 100.0, unit="percent", low_open=True),
               None, "sample size in percent, at most 100 - start; the sample ratio it leaves "
               "must stay >= 1e-6%%", required=True),
        _seed("shuffle seed"),
    ),
    "generate": option_table(
        Option("preset", "--preset", str, "region1-like", "block-trace preset: "
               + ", ".join(PRESETS) + "; object-trace preset: " + ", ".join(OBJECT_PRESETS)
               + "; MSR-CSV block preset: " + ", ".join(BLOCK_PRESETS), metavar="NAME"),
        Option("zipf", "--zipf", Number(float, 0.0, MAX_ZIPF), None,
               "MSR-CSV block presets: the Zipf exponent of popularity (web-like: 0.5-1, the "
               "paper's Fig. 13)"),
        Option("overwrites", "--overwrites",
               Number(float, 0.0, MAX_OVERWRITES, unit="overwrites per read"), None,
               "MSR-CSV block presets: overwrites per read (the paper's Fig. 13b: 0-100%% "
               "overwrites at Zipf 0.8)", metavar="R"),
        _seed("random seed"),
        Option("accesses", "--accesses",
               Number(int, 1, MAX_GENERATED_ACCESSES, unit="accesses"), None,
               "number of accesses (requests, for an object-trace preset; default: the "
               "preset's): the generator holds the trace in memory"),
        Option("days", "--days", Number(float, 0.0, MAX_DAYS, unit="days", low_open=True),
               None, "trace length in days (default: the preset's)"),
        Option("quiet", "--quiet", bool, False, "no progress bar"),
        replace(OUTPUT, help="output trace file"),
    ),
    "mix": option_table(
        Option("streams", "--streams", Number(int, 1, MAX_STREAMS, unit="streams"), 4,
               "number of streams"),
        Option("requests", "--requests",
               Number(int, 1, MAX_GENERATED_ACCESSES, unit="requests"), 200_000,
               "page requests in all"),
        Option("kinds", "--kinds", str, None, "comma-separated kind of each stream (default: "
               "drawn by the seed)"),
        Option("phases", "--phases", Number(int, 1, MAX_PHASES, unit="phases"), PHASES,
               "intensity phases"),
        Option("scale", "--scale", Number(int, 5, MAX_SCALE, unit="pages"), SCALE,
               "typical working set of a stream in pages"),
        _seed("random seed"),
        OUTPUT,
    ),
    "stats": option_table(
        *INPUT_OPTIONS.values(),
        Option("json", "--json", bool, False, "print JSON"),
    ),
    "validate": option_table(
        *INPUT_OPTIONS.values(),
        Option("context_dir", "--context-dir", Path, None, "Great Expectations file context; "
               "its Data Docs go to CONTEXT_DIR/uncommitted/data_docs/local_site/index.html "
               "(default $FLASHML_HOME/gx, else .flashml/gx: where the pipeline and the DAG "
               "write theirs; give the same to `flashml ui docs --context-dir`)"),
    ),
}

#: `--trace FILE`, `--format` and `--sample-ratio` of the commands that take other arguments
#: too (`add_trace_option`).
TRACE_OPTIONS = option_table(
    Option("trace", "--trace", Path, None, "canonical .parquet access table, or a raw trace "
           "(see --format)", metavar="FILE", required=True),
    INPUT_OPTIONS["format"],
    SAMPLE_RATIO,
)


def add_trace_option(p: argparse.ArgumentParser, *, required: bool = True,
                     trace_help: str | None = None, formats: tuple[str, ...] | None = None,
                     default_format: str = "tectonic") -> None:
    """`--trace FILE`, `--format`, `--sample-ratio` (`TRACE_OPTIONS`): the trace input of the
    commands that take other arguments too (episodes, sim, train, sweep, regress, <system>
    run). `formats`: the choices of --format (default: the block-trace readers')."""
    t, f = TRACE_OPTIONS["trace"], TRACE_OPTIONS["format"]
    add_options(p, options=option_table(
        replace(t, required=required, help=trace_help or t.help),
        replace(f, choices=formats or f.choices, help=FORMAT_HELP.format(default_format)),
        TRACE_OPTIONS["sample_ratio"]))


def add_trace_input(p: argparse.ArgumentParser, command: str) -> None:
    """FILE, then the options of trace `command` (`TABLES`)."""
    p.add_argument("trace", type=Path, nargs="?", default=None,
                   help="trace file: canonical .parquet, or raw text (.gz/.zst read "
                   "transparently); or --trace FILE, as in every other command")
    add_options(p, options=TABLES[command])


def reader_options(v: dict[str, Any]) -> dict:
    """The reader's options among a trace command's option values `v`."""
    fmt = v.get("format") or "tectonic"
    opts: dict = {"block_bytes": v["block_bytes"]}
    if v.get("skip_bad_lines"):
        opts["skip_bad_lines"] = True
    if fmt == "cloudphysics":
        opts.update(sector_bytes=v["sector_bytes"], time_scale=v["time_scale"])
    elif fmt == "csv":
        opts.update(columns=v["columns"], separator=v["separator"], header=not v["no_header"],
                    time_scale=v["time_scale"])
    return opts


def load(args: argparse.Namespace, v: dict[str, Any]):  # type: ignore[no-untyped-def]
    from flashml.trace.ingest import load_trace

    return load_trace(args.trace, v["format"], sample_ratio=v["sample_ratio"],
                      **reader_options(v))


# --- handlers ---------------------------------------------------------------------------------
def cmd_ingest(args: argparse.Namespace) -> int:
    from flashml.trace.ingest import ingest

    v = option_values(TABLES["ingest"], args)
    refuse_overwriting_inputs({"-o": v["output"]}, {"TRACE": args.trace})
    if v["format"] == OBJECTS_CSV:
        return _ingest_objects(args.trace, v["output"])
    res = ingest(args.trace, v["output"], v["format"] or "tectonic",
                 sample_ratio=v["sample_ratio"], chunk_bytes=v["chunk_mb"] * 1024 * 1024,
                 max_expansion=v["max_expansion"], **reader_options(v))
    print(f"{res.out}: {res.rows} accesses from {res.lines} lines "
          f"({res.meta.source_format}, sample ratio {res.meta.sample_ratio:g}%), "
          f"{res.dropped_zero_size} zero-size IOs dropped, "
          + (f"{res.skipped_lines} bad lines skipped, " if res.skipped_lines else "")
          + f"{res.seconds:.2f}s ({res.lines_per_s / 1e6:.2f} M lines/s)")
    return 0


def _ingest_objects(trace: Path, output: Path) -> int:
    """objects-csv -> an object table (Parquet: key, size, time), written atomically: what
    object-mode readers take as `--format parquet`. Not the canonical block table."""
    from flashml.files import atomic_path
    from flashml.trace.objects import read_objects_csv

    df = read_objects_csv(trace)
    out = Path(output)
    with atomic_path(out) as tmp:
        df.write_parquet(tmp)
    objects = df["key"].n_unique()
    print(f"{out}: {df.height} requests, {objects} objects (objects-csv -> object table "
          "key, size, time; object-mode commands read it with --format parquet)")
    return 0


def cmd_sample(args: argparse.Namespace) -> int:
    from flashml.trace.canonical import write_table
    from flashml.trace.sample import sample_by_key

    v = option_values(TABLES["sample"], args)
    out_path = v["output"]
    refuse_overwriting_inputs({"-o": out_path}, {"TRACE": args.trace})
    df, meta = load(args, v)
    out, meta2 = sample_by_key(df, meta, start=v["start"], size=v["size"], seed=v["seed"])
    write_table(out, out_path, meta2)
    print(f"{out_path}: kept {out['key'].n_unique()} of {df['key'].n_unique()} keys, "
          f"{len(out)} of {len(df)} accesses ({100 * len(out) / max(len(df), 1):.2f}%); "
          f"sample ratio {meta.sample_ratio:g}% -> {meta2.sample_ratio:g}%")
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    v = option_values(TABLES["generate"], args)
    preset, output = v["preset"], v["output"]
    refuse_overwriting_inputs({"-o": output}, {})
    if preset in BLOCK_PRESETS:
        from flashml.systems.pannier.blockgen import get_block_preset, write_block_msr

        if v["days"] is not None:
            raise UserError(f"--days: the block preset {preset} has a fixed span "
                            f"({BLOCK_PRESETS[preset].hours:g} h); set --accesses")
        p = get_block_preset(preset, zipf=v["zipf"], overwrites=v["overwrites"])
        info = write_block_msr(p, v["seed"], output, requests=v["accesses"])
        print(f"{output}: " + ", ".join(f"{k}={x}" for k, x in info.items()))
        return 0
    if v["zipf"] is not None or v["overwrites"] is not None:
        raise UserError("--zipf and --overwrites apply to the block presets only: "
                        + ", ".join(BLOCK_PRESETS))
    from flashml.trace.generate import generate_trace

    info = generate_trace(preset, v["seed"], output, accesses=v["accesses"], days=v["days"],
                          progress=not v["quiet"])
    print(f"{output}: " + ", ".join(f"{k}={x}" for k, x in info.items()))
    return 0


def cmd_mix(args: argparse.Namespace) -> int:
    from flashml.systems.mlcache.multistream import generate_mix, write_mix

    v = option_values(TABLES["mix"], args)
    refuse_overwriting_inputs({"-o": v["output"]}, {})
    kinds = None
    streams = v["streams"]
    if v["kinds"]:
        from flashml.systems.mlcache.multistream import STREAM_KINDS

        kinds = tuple(k.strip() for k in v["kinds"].split(","))
        bad = [k for k in kinds if k not in STREAM_KINDS]
        if bad or len(kinds) != streams:
            raise UserError(f"--kinds: expected {streams} names from "
                            f"{', '.join(STREAM_KINDS)}, got {v['kinds']!r}")
    df, kinds = generate_mix(streams, v["requests"], v["seed"], kinds=kinds,
                             phases=v["phases"], scale=v["scale"])
    write_mix(df, v["output"])
    print(f"{v['output']}: {df.height} page requests, streams (namespace) "
          + ", ".join(f"{i}={k}" for i, k in enumerate(kinds)))
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    from flashml.trace.stats import compute_stats, format_stats

    v = option_values(TABLES["stats"], args)
    df, meta = load(args, v)
    stats = compute_stats(df, meta)
    if v["json"]:
        print(json.dumps(stats, indent=2, sort_keys=True))
    else:
        print(format_stats(stats))
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from flashml.trace.validate import validate_table

    v = option_values(TABLES["validate"], args)
    refuse_overwriting_inputs({"--context-dir": v["context_dir"]}, {"TRACE": args.trace})
    df, meta = load(args, v)
    report = validate_table(df, meta, context_dir=v["context_dir"], name=Path(args.trace).name)
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
    add_trace_input(p, "ingest")
    p.set_defaults(func=cmd_ingest)

    p = tsub.add_parser("sample", help="sample a trace by key, recording the sample ratio",
                        description="Sample by key as Baleen's artifact does: shuffle keys, keep "
                        "those whose cumulative share of accesses falls in [start, start+size).")
    add_trace_input(p, "sample")
    p.set_defaults(func=cmd_sample)

    p = tsub.add_parser("generate", help="write a synthetic trace from a preset",
                        description="Write a synthetic trace from a preset: a block trace "
                        "(Tectonic text, 201910 schema) modelled on Baleen's Table 2 "
                        f"({', '.join(PRESETS)}), a whole-object trace as objects-csv "
                        f"(time,key,size; {', '.join(OBJECT_PRESETS)}) for object caches "
                        "(`flashml sim objects --format objects-csv`), or a 4 KiB block "
                        f"trace with reads and overwrites as MSR CSV ({', '.join(BLOCK_PRESETS)}"
                        "; Pannier, `flashml pannier run --format msr`). The same preset, seed "
                        "and size always give the same bytes.")
    add_options(p, options=TABLES["generate"])
    p.set_defaults(func=cmd_generate)

    p = tsub.add_parser("mix", help="write a synthetic multi-stream page trace (MLCache)",
                        description="Write a canonical table of page requests from several "
                        "streams with distinct reuse profiles (loop, zipf, scan, shift, "
                        "hotset) and shifting intensities, interleaved by time; the stream is "
                        "the namespace column (`flashml sim partition --streams namespace`).")
    add_options(p, options=TABLES["mix"])
    p.set_defaults(func=cmd_mix)

    p = tsub.add_parser("stats", help="Baleen Table 2 statistics of a trace",
                        description="Print the Table 2 statistics of a trace (rates scaled to a "
                        "full node by the sample ratio).")
    add_trace_input(p, "stats")
    p.set_defaults(func=cmd_stats)

    p = tsub.add_parser("validate", help="run the Great Expectations suite; write Data Docs",
                        description="Validate a trace's canonical table with the Great "
                        "Expectations suite and write its Data Docs; exit 1 on failure. The "
                        "Data Docs go to $FLASHML_HOME/gx (default .flashml/gx), the context "
                        "`flashml pipeline run` and the retraining DAG's ingest task validate "
                        "into too: one index across runs, each validation named by its "
                        "trace, static and complete offline. `flashml ui docs` serves it.")
    add_trace_input(p, "validate")
    p.set_defaults(func=cmd_validate)
