"""What every reader shares: typed column parsing, row checks that name the line and field,
splitting byte addresses into blocks, and the final canonical column set."""

from __future__ import annotations

import io
import logging
import math
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import polars as pl

from flashml.config import OPS, UNITS
from flashml.errors import TraceError, UserError
from flashml.trace.canonical import CORE_SCHEMA
from flashml.trace.canonical import MAX_TIME_S as CANONICAL_MAX_TIME_S
from flashml.trace.limits import (
    MAX_BLOCK_BYTES,
    MAX_IO_BYTES,
    MAX_TIME_SCALE,
    MIN_BLOCK_BYTES,
    MIN_TIME_SCALE,
)
from flashml.trace.textio import Chunk

Kind = Literal["int", "float", "str"]
_POLARS = {"int": pl.Int64, "float": pl.Float64, "str": pl.String}
log = logging.getLogger("flashml.trace.ingest")

MAX_BLOCKS_PER_IO = MAX_IO_BYTES // MIN_BLOCK_BYTES + 1
"""The most rows one IO is split into (32,769): an IO of at most MAX_IO_BYTES, cut into
blocks of at least MIN_BLOCK_BYTES (+1: an unaligned IO touches one more)."""
MAX_TIME_S = CANONICAL_MAX_TIME_S
"""The largest |time| of an access, 1e12 seconds after any time scale (about 31,700 years
from the epoch): a larger one is corrupt input, and loses sub-second precision in float64."""
MAX_ADDRESS = (1 << 63) - 1 - MAX_IO_BYTES
"""The largest byte address (room for an IO below 2^63, so no sum overflows)."""
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1
# Polars' errors, and its PanicException (a Rust panic; a BaseException, not an Exception).
_POLARS_ERRORS = (pl.exceptions.PolarsError, pl.exceptions.PanicException)
# What Polars reads as an Int64 / Float64 (leading spaces allowed, trailing ones not).
_INT = re.compile(r" *[+-]?[0-9]+\Z")
_FLOAT = re.compile(r" *[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
                    r"|inf|infinity|nan)\Z", re.IGNORECASE)


def check_time_scale(time_scale: float) -> None:
    """`--time-scale`: seconds per source time unit, finite and in [MIN_TIME_SCALE,
    MAX_TIME_SCALE]."""
    if not (math.isfinite(time_scale) and MIN_TIME_SCALE <= time_scale <= MAX_TIME_SCALE):
        raise UserError(f"--time-scale must be a finite number of seconds per source time "
                        f"unit in [{MIN_TIME_SCALE:g}, {MAX_TIME_SCALE:g}] (1e-6: "
                        f"microseconds, 1e-9: nanoseconds), got {time_scale!r}")


def check_block_bytes(block_bytes: int) -> None:
    """`--block-bytes`: a whole number of segments in [MIN_BLOCK_BYTES, MAX_BLOCK_BYTES]."""
    seg = UNITS.segment_bytes
    if not (isinstance(block_bytes, int) and MIN_BLOCK_BYTES <= block_bytes <= MAX_BLOCK_BYTES
            and block_bytes % seg == 0):
        raise UserError(f"--block-bytes must be a multiple of the {seg}-byte segment in "
                        f"[{MIN_BLOCK_BYTES}, {MAX_BLOCK_BYTES}] bytes (128 KiB to 4 GiB), "
                        f"got {block_bytes!r}")


def _shown(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:40] + "...")


class BadLines:
    """Lines at fault: raised at once (the default), or with `skip` (`--skip-bad-lines`)
    counted, the first few logged and kept as examples, and left out. Never silent."""

    EXAMPLES = 10

    def __init__(self, path: Path, skip: bool = False) -> None:
        self.path = path
        self.skip = skip
        self.count = 0
        self.examples: list[str] = []

    def reject(self, err: TraceError) -> None:
        if not self.skip:
            raise err
        self.count += 1
        if len(self.examples) < self.EXAMPLES:
            self.examples.append(str(err))
            log.warning("skipped bad line: %s", err)
            if len(self.examples) == self.EXAMPLES:
                log.warning("further bad lines are counted, not shown; the total comes at "
                            "the end")


@dataclass(frozen=True)
class Column:
    name: str
    kind: Kind


@dataclass(frozen=True)
class Check:
    """Rows where `bad` is true are rejected with `message` (may use {value} of `field`)."""

    bad: pl.Expr
    field: str
    message: str


