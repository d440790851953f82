"""The canonical access table: one row per access, the same columns whatever the source.

Columns (in this order), then any `src_*` columns of the source format:

| column      | type   | meaning                                                       |
|-------------|--------|---------------------------------------------------------------|
| `time`      | f64    | seconds (Unix seconds where the source has an epoch)          |
| `key`       | u64    | cache key: the block (and host/shard where the source has one) |
| `offset`    | u64    | byte offset of the access inside its block                    |
| `size`      | u64    | bytes; `offset + size <= block size`                          |
| `op`        | u8     | Tectonic op code (`flashml.config.OPS`)                       |
| `namespace` | u32    | namespace / tenant id                                         |
| `user`      | u32    | user id                                                       |
| `src_line`  | u64    | 1-based line number of the source line the access came from   |

Parquet key-value metadata records the sample ratio, the source format and the block size.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from flashml.config import UNITS
from flashml.errors import TraceError
from flashml.files import atomic_path
from flashml.trace.limits import MIN_SAMPLE_RATIO
from flashml.trace.textio import check_input

CORE_SCHEMA: dict[str, pl.DataType] = {
    "time": pl.Float64(),
    "key": pl.UInt64(),
    "offset": pl.UInt64(),
    "size": pl.UInt64(),
    "op": pl.UInt8(),
    "namespace": pl.UInt32(),
    "user": pl.UInt32(),
    "src_line": pl.UInt64(),
}
CORE_COLUMNS: tuple[str, ...] = tuple(CORE_SCHEMA)
MAX_TIME_S = 1e12
"""The largest |time| in seconds (as `readers.base.MAX_TIME_S`, which is this one)."""

META_PREFIX = "flashml."
SCHEMA_VERSION = "1"

_ARTIFACT_NAME = re.compile(r"full_(?P<start>\d+(?:\.\d+)?)_(?P<ratio>\d+(?:\.\d+)?)\.trace")


@dataclass(frozen=True)
class TraceMeta:
    sample_ratio: float = 100.0
    source_format: str = "unknown"
    block_bytes: int = UNITS.block_bytes
    source_file: str = ""

    def to_kv(self) -> dict[bytes, bytes]:
        d = {
            "sample_ratio": repr(float(self.sample_ratio)),
            "source_format": self.source_format,
            "block_bytes": str(int(self.block_bytes)),
            "source_file": self.source_file,
            "schema_version": SCHEMA_VERSION,
        }
        return {(META_PREFIX + k).encode(): v.encode() for k, v in d.items()}

    @classmethod
    def from_kv(cls, kv: dict[bytes, bytes] | None) -> TraceMeta:
        kv = kv or {}
        g = {k.decode(): v.decode() for k, v in kv.items() if k.startswith(META_PREFIX.encode())}
        return cls(
            sample_ratio=float(g.get(META_PREFIX + "sample_ratio", 100.0)),
            source_format=g.get(META_PREFIX + "source_format", "unknown"),
            block_bytes=int(g.get(META_PREFIX + "block_bytes", UNITS.block_bytes)),
            source_file=g.get(META_PREFIX + "source_file", ""),
        )

    def as_json(self) -> str:
        return json.dumps(self.__dict__)


def sample_ratio_from_name(path: str | os.PathLike[str]) -> float | None:
    """The sample ratio (percent) of an artifact-style file name `full_<start>_<ratio>.trace`."""
    m = _ARTIFACT_NAME.search(Path(path).name)
    return float(m.group("ratio")) if m else None


def resolve_sample_ratio(explicit: float | None, path: str | os.PathLike[str],
                         meta: TraceMeta | None = None, *,
                         recorded: float | None = None) -> float:
    """The one rule for a trace's sample ratio (percent): --sample-ratio if given, else what
    the trace records (a canonical table's metadata `meta`, or a raw trace's `# flashml:`
    comment, `recorded`), else the artifact file name full_<start>_<ratio>.trace, else 100."""
    if explicit is not None:
        ratio = float(explicit)
    elif meta is not None and meta.source_format != "unknown":
        ratio = meta.sample_ratio
    elif recorded is not None:
        ratio = float(recorded)
    else:
        ratio = sample_ratio_from_name(path) or 100.0
    if not (math.isfinite(ratio) and MIN_SAMPLE_RATIO <= ratio <= 100.0):
        raise TraceError(path, f"sample ratio must be a percentage in [{MIN_SAMPLE_RATIO:g}, "
                         f"100] (rates are scaled by 100 / ratio), got {ratio!r}",
                         field="sample_ratio")
    return ratio


def with_sample_ratio(meta: TraceMeta, explicit: float | None,
                      path: str | os.PathLike[str]) -> TraceMeta:
    """A canonical table's metadata with its sample ratio resolved (`resolve_sample_ratio`)."""
    return replace(meta, sample_ratio=resolve_sample_ratio(explicit, path, meta))


