"""The fuzzing suite's shared parts: valid seed traces of every format, the
mutations a careless user (or a cut download) makes of them, and the runner that judges one
case: either a valid canonical table, or one clear `flashml: error:` naming the file (and the
line where a line is at fault), with no traceback, no output file and no hang.

How many cases Hypothesis runs: `fuzz_settings()`. Default (`make test`): a small fixed-seed
set (FLASHML_FUZZ_CASES, default 20 per test, derandomized). `make fuzz` sets
FLASHML_FUZZ_PROFILE=fuzz and FLASHML_FUZZ_CASES=1000 (random seeds). Every case's outcome is
appended to $FLASHML_FUZZ_LOG (JSON lines) when that is set; `bench/bench_fuzz.py` sums them.
"""

from __future__ import annotations

import contextlib
import faulthandler
import gzip
import io
import json
import os
import random
import re
import signal
import tempfile
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

CASE_TIMEOUT_S = float(os.environ.get("FLASHML_FUZZ_TIMEOUT", "20"))
"""A case slower than this is a hang (tiny inputs: a real ingest takes ~20 ms)."""
COUNT_ONLY = os.environ.get("FLASHML_FUZZ_COUNT_ONLY") == "1"
"""bench/bench_fuzz.py: record every outcome in the log and fail no test, so each format runs
all its cases and the figures count every bad outcome (not just the first)."""


def expect(ok: bool, message: str) -> None:
    """The fuzz tests' assertion (a no-op when only counting: the log has the outcome)."""
    if not COUNT_ONLY:
        assert ok, message


# --- Hypothesis settings ------------------------------------------------------------------------
def fuzz_cases(default: int = 20) -> int:
    return int(os.environ.get("FLASHML_FUZZ_CASES", default))


def fuzz_settings(default_cases: int = 20, **over: Any) -> dict[str, Any]:
    """Keyword arguments for `hypothesis.settings` of every fuzz test: a fixed-seed set in
    `make test`, FLASHML_FUZZ_CASES random cases in `make fuzz` (FLASHML_FUZZ_PROFILE=fuzz)."""
    from hypothesis import HealthCheck, Phase

    fuzz = os.environ.get("FLASHML_FUZZ_PROFILE", "ci") == "fuzz"
    kw: dict[str, Any] = {
        "max_examples": fuzz_cases(default_cases),
        "deadline": None,  # hangs are caught by the runner's own timeout
        "database": None,
        "derandomize": not fuzz,
        "suppress_health_check": list(HealthCheck),
        "phases": [Phase.explicit, Phase.generate, Phase.shrink] if fuzz
        else [Phase.explicit, Phase.generate],
        "print_blob": True,
    }
    kw.update(over)
    return kw


# --- seed traces ------------------------------------------------------------------------------
B = 8 * 1024 * 1024
T0 = 1_572_000_000.0


@dataclass(frozen=True)
class Spec:
    """One input format as the fuzzer feeds it: seed file contents, how to ingest it."""

    name: str
    fmt: str  # ingest --format (or read_objects format for object specs)
    text: bytes  # the valid seed (uncompressed)
    options: dict[str, Any] = field(default_factory=dict)  # reader options
    compress: str = ""  # "", "gz" or "zst"
    objects: bool = False  # read by flashml.trace.objects.read_objects
    canonical: bool = False  # a canonical Parquet table, read by flashml.trace.ingest.load_trace
    separator: str = " "

    @property
    def suffix(self) -> str:
        base = {"tectonic": ".trace", "parquet": ".parquet"}.get(self.fmt, ".csv")
        return base + (f".{self.compress}" if self.compress else "")


def _tectonic(schema: str, rng: random.Random, n: int) -> bytes:
    from flashml.trace.readers.tectonic import SCHEMAS

    lines = ["#" + " ".join(SCHEMAS[schema]), "# flashml: sample_ratio=1.5 preset=fuzz"]
    t = T0
    for i in range(n):
        t += rng.choice([0.0, 0.25, 1.0, 3.5])
        size = rng.choice([0, 4096, 131072, 1 << 20])
        off = rng.randrange(0, B - size + 1, 4096)
        row = [rng.randrange(1, 40), off, size, f"{t:.5f}", rng.choice([1, 2, 3, 4, 5, 6])]
        if schema == "201910":
            row += [rng.randrange(20, 30), rng.randrange(1, 5), rng.randrange(1, 9)]
        elif schema == "202110":
            row += [rng.randrange(1, 5), rng.randrange(1, 9), f"host{rng.randrange(3)}",
                    rng.choice([1, 1, 2, 3])]
        else:
            row += [rng.randrange(1, 5), rng.randrange(1, 9), f"shard{rng.randrange(4)}",
                    rng.choice([1, 1, 2]), f"host{rng.randrange(3)}"]
        lines.append(" ".join(map(str, row)))
        if i == n // 2:
            lines.append("")  # a blank line inside the data
    return ("\n".join(lines) + "\n").encode()


