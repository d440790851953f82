"""What every reader shares: typed column parsing, row checks that name the line and field,
splitting byte addresses into blocks, and the final canonical column set."""

from __future__ import annotations

import io
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import polars as pl

from flashml.config import OPS, UNITS
from flashml.errors import TraceError
from flashml.trace.canonical import CORE_SCHEMA
from flashml.trace.textio import Chunk

Kind = Literal["int", "float", "str"]
_POLARS = {"int": pl.Int64, "float": pl.Float64, "str": pl.String}


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
    def parse(self, chunk: Chunk) -> pl.DataFrame:
        """Typed source columns plus `src_line`; errors name the line and field."""
        schema = {c.name: _POLARS[c.kind] for c in self.columns}
        try:
            df = pl.read_csv(io.BytesIO(chunk.data), separator=self.separator, has_header=False,
                             schema=schema, quote_char=None)
        except (pl.exceptions.ComputeError, pl.exceptions.ShapeError,
                pl.exceptions.NoDataError) as e:
            self.locate_parse_error(chunk)
            raise TraceError(self.path, f"cannot parse ({str(e).splitlines()[0]})") from None
        if len(df) != len(chunk.line_numbers) or df.null_count().sum_horizontal().item() > 0:
            self.locate_parse_error(chunk)
            raise TraceError(self.path, "cannot parse (missing fields)")
        return df.with_columns(src_line=pl.Series(chunk.line_numbers, dtype=pl.UInt64))

    def locate_parse_error(self, chunk: Chunk) -> None:
        """Slow path: find the first line of `chunk` that does not parse and raise for it."""
        lines = chunk.data.split(b"\n")
        n = len(self.columns)
        for raw, lineno in zip(lines, chunk.line_numbers.tolist(), strict=False):
            fields = raw.decode("utf-8", "replace").split(self.separator)
            if len(fields) != n:
                raise TraceError(self.path, f"expected {n} fields, found {len(fields)}",
                                 line=lineno,
                                 field=self.shown(self.columns[min(len(fields), n - 1)].name))
            for col, text in zip(self.columns, fields, strict=True):
                if col.kind == "str":
                    continue
                try:
                    int(text) if col.kind == "int" else float(text)
                except ValueError:
                    what = "an integer" if col.kind == "int" else "a number"
                    raise TraceError(self.path, f"expected {what}, found {text!r}",
                                     line=lineno, field=self.shown(col.name)) from None

    def checks(self) -> list[Check]:
        return []

    def validate(self, df: pl.DataFrame) -> None:
        """Raise for the first row that fails any check (earliest line wins)."""
        first: tuple[int, Check] | None = None
        for check in self.checks():
            idx = df.select(pl.arg_where(check.bad).first()).item()
            if idx is not None and (first is None or idx < first[0]):
                first = (idx, check)
        if first is not None:
            idx, check = first
            row = df.row(idx, named=True)
            raise TraceError(self.path, check.message.format(value=row.get(check.field)),
                             line=int(row["src_line"]), field=self.shown(check.field))

    def shown(self, column: str) -> str:
        return self.display.get(column, column)

    def horizon(self, df: pl.DataFrame) -> float | None:  # noqa: ARG002
        """For readers that spread one line over later times (op_count): the canonical time up
        to which output of this chunk is final. None: rows come out in time order already."""
        return None

    @abstractmethod
    def to_canonical(self, df: pl.DataFrame) -> pl.DataFrame:
        """Canonical columns (CORE_SCHEMA order) followed by `src_*` columns."""

    # --- shared helpers ---------------------------------------------------------------------
    def drop_zero_size(self, df: pl.DataFrame, size: str) -> pl.DataFrame:
        """`df` without its zero-size IOs (counted in `dropped_zero_size`)."""
        zero = df[size] == 0
        if zero.any():
            self.dropped_zero_size += int(zero.sum())
            df = df.filter(~zero)
        return df

    def size_checks(self, size: str, offset: str | None = None) -> list[Check]:
        checks = [Check(pl.col(size) < 0, size, "negative size {value}")]
        if offset is not None:
            checks.append(Check(pl.col(offset) < 0, offset, "negative offset {value}"))
        return checks

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
