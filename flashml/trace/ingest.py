"""Raw traces in, canonical access table out (streamed: memory is bounded by the chunk size).

Each chunk of whole lines is parsed by the format's reader (Polars, vectorised), checked row by
row with errors that name the file, line and field, checked for non-decreasing time, turned
into canonical rows and appended to the Parquet file. The output is written to a temporary
name and renamed only when the whole input was read without error.

Memory is O(chunk) by construction. Every expansion has a cap checked before anything is
built: a chunk is at most MAX_CHUNK_BYTES; a line's op_count at most MAX_OP_COUNT (2^20); an
IO at most MAX_IO_BYTES (4 GiB), cut into blocks of at least MIN_BLOCK_BYTES (128 KiB), so
into at most MAX_BLOCKS_PER_IO rows; and the whole trace at most `max_expansion`
(`--max-expansion`, default DEFAULT_MAX_EXPANSION) accesses per line beyond its first
FREE_ACCESSES. How many rows each line becomes is counted first (`Reader.expansion`); the
rows are then built and written in slices of at most ROW_BUDGET accesses (op_count repeats
through `spread.Spreader`, which holds one row per pending line, not its repeats).

A bad line (one that does not parse, fails a row check, or goes back in time) stops the
ingest with an error naming the file, the line and the field, wherever it is: first, middle
or last chunk, a last line cut short included. With `skip_bad_lines` (`--skip-bad-lines`)
such lines are left out instead, and counted: in the log (the first few with their reason)
and in the result (`IngestResult.skipped_lines`).
"""

from __future__ import annotations

import glob
import logging
import math
import re
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

from flashml.config import UNITS
from flashml.errors import TraceError, UserError
from flashml.files import atomic_path
from flashml.trace.canonical import (
    TraceMeta,
    arrow_schema,
    read_table,
    resolve_sample_ratio,
    with_sample_ratio,
)
from flashml.trace.limits import (
    CHUNK_BYTES,
    DEFAULT_MAX_EXPANSION,
    FREE_ACCESSES,
    MAX_BLOCK_BYTES,
    MAX_CHUNK_BYTES,
    MAX_MAX_EXPANSION,
    MIN_BLOCK_BYTES,
)
from flashml.trace.readers import FORMATS, READERS, Reader
from flashml.trace.readers.base import MAX_BLOCKS_PER_IO, BadLines, check_block_bytes
from flashml.trace.spread import ROW_BUDGET, Spreader
from flashml.trace.textio import (
    check_input,
    first_data_line,
    iter_chunks,
    open_binary,
)

log = logging.getLogger(__name__)
__all__ = ["DEFAULT_MAX_EXPANSION", "FREE_ACCESSES", "MAX_BLOCK_BYTES", "MAX_BLOCKS_PER_IO",
           "MAX_CHUNK_BYTES", "MAX_MAX_EXPANSION", "MIN_BLOCK_BYTES", "ROW_BUDGET",
           "IngestResult", "ingest", "load_trace", "canonical_path"]
_FLASHML_COMMENT = re.compile(r"^#\s*flashml:\s*(.*)$")


@dataclass
class IngestResult:
    out: Path
    meta: TraceMeta
    rows: int
    lines: int
    dropped_zero_size: int
    seconds: float
    details: dict[str, Any] = field(default_factory=dict)
    skipped_lines: int = 0
    """Bad lines left out (`skip_bad_lines`); their first few reasons are in
    `details["skipped_examples"]`."""

    @property
    def lines_per_s(self) -> float:
        return self.lines / self.seconds if self.seconds > 0 else math.inf


def comment_settings(comments: list[str]) -> dict[str, str]:
    """`# flashml: key=value key=value` comment lines (written by `flashml trace generate`)."""
    out: dict[str, str] = {}
    for c in comments:
        m = _FLASHML_COMMENT.match(c)
        if m:
            for tok in m.group(1).split():
                if "=" in tok:
                    k, v = tok.split("=", 1)
                    out[k] = v
    return out


def make_reader(fmt: str, path: Path, *, block_bytes: int = UNITS.block_bytes,
                **options: Any) -> Reader:
    if fmt not in READERS:
        raise UserError(f"unknown trace format {fmt!r}; choose one of {', '.join(FORMATS)}")
    check_block_bytes(block_bytes)
    return READERS[fmt](path, block_bytes=block_bytes, **options)