def arrow_schema(extra: pa.Schema | None = None, meta: TraceMeta | None = None) -> pa.Schema:
    fields = [pa.field(n, pl.select(pl.lit(None, dtype=t)).to_arrow().schema[0].type)
              for n, t in CORE_SCHEMA.items()]
    if extra is not None:
        fields += [f for f in extra if f.name not in CORE_SCHEMA]
    return pa.schema(fields, metadata=(meta or TraceMeta()).to_kv())


# What a damaged Parquet file can raise from Arrow or Polars (Polars' PanicException, a Rust
# panic in its reader, is a BaseException).
_UNREADABLE = (OSError, ValueError, pa.ArrowException, pl.exceptions.PolarsError,
               pl.exceptions.PanicException)


def _short(e: BaseException) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return text[:200]


def read_meta(path: str | os.PathLike[str]) -> TraceMeta:
    try:
        md = pq.read_schema(path).metadata
        return TraceMeta.from_kv(md)
    except _UNREADABLE as e:  # UnicodeDecodeError and bad numbers are ValueErrors
        raise TraceError(path, f"not a readable Parquet file ({_short(e)})") from None


def read_table(path: str | os.PathLike[str], *, core_only: bool = False
               ) -> tuple[pl.DataFrame, TraceMeta]:
    """Read a canonical table and its metadata; checks that the core columns are present,
    of their types (or castable to them) and without nulls. A damaged file is a TraceError
    naming it. `core_only`: only the core columns (`CORE_COLUMNS`: what the simulator and
    the features read), not the source's (`src_line`, ...: 24 of a row's 57 bytes)."""
    path = Path(path)
    check_input(path)
    meta = read_meta(path)
    try:
        columns = [c for c in pl.read_parquet_schema(path) if c in CORE_SCHEMA] \
            if core_only else None
        # one chunk per column: the simulator borrows each column as a NumPy array, which
        # copies a column of several chunks on every call (at 10 M accesses, 32 row groups:
        # 0.24 s per column per simulation)
        df = pl.read_parquet(path, columns=columns).rechunk()
    except _UNREADABLE as e:
        raise TraceError(path, f"not a readable Parquet file ({_short(e)})") from None
    return _checked(df, path), meta


def _checked(df: pl.DataFrame, path: Path, first_row: int = 0) -> pl.DataFrame:
    """`df` (rows `first_row`.. of the table at `path`) with the core columns of their types,
    checked: present, castable, without nulls, times in range (`check_times`)."""
    missing = [c for c in CORE_COLUMNS if c not in df.columns]
    if missing:
        raise TraceError(path, f"not a canonical access table: missing column(s) {missing}",
                         field=missing[0])
    for name, dtype in CORE_SCHEMA.items():
        if df.schema[name] != dtype:
            try:
                df = df.with_columns(df[name].cast(dtype, strict=True))
            except _UNREADABLE:
                raise TraceError(path, f"not a canonical access table: column {name} is "
                                 f"{df.schema[name]}, not {dtype}", field=name) from None
    nulls = df.select(CORE_COLUMNS).null_count().row(0, named=True)
    bad = [c for c in CORE_COLUMNS if nulls[c]]
    if bad:
        raise TraceError(path, f"not a canonical access table: {nulls[bad[0]]} null value(s)",
                         field=bad[0])
    check_times(df, path, first_row)
    return df


#: The name of `mapped_table`'s copies of a table's core columns.
MAPPED_GLOB = "core-columns-*.bin"
#: Rows read, checked and written at a time by `mapped_table`'s first call.
MAPPED_BATCH_ROWS = 1 << 20
#: Alignment of each column in the copy (bytes: a cache line, and every type's width).
_ALIGN = 64


def _core_types() -> dict[str, tuple[np.dtype, pa.DataType]]:
    """Each core column's NumPy and Arrow type (from `CORE_SCHEMA`)."""
    out = {}
    for name, dtype in CORE_SCHEMA.items():
        empty = pl.Series(name, [], dtype=dtype)
        out[name] = (empty.to_numpy().dtype, empty.to_arrow().type)
    return out


_CORE_TYPES = _core_types()