def _msr(rng: random.Random, n: int) -> bytes:
    lines = ["Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime"]
    ts = 128_166_372_003_061_629
    for _ in range(n):
        ts += rng.choice([0, 10_000, 5_000_000])
        off = rng.choice([0, 4096, B - 4096, 3 * B + 512])
        lines.append(f"{ts},{rng.choice(['web', 'prxy', 'src1'])},{rng.randrange(3)},"
                     f"{rng.choice(['Read', 'Write'])},{off},{rng.choice([512, 8192, 65536])},"
                     f"{rng.randrange(100, 5000)}")
    return ("\n".join(lines) + "\n").encode()


def _cloudphysics(rng: random.Random, n: int) -> bytes:
    lines = ["version,time,op,size,lbn"]
    t = 5_633_898
    for _ in range(n):
        t += rng.choice([0, 1, 7])
        lines.append(f"1,{t},{rng.choice(['28', '2a', '08', '0a', '88'])},"
                     f"{rng.choice([512, 4096, 65536])},{rng.randrange(0, 1 << 26)}")
    return ("\n".join(lines) + "\n").encode()


def _generic(rng: random.Random, n: int) -> bytes:
    lines = ["ts,object,bytes,kind,tenant"]
    t = 10.0
    for _ in range(n):
        t += rng.choice([0.0, 0.5, 2.0])
        lines.append(f"{t},{rng.choice(['alpha', 'beta', '42', 'gamma'])},"
                     f"{rng.choice([1, 512, 4096, 1 << 20])},"
                     f"{rng.choice(['read', 'write', 'get', '2', 'W'])},{rng.randrange(0, 4)}")
    return ("\n".join(lines) + "\n").encode()


def _generic_address(rng: random.Random, n: int) -> bytes:
    lines = ["t;vol;addr;len"]
    t = 0.0
    for _ in range(n):
        t += rng.choice([0.0, 0.001, 0.1])
        lines.append(f"{t:.3f};vol{rng.randrange(2)};{rng.randrange(0, 1 << 34)};"
                     f"{rng.choice([512, 4096, B + 4096])}")
    return ("\n".join(lines) + "\n").encode()


def _objects_csv(rng: random.Random, n: int) -> bytes:
    lines = ["time,key,size"]
    t = 0.0
    for _ in range(n):
        t += rng.choice([0.0, 0.5, 1.0])
        lines.append(f"{t},{rng.randrange(0, 50)},{rng.choice([1, 100, 4096, 1 << 20])}")
    return ("\n".join(lines) + "\n").encode()


def _objects_parquet(rng: random.Random, n: int) -> bytes:
    import polars as pl

    df = pl.DataFrame({"key": [rng.randrange(0, 50) for _ in range(n)],
                       "size": [rng.choice([1, 100, 4096]) for _ in range(n)]},
                      schema={"key": pl.UInt64, "size": pl.UInt64})
    buf = io.BytesIO()
    df.write_parquet(buf)
    return buf.getvalue()


def _canonical_parquet(text: bytes) -> bytes:
    """A canonical table (what `flashml trace ingest` writes) of a Tectonic seed."""
    from flashml.trace.ingest import ingest

    with tempfile.TemporaryDirectory() as d:
        src, out = Path(d) / "s.trace", Path(d) / "s.parquet"
        src.write_bytes(text)
        ingest(src, out, progress=False)
        return out.read_bytes()