def ingest(src: str | Path, out: str | Path, fmt: str = "tectonic", *,
           sample_ratio: float | None = None, block_bytes: int = UNITS.block_bytes,
           chunk_bytes: int = CHUNK_BYTES, progress: bool | None = None,
           skip_bad_lines: bool = False, max_expansion: int = DEFAULT_MAX_EXPANSION,
           row_budget: int = ROW_BUDGET, **reader_options: Any) -> IngestResult:
    """Ingest `src` (plain, .gz or .zst) of format `fmt` into the canonical Parquet `out`.
    A bad line raises a TraceError naming it; with `skip_bad_lines` it is left out and
    counted (log and `IngestResult.skipped_lines`). Memory is bounded by `chunk_bytes`
    and `row_budget` (accesses built at once); `max_expansion` caps the accesses per line
    (module doc)."""
    src, out = Path(src), Path(out)
    started = time.perf_counter()
    if not (isinstance(chunk_bytes, int) and 0 < chunk_bytes <= MAX_CHUNK_BYTES):
        raise UserError(f"chunk size must be in 1..{MAX_CHUNK_BYTES} bytes (--chunk-mb "
                        f"1..{MAX_CHUNK_BYTES >> 20}), got {chunk_bytes!r}")
    if not (isinstance(max_expansion, int) and 1 <= max_expansion <= MAX_MAX_EXPANSION):
        raise UserError(f"--max-expansion must be an integer number of accesses per line in "
                        f"1..{MAX_MAX_EXPANSION}, got {max_expansion!r}")
    row_budget = max(1, int(row_budget))  # one line may exceed it: built alone, <= 2^20 rows
    expanded = 0
    bad = BadLines(src, skip=skip_bad_lines)
    reader = make_reader(fmt, src, block_bytes=block_bytes, **reader_options)
    first, comments = first_data_line(src)
    reader.detect(first, comments)
    from_comments = comment_settings(comments).get("sample_ratio")
    recorded = None
    if from_comments is not None:
        try:
            recorded = float(from_comments)
        except ValueError:
            if sample_ratio is None:
                raise TraceError(src, f"bad sample_ratio {from_comments!r} in '# flashml:' "
                                 "comment", field="sample_ratio") from None
    ratio = resolve_sample_ratio(sample_ratio, src, recorded=recorded)
    meta = TraceMeta(sample_ratio=ratio, source_format=fmt, block_bytes=block_bytes,
                     source_file=src.name)

    _remove_stale_temporaries(out)
    stream, raw = open_binary(src)
    total = src.stat().st_size
    bar = tqdm(total=total, unit="B", unit_scale=True, desc=f"ingest {src.name}",
               disable=(not progress) if progress is not None else None, leave=False)
    rows = lines = 0
    writer: pq.ParquetWriter | None = None
    schema: pa.Schema | None = None
    pending: Future[None] | None = None
    try:
        # each batch is compressed and written on a thread of its own while the next chunk
        # is parsed (Arrow's writer lets go of the GIL: at 10 M accesses a third of the
        # ingest was the zstd writes); one write in flight at a time, in order, and none
        # outlives the temporary file (the pool ends, waiting, before `atomic_path` does)
        with atomic_path(out) as tmp, \
                ThreadPoolExecutor(max_workers=1, thread_name_prefix="ingest-write") as writes:
            header_pending = True
            last_time: Any = None
            spreader = Spreader(src, budget=row_budget) if reader.spreads else None

            def emit(frame: pl.DataFrame) -> None:
                nonlocal writer, schema, rows, pending
                if frame.is_empty():
                    return
                table = frame.to_arrow()
                if schema is None:
                    schema = arrow_schema(table.schema, meta)
                    writer = pq.ParquetWriter(tmp, schema, compression="zstd")
                assert writer is not None
                if pending is not None:
                    pending.result()
                pending = writes.submit(writer.write_table,
                                        table.select(schema.names).cast(schema))
                rows += len(frame)

            for chunk in iter_chunks(stream, src, chunk_bytes):
                bar.update(raw.tell() - bar.n)
                if header_pending and len(chunk.line_numbers):
                    head, _, rest = chunk.data.partition(b"\n")
                    if reader.is_header(head.decode("utf-8", "replace")):
                        chunk.data, chunk.line_numbers = rest, chunk.line_numbers[1:]
                    header_pending = False
                if not len(chunk.line_numbers):
                    continue
                lines += len(chunk.line_numbers)
                df = reader.parse(chunk, bad)
                df = reader.validate(df, bad)
                df, last_time = _check_time_order(reader, df, last_time, bad)
                if df.is_empty():
                    continue
                counts = reader.expansion(df)
                _check_expansion(reader, df, counts, expanded, max_expansion)
                expanded += int(counts.sum())
                for lo, hi in _slices(counts, row_budget):
                    part = df.slice(lo, hi - lo)
                    if spreader is None:
                        emit(reader.to_canonical(part))
                        continue
                    # later lines start no earlier than this slice's last: what is due by
                    # then is final
                    spreader.add(reader.to_canonical(part))
                    for batch in spreader.until(float(part[reader.time_column][-1])):
                        emit(batch)
            if spreader is not None:
                for batch in spreader.until(None):
                    emit(batch)
            if rows == 0:
                why = ""
                if bad.count:
                    why = f" ({bad.count} bad line(s) skipped, the rest had size 0)" \
                        if bad.count < lines else f" (all {lines} were bad and skipped)"
                elif lines:
                    why = " (all had size 0)"
                raise TraceError(src, "no accesses: the trace has no data lines" + why)
            assert writer is not None and pending is not None
            pending.result()
            writer.close()
            writer = None
    finally:
        if writer is not None:
            writer.close()
        bar.close()
        stream.close()
        raw.close()
    result = IngestResult(out=out, meta=meta, rows=rows, lines=lines,
                          dropped_zero_size=reader.dropped_zero_size,
                          seconds=time.perf_counter() - started,
                          details={"schema": getattr(reader, "schema", fmt),
                                   "skipped_examples": list(bad.examples)},
                          skipped_lines=bad.count)
    log.info("ingested %s (%s%s): %d lines -> %d accesses in %.2fs (%.0f lines/s), "
             "sample ratio %g%%, %d zero-size IOs dropped, %d bad lines skipped -> %s", src, fmt,
             f" {result.details['schema']}" if result.details["schema"] != fmt else "",
             lines, rows, result.seconds, result.lines_per_s, ratio, result.dropped_zero_size,
             bad.count, out)
    if bad.count:
        log.warning("skipped %d bad line(s) of %d in %s (--skip-bad-lines); the first: %s",
                    bad.count, lines, src, bad.examples[0])
    return result


