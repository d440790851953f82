"""Raw traces in, canonical access table out (streamed: memory is bounded by the chunk size).

Each chunk of whole lines is parsed by the format's reader (Polars, vectorised), checked row by
row with errors that name the file, line and field, checked for non-decreasing time, turned
into canonical rows and appended to the Parquet file as one row group. The output is written
to a temporary name and renamed only when the whole input was read without error.

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
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
from flashml.trace.readers import FORMATS, READERS, Reader
from flashml.trace.readers.base import BadLines
from flashml.trace.textio import CHUNK_BYTES, first_data_line, iter_chunks, open_binary

log = logging.getLogger(__name__)
MAX_BLOCK_BYTES = 1 << 40
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
    if not 0 < block_bytes <= MAX_BLOCK_BYTES:
        raise UserError(f"block size must be in 1..{MAX_BLOCK_BYTES} bytes, got {block_bytes}")
    return READERS[fmt](path, block_bytes=block_bytes, **options)


def ingest(src: str | Path, out: str | Path, fmt: str = "tectonic", *,
           sample_ratio: float | None = None, block_bytes: int = UNITS.block_bytes,
           chunk_bytes: int = CHUNK_BYTES, progress: bool | None = None,
           skip_bad_lines: bool = False, **reader_options: Any) -> IngestResult:
    """Ingest `src` (plain, .gz or .zst) of format `fmt` into the canonical Parquet `out`.
    A bad line raises a TraceError naming it; with `skip_bad_lines` it is left out and
    counted (log and `IngestResult.skipped_lines`)."""
    src, out = Path(src), Path(out)
    started = time.perf_counter()
    if chunk_bytes <= 0:
        raise UserError(f"chunk size must be > 0 bytes, got {chunk_bytes}")
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
    try:
        with atomic_path(out) as tmp:
            header_pending = True
            last_time: Any = None
            carry: pl.DataFrame | None = None

            def emit(frame: pl.DataFrame) -> None:
                nonlocal writer, schema, rows
                if frame.is_empty():
                    return
                table = frame.to_arrow()
                if schema is None:
                    schema = arrow_schema(table.schema, meta)
                    writer = pq.ParquetWriter(tmp, schema, compression="zstd")
                assert writer is not None
                writer.write_table(table.select(schema.names).cast(schema))
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
                canon = reader.to_canonical(df)
                horizon = reader.horizon(df)
                if horizon is None:
                    emit(canon)
                    continue
                frame = canon if carry is None else pl.concat([carry, canon])
                if (frame["time"].diff() < 0).any():
                    frame = frame.sort("time", maintain_order=True)
                emit(frame.filter(pl.col("time") <= horizon))
                carry = frame.filter(pl.col("time") > horizon)
            if carry is not None:
                emit(carry)
            if rows == 0:
                why = ""
                if bad.count:
                    why = f" ({bad.count} bad line(s) skipped, the rest had size 0)" \
                        if bad.count < lines else f" (all {lines} were bad and skipped)"
                elif lines:
                    why = " (all had size 0)"
                raise TraceError(src, "no accesses: the trace has no data lines" + why)
            assert writer is not None
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
    if not path.exists():
        raise TraceError(path, "no such file")
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