def specs(n: int = 40) -> dict[str, Spec]:
    """Every format the fuzzer feeds, each with a valid seed of about `n` lines."""
    rng = random.Random(23)
    csv_opts = {"columns": "time=ts,key=object,size=bytes,op=kind,namespace=tenant"}
    addr_opts = {"columns": "time=t,key=vol,address=addr,size=len", "separator": ";"}
    out = [
        Spec("tectonic-201910", "tectonic", _tectonic("201910", rng, n)),
        Spec("tectonic-202110", "tectonic", _tectonic("202110", rng, n)),
        Spec("tectonic-2023", "tectonic", _tectonic("2023", rng, n)),
        Spec("msr", "msr", _msr(rng, n), separator=","),
        Spec("cloudphysics", "cloudphysics", _cloudphysics(rng, n), separator=","),
        Spec("csv", "csv", _generic(rng, n), csv_opts, separator=","),
        Spec("csv-address", "csv", _generic_address(rng, n), addr_opts, separator=";"),
        Spec("tectonic-gz", "tectonic", _tectonic("202110", rng, n), compress="gz"),
        Spec("msr-zst", "msr", _msr(rng, n), compress="zst", separator=","),
        Spec("objects-cloudphysics", "cloudphysics", _cloudphysics(rng, n), objects=True,
             separator=","),
    ]
    out.append(Spec("canonical-parquet", "parquet", _canonical_parquet(out[1].text),
                    canonical=True))
    from flashml.trace.objects import OBJECT_FORMATS

    if "objects-csv" in OBJECT_FORMATS:
        out.append(Spec("objects-csv", "objects-csv", _objects_csv(rng, n), objects=True,
                        separator=","))
    if "parquet" in OBJECT_FORMATS:
        out.append(Spec("objects-parquet", "parquet", _objects_parquet(rng, n), objects=True))
    return {s.name: s for s in out}


def compress(data: bytes, how: str) -> bytes:
    if how == "gz":
        return gzip.compress(data, mtime=0)
    if how == "zst":
        import zstandard

        return zstandard.ZstdCompressor().compress(data)
    return data


# --- mutations --------------------------------------------------------------------------------
WEIRD_VALUES = [
    "", " ", "x", "12x", "-1", "-0", "0", "+5", "1.5", "1e5", "1e400", "-1e400", "nan", "NaN",
    "inf", "-inf", "Infinity", "9223372036854775807", "9223372036854775808",
    "18446744073709551615", "18446744073709551616", "-9223372036854775809", "1" * 400,
    "0x10", "1_000", "\u0663", "\x00", "\xff", "\"5\"", "5 ", " 5", "4294967296", "4294967295",
    "8388608", "8388609", "1048577", "999999999999", "3.4e38", "-0.0", "1e-320", "#",
]
MUTATIONS = (
    "cut_file", "cut_line", "duplicate_line", "delete_line", "swap_lines", "swap_fields",
    "set_field", "add_field", "drop_field", "empty_lines", "binary_junk", "crlf", "bom",
    "comment", "separator", "long_line", "flip_byte", "drop_header", "cut_compressed",
    "flip_compressed",
)


def _lines(data: bytes) -> list[bytes]:
    return data.split(b"\n")