def _check_expansion(reader: Reader, df: pl.DataFrame, counts: np.ndarray, before: int,
                     max_expansion: int) -> None:
    """Refuse (before building them) the first row whose accesses would bring the trace
    beyond max(FREE_ACCESSES, max_expansion x its line number) accesses."""
    total = before + np.cumsum(counts)
    line = df["src_line"].to_numpy().astype(np.int64)
    over = total > np.maximum(FREE_ACCESSES, max_expansion * line)
    if not over.any():
        return
    i = int(np.argmax(over))
    field = "op_count" if "op_count" in df.columns else reader.shown(reader.time_column)
    for name in ("Size", "size", getattr(reader, "src", {}).get("size", "")):
        if field != "op_count" and name in df.columns:
            field = reader.shown(name)
    raise TraceError(reader.path, f"this line brings the trace to {int(total[i]):,} accesses "
                     f"from {int(line[i]):,} lines (op_count repeats and IOs split into "
                     f"blocks), more than --max-expansion {max_expansion} accesses per line "
                     f"beyond the first {FREE_ACCESSES:,}; raise --max-expansion (at most "
                     f"{MAX_MAX_EXPANSION}) if the trace is genuine",
                     line=int(line[i]), field=field)


def _slices(counts: np.ndarray, budget: int) -> Iterator[tuple[int, int]]:
    """[lo, hi) row ranges whose accesses (counts) add up to at most `budget` each (or one
    row, if that alone is more)."""
    cum = np.cumsum(counts)
    lo, n = 0, len(counts)
    while lo < n:
        base = int(cum[lo - 1]) if lo else 0
        hi = max(int(np.searchsorted(cum, base + budget, side="right")), lo + 1)
        yield lo, min(hi, n)
        lo = hi


STALE_TEMPORARY_S = 600.0
"""A temporary output untouched this long belongs to an ingest that died (kill -9, power
loss): a live one gets a row group every chunk, well within a second or two."""