class Reader(ABC):
    """Parses chunks of one source format into canonical rows."""

    format_name: str = ""
    separator: str = ","
    header_prefix: str | None = None
    """A first data line starting with this is a header line (None: no header)."""

    def __init__(self, path: Path, *, block_bytes: int = UNITS.block_bytes) -> None:
        self.path = path
        self.block_bytes = int(block_bytes)
        self.columns: list[Column] = []
        self.display: dict[str, str] = {}  # internal column name -> name shown in errors
        self.dropped_zero_size = 0  # zero-size IOs `drop_zero_size` left out so far

    # --- set-up -----------------------------------------------------------------------------
    def detect(self, first_line: str | None, comments: list[str]) -> None:  # noqa: ARG002
        """Choose the column layout from the first data line and the comments before it
        (formats whose layout is fixed keep the one set in __init__)."""
        return None

    def is_header(self, line: str) -> bool:
        return self.header_prefix is not None and line.startswith(self.header_prefix)

    time_column: str = ""
    """The source column whose values must be non-decreasing (a property where the layout
    decides it)."""

    # --- per chunk --------------------------------------------------------------------------
    def parse(self, chunk: Chunk, bad: BadLines | None = None) -> pl.DataFrame:
        """Typed source columns plus `src_line`. A line that does not parse (wrong field count,
        not a number, a non-finite number, not UTF-8) raises a TraceError naming its line and
        field; with `bad` in skip mode it is counted there and left out instead."""
        lines: list[bytes] | None = None
        numbers = chunk.line_numbers
        df = self._read(chunk.data, len(numbers))
        if df is None:  # the slow path: find (and maybe skip) the lines at fault
            lines = chunk.data.split(b"\n")
            keep = self._sift(lines, numbers.tolist(), bad or BadLines(self.path))
            lines = [lines[i] for i in keep]
            numbers = numbers[np.asarray(keep, dtype=np.int64)] if keep else numbers[:0]
            df = self._read(b"\n".join(lines), len(lines)) if lines else self._empty()
            if df is None:  # pragma: no cover - _sift leaves only lines that parse
                raise TraceError(self.path, "cannot parse", line=int(numbers[0]))
        return df.with_columns(src_line=pl.Series(numbers, dtype=pl.UInt64))

    def _schema(self) -> dict[str, pl.DataType]:
        return {c.name: _POLARS[c.kind] for c in self.columns}

    def _empty(self) -> pl.DataFrame:
        return pl.DataFrame(schema=self._schema())

    def _read(self, data: bytes, n: int) -> pl.DataFrame | None:
        """`data` parsed by Polars, or None when any line of it is at fault: Polars refuses
        it (any of its errors: a short first line is a SchemaError, a long one a
        ComputeError), a field is missing (null), a row is lost, or a float is not finite."""
        try:
            df = pl.read_csv(io.BytesIO(data), separator=self.separator, has_header=False,
                             schema=self._schema(), quote_char=None)
        except _POLARS_ERRORS:
            return None
        if len(df) != n or df.null_count().sum_horizontal().item() > 0:
            return None
        floats = [c.name for c in self.columns if c.kind == "float"]
        if floats and not df.select(pl.all_horizontal(pl.col(floats).is_finite()).all()).item():
            return None
        return df

    def line_problem(self, raw: bytes) -> tuple[str, str] | None:
        """(field, message) for a line that cannot be parsed, None if it looks fine (Polars
        has the last word: `_sift` asks it about the lines this passes)."""
        n = len(self.columns)
        cells = raw.split(self.separator.encode())
        if len(cells) != n:
            col = self.columns[min(len(cells), n - 1)].name
            tail = " (the line is cut short)" if len(cells) < n else ""
            return col, f"expected {n} fields, found {len(cells)}{tail}"
        for col, cell in zip(self.columns, cells, strict=True):
            try:
                text = cell.decode("utf-8")
            except UnicodeDecodeError:
                return col.name, f"not UTF-8 text: {cell[:40]!r}"
            if not text:
                return col.name, "empty field"
            if col.kind == "int":
                if not _INT.match(text) or not _I64_MIN <= int(text) <= _I64_MAX:
                    what = "an integer" if _INT.match(text) is None else \
                        "an integer that fits in 64 bits"
                    return col.name, f"expected {what}, found {_shown(text)}"
            elif col.kind == "float":
                if not _FLOAT.match(text):
                    return col.name, f"expected a number, found {_shown(text)}"
                if not math.isfinite(float(text)):
                    return col.name, f"expected a finite number, found {_shown(text)}"
        return None

    def _sift(self, lines: list[bytes], numbers: list[int], bad: BadLines) -> list[int]:
        """Indices of the lines of a chunk that parse. The first bad line raises (skip mode:
        every bad line is counted in `bad` and left out). Each line is checked in Python
        first; Polars then reads the runs of lines between bad ones, and where it disagrees,
        a bisection finds the line it refuses."""
        keep: list[int] = []
        i = 0
        while i < len(lines):
            j = i
            problem = None
            while j < len(lines):
                problem = self.line_problem(lines[j])
                if problem is not None:
                    break
                j += 1
            # lines[i:j] pass the Python checks; does Polars agree?
            k = self._first_polars_failure(lines, i, j)
            if k is not None:
                j, problem = k, self._polars_problem(lines[k])
            keep.extend(range(i, j))
            if j < len(lines):
                field, message = problem or (self.columns[0].name, "cannot parse")
                bad.reject(TraceError(self.path, message, line=numbers[j],
                                      field=self.shown(field)))
            i = j + 1
        return keep

    def _first_polars_failure(self, lines: list[bytes], lo: int, hi: int) -> int | None:
        """The first index in [lo, hi) whose line makes Polars fail on lines[lo:idx+1]."""
        if hi <= lo or self._read(b"\n".join(lines[lo:hi]), hi - lo) is not None:
            return None
        a, b = lo + 1, hi  # smallest end e in [a, b] with lines[lo:e] failing
        while a < b:
            mid = (a + b) // 2
            if self._read(b"\n".join(lines[lo:mid]), mid - lo) is None:
                b = mid
            else:
                a = mid + 1
        return a - 1

    def _polars_problem(self, raw: bytes) -> tuple[str, str]:
        """(field, message) for one line Polars refuses though the Python checks pass."""
        try:
            df = pl.read_csv(io.BytesIO(raw), separator=self.separator, has_header=False,
                             schema=self._schema(), quote_char=None)
        except _POLARS_ERRORS as e:
            msg = str(e).splitlines()[0] if str(e) else type(e).__name__
            m = re.search(r"column '([^']+)'", msg)
            field = m.group(1) if m else self.columns[0].name
            return field, f"cannot parse ({msg[:200]})"
        for c in self.columns:
            if df[c.name].null_count():
                return c.name, "missing or empty field"
        return self.columns[0].name, "cannot parse"

    def checks(self) -> list[Check]:
        return []

    def all_checks(self) -> list[Check]:
        """The format's row checks, then the time check every reader shares (a float time,
        scaled, must be finite and within MAX_TIME_S seconds of the epoch)."""
        checks = self.checks()
        scale = float(getattr(self, "time_scale", 1.0))
        col = self.time_column
        if any(c.name == col and c.kind == "float" for c in self.columns):
            scaled = f" x time scale {scale:g}" if scale != 1.0 else ""
            checks.append(Check(~((pl.col(col) * scale).abs() <= MAX_TIME_S), col,
                                f"time {{value}}{scaled} is outside [-{MAX_TIME_S:g}, "
                                f"{MAX_TIME_S:g}] seconds"))
        return checks

    def validate(self, df: pl.DataFrame, bad: BadLines | None = None) -> pl.DataFrame:
        """Raise for the first row that fails any check (earliest line wins); in skip mode
        (`bad`) every failing row is counted and left out. Returns the rows kept."""
        checks = self.all_checks()
        if not checks or df.is_empty():
            return df
        flags = df.select([c.bad.fill_null(True).alias(f"_c{i}") for i, c in enumerate(checks)])
        any_bad = flags.select(pl.any_horizontal(pl.all())).to_series()
        if not any_bad.any():
            return df
        skip = bad is not None and bad.skip
        for idx in any_bad.arg_true().to_list():
            row = df.row(idx, named=True)
            check = next(c for i, c in enumerate(checks) if flags[f"_c{i}"][idx])
            err = TraceError(self.path, check.message.format(value=row.get(check.field)),
                             line=int(row["src_line"]), field=self.shown(check.field))
            if not skip:
                raise err
            assert bad is not None
            bad.reject(err)
        return df.filter(~any_bad)

    def shown(self, column: str) -> str:
        return self.display.get(column, column)

    @property
    def spreads(self) -> bool:
        """True for readers that spread one line over the next second (Tectonic op_count):
        `to_canonical` then gives one row per line with a `_repeats` column (>= 1), its
        accesses being at time + i / repeats for i < repeats. False: rows come out in time
        order already."""
        return False

    @abstractmethod
    def to_canonical(self, df: pl.DataFrame) -> pl.DataFrame:
        """Canonical columns (CORE_SCHEMA order) followed by `src_*` columns."""

    def expansion(self, df: pl.DataFrame) -> np.ndarray:
        """How many canonical rows each (validated) source row becomes, computed without
        building them (int64, >= 0): ingest checks the total against its caps and cuts the
        chunk into slices of bounded output before calling `to_canonical`."""
        return np.ones(len(df), dtype=np.int64)

    def split_counts(self, df: pl.DataFrame, address: pl.Expr, size: str) -> np.ndarray:
        """The number of blocks each IO at byte `address` of `size` bytes touches (what
        `split_blocks` makes of it); 0 for a zero-size IO (dropped)."""
        b = self.block_bytes
        a = address.cast(pl.Int64)
        n = (a + pl.col(size) - 1) // b - a // b + 1
        return df.select(pl.when(pl.col(size) > 0).then(n).otherwise(0)).to_series() \
            .to_numpy().astype(np.int64)

    # --- shared helpers ---------------------------------------------------------------------
    def drop_zero_size(self, df: pl.DataFrame, size: str) -> pl.DataFrame:
        """`df` without its zero-size IOs (counted in `dropped_zero_size`)."""
        zero = df[size] == 0
        if zero.any():
            self.dropped_zero_size += int(zero.sum())
            df = df.filter(~zero)
        return df

    def size_checks(self, size: str, offset: str | None = None) -> list[Check]:
        checks = [Check(pl.col(size) < 0, size, "negative size {value}"),
                  Check(pl.col(size) > MAX_IO_BYTES, size,
                        "size {value} larger than " + f"{MAX_IO_BYTES} bytes (one IO)")]
        if offset is not None:
            checks.append(Check(pl.col(offset) < 0, offset, "negative offset {value}"))
        return checks

    @staticmethod
    def address_check(address: pl.Expr, field: str, what: str = "address") -> Check:
        """A byte address must leave room for an IO below 2^63 (so address + size and the
        block arithmetic cannot overflow)."""
        return Check(address > MAX_ADDRESS, field,
                     f"{what} {{value}} beyond the largest byte address ({MAX_ADDRESS})")

    @staticmethod
    def op_check(op: str) -> Check:
        return Check(~pl.col(op).is_in(list(OPS)), op,
                     "unknown op {value} (known: " + ", ".join(f"{k}={v}" for k, v in OPS.items())
                     + ")")

    @staticmethod
    def id_check(col: str) -> Check:
        return Check((pl.col(col) < 0) | (pl.col(col) > 0xFFFFFFFF), col,
                     "id {value} outside 0..2^32-1")

    def split_blocks(self, df: pl.DataFrame, address: str, size: str) -> pl.DataFrame:
        """One row per 8 MiB block an IO at byte `address` touches: adds `block`, `offset`,
        `size` (the piece inside that block)."""
        b = self.block_bytes
        df = df.with_columns(
            _a=pl.col(address).cast(pl.UInt64), _e=(pl.col(address) + pl.col(size)).cast(pl.UInt64)
        ).with_columns(_b0=pl.col("_a") // b, _b1=(pl.col("_e") - 1) // b)
        if (df["_b1"] != df["_b0"]).any():
            df = df.with_columns(block=pl.int_ranges(pl.col("_b0"), pl.col("_b1") + 1,
                                                     dtype=pl.UInt64)).explode("block")
        else:
            df = df.with_columns(block=pl.col("_b0"))
        lo = pl.max_horizontal(pl.col("_a"), pl.col("block") * b)
        hi = pl.min_horizontal(pl.col("_e"), (pl.col("block") + 1) * b)
        return df.with_columns(offset=lo - pl.col("block") * b, size=hi - lo).drop(
            "_a", "_e", "_b0", "_b1")


def scoped_keys(scope_hash: np.ndarray, block: pl.Series) -> pl.Series:
    from flashml.trace.keys import combine

    return pl.Series("key", combine(scope_hash, block.to_numpy()), dtype=pl.UInt64)


def finish(df: pl.DataFrame, src: list[str]) -> pl.DataFrame:
    """Select and cast the canonical columns, then the source columns."""
    return df.select([pl.col(n).cast(t) for n, t in CORE_SCHEMA.items()] + [pl.col(s) for s in src])