def mutate(data: bytes, spec: Spec, kind: str, r: random.Random) -> bytes:
    """`data` (the uncompressed text, or the raw bytes for binary formats) with one mutation
    `kind`, its details drawn from `r`."""
    lines = _lines(data)
    n = max(len(lines) - 1, 1)  # the last element is what follows the final newline
    i = r.randrange(n)
    sep = spec.separator.encode()
    if kind == "cut_file":
        return data[: r.randrange(1, max(len(data), 2))]
    if kind == "cut_line":
        ln = lines[i]
        lines[i] = ln[: r.randrange(0, max(len(ln), 1))]
        if r.random() < 0.5:  # the cut line is the last one (a copy of a file being written)
            return b"\n".join(lines[: i + 1])
        return b"\n".join(lines)
    if kind == "duplicate_line":
        lines.insert(i, lines[i])
    elif kind == "delete_line":
        del lines[i]
    elif kind == "swap_lines":
        j = r.randrange(n)
        lines[i], lines[j] = lines[j], lines[i]
    elif kind in ("swap_fields", "set_field", "add_field", "drop_field"):
        cells = lines[i].split(sep)
        a = r.randrange(len(cells))
        if kind == "swap_fields":
            b = r.randrange(len(cells))
            cells[a], cells[b] = cells[b], cells[a]
        elif kind == "set_field":
            cells[a] = r.choice(WEIRD_VALUES).encode("utf-8", "surrogateescape")
        elif kind == "add_field":
            cells.insert(a, r.choice(WEIRD_VALUES[:8]).encode())
        else:
            del cells[a]
        lines[i] = sep.join(cells)
    elif kind == "empty_lines":
        for _ in range(r.randrange(1, 4)):
            lines.insert(r.randrange(len(lines)), r.choice([b"", b" ", b"\t", b"  \r"]))
    elif kind == "binary_junk":
        junk = bytes(r.randrange(256) for _ in range(r.randrange(1, 64)))
        pos = r.randrange(len(data) + 1)
        return data[:pos] + junk + data[pos:]
    elif kind == "crlf":
        if r.random() < 0.5:
            return data.replace(b"\n", b"\r\n")
        lines[i] += b"\r"
    elif kind == "bom":
        return b"\xef\xbb\xbf" + data
    elif kind == "comment":
        lines.insert(i, r.choice([b"# a comment", b"#", b"# flashml: sample_ratio=nan",
                                  b"# flashml: sample_ratio=0", b"#block_id io_offset"]))
    elif kind == "separator":
        lines[i] = lines[i].replace(sep, r.choice([b",", b" ", b"\t", b";", b"  "]))
    elif kind == "long_line":
        lines.insert(i, b"9" * r.choice([5_000, 70_000, 300_000]))
    elif kind == "flip_byte":
        if data:
            b = bytearray(data)
            pos = r.randrange(len(b))
            b[pos] = r.randrange(256)
            return bytes(b)
    elif kind == "drop_header":
        return b"\n".join(ln for ln in lines if not ln.startswith(b"#")) if lines[0][:1] == b"#" \
            else b"\n".join(lines[1:])
    return b"\n".join(lines)


def mutate_bytes(compressed: bytes, kind: str, r: random.Random) -> bytes:
    """Mutations of the compressed file itself."""
    if kind == "cut_compressed":
        return compressed[: r.randrange(0, max(len(compressed), 1))]
    b = bytearray(compressed)
    for _ in range(r.randrange(1, 4)):
        if b:
            b[r.randrange(len(b))] = r.randrange(256)
    return bytes(b)


def build_case(spec: Spec, kinds: list[str], seed: int) -> bytes:
    """The file bytes of one case: `kinds` applied in order to the seed (text mutations
    before compression, `*_compressed` ones after)."""
    r = random.Random(seed)
    data = spec.text
    text_kinds = [k for k in kinds if not k.endswith("_compressed")]
    for k in text_kinds:
        data = mutate(data, spec, k, r)
    data = compress(data, spec.compress)
    if spec.compress:
        for k in kinds:
            if k.endswith("_compressed"):
                data = mutate_bytes(data, k, r)
    return data


