"""Meta Tectonic text traces (Baleen's artifact), all three schemas.

Plain ASCII, one access per line, fields separated by one space, `#` lines are comments and
the first holds the column names. Zero-size IOs are dropped. In the 202110 and 2023 schemas
the cache key is (block_id, host_name) resp. (block_id, rs_shard_id), and `op_count` (at most
MAX_OP_COUNT) repeats an access that many times, spread evenly over the next second
(t + i/op_count): `to_canonical` gives one row per line with its `_repeats`, and ingest's
`Spreader` writes the repeats in time order, a bounded number at a time.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from flashml.errors import TraceError
from flashml.trace.keys import hash_names
from flashml.trace.readers.base import Check, Column, Reader, finish, scoped_keys

_COMMON = ["block_id", "io_offset", "io_size", "op_time", "op_name"]
SCHEMAS: dict[str, list[str]] = {
    "201910": _COMMON + ["pipeline", "user_namespace", "user_name"],
    "202110": _COMMON + ["user_namespace", "user_name", "host_name", "op_count"],
    "2023": _COMMON + ["user_namespace", "user_name", "rs_shard_id", "op_count", "host_name"],
}
_KINDS = {"op_time": "float", "host_name": "str", "rs_shard_id": "str"}
MAX_OP_COUNT = 1 << 20
"""The most repeats one line may carry (each becomes a row; more is corrupt input)."""
_SCOPE = {"202110": "host_name", "2023": "rs_shard_id"}


class TectonicReader(Reader):
    format_name = "tectonic"
    separator = " "
    time_column = "op_time"

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.schema = ""
        self._names: dict[str, int] = {}

    def detect(self, first_line: str | None, comments: list[str]) -> None:
        if comments:
            names = comments[0].lstrip("#").replace(",", " ").split()
            for schema, cols in SCHEMAS.items():
                if names == cols:
                    self.schema = schema
        if not self.schema and first_line is not None:
            n = len(first_line.split(" "))
            by_count = {len(cols): s for s, cols in SCHEMAS.items()}
            if n not in by_count:
                raise TraceError(self.path, f"{n} fields: not a Tectonic trace (expected 8 "
                                 "(201910), 9 (202110) or 10 (2023) space-separated fields)",
                                 line=1 + len(comments))
            self.schema = by_count[n]
        if not self.schema:
            self.schema = "201910"
        self.columns = [Column(n, _KINDS.get(n, "int")) for n in SCHEMAS[self.schema]]

    def checks(self) -> list[Check]:
        checks = self.size_checks("io_size", "io_offset") + [
            Check(pl.col("block_id") < 0, "block_id", "negative block id {value}"),
            Check((pl.col("io_offset") > self.block_bytes)
                  | (pl.col("io_size") > self.block_bytes)
                  | (pl.col("io_offset") + pl.col("io_size") > self.block_bytes), "io_size",
                  f"io_offset + io_size exceeds the block size ({self.block_bytes} bytes): "
                  "size {value}"),
            self.op_check("op_name"),
            self.id_check("user_namespace"),
            self.id_check("user_name"),
        ]
        if "op_count" in self.columns_names:
            checks.append(Check(pl.col("op_count") < 1, "op_count", "op_count {value} < 1"))
            checks.append(Check(pl.col("op_count") > MAX_OP_COUNT, "op_count",
                                "op_count {value} > " + f"{MAX_OP_COUNT} (repeats of one line)"))
        return checks

    @property
    def columns_names(self) -> list[str]:
        return [c.name for c in self.columns]

    @property
    def spreads(self) -> bool:
        return "op_count" in self.columns_names

    def expansion(self, df: pl.DataFrame) -> np.ndarray:
        n = df["op_count"].to_numpy().astype(np.int64) if "op_count" in df.columns \
            else np.ones(len(df), dtype=np.int64)
        return np.where(df["io_size"].to_numpy() > 0, n, 0)

    def to_canonical(self, df: pl.DataFrame) -> pl.DataFrame:
        df = self.drop_zero_size(df, "io_size")
        scope = _SCOPE.get(self.schema)
        if scope is None:
            key = pl.col("block_id").cast(pl.UInt64)
            df = df.with_columns(key=key)
        else:
            scope_hash = hash_names(df[scope].to_numpy(), self._names)
            df = df.with_columns(key=scoped_keys(scope_hash, df["block_id"]))
        src = ["block_id"] + [c for c in ("pipeline", "host_name", "rs_shard_id", "op_count")
                              if c in df.columns]
        df = df.with_columns(
            time=pl.col("op_time"), offset=pl.col("io_offset"), size=pl.col("io_size"),
            op=pl.col("op_name"), namespace=pl.col("user_namespace"), user=pl.col("user_name"),
            **{f"src_{c}": pl.col(c) for c in src},
        )
        out = finish(df, [f"src_{c}" for c in src])
        if "op_count" in df.columns:  # one row per line; ingest's Spreader makes the repeats
            out = out.with_columns(_repeats=df["op_count"])
        return out


__all__ = ["SCHEMAS", "TectonicReader"]