def _remove_stale_temporaries(out: Path) -> None:
    """Remove what killed ingests into `out` left behind (`files.atomic_path`'s temporary
    `.NAME.*.tmp` beside it); never a finished-looking file, and never a live one."""
    if not out.parent.is_dir():
        return
    now = time.time()
    for p in out.parent.glob(f".{glob.escape(out.name)}.*.tmp"):
        try:
            if p.is_file() and now - p.stat().st_mtime > STALE_TEMPORARY_S:
                p.unlink()
                log.info("removed %s, left by an earlier ingest that did not finish", p)
        except OSError:
            pass


def _check_time_order(reader: Reader, df: pl.DataFrame, last_time: Any,
                      bad: BadLines) -> tuple[pl.DataFrame, Any]:
    """Raise at the first time smaller than its predecessor (in the source's own type, so
    integer timestamps such as filetimes are compared exactly); in skip mode every access
    earlier than the latest time before it is counted and left out. Returns the rows kept
    and the latest time so far."""
    if df.is_empty():
        return df, last_time
    t = df[reader.time_column]
    if not bad.skip:
        prev = t.shift(1)
        flags = (t < prev).fill_null(False)
        if last_time is not None:
            flags[0] = bool(t[0] < last_time)
        idx = flags.arg_true()
        if len(idx):
            i = int(idx[0])
            before = prev[i] if i > 0 else last_time
            raise TraceError(reader.path, f"time goes backwards: {t[i]!r} after {before!r} "
                             "(timestamps must be non-decreasing)",
                             line=int(df["src_line"][i]), field=reader.shown(reader.time_column))
        return df, t[-1]
    latest = t.cum_max().shift(1)
    if last_time is not None:
        latest = latest.fill_null(last_time).clip(lower_bound=last_time)
    flags = (t < latest).fill_null(False)
    for i in flags.arg_true().to_list():
        bad.reject(TraceError(reader.path, f"time goes backwards: {t[i]!r} after "
                              f"{latest[i]!r} (timestamps must be non-decreasing)",
                              line=int(df["src_line"][i]), field=reader.shown(reader.time_column)))
    df = df.filter(~flags)
    return df, (df[reader.time_column][-1] if len(df) else last_time)


def is_parquet(path: Path) -> bool:
    """Whether `path` is a canonical Parquet table (by suffix or magic bytes). A path that is
    not a regular file is a TraceError here, before anything opens it (a FIFO would block)."""
    check_input(path)
    if path.suffix == ".parquet":
        return True
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"PAR1"
    except OSError:
        return False


@contextmanager
def canonical_path(path: str | Path, fmt: str | None = None, *,
                   sample_ratio: float | None = None, workdir: str | Path | None = None,
                   **options: Any) -> Iterator[tuple[Path, IngestResult | None]]:
    """Any trace as a canonical table on disk, for the `with` block: canonical Parquet is used
    as is; a raw trace (`fmt`, default tectonic) is ingested into a temporary folder (in
    `workdir`, else the system's) removed afterwards. Yields (table path, the IngestResult or
    None). `sample_ratio` and `options` (reader options, `progress`) go to ingest; a canonical
    table's sample-ratio override is the caller's (`with_sample_ratio`)."""
    path = Path(path)
    check_input(path)
    if is_parquet(path) and fmt in (None, "parquet"):
        yield path, None
        return
    if workdir is not None:
        Path(workdir).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".flashml-ingest-", dir=workdir) as tmp:
        res = ingest(path, Path(tmp) / "trace.parquet", fmt or "tectonic",
                     sample_ratio=sample_ratio, **options)
        yield res.out, res


def load_trace(path: str | Path, fmt: str | None = None, *, sample_ratio: float | None = None,
               **reader_options: Any) -> tuple[pl.DataFrame, TraceMeta]:
    """Any trace as a canonical DataFrame: canonical Parquet is read as is, a raw trace is
    ingested first (`fmt`, default tectonic). `sample_ratio` overrides the recorded one."""
    with canonical_path(path, fmt, sample_ratio=sample_ratio, **reader_options) as (table, res):
        if res is not None:
            return pl.read_parquet(table), res.meta
        df, meta = read_table(table)
        return df, with_sample_ratio(meta, sample_ratio, table)