# --- running one case -------------------------------------------------------------------------
class Hang(Exception):
    """A case ran past CASE_TIMEOUT_S."""


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise Hang in the main thread after `seconds` (SIGALRM); as a backstop for code that
    never returns to Python, faulthandler kills the process (with every thread's stack) after
    three times that, so a hang can never stall the suite."""
    def on_alarm(signum: int, frame: Any) -> None:  # noqa: ARG001
        raise Hang(f"no result after {seconds:g} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    faulthandler.dump_traceback_later(seconds * 3, exit=True)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        faulthandler.cancel_dump_traceback_later()


@dataclass
class Outcome:
    """What one case gave: kind is ok | error (both fine) or traceback | hang | partial |
    unclear | invalid (failures)."""

    kind: str
    spec: str
    message: str = ""
    seconds: float = 0.0
    rows: int = 0
    skipped: int = 0
    detail: str = ""

    @property
    def fine(self) -> bool:
        return self.kind in ("ok", "error")


# Errors about the whole file (no single line at fault) may leave the line out.
FILE_LEVEL = re.compile(
    r"no accesses|no requests|cannot decompress/read input|not a Tectonic trace|sample[_ ]ratio"
    r"|is not a column|--columns|not a readable Parquet|missing column|cannot read|"
    r"not a canonical|no such file|cannot open|header|Parquet")


def judge_error(message: str, src: Path, nlines: int) -> str | None:
    """None if `message` (one stderr line) is a clear error for `src`, else why not."""
    prefix = f"flashml: error: {src}"
    if not message.startswith(prefix):
        return f"does not start with {prefix!r}"
    rest = message[len(prefix):]
    m = re.match(r":(\d+)(: field '[^']*')?: .+", rest)
    if m:
        line = int(m.group(1))
        if not 1 <= line <= nlines + 1:
            return f"line {line} outside the file's 1..{nlines} lines"
        return None
    if re.match(r"(: field '[^']*')?: .+", rest) and FILE_LEVEL.search(rest):
        return None
    return "names no line (and is not a whole-file error)"


def check_table(out: Path, block_bytes: int, nlines: int) -> str | None:
    """None if `out` is a valid canonical access table, else what is wrong with it."""
    import polars as pl

    from flashml.config import OPS
    from flashml.trace.canonical import CORE_SCHEMA, read_table

    df, meta = read_table(out)
    for name, dtype in CORE_SCHEMA.items():
        if df.schema[name] != dtype:
            return f"column {name} is {df.schema[name]}, not {dtype}"
    if df.is_empty():
        return "no rows"
    core = df.select(list(CORE_SCHEMA))
    if core.null_count().sum_horizontal().item():
        return "nulls in the core columns"
    t = df["time"].to_numpy()
    if not np.isfinite(t).all():
        return "non-finite time"
    if (np.diff(t) < 0).any():
        return "time goes backwards"
    checks = {
        "size >= 1": (df["size"] >= 1).all(),
        "offset + size <= block": ((df["offset"].cast(pl.Float64) + df["size"].cast(pl.Float64))
                                   <= block_bytes).all(),
        "op known": df["op"].is_in(list(OPS)).all(),
        "src_line in the file": df["src_line"].is_between(1, nlines).all(),
        "sample ratio in (0, 100]": 0 < meta.sample_ratio <= 100,
    }
    bad = [k for k, ok in checks.items() if not ok]
    return f"fails: {', '.join(bad)}" if bad else None


def leftovers(folder: Path, keep: set[str]) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name not in keep)


def _log(outcome: Outcome, kinds: list[str]) -> None:
    path = os.environ.get("FLASHML_FUZZ_LOG")
    if not path:
        return
    rec = {"spec": outcome.spec, "kind": outcome.kind, "mutations": kinds,
           "seconds": round(outcome.seconds, 4), "message": outcome.message[:300],
           "detail": outcome.detail[-2000:], "pid": os.getpid(), "t": time.time()}
    with open(path, "a") as f:
        f.write(json.dumps(rec) + "\n")


def run_ingest(spec: Spec, data: bytes, workdir: Path, *, chunk_bytes: int = 16 << 20,
               skip_bad_lines: bool = False, kinds: list[str] | None = None) -> Outcome:
    """One ingest as `flashml trace ingest` runs it (cli.main's contract: a UserError is
    `flashml: error: ...` and exit 1, anything else escaping is a traceback)."""
    from flashml.errors import UserError
    from flashml.trace.ingest import ingest

    src = workdir / f"in{spec.suffix}"
    src.write_bytes(data)
    outdir = workdir / "out"
    outdir.mkdir()
    out = outdir / "t.parquet"
    nlines = _count_lines(data, spec)
    started = time.perf_counter()
    try:
        with time_limit(CASE_TIMEOUT_S):
            res = ingest(src, out, spec.fmt, chunk_bytes=chunk_bytes, progress=False,
                         skip_bad_lines=skip_bad_lines, **spec.options)
    except Hang as e:
        o = Outcome("hang", spec.name, str(e))
    except UserError as e:
        msg = f"flashml: error: {e}"
        why = judge_error(msg, src, nlines)
        extra = leftovers(outdir, set())
        if extra:
            o = Outcome("partial", spec.name, msg, detail=f"left behind: {extra}")
        else:
            o = Outcome("unclear" if why else "error", spec.name, msg, detail=why or "")
    except BaseException as e:  # noqa: BLE001 - every other exception is a traceback
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        o = Outcome("traceback", spec.name, f"{type(e).__name__}: {e}"[:500],
                    detail=traceback.format_exc())
    else:
        why = check_table(out, res.meta.block_bytes, nlines)
        extra = leftovers(outdir, {out.name})
        if why:
            o = Outcome("invalid", spec.name, why, rows=res.rows)
        elif extra:
            o = Outcome("partial", spec.name, "temporary files left", detail=str(extra))
        else:
            o = Outcome("ok", spec.name, rows=res.rows, skipped=res.skipped_lines)
    o.seconds = time.perf_counter() - started
    _log(o, kinds or [])
    return o


def run_objects(spec: Spec, data: bytes, workdir: Path, kinds: list[str] | None = None
                ) -> Outcome:
    """One `flashml.trace.objects.read_objects` call: a (key u64, size u64) table, or a
    TraceError naming the file."""
    import polars as pl

    from flashml.errors import UserError
    from flashml.trace.objects import read_objects

    src = workdir / f"in{spec.suffix}"
    src.write_bytes(data)
    nlines = _count_lines(data, spec)
    started = time.perf_counter()
    try:
        with time_limit(CASE_TIMEOUT_S):
            df = read_objects(src, spec.fmt)
    except Hang as e:
        o = Outcome("hang", spec.name, str(e))
    except UserError as e:
        msg = f"flashml: error: {e}"
        why = judge_error(msg, src, nlines)
        o = Outcome("unclear" if why else "error", spec.name, msg, detail=why or "")
    except BaseException as e:  # noqa: BLE001
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        o = Outcome("traceback", spec.name, f"{type(e).__name__}: {e}"[:500],
                    detail=traceback.format_exc())
    else:
        problems = []
        for col in ("key", "size"):
            if col not in df.columns or df.schema[col] != pl.UInt64:
                problems.append(f"{col} missing or not u64")
            elif df[col].null_count():
                problems.append(f"nulls in {col}")
        if "time" in df.columns and not df["time"].is_finite().all():
            problems.append("non-finite time")
        o = Outcome("invalid" if problems else "ok", spec.name, "; ".join(problems),
                    rows=df.height)
    o.seconds = time.perf_counter() - started
    _log(o, kinds or [])
    return o


def run_canonical(spec: Spec, data: bytes, workdir: Path, kinds: list[str] | None = None
                  ) -> Outcome:
    """A canonical Parquet table as every command takes one (`load_trace`): a valid table, or
    a TraceError naming the file."""
    from flashml.errors import UserError
    from flashml.trace.ingest import load_trace

    src = workdir / "in.parquet"
    src.write_bytes(data)
    started = time.perf_counter()
    try:
        with time_limit(CASE_TIMEOUT_S):
            df, meta = load_trace(src)
    except Hang as e:
        o = Outcome("hang", spec.name, str(e))
    except UserError as e:
        msg = f"flashml: error: {e}"
        why = judge_error(msg, src, 1)
        o = Outcome("unclear" if why else "error", spec.name, msg, detail=why or "")
    except BaseException as e:  # noqa: BLE001 - Polars' PanicException is a BaseException
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        o = Outcome("traceback", spec.name, f"{type(e).__name__}: {e}"[:500],
                    detail=traceback.format_exc())
    else:
        import polars as pl

        from flashml.trace.canonical import CORE_SCHEMA

        bad = [c for c, t in CORE_SCHEMA.items() if df.schema[c] != t or df[c].null_count()]
        if not bad and not df["time"].cast(pl.Float64).is_finite().all():
            bad = ["time (not finite)"]
        o = Outcome("invalid" if bad else "ok", spec.name, f"bad columns {bad}" if bad else "",
                    rows=df.height)
    o.seconds = time.perf_counter() - started
    _log(o, kinds or [])
    return o


def _count_lines(data: bytes, spec: Spec) -> int:
    try:
        if spec.compress == "gz":
            data = gzip.decompress(data)
        elif spec.compress == "zst":
            import zstandard

            data = zstandard.ZstdDecompressor().decompressobj().decompress(data)
    except Exception:  # noqa: BLE001 - a corrupt stream: count what is readable
        return 1 << 40
    return data.count(b"\n") + 1


def run_case(spec: Spec, kinds: list[str], seed: int, *, chunk_bytes: int = 16 << 20,
             skip_bad_lines: bool = False) -> Outcome:
    """Build and run one case in a fresh temporary folder."""
    data = build_case(spec, kinds, seed)
    with tempfile.TemporaryDirectory(prefix="flashml-fuzz-") as d:
        if spec.objects:
            return run_objects(spec, data, Path(d), kinds)
        if spec.canonical:
            return run_canonical(spec, data, Path(d), kinds)
        return run_ingest(spec, data, Path(d), chunk_bytes=chunk_bytes,
                          skip_bad_lines=skip_bad_lines, kinds=kinds)


def describe(o: Outcome, spec: Spec, kinds: list[str], seed: int) -> str:
    return (f"{o.kind} on {spec.name} after {kinds} (seed {seed}): {o.message}\n{o.detail}")
