"""Whole-object request streams (key, size) for the simulator's object-cache mode.

libCacheSim's model: every request is one object; CloudPhysics requests are keyed by `lbn`
with their `size` in bytes, one row per request (no splitting into blocks).

Formats (`OBJECT_FORMATS`):

- `cloudphysics`: libCacheSim's CloudPhysics CSV `version,time,op,size,lbn` (key = lbn).
- `objects-csv`: the object-trace presets' output (`flashml trace generate --preset cdn-like`)
  and the simplest way in for any other object trace: a header line naming the columns
  `time`, `key` and `size` (in any order; other columns are ignored), then one request per
  line: `time` seconds (a number, non-decreasing), `key` an unsigned 64-bit integer, `size`
  bytes (an integer >= 1). A bad row is an error naming the file, its line and the field.
  `csv` is another name for it.
- `parquet`: a table with `key` and `size` columns (and `time`, if it has one), such as
  `flashml trace ingest --format objects-csv` writes.

`read_objects` returns `key` (u64), `size` (u64) and, where the format has it, `time` (f64).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from flashml.config import HOUR_S
from flashml.errors import TraceError
from flashml.trace.canonical import MAX_TIME_S

# Object-trace formats (flashml/trace/formats.py); `csv` is another name for `objects-csv`
# (`--format cloudphysics|csv|parquet`).
from flashml.trace.formats import OBJECT_FORMATS
from flashml.trace.textio import check_input

OBJECTS_CSV_COLUMNS = ("time", "key", "size")
U64_MAX = (1 << 64) - 1


def read_objects(path: str | Path, fmt: str = "cloudphysics") -> pl.DataFrame:
    """Return a DataFrame with columns `key` (u64) and `size` (u64), plus `time` (f64) where
    the format has one, one row per request. A `TraceError` naming the file (and the line
    or row, and the field) for input it cannot take."""
    path = Path(path)
    check_input(path)
    if fmt == "cloudphysics":
        df = _read_named_csv(path, {"lbn": "u64", "size": "u64"}, {"time": "f64"},
                             "CloudPhysics CSV (version,time,op,size,lbn)", allow_empty=True)
        cols = [pl.col("lbn").alias("key"), pl.col("size")]
        if "time" in df.columns:
            _check_finite_time(path, df, first_line=2)
            cols.append(pl.col("time"))
        return df.select(cols)
    if fmt in ("objects-csv", "csv"):
        return read_objects_csv(path)
    if fmt == "parquet":
        return _read_objects_parquet(path)
    raise TraceError(path, f"unknown object format {fmt!r}; expected one of {OBJECT_FORMATS}",
                     field="format")


# What a damaged Parquet file can raise from Polars: several error types, and its
# PanicException (a Rust panic in its reader; a BaseException, not an Exception).
_UNREADABLE = (Exception, pl.exceptions.PanicException)


def _read_objects_parquet(path: Path) -> pl.DataFrame:
    try:
        return _objects_table(path)
    except TraceError:
        raise
    except _UNREADABLE as e:  # while reading, or on data a damaged file decoded to
        raise TraceError(path, f"cannot read Parquet: {_first_line(e)[:200]}") from None


def _objects_table(path: Path) -> pl.DataFrame:
    df = pl.read_parquet(path)
    for col in ("key", "size"):
        if col not in df.columns:
            raise TraceError(path, "missing column", field=col)
        s = df[col]
        if not s.dtype.is_integer():
            raise TraceError(path, f"column type {s.dtype}, expected unsigned integers",
                             field=col)
        if s.null_count():
            row = int(s.is_null().arg_max() or 0)
            raise TraceError(path, f"null {col} in row {row + 1}", field=col)
        if s.dtype.is_signed_integer() and (s < 0).any():
            row = int((s < 0).arg_max() or 0)
            raise TraceError(path, f"negative {col} {s[row]} in row {row + 1}", field=col)
    cols = [pl.col("key").cast(pl.UInt64), pl.col("size").cast(pl.UInt64)]
    if "time" in df.columns:
        if not df["time"].dtype.is_numeric():
            raise TraceError(path, f"column type {df['time'].dtype}, expected numbers",
                             field="time")
        df = df.with_columns(pl.col("time").cast(pl.Float64))
        _check_finite_time(path, df, first_line=None)
        cols.append(pl.col("time"))
    return df.select(cols)


def _check_finite_time(path: Path, df: pl.DataFrame, first_line: int | None) -> None:
    """A TraceError for the first time that is null, NaN or infinite (line = row +
    first_line, or 'row N' for a table)."""
    bad = ~(df["time"].abs() <= MAX_TIME_S).fill_null(False)
    if bad.any():
        row = int(bad.arg_max() or 0)
        where = {"line": row + first_line} if first_line else {}
        what = f" in row {row + 1}" if first_line is None else ""
        raise TraceError(path, f"time must be a finite number within {MAX_TIME_S:g} s of the "
                         f"epoch, found {df['time'][row]}{what}", field="time", **where)


# --- CSV with a header naming the columns ------------------------------------------------------

_POLARS = {"u64": pl.UInt64, "f64": pl.Float64}
_U64 = re.compile(r"[0-9]+")
_F64 = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
                  r"|[+-]?(?i:inf|infinity|nan)")


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _read_named_csv(path: Path, required: dict[str, str], optional: dict[str, str],
                    what: str, *, allow_empty: bool = False) -> pl.DataFrame:
    """The `required` and present `optional` columns (name -> 'u64' | 'f64') of a
    comma-separated file whose first line names its columns; row i is line i + 2. Blank
    lines at the end are ignored; anything else that does not parse is a TraceError naming
    the line and the field."""
    with open(path, "rb") as f:
        first = f.readline().decode("utf-8", "replace").rstrip("\r\n")
    if not first.strip():
        raise TraceError(path, f"empty file: expected a header line naming the columns of a "
                         f"{what}", line=1)
    header = first.split(",")
    if len(set(header)) != len(header):
        dup = next(h for h in header if header.count(h) > 1)
        raise TraceError(path, "column named twice in the header", line=1, field=dup)
    for col in required:
        if col not in header:
            raise TraceError(path, f"missing column (header {first!r}; a {what} needs "
                             f"{', '.join(required)})", line=1, field=col)
    kinds = {c: k for c, k in (required | optional).items() if c in header}
    try:
        df = pl.read_csv(path, has_header=True, columns=list(kinds), quote_char=None,
                         schema_overrides={c: _POLARS[k] for c, k in kinds.items()})
    except (pl.exceptions.PolarsError, OSError, UnicodeDecodeError):
        df = None
    if df is not None:
        df = _drop_trailing_blank_lines(path, df)
    if df is None or df.null_count().sum_horizontal().item() > 0:
        _locate_csv_error(path, header, kinds)  # raises for the first bad line
        raise TraceError(path, f"cannot parse as a {what}")
    if df.height == 0 and not allow_empty:
        raise TraceError(path, "no requests (only a header line)", line=2)
    return df


def _drop_trailing_blank_lines(path: Path, df: pl.DataFrame) -> pl.DataFrame:
    """Polars reads a blank last line as a row of nulls: drop such rows where the file really
    ends in that many blank lines."""
    nulls = df.select(pl.all_horizontal(pl.all().is_null())).to_series()
    k = 0
    while k < nulls.len() and nulls[nulls.len() - 1 - k]:
        k += 1
    if k == 0:
        return df
    with open(path, "rb") as f:
        f.seek(0, 2)
        f.seek(max(0, f.tell() - 4 * (k + 2) - 4096))
        tail = f.read().split(b"\n")
    tail = tail[:-1] if tail and tail[-1] == b"" else tail  # the final newline
    if len(tail) > k and all(not t.strip() for t in tail[-k:]):
        return df.head(df.height - k)
    return df


def _locate_csv_error(path: Path, header: list[str], kinds: dict[str, str]) -> None:
    """Slow path: raise for the first data line that does not parse (wrong field count, a
    number that is not one, an unsigned integer out of range)."""
    where = {c: header.index(c) for c in kinds}
    with open(path, "rb") as f:
        f.readline()
        lineno = 1
        for raw in f:
            lineno += 1
            raw = raw[:-1] if raw.endswith(b"\n") else raw
            raw = raw[:-1] if raw.endswith(b"\r") else raw  # one \r, as Polars strips
            for i, part in enumerate(raw.split(b",")):
                try:
                    part.decode("utf-8")
                except UnicodeDecodeError:
                    raise TraceError(path, "not UTF-8 text", line=lineno,
                                     field=header[min(i, len(header) - 1)]) from None
            text = raw.decode("utf-8")
            fields = text.split(",")
            if len(fields) != len(header):
                if not text.strip():
                    if not any(ln.strip() for ln in f):
                        return  # blank lines at the end
                    raise TraceError(path, f"blank line (expected {len(header)} fields "
                                     f"{','.join(header)})", line=lineno, field=header[0])
                field = header[min(len(fields), len(header) - 1)]
                raise TraceError(path, f"expected {len(header)} fields ({','.join(header)}), "
                                 f"found {len(fields)}", line=lineno, field=field)
            for col, kind in kinds.items():
                _check_value(path, lineno, col, kind, fields[where[col]])


def _check_value(path: Path, lineno: int, col: str, kind: str, text: str) -> None:
    if kind == "f64":
        if not _F64.fullmatch(text):
            raise TraceError(path, f"expected a number, found {text[:40]!r}", line=lineno,
                             field=col)
        return
    if text.startswith("-") and _U64.fullmatch(text[1:]):
        raise TraceError(path, f"negative {col} {text}", line=lineno, field=col)
    if not _U64.fullmatch(text):
        raise TraceError(path, f"expected an integer, found {text[:40]!r}", line=lineno,
                         field=col)
    if int(text) > U64_MAX:
        raise TraceError(path, f"{col} {text} does not fit in 64 bits", line=lineno,
                         field=col)


# --- objects-csv ----------------------------------------------------------------------------


def read_objects_csv(path: str | Path) -> pl.DataFrame:
    """An `objects-csv` trace (module docstring) as (key u64, size u64, time f64); a
    `TraceError` naming the file, line and field for the first bad row."""
    path = Path(path)
    check_input(path)
    df = _read_named_csv(path, {"time": "f64", "key": "u64", "size": "u64"}, {},
                         "objects-csv trace (time,key,size)")
    df = df.with_row_index("_row")
    checks = [
        (pl.col("size") == 0, "size", "size must be >= 1 byte, found 0"),
        (~(pl.col("time").abs() <= MAX_TIME_S), "time", "time must be a finite number within "
         f"{MAX_TIME_S:g} s of the epoch, found {{value}}"),
        (pl.col("time") < pl.col("time").shift(1), "time", "time goes backwards ({value} after "
         "{prev})"),
    ]
    first_bad: tuple[int, str, str] | None = None
    for expr, field, msg in checks:
        idx = df.select(pl.arg_where(expr).first()).item()
        if idx is not None and (first_bad is None or idx < first_bad[0]):
            first_bad = (idx, field, msg)
    if first_bad is not None:
        idx, field, msg = first_bad
        value = df[field][idx]
        prev = df[field][idx - 1] if idx > 0 else None
        raise TraceError(path, msg.format(value=value, prev=prev), line=idx + 2, field=field)
    return df.select("key", "size", "time")


def write_objects_csv(df: pl.DataFrame, path: str | Path) -> Path:
    """Write (time, key, size) as an `objects-csv` trace, atomically."""
    from flashml.files import atomic_path

    path = Path(path)
    with atomic_path(path) as tmp:
        df.select(*OBJECTS_CSV_COLUMNS).write_csv(tmp, quote_style="never")
    return path


# --- statistics -----------------------------------------------------------------------------


def object_stats(df: pl.DataFrame, *, window_s: float | None = None,
                 top_k: int = 100) -> dict[str, Any]:
    """Statistics of an object trace (key, size[, time]): what the docs' object-preset
    sections report. Sizes are per object (its first request's size).

    requests, objects, unique_bytes (total size of the distinct objects, the working set),
    requests_per_object, compulsory_miss_ratio (objects / requests), one_hit_wonder_rate
    (objects requested once / objects), size_p10/p50/p90/p99/max (bytes, over objects),
    mean_request_bytes, zipf_slope (minus the slope of log count vs log rank over the 1000
    most requested objects), top1pct_request_share (requests to the 1% most requested
    objects), and with `time`: duration_h, request_rate_per_s, peak_to_mean_hourly, and for
    `window_s`, hot_set_kept (mean over consecutive windows of that length of the fraction
    of a window's `top_k` most requested objects still among the next window's `top_k`).
    """
    per = (df.lazy().group_by("key")
           .agg(n=pl.len(), size=pl.col("size").first()).collect())
    counts = np.sort(per["n"].to_numpy())[::-1]
    sizes = per["size"].to_numpy().astype(np.float64)
    top = counts[:1000].astype(np.float64)
    slope = (-float(np.polyfit(np.log(np.arange(1, top.size + 1)), np.log(top), 1)[0])
             if top.size >= 2 else math.nan)
    n_top = max(1, int(round(0.01 * counts.size)))
    p10, p50, p90, p99 = np.percentile(sizes, [10, 50, 90, 99])
    st: dict[str, Any] = {
        "requests": df.height,
        "objects": per.height,
        "unique_bytes": int(per["size"].sum()),
        "requests_per_object": df.height / max(per.height, 1),
        "compulsory_miss_ratio": per.height / max(df.height, 1),
        "one_hit_wonder_rate": float((counts == 1).mean()),
        "size_p10": float(p10), "size_p50": float(p50), "size_p90": float(p90),
        "size_p99": float(p99), "size_max": float(sizes.max()),
        "mean_request_bytes": float(df["size"].mean()),
        "zipf_slope": slope,
        "top1pct_request_share": float(counts[:n_top].sum() / max(df.height, 1)),
    }
    if "time" in df.columns:
        t = df["time"].to_numpy()
        dur = float(t[-1] - t[0])
        st["duration_h"] = dur / HOUR_S
        st["request_rate_per_s"] = df.height / dur if dur > 0 else math.nan
        hours = np.bincount(((t - t[0]) // HOUR_S).astype(np.int64))
        full = hours[:-1] if hours.size > 1 else hours  # the last hour is partial
        st["peak_to_mean_hourly"] = float(full.max() / full.mean())
        if window_s:
            st["hot_set_kept"] = _hot_set_kept(df, window_s, top_k)
    return st


def _hot_set_kept(df: pl.DataFrame, window_s: float, top_k: int) -> float:
    t0 = df["time"][0]
    tops = (df.lazy()
            .with_columns(w=((pl.col("time") - t0) // window_s).cast(pl.Int64))
            .group_by("w", "key").len()
            .sort(["w", "len", "key"], descending=[False, True, False])
            .group_by("w", maintain_order=True).head(top_k)
            .group_by("w").agg(pl.col("key"))
            .sort("w").collect())
    sets = [set(k) for k in tops["key"].to_list()]
    kept = [len(a & b) / max(len(a), 1) for a, b in zip(sets, sets[1:], strict=False)]
    return float(np.mean(kept)) if kept else math.nan
