"""MSR Cambridge block traces: `Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime`.

Timestamps are Windows filetimes (100 ns ticks since 1601-01-01) and become Unix seconds;
offsets and sizes are bytes. Each disk's byte address space is cut into blocks (8 MiB by
default); an IO crossing a block boundary becomes one access per block. The cache key is
(host, disk, block); namespace is a 32-bit hash of the host name, user is the disk number.
Reads are GET_PERM (2), writes PUT_PERM (4).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from flashml.config import OP_CODES
from flashml.trace.keys import hash_names
from flashml.trace.readers.base import Check, Column, Reader, finish, scoped_keys

FILETIME_UNIX_OFFSET_TICKS = 116_444_736_000_000_000  # 1601-01-01 -> 1970-01-01, 100 ns
COLUMNS = ["Timestamp", "Hostname", "DiskNumber", "Type", "Offset", "Size", "ResponseTime"]
_KINDS = {"Hostname": "str", "Type": "str"}
OP_TYPES = {"read": OP_CODES["GET_PERM"], "write": OP_CODES["PUT_PERM"]}


class MsrReader(Reader):
    format_name = "msr"
    separator = ","
    header_prefix = "Timestamp"
    time_column = "Timestamp"

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self._names: dict[str, int] = {}
        self.columns = [Column(n, _KINDS.get(n, "int")) for n in COLUMNS]

    def checks(self) -> list[Check]:
        return self.size_checks("Size", "Offset") + [
            self.address_check(pl.col("Offset"), "Offset", "offset"),
            Check(pl.col("Timestamp") < 0, "Timestamp", "negative timestamp {value}"),
            Check(~pl.col("Type").str.to_lowercase().is_in(list(OP_TYPES)), "Type",
                  "unknown op {value!r} (expected Read or Write)"),
            self.id_check("DiskNumber"),
        ]

    def expansion(self, df: pl.DataFrame) -> np.ndarray:
        return self.split_counts(df, pl.col("Offset"), "Size")

    def to_canonical(self, df: pl.DataFrame) -> pl.DataFrame:
        df = self.drop_zero_size(df, "Size")
        df = self.split_blocks(df, "Offset", "Size")
        scope_names = (df["Hostname"] + ":" + df["DiskNumber"].cast(pl.String)).to_numpy()
        host_hash = hash_names(df["Hostname"].to_numpy(), self._names)
        df = df.with_columns(
            key=scoped_keys(hash_names(scope_names, self._names), df["block"]),
            # NumPy, not a Polars expression: Polars divides a one-row frame exactly but a
            # longer one by multiplying with 1e-7, so equal filetimes in two chunks could
            # come out a few ulps apart, and time would seem to go backwards.
            time=pl.Series((df["Timestamp"].to_numpy() - FILETIME_UNIX_OFFSET_TICKS) / 1e7,
                           dtype=pl.Float64),
            op=pl.col("Type").str.to_lowercase().replace_strict(OP_TYPES),
            namespace=pl.Series((host_hash & np.uint64(0xFFFFFFFF)).astype(np.uint32)),
            user=pl.col("DiskNumber"),
            src_hostname=pl.col("Hostname"),
            src_disk=pl.col("DiskNumber"),
            src_address=pl.col("Offset"),
            src_io_size=pl.col("Size"),
            src_response_time=pl.col("ResponseTime"),
        )
        return finish(df, ["src_hostname", "src_disk", "src_address", "src_io_size",
                           "src_response_time"])