def _layout(rows: int) -> tuple[dict[str, int], int]:
    """Each core column's byte offset in `mapped_table`'s copy of `rows` rows, and its size:
    the columns one after another in `CORE_COLUMNS`' order, each aligned to `_ALIGN`."""
    offsets, end = {}, 0
    for name, (np_type, _) in _CORE_TYPES.items():
        offsets[name] = end
        end += -(-rows * np_type.itemsize // _ALIGN) * _ALIGN
    return offsets, end


def mapped_table(path: str | os.PathLike[str], folder: str | os.PathLike[str]
                 ) -> tuple[pl.DataFrame, TraceMeta]:
    """`read_table(path, core_only=True)`, its columns mapped from a file instead of held:
    the first call writes them, checked as `read_table` checks them, a batch of rows at a
    time (`MAPPED_BATCH_ROWS`), into a file in `folder` that holds each column as one
    contiguous array (`_layout`), named by the table file's identity (inode, size,
    modification time: a re-ingested table is a new file) and replacing the older ones;
    every call maps that file. Each column's NumPy view is then a read-only window on the
    file's pages, which the kernel can take back under memory pressure, where a read table
    is the process's own memory (10 M accesses: a 0.47 GB frame whose Parquet decode held
    1.1-1.4 GB; 100 M: 4.1 GB, 9.4 GB at its peak); the copy itself is written in the
    memory of one batch."""
    path, folder = Path(path), Path(folder)
    check_input(path)
    meta = read_meta(path)
    st = path.stat()
    mapped = folder / MAPPED_GLOB.replace("*", f"{st.st_ino}-{st.st_size}-{st.st_mtime_ns}")
    try:
        rows = pq.ParquetFile(path).metadata.num_rows
    except _UNREADABLE as e:
        raise TraceError(path, f"not a readable Parquet file ({_short(e)})") from None
    offsets, size = _layout(rows)
    if not (mapped.is_file() and mapped.stat().st_size == size):
        folder.mkdir(parents=True, exist_ok=True)
        with atomic_path(mapped) as tmp:
            _write_columns(path, tmp, rows, offsets, size)
        for old in folder.glob(MAPPED_GLOB):
            if old != mapped:
                old.unlink(missing_ok=True)
    # (the maps are not closed here: the columns' buffers keep them, and end with them)
    columns = {}
    for name, (np_type, arrow_type) in _CORE_TYPES.items():
        view = np.memmap(mapped, dtype=np_type, mode="r", offset=offsets[name],
                         shape=(rows,)) if rows else np.empty(0, np_type)
        columns[name] = pa.Array.from_buffers(arrow_type, rows, [None, pa.py_buffer(view)])
    return pl.from_arrow(pa.table(columns), rechunk=False), meta  # type: ignore[return-value]


def _write_columns(path: Path, tmp: Path, rows: int, offsets: dict[str, int],
                   size: int) -> None:
    """`mapped_table`'s copy of `path`'s core columns into `tmp`, a batch at a time."""
    names = [c for c in pl.read_parquet_schema(path) if c in CORE_SCHEMA]
    done = 0
    with open(tmp, "wb") as f:
        f.truncate(size)
        try:
            batches = pq.ParquetFile(path).iter_batches(batch_size=MAPPED_BATCH_ROWS,
                                                        columns=names)
        except _UNREADABLE as e:
            raise TraceError(path, f"not a readable Parquet file ({_short(e)})") from None
        while True:
            try:  # (a damaged file, not the checks' TraceErrors, which are ValueErrors too)
                batch = next(batches, None)
            except _UNREADABLE as e:
                raise TraceError(path, f"not a readable Parquet file ({_short(e)})") from None
            if batch is None:
                break
            df = _checked(pl.from_arrow(batch), path, done)  # type: ignore[arg-type]
            for name in CORE_COLUMNS:
                data = df[name].to_numpy()
                os.pwrite(f.fileno(), memoryview(data).cast("B"),
                          offsets[name] + done * data.itemsize)
            done += batch.num_rows
    if done != rows:
        raise TraceError(path, f"not a readable Parquet file ({done} rows read of {rows})")


def check_times(df: pl.DataFrame, path: str | os.PathLike[str], first_row: int = 0) -> None:
    """Refuse a table with a time that is not finite or beyond MAX_TIME_S seconds of the
    epoch, naming its row (`df` is the table's rows from `first_row` on) and source line."""
    outside = ~(df["time"].abs() <= MAX_TIME_S)
    if outside.any():
        i = int(outside.arg_true()[0])
        line = f", source line {df['src_line'][i]}" if "src_line" in df.columns else ""
        raise TraceError(path, f"not a canonical access table: time {df['time'][i]!r} at row "
                         f"{first_row + i + 1}{line} is outside [-{MAX_TIME_S:g}, {MAX_TIME_S:g}] "
                         f"seconds ({int(outside.sum())} such row(s))", field="time")


def write_table(df: pl.DataFrame, path: str | os.PathLike[str], meta: TraceMeta) -> None:
    """Write a canonical table atomically with its metadata."""
    table = df.to_arrow()
    table = table.cast(arrow_schema(table.schema, meta).remove_metadata()).replace_schema_metadata(
        meta.to_kv())
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")
